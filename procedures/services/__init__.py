"""Writes of procedures: create, edit, record runs, delete and embed (procedures.py)."""

from procedures.services.procedures import *  # noqa: F403

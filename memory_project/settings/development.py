"""Local development: the default when DJANGO_SETTINGS_MODULE is not set."""

from memory_project.env import env_bool

from .base import *  # noqa: F403

DEBUG = env_bool("DJANGO_DEBUG", True)

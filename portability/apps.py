"""Export and import of a workspace's memory (docs/export.md)."""

from django.apps import AppConfig


class PortabilityConfig(AppConfig):
    name = "portability"

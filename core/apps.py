from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"

    def ready(self):
        from core import checks, schema  # noqa: F401 - register the system checks, the OpenAPI auth extension

from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "runtime"

    def ready(self):
        from core.context_preview import context_preview_register
        from runtime.selectors.preview import context_preview

        # The /memories context preview builds through runtime without importing it.
        context_preview_register(context_preview)

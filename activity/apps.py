from django.apps import AppConfig


class ActivityConfig(AppConfig):
    name = "activity"
    verbose_name = "Activity"

    def ready(self):
        from activity.services import counters_store
        from core.counters import counter_sink_register

        counter_sink_register(counters_store)

"""The procedures app; it learns procedures from episodes after commits that touched them."""

from django.apps import AppConfig


class ProceduresConfig(AppConfig):
    name = "procedures"

    def ready(self):
        from core.events import audit_listener_register
        from procedures.services.learning import procedures_learn_listener

        audit_listener_register("procedures-learning", procedures_learn_listener)

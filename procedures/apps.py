"""The procedures app; it learns procedures from episodes after commits that touched them."""

from django.apps import AppConfig


class ProceduresConfig(AppConfig):
    name = "procedures"

    def ready(self):
        from core.events import audit_listener_register
        from procedures.services.learning import procedures_learn_listener

        # Learning reads episode events only: commits of other tiers (every episodic add)
        # skip its query.
        audit_listener_register("procedures-learning", procedures_learn_listener, entity_types={"episode"})

"""The procedures app; it learns procedures from episodes after commits that touched them,
and declares the person copied onto procedure runs to core.holdings."""

from django.apps import AppConfig


class ProceduresConfig(AppConfig):
    name = "procedures"

    def ready(self):
        from core.events import audit_listener_register
        from core.holdings import Holding, holding_register
        from procedures.models import ProcedureRun
        from procedures.services.learning import procedures_learn_listener

        # A run's memory_user copies its episode's (the person page reads it): a merge moves
        # it with the episodes; erasing the episode deletes the run.
        holding_register(Holding("procedure_runs", ProcedureRun, counted=False))

        # Learning reads episode events only: commits of other tiers (every episodic add)
        # skip its query.
        audit_listener_register("procedures-learning", procedures_learn_listener, entity_types={"episode"})

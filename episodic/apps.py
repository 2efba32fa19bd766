"""The episodic memory app; it declares a memory user's episodic entries to core.holdings."""

from django.apps import AppConfig


class EpisodicConfig(AppConfig):
    name = "episodic"
    verbose_name = "Episodic memory"

    def ready(self):
        from core.holdings import Holding, holding_register
        from episodic.models import EpisodicEntry

        holding_register(Holding("episodic_entries", EpisodicEntry))

"""The episodes app; it declares a memory user's episodes to core.holdings."""

from django.apps import AppConfig


class EpisodesConfig(AppConfig):
    name = "episodes"

    def ready(self):
        from core.holdings import Holding, holding_register
        from episodes.models import Episode

        holding_register(Holding("episodes", Episode))

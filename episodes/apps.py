"""The episodes app; it declares a memory user's episodes to core.holdings."""

from django.apps import AppConfig


class EpisodesConfig(AppConfig):
    name = "episodes"

    def ready(self):
        from core.holdings import Holding, holding_register
        from episodes.models import Episode

        # Locked by an erasure before it deletes anything, after the threads: a fact write
        # holds the episode it cites before it locks its key's versions (facts' _sources_held),
        # and an erasure that cleared those versions first waited for the episode in a cycle.
        holding_register(Holding("episodes", Episode, locked_first=True))

"""The episodic memory app; it declares a memory user's entries and their vectors to core.holdings."""

from django.apps import AppConfig


class EpisodicConfig(AppConfig):
    name = "episodic"
    verbose_name = "Episodic memory"

    def ready(self):
        from core.holdings import Holding, holding_register
        from episodic.models import EntryEmbedding, EpisodicEntry
        from episodic.services.entries import memory_user_entries_merge

        # Moved with their twins closed: two people merged keep one current copy of a note.
        holding_register(Holding("episodic_entries", EpisodicEntry, merge=memory_user_entries_merge))
        # The vectors' own memory_user scopes the hybrid search: a merge must move it.
        holding_register(Holding("episodic_entry_vectors", EntryEmbedding, counted=False))

"""The facts app; it declares a memory user's facts to core.holdings."""

from django.apps import AppConfig


class FactsConfig(AppConfig):
    name = "facts"

    def ready(self):
        from core.holdings import Holding, holding_register
        from facts.models import Fact
        from facts.services import memory_user_facts_merge

        # A session fact of a thread linked to the user after it was written carries no
        # user: it belongs to them through the thread.
        holding_register(
            Holding(
                "facts", Fact, owner=("memory_user", "thread__memory_user"), merge=memory_user_facts_merge
            )
        )

"""The threads app; it declares a memory user's threads, messages and message vectors to core.holdings."""

from django.apps import AppConfig


class ThreadsConfig(AppConfig):
    name = "threads"

    def ready(self):
        from core.holdings import Holding, holding_register
        from threads.models import Message, MessageEmbedding, Thread

        # Locked before erasure deletes their messages: appends and compactions lock the
        # thread first too.
        holding_register(Holding("threads", Thread, statistic="thread_count", locked_first=True))
        # Messages follow their thread on a merge; registered after threads so erasure
        # deletes them first, while the join through their thread still finds them.
        holding_register(
            Holding(
                "messages",
                Message,
                owner=("thread__memory_user",),
                moves=False,
                statistic="message_count",
                agent_field="thread__agent",
            )
        )
        # The vectors' own memory_user scopes semantic message search: a merge must move it.
        holding_register(Holding("message_vectors", MessageEmbedding, counted=False))

"""The project's Celery task class: DjangoTask, whose sends after commit survive a broker
that is down when a periodic sweep does the task's work anyway.

A write that queues a task after its commit (`delay_on_commit`) used to fail when the
broker could not be reached (Valkey restarting, a network split): the rows were committed,
then the send raised in the commit hook and the client got a 500 for a write that had
happened, and might repeat it. For a task marked `swept = True` the work is in PostgreSQL
and a periodic sweep finds it (the embeddings sweep, the webhooks and import-jobs sweeps);
its send is then tried, and when the broker refuses it, logged and left to the sweep. A task
that is the whole of what its request asked for (a retention run now) is not marked: its
send still raises, and the API answers 503 (core.errors).
"""

import functools
import logging

from celery.contrib.django.task import DjangoTask
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerUnavailable

logger = logging.getLogger(__name__)


class MemoryTask(DjangoTask):
    # Whether a periodic sweep does this task's work when its message is never sent.
    swept = False

    def delay_on_commit(self, *args, **kwargs) -> None:
        self.apply_async_on_commit(args, kwargs)

    def apply_async_on_commit(self, *args, **kwargs) -> None:
        send = functools.partial(self.apply_async, *args, **kwargs)
        transaction.on_commit(functools.partial(self._sent_or_swept, send) if self.swept else send)

    def _sent_or_swept(self, send) -> None:
        try:
            send()
        except BrokerUnavailable as exc:
            logger.warning(
                "The broker did not take %s (%s); its periodic sweep will do the work.", self.name, exc
            )

import socket
import time

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import InterfaceError, OperationalError

from core.embeddings import EmbeddingError
from core.services import api_keys_purge_expired, vector_graph_extend, worker_heartbeat_record

# A database that restarts or fails over (connections refused or cut, deadlocks) is
# transient: idempotent tasks retry instead of failing, which would acknowledge them.
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)
# Retry policy of every embedding task (facts, procedures, entries, messages): an endpoint
# or database failure is retried after 10, 20, 40 ... at most 600 s (the visibility timeout,
# settings.CELERY_BROKER_TRANSPORT_OPTIONS, must stay above that plus the time limit). A row
# whose task was never sent is embedded by the embeddings sweep (runtime.tasks), so a broker
# that is down does not fail the write that queued it (`swept`, core.lib.celery_task).
EMBED_RETRY = {
    "autoretry_for": (EmbeddingError, *DATABASE_UNAVAILABLE),
    "retry_backoff": 10,
    "retry_backoff_max": 600,
    "retry_jitter": True,
    "max_retries": 6,
    "swept": True,
}


@shared_task
def worker_heartbeat_task(worker: str | None = None):
    worker_heartbeat_record(worker=worker or socket.gethostname())


@shared_task
def api_keys_purge_expired_task():
    return api_keys_purge_expired()


@shared_task(autoretry_for=DATABASE_UNAVAILABLE, retry_backoff=10, retry_backoff_max=600, max_retries=6)
def vector_graph_extend_task(table: str, model: str, scope: dict):
    """A scope's vectors into the HNSW graph, for as long as half the soft time limit; the
    rest by the same task queued again (each chunk is committed as it goes)."""
    budget = settings.CELERY_TASK_SOFT_TIME_LIMIT / 2
    started = time.monotonic()
    joined = vector_graph_extend(table=table, model=model, scope=scope, seconds=budget)
    if joined and time.monotonic() - started >= budget:
        vector_graph_extend_task.delay(table, model, scope)
    return joined


@worker_ready.connect
def _heartbeat_on_start(sender, **kwargs):
    # /readyz sees a fresh worker at once instead of after the first beat interval.
    worker_heartbeat_task.delay(worker=getattr(sender, "hostname", None) or socket.gethostname())

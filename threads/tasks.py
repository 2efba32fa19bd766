from celery import shared_task

from core.llm import LLMError
from core.tasks import DATABASE_UNAVAILABLE
from threads.services import thread_compact, threads_purge_expired


# Idempotent (a lease and a compare-and-set on the summary), so late acknowledgement
# (settings) and retries are safe; a failing summarizer or database is retried with
# exponential backoff while the previous summary stays.
@shared_task(
    autoretry_for=(LLMError, *DATABASE_UNAVAILABLE),
    retry_backoff=10,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=6,
)
def thread_compact_task(thread_id: str):
    return thread_compact(thread_id=thread_id)


@shared_task
def threads_purge_expired_task():
    return threads_purge_expired()

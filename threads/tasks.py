from celery import shared_task

from core.llm import LLMError
from core.tasks import DATABASE_UNAVAILABLE, EMBED_RETRY
from threads.services import message_embed_batch
from threads.services.compaction import thread_compact_job


# Idempotent (a lease and a compare-and-set on the summary), so late acknowledgement
# (settings) and retries are safe; a failing summarizer or database is retried with
# exponential backoff while the previous summary stays. Queued through core.lib.fair_queue
# (thread_compact_enqueue), which passes `llm_job_id`; the service finishes, keeps (while a
# retry is pending) or defers (a `wait` budget) the job.
@shared_task(
    bind=True,
    autoretry_for=(LLMError, *DATABASE_UNAVAILABLE),
    retry_backoff=10,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=6,
)
def thread_compact_task(self, thread_id: str, node: str = "", llm_job_id: int | None = None):
    return thread_compact_job(
        thread_id=thread_id,
        node=node,
        llm_job_id=llm_job_id,
        retries_left=self.max_retries - self.request.retries,
    )


# Idempotent like the other embedding tasks (existing (message, model) vectors are skipped).
# Defined in episodes/tasks.py before message vectors moved to this tier; the name stays so
# that messages queued by an earlier release still run after an upgrade.
@shared_task(name="episodes.tasks.message_embed_task", **EMBED_RETRY)
def message_embed_task(message_ids: list[str], attempt: int = 0):
    return message_embed_batch(message_ids=message_ids, attempt=attempt)

"""Episodic memory's Celery tasks: embedding, re-embedding and extraction of entries."""

from celery import shared_task

from core.tasks import EMBED_RETRY
from episodic.services import entries_reembed, entry_embed_batch

# Queued messages carry a task's name. These tasks were defined in episodes/tasks.py until
# episodic memory became an app of its own; the names stay so that messages queued by an
# earlier release still run after an upgrade.
#
# Embedding tasks are idempotent (existing (row, model) vectors are skipped, rows deleted or
# edited meanwhile are skipped, and the unique constraint absorbs races), so late
# acknowledgement (settings) and retries are safe.


@shared_task(name="episodes.tasks.entry_embed_task", **EMBED_RETRY)
def entry_embed_task(entry_ids: list[str], attempt: int = 0):
    return entry_embed_batch(entry_ids=entry_ids, attempt=attempt)


@shared_task(name="episodes.tasks.entries_reembed_task")
def entries_reembed_task(workspace_id: str | None = None):
    from core.models import Workspace

    workspace = Workspace.objects.filter(pk=workspace_id).first() if workspace_id else None
    return entries_reembed(workspace=workspace)


# The one task that opts out of late acknowledgement (settings.CELERY_TASK_ACKS_LATE): a
# redelivered extraction would be deduped, but its LLM call would be paid twice. Queued
# through core.lib.fair_queue (episodic.services.extraction.entry_extract_enqueue), which
# passes `llm_job_id`; the service finishes or defers the job whatever happens.
@shared_task(name="episodes.tasks.entry_extract_task", acks_late=False)
def entry_extract_task(
    agent_id: str,
    memory_user_id: str,
    transcript: list[dict],
    candidates: list[dict] | None = None,
    use_llm: bool = True,
    known_memory: str = "",
    known_profile: str = "",
    thread_id: str | None = None,
    actor: str = "system",
    llm_job_id: int | None = None,
):
    from episodic.services.extraction import entry_extract_job

    return entry_extract_job(
        llm_job_id=llm_job_id,
        agent_id=agent_id,
        memory_user_id=memory_user_id,
        thread_id=thread_id,
        transcript=transcript,
        candidates=candidates,
        use_llm=use_llm,
        known_memory=known_memory,
        known_profile=known_profile,
        actor=actor,
    )

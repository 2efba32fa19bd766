"""Episodic memory's Celery tasks: embedding, re-embedding and extraction of entries."""

from celery import shared_task

from core.counters import EXTRACTIONS_RUN, counters_add
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
def entry_embed_task(entry_ids: list[str]):
    return entry_embed_batch(entry_ids=entry_ids)


@shared_task(name="episodes.tasks.entries_reembed_task")
def entries_reembed_task(workspace_id: str | None = None):
    from core.models import Workspace

    workspace = Workspace.objects.filter(pk=workspace_id).first() if workspace_id else None
    return entries_reembed(workspace=workspace)


# The one task that opts out of late acknowledgement (settings.CELERY_TASK_ACKS_LATE): a
# redelivered extraction would be deduped, but its LLM call would be paid twice.
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
):
    from core.models import Agent
    from episodic.services import entry_extract
    from identities.models import MemoryUser
    from threads.models import Thread

    agent = Agent.objects.select_related("workspace").get(pk=agent_id)
    counters_add(workspace_id=agent.workspace_id, agent_id=agent.pk, counts={EXTRACTIONS_RUN: 1})
    memory_user = MemoryUser.objects.get(pk=memory_user_id)
    thread = Thread.objects.filter(pk=thread_id).first() if thread_id else None
    result = entry_extract(
        agent=agent,
        memory_user=memory_user,
        transcript=transcript,
        candidates=candidates,
        use_llm=use_llm,
        known_memory=known_memory,
        known_profile=known_profile,
        thread=thread,
        actor=actor,
    )
    return {"stored": len(result.stored), "rejected": len(result.rejected)}

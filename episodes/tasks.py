from celery import shared_task

from core.tasks import EMBED_RETRY
from episodes.entry_services import entries_reembed, entry_embed_batch, message_embed_batch

# Embedding tasks are idempotent (existing (row, model) vectors are skipped, rows deleted or
# edited meanwhile are skipped, and the unique constraint absorbs races), so late
# acknowledgement (settings) and retries are safe.


@shared_task(**EMBED_RETRY)
def entry_embed_task(entry_ids: list[str]):
    return entry_embed_batch(entry_ids=entry_ids)


@shared_task(**EMBED_RETRY)
def message_embed_task(message_ids: list[str]):
    return message_embed_batch(message_ids=message_ids)


@shared_task
def entries_reembed_task(workspace_id: str | None = None):
    from core.models import Workspace

    workspace = Workspace.objects.filter(pk=workspace_id).first() if workspace_id else None
    return entries_reembed(workspace=workspace)


# The one task that opts out of late acknowledgement (settings.CELERY_TASK_ACKS_LATE): a
# redelivered extraction would be deduped, but its LLM call would be paid twice.
@shared_task(acks_late=False)
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
    from episodes.entry_services import entry_extract
    from identities.models import MemoryUser
    from threads.models import Thread

    agent = Agent.objects.select_related("workspace").get(pk=agent_id)
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

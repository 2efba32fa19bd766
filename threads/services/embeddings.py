"""Message vectors for semantic recall: embedding batches, the sweep and re-embedding."""

from django.db import connection, transaction
from django.db.models import Exists, OuterRef

from core.embeddings import embedding_provider_for
from core.lib.sweep import embed_skipped_requeue, sweep_take
from core.memory_settings import memory_settings_for
from identities.services import memory_users_hold
from threads.models import MessageEmbedding

EMBEDDABLE_ROLES = ("user", "assistant")

# KEY SHARE conflicts only with FOR UPDATE (appends, compactions, thread deletion): embedding
# batches and retention's message batches (KEY SHARE too) never wait for each other here.
_THREADS_HOLD_SQL = "SELECT id FROM threads_thread WHERE id = ANY(%s) ORDER BY id FOR KEY SHARE"


def message_embedding_texts(message, previous) -> tuple[str, str]:
    """The text of a message as embedded alone (dated) and after its predecessor."""
    speaker = message.name or message.role
    text = f"{speaker}: {message.content}"
    dated = f"[{message.created_at:%d %B %Y}] {text}"
    if previous is None:
        return dated, text
    return dated, f"{previous.name or previous.role}: {previous.content}\n{text}"


def message_embed_batch(*, message_ids, provider=None, attempt: int = 0) -> int:
    """Embed user and assistant messages of `message_ids` that have no vector under the model.

    Each message gets two vectors (alone, and read after the previous message of its
    thread); idempotent like `entry_embed_batch`. Returns rows written.

    Messages another transaction held are queued again after commit (`message_embed_task`,
    `attempt` + 1, at most core.lib.sweep.EMBED_SKIPPED_ATTEMPTS) when the workspace's own provider is used.
    """
    from threads.models import Message, Thread

    messages = list(
        Message.objects.filter(pk__in=list(message_ids), role__in=EMBEDDABLE_ROLES)
        .exclude(content="")
        .select_related("thread", "thread__workspace")
        .order_by("thread_id", "seq")
    )
    written, held = 0, []
    by_workspace: dict = {}
    for message in messages:
        by_workspace.setdefault(message.workspace_id, []).append(message)
    for group in by_workspace.values():
        group_provider = provider or embedding_provider_for(group[0].thread.workspace)
        model = group_provider.model_name
        done = set(
            MessageEmbedding.objects.filter(message__in=group, model=model).values_list(
                "message_id", flat=True
            )
        )
        todo = [m for m in group if m.pk not in done]
        if not todo:
            continue
        previous = _previous_messages(todo)
        texts, contexts = zip(*(message_embedding_texts(m, previous.get(m.pk)) for m in todo), strict=True)
        vectors = group_provider.embed(list(texts) + list(contexts))
        plain, context = vectors[: len(todo)], vectors[len(todo) :]
        thread_ids = {m.thread_id for m in todo}
        with transaction.atomic():
            # The vectors copy their thread's agent and person, which a merge re-points: the
            # people are held first, so the threads read after are as a merge leaves them, and
            # a merge after this one moves these vectors too.
            memory_users_hold(
                ids={m.thread.memory_user_id for m in todo if m.thread.memory_user_id is not None}
            )
            # The threads are held before any message: the vectors' foreign key to the thread
            # is checked at commit (KEY SHARE), and taken only then it waited for a thread
            # deletion (retention's, a user's) that was itself waiting for these messages: a
            # deadlock. Held first, a deletion in progress is waited for (its messages are
            # then gone) and one after waits for this batch, or, retention's, skips the thread.
            with connection.cursor() as cursor:
                cursor.execute(_THREADS_HOLD_SQL, [list(thread_ids)])
            # One statement in pk order, SKIP LOCKED: this batch never waits for a message
            # lock, so nothing that holds messages and then waits for these (retention's
            # batch detaching children, a second batch) can close a cycle with it. Skipped
            # messages are being deleted (a vector of one would fail the batch at commit,
            # deferred foreign key) or written, and are queued again below: the sweep
            # (message_embed_sweep) does not see every message (agents without semantic
            # recall, threads without a person, vectors of a previous model). The lock keeps
            # the others until their vectors commit.
            alive = set(
                Message.objects.filter(pk__in=[m.pk for m in todo])
                .order_by("pk")
                .select_for_update(no_key=True, skip_locked=True)
                .values_list("pk", flat=True)
            )
            owners = {
                pk: (agent, person)
                for pk, agent, person in Thread.objects.filter(pk__in=thread_ids).values_list(
                    "pk", "agent_id", "memory_user_id"
                )
            }
            rows = [
                MessageEmbedding(
                    message=m,
                    thread_id=m.thread_id,
                    workspace_id=m.workspace_id,
                    agent_id=owners[m.thread_id][0],
                    memory_user_id=owners[m.thread_id][1],
                    model=model,
                    dimensions=len(v),
                    embedding=v,
                    context_embedding=c,
                )
                for m, v, c in zip(todo, plain, context, strict=True)
                if m.pk in alive
            ]
            MessageEmbedding.objects.bulk_create(rows, ignore_conflicts=True)
        written += len(rows)
        held.extend(m.pk for m in todo if m.pk not in alive)
    if provider is None:
        # Once every group is stored: a group whose model fails raises before this, and the
        # task's retry runs the whole batch again, so no chain of retries is started twice.
        from threads.tasks import message_embed_task

        embed_skipped_requeue(message_embed_task, ids=held, attempt=attempt)
    return written


def _previous_messages(messages) -> dict:
    """message id -> the previous user/assistant message of its thread (by sequence)."""
    from threads.models import Message

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT m.id, (
                SELECT p.id FROM threads_message p
                WHERE p.thread_id = m.thread_id AND p.seq < m.seq AND p.node_id = m.node_id
                  AND p.role IN ('user', 'assistant') AND p.content <> ''
                ORDER BY p.seq DESC LIMIT 1
            ) FROM threads_message m WHERE m.id = ANY(%s)
            """,
            [[m.pk for m in messages]],
        )
        pairs = dict(cursor.fetchall())
    by_id = {m.pk: m for m in Message.objects.filter(pk__in=[p for p in pairs.values() if p])}
    return {mid: by_id.get(pid) for mid, pid in pairs.items() if pid}


def message_embed_sweep(*, limit: int = 500, before=None) -> list[tuple[str, object]]:
    """Up to `limit` (id, workspace id) of messages (created before `before`) with no vector
    yet, in core.lib.sweep.sweep_take's order.

    Only agents with `semantic_recall` on are swept: embedding every message of every
    agent would spend the workers' CPU on vectors nobody searches.
    """
    from core.models import Agent
    from threads.models import Message

    enabled = [
        a.pk for a in Agent.objects.only("pk", "memory_settings") if memory_settings_for(a).semantic_recall
    ]
    if not enabled:
        return []
    has_vector = MessageEmbedding.objects.filter(message=OuterRef("pk"))
    messages = Message.objects.filter(
        role__in=EMBEDDABLE_ROLES, thread__agent__in=enabled, thread__memory_user__isnull=False
    )
    if before is not None:
        messages = messages.filter(created_at__lt=before)
    return sweep_take(messages.exclude(content="").filter(~Exists(has_vector)), limit=limit)


def messages_reembed(*, workspace, batch_size: int = 256) -> int:
    """Enqueue embedding of the workspace's messages lacking a vector under its current model."""
    from threads.models import Message
    from threads.tasks import message_embed_task

    model = embedding_provider_for(workspace).model_name
    has_vector = MessageEmbedding.objects.filter(message=OuterRef("pk"), model=model)
    ids = [
        str(pk)
        for pk in Message.objects.filter(
            workspace=workspace, role__in=EMBEDDABLE_ROLES, thread__memory_user__isnull=False
        )
        .exclude(content="")
        .filter(~Exists(has_vector))
        .values_list("pk", flat=True)
    ]
    for start in range(0, len(ids), batch_size):
        chunk = ids[start : start + batch_size]
        message_embed_task.delay_on_commit(chunk)
    return len(ids)

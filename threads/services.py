"""Every write to conversation memory: threads, messages, plans, snapshots, iterations, compaction."""

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, F, Max, OuterRef, Q
from django.utils import timezone

from core.access import Principal, references_resolve, require_write
from core.embeddings import embedding_provider_for
from core.errors import ApplicationError, NotFoundError
from core.lib.sweep import sweep_take
from core.lib.tokens import count_message_tokens, count_tokens
from core.llm import LLMError, LLMUnavailable, chat_complete
from core.memory_settings import memory_settings_for
from core.models import Agent
from core.services import audit_record
from threads.lib.summarize import summary_extractive, summary_prompt
from threads.lib.tree import TreeNode, ancestor_at_depth, child_position
from threads.lib.validation import MessageErrors, message_clean
from threads.models import IterationLog, Message, MessageEmbedding, RunSnapshot, Thread, ThreadPlan

logger = logging.getLogger(__name__)

MESSAGES_REQUIRED = "Send at least one message."
BATCH_TOO_LARGE = "At most {limit} messages per request."
MESSAGES_INVALID = "Some messages are invalid; nothing was stored."
PARENT_UNKNOWN = "Unknown parent message."
ID_TAKEN = "A message with this id already exists."
IDEMPOTENCY_DUPLICATE = "This idempotency key is used twice in the batch."
TOOL_RESULT_WITHOUT_CALL = "No earlier assistant message on this branch made the tool call `{call_id}`."
NODE_REQUIRED = "Name the node whose memory to clear (`node`)."
MEMORY_USER_UNKNOWN = "Unknown memory user."
PLAN_INVALID = "The plan must be a JSON object or list."
RUN_ID_INVALID = "A run id is 1 to 200 characters."
METADATA_INVALID = "Metadata must be a JSON object."

# A compaction holds its lease at most this long; a crashed worker's lease then expires.
COMPACTION_LEASE = timedelta(minutes=5)
# An enqueued compaction that has not finished after this long may be enqueued again.
COMPACTION_REQUEST_TTL = timedelta(minutes=10)


# --- threads -----------------------------------------------------------------------------------


def memory_user_canonical(memory_user):
    """The user a merged identity now belongs to (None stays None)."""
    from identities.selectors import memory_user_resolve_merged

    return None if memory_user is None else memory_user_resolve_merged(memory_user=memory_user)


def thread_create(
    *,
    workspace,
    agent: Agent,
    memory_user=None,
    channel: str = "",
    channel_chat_id: str = "",
    client_key: str = "",
    title: str = "",
    metadata=None,
    model: str = "",
) -> Thread:
    memory_user = memory_user_canonical(memory_user)
    if metadata is not None and not isinstance(metadata, dict):
        raise ApplicationError(METADATA_INVALID, fields={"metadata": [METADATA_INVALID]})
    if agent.workspace_id != workspace.pk:
        raise NotFoundError("Agent not found.")
    if memory_user is not None and memory_user.workspace_id != workspace.pk:
        raise NotFoundError(MEMORY_USER_UNKNOWN, fields={"memory_user": [MEMORY_USER_UNKNOWN]})
    thread = Thread(
        workspace=workspace,
        agent=agent,
        memory_user=memory_user,
        channel=channel or "",
        channel_chat_id=channel_chat_id or "",
        client_key=client_key or "",
        title=title or "",
        metadata=metadata or {},
        model=model or "",
    )
    thread.full_clean(exclude=["workspace", "agent", "memory_user"], validate_unique=False)
    thread.save()
    return thread


def thread_resolve(
    *,
    workspace,
    agent: Agent,
    memory_user=None,
    channel: str = "",
    channel_chat_id: str = "",
    client_key: str = "",
    title: str = "",
    metadata=None,
    model: str = "",
) -> Thread:
    """The thread of (agent, memory user, channel chat id), created on first use.

    With no chat id, the same person talking to the same agent continues one thread across
    runs and channels. With neither a user nor a chat id, `client_key` identifies the thread;
    with none of the three there is nothing to resolve by and a new thread is created.
    Concurrent resolves of the same conversation return the same thread (advisory lock).
    """
    return thread_resolve_or_create(
        workspace=workspace,
        agent=agent,
        memory_user=memory_user,
        channel=channel,
        channel_chat_id=channel_chat_id,
        client_key=client_key,
        title=title,
        metadata=metadata,
        model=model,
    )[0]


def thread_resolve_or_create(
    *,
    workspace,
    agent: Agent,
    memory_user=None,
    channel: str = "",
    channel_chat_id: str = "",
    client_key: str = "",
    title: str = "",
    metadata=None,
    model: str = "",
) -> tuple[Thread, bool]:
    """`thread_resolve`, also saying whether the thread was created."""
    memory_user = memory_user_canonical(memory_user)
    if memory_user is None and not channel_chat_id and not client_key:
        thread = thread_create(
            workspace=workspace, agent=agent, channel=channel, title=title, metadata=metadata, model=model
        )
        return thread, True
    lookup = Q(workspace=workspace, agent=agent)
    if memory_user is not None:
        # Threads of identities merged into this user continue too.
        lookup &= Q(channel_chat_id=channel_chat_id or "") & (
            Q(memory_user=memory_user) | Q(memory_user__merged_into=memory_user)
        )
        identity = f"{agent.pk}:{memory_user.pk}:{channel_chat_id}"
    elif channel_chat_id:
        lookup &= Q(memory_user__isnull=True, channel_chat_id=channel_chat_id)
        identity = f"{agent.pk}::{channel_chat_id}"
    else:
        lookup &= Q(memory_user__isnull=True, channel_chat_id="", client_key=client_key)
        identity = f"{agent.pk}:key:{client_key}"
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"threads:{identity}"])
        thread = Thread.objects.filter(lookup).order_by("-last_activity_at").first()
        if thread is not None:
            return thread, False
        thread = thread_create(
            workspace=workspace,
            agent=agent,
            memory_user=memory_user,
            channel=channel,
            channel_chat_id=channel_chat_id,
            client_key=client_key,
            title=title,
            metadata=metadata,
            model=model,
        )
        return thread, True


def thread_update(*, thread: Thread, actor: str = "system", **changes) -> Thread:
    """Change title, metadata, model, channel or client key; audited."""
    allowed = {"title", "metadata", "model", "channel", "client_key"}
    if changes.get("metadata") is not None and not isinstance(changes["metadata"], dict):
        raise ApplicationError(METADATA_INVALID, fields={"metadata": [METADATA_INVALID]})
    changed = {}
    for key, value in changes.items():
        if key not in allowed or value is None:
            continue
        if getattr(thread, key) != value:
            changed[key] = value
            setattr(thread, key, value)
    if not changed:
        return thread
    thread.full_clean(exclude=["workspace", "agent", "memory_user"], validate_unique=False)
    thread.save(update_fields=[*changed, "updated_at"])
    audit_record(
        workspace=thread.workspace,
        actor=actor,
        action="update",
        entity_type="thread",
        entity_id=thread.pk,
        changes={k: (True if k == "metadata" else v) for k, v in changed.items()},
    )
    return thread


def _threads_delete(queryset) -> dict:
    """Delete threads with everything under them; returns counts by kind."""
    _total, by_model = queryset.delete()
    return {
        "threads": by_model.get("threads.Thread", 0),
        "messages": by_model.get("threads.Message", 0),
        "checkpoints": by_model.get("checkpoints.Checkpoint", 0),
    }


def thread_delete(*, thread: Thread, actor: str = "system") -> dict:
    with transaction.atomic():
        counts = _threads_delete(Thread.objects.filter(pk=thread.pk))
        audit_record(
            workspace=thread.workspace,
            actor=actor,
            action="delete",
            entity_type="thread",
            entity_id=thread.pk,
            changes=counts,
        )
    return counts


def threads_delete(*, ids, actor: str) -> dict:
    """Delete threads by id with everything under them, auditing each; no scoping here."""
    from core.models import Workspace

    with transaction.atomic():
        rows = list(Thread.objects.filter(pk__in=ids).select_for_update().values_list("pk", "workspace_id"))
        counts = _threads_delete(Thread.objects.filter(pk__in=[pk for pk, _ in rows]))
        for pk, workspace_id in rows:
            audit_record(
                workspace=Workspace(pk=workspace_id),
                actor=actor,
                action="delete",
                entity_type="thread",
                entity_id=pk,
                changes={"batch": True},
            )
    return counts


def thread_batch_delete(*, principal: Principal, ids) -> dict:
    """Delete the threads `ids`, all or nothing: one id outside the caller's scope is a 404."""
    require_write(principal)
    with transaction.atomic():
        found = references_resolve(
            Thread.objects.only("pk"),
            principal,
            ids,
            not_found=NotFoundError("Some threads were not found; nothing was deleted."),
        )
        counts = threads_delete(ids=[t.pk for t in found], actor=principal.actor)
    return {"deleted": counts["threads"], **counts}


def threads_purge_expired(*, now=None) -> int:
    """Delete threads idle longer than their agent's `retention_days`, in batches."""
    now = now or timezone.now()
    batch = settings.THREADS_RETENTION_BATCH
    deleted = 0
    for agent in Agent.objects.only("id", "memory_settings", "workspace_id").iterator():
        days = memory_settings_for(agent).retention_days
        if days <= 0:
            continue
        cutoff = now - timedelta(days=days)
        while True:
            ids = list(
                Thread.objects.filter(agent=agent, last_activity_at__lt=cutoff).values_list("pk", flat=True)[
                    :batch
                ]
            )
            if not ids:
                break
            with transaction.atomic():
                deleted += _threads_delete(Thread.objects.filter(pk__in=ids))["threads"]
    return deleted


# --- messages ----------------------------------------------------------------------------------


def archived_reference(*, message_id, thread_id, content: str, length: int | None = None) -> str:
    """What the window sends instead of a large tool result: its id, size and a preview."""
    preview = content[: settings.THREADS_TOOL_RESULT_PREVIEW_CHARS]
    length = len(content) if length is None else length
    return (
        f"[Tool result archived: {length} characters, id {message_id}. "
        f"GET /api/v1/threads/{thread_id}/messages/{message_id}/ returns it whole.]\n{preview}…"
    )


_NODE_FIELDS = ("id", "depth", "jump_id", "jump_depth", "branch_tokens", "parent_id")


def _tree_node(row: dict) -> TreeNode:
    return TreeNode(**{k: row[k] for k in _NODE_FIELDS})


_ROW_COLUMNS = (*_NODE_FIELDS, "thread_id", "role", "tool_calls", "node_id", "idempotency_key")
_ROW_SELECT = ", ".join(f"{{t}}.{c}" for c in _ROW_COLUMNS)

# One round trip for the context of a batch: the named parents, the newest message of each
# node scope the batch continues, the jump target of each (needed to place a child), the
# messages already stored under the batch's idempotency keys, and client ids already taken.
_TREE_ROWS_SQL = f"""
WITH RECURSIVE base AS (
    SELECT 'parent' AS tag, {_ROW_SELECT.format(t="m")}
    FROM threads_message m
    WHERE m.id = ANY(%(parents)s) AND m.thread_id = %(thread)s
  UNION ALL
    SELECT 'newest', {_ROW_SELECT.format(t="n")}
    FROM unnest(%(scopes)s::text[]) AS s(scope)
    CROSS JOIN LATERAL (
        SELECT * FROM threads_message
        WHERE thread_id = %(thread)s AND node_id = s.scope ORDER BY seq DESC LIMIT 1
    ) n
),
-- The whole jump chain up to the root (O(log n) rows): every jump target a new child can
-- need lies on it.
chain(id, jump_id) AS (
    SELECT j.id, j.jump_id FROM threads_message j WHERE j.id IN (SELECT jump_id FROM base)
  UNION
    SELECT j.id, j.jump_id
    FROM chain c JOIN threads_message j ON j.id = c.jump_id
    WHERE c.jump_id <> c.id
)
SELECT * FROM base
UNION ALL
SELECT 'jump', {_ROW_SELECT.format(t="j")}
FROM threads_message j WHERE j.id IN (SELECT id FROM chain)
UNION ALL
SELECT 'dup', {_ROW_SELECT.format(t="d")}
FROM threads_message d WHERE d.thread_id = %(thread)s AND d.idempotency_key = ANY(%(keys)s)
UNION ALL
SELECT 'taken', {_ROW_SELECT.format(t="g")}
FROM threads_message g WHERE g.id = ANY(%(given)s)
"""


def _tree_rows(*, thread: Thread, parent_ids, scopes, keys, given_ids):
    if not parent_ids and not scopes and not keys and not given_ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            _TREE_ROWS_SQL,
            {
                "parents": list(parent_ids),
                "scopes": list(scopes),
                "thread": thread.pk,
                "keys": list(keys),
                "given": list(given_ids),
            },
        )
        fetched = cursor.fetchall()
    result = []
    for record in fetched:
        row = dict(zip(_ROW_COLUMNS, record[1:], strict=True))
        if isinstance(row["tool_calls"], str):
            row["tool_calls"] = json.loads(row["tool_calls"])
        result.append((record[0], row))
    return result


_COPY_COLUMNS = (
    "id",
    "created_at",
    "updated_at",
    "workspace_id",
    "thread_id",
    "role",
    "content",
    "parent_id",
    "metadata",
    "seq",
    "depth",
    "jump_id",
    "jump_depth",
    "token_count",
    "branch_tokens",
    "node_id",
    "author_agent",
    "delegation_id",
    "name",
    "tool_calls",
    "tool_call_id",
    "files",
    "idempotency_key",
    "archived",
)


def _messages_insert(messages: list[Message]) -> None:
    """Insert with COPY: for batches it is several times cheaper than an INSERT with one
    parameter per field (Django's bulk_create prepares every value in Python)."""
    columns = ", ".join(_COPY_COLUMNS)
    sql = f"COPY threads_message ({columns}) FROM STDIN"
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for m in messages:
            copy.write_row(
                (
                    m.id,
                    m.created_at,
                    m.updated_at,
                    m.workspace_id,
                    m.thread_id,
                    m.role,
                    m.content,
                    m.parent_id,
                    json.dumps(m.metadata),
                    m.seq,
                    m.depth,
                    m.jump_id,
                    m.jump_depth,
                    m.token_count,
                    m.branch_tokens,
                    m.node_id,
                    m.author_agent,
                    m.delegation_id,
                    m.name,
                    json.dumps(m.tool_calls),
                    m.tool_call_id,
                    json.dumps(m.files),
                    m.idempotency_key,
                    m.archived,
                )
            )
    for m in messages:
        m._state.adding = False
        m._state.db = connection.alias


def thread_append_messages(*, thread: Thread, messages: list[dict], actor: str = "system") -> list[Message]:
    """Append one or more messages atomically and return them in order.

    - `parent` defaults to the newest message of the same node scope (the batch chains);
      a regeneration names an earlier message as its parent.
    - A message whose `idempotency_key` was stored before is returned, not duplicated
      (its `duplicate` attribute is True; new messages have it False).
    - Any invalid message rejects the whole batch with per-message field errors
      (`messages[2].parent`), and nothing is stored.
    - Token counts, tree position and large-tool-result archiving are computed here, and a
      compaction is enqueued on commit when the branch passes the agent's threshold.
    """
    if not isinstance(messages, list) or not messages:
        raise ApplicationError(MESSAGES_REQUIRED, fields={"messages": [MESSAGES_REQUIRED]})
    limit = settings.THREADS_MAX_BATCH
    if len(messages) > limit:
        message = BATCH_TOO_LARGE.format(limit=limit)
        raise ApplicationError(message, fields={"messages": [message]})

    errors: dict[str, list[str]] = {}
    cleaned = []
    for index, raw in enumerate(messages):
        try:
            cleaned.append(message_clean(raw))
        except MessageErrors as exc:
            errors.update({f"messages[{index}].{key}": value for key, value in exc.fields.items()})
            cleaned.append(None)
    if errors:
        raise ApplicationError(MESSAGES_INVALID, fields=errors)

    with transaction.atomic():
        # The row lock serializes appends to one thread: sequence numbers and default
        # parents stay consistent, and idempotency keys cannot race.
        locked = (
            Thread.objects.select_for_update()
            .only("id", "message_seq", "summary_upto_id", "summary_covers_tokens", "summary_tokens")
            .get(pk=thread.pk)
        )
        seq = locked.message_seq

        keys = [m["idempotency_key"] for m in cleaned if m["idempotency_key"]]
        seen = set()
        for index, m in enumerate(cleaned):
            key = m["idempotency_key"]
            if key and key in seen:
                errors[f"messages[{index}].idempotency_key"] = [IDEMPOTENCY_DUPLICATE]
            seen.add(key)
        given_ids = [m["id"] for m in cleaned if m["id"]]

        # Tree rows known so far: parents from the database, then this batch as it is built.
        nodes: dict = {}
        rows: dict = {}
        batch_ids = set(given_ids)
        external = {m["parent"] for m in cleaned if m["parent"] and m["parent"] not in batch_ids}
        scopes = {m["node_id"] for m in cleaned if not m["parent_given"]}
        newest: dict = {}
        duplicate_ids, taken = [], set()
        for tag, row in _tree_rows(
            thread=thread, parent_ids=external, scopes=scopes, keys=keys, given_ids=given_ids
        ):
            if tag == "dup":
                duplicate_ids.append(row["id"])
                continue
            if tag == "taken":
                taken.add(row["id"])
                continue
            rows.setdefault(row["id"], row)
            if tag == "newest":
                newest[row["node_id"]] = row["id"]
        for row in rows.values():
            nodes[row["id"]] = _tree_node(row)
        existing_by_key = {}
        if duplicate_ids:
            existing_by_key = {m.idempotency_key: m for m in Message.objects.filter(pk__in=duplicate_ids)}
        for index, m in enumerate(cleaned):
            if m["id"] in taken and m["idempotency_key"] not in existing_by_key:
                errors[f"messages[{index}].id"] = [ID_TAKEN]

        def lookup(message_id):
            row = rows.get(message_id)
            if row is None and message_id is not None:
                row = (
                    Message.objects.filter(pk=message_id, thread=thread)
                    .values(*_NODE_FIELDS, "thread_id", "role", "tool_calls", "node_id")
                    .first()
                )
                if row is not None:
                    rows[message_id] = row
            return row

        now = timezone.now()
        model = thread.model or None
        created: list[Message] = []
        result: list[Message] = []
        for index, m in enumerate(cleaned):
            if m["idempotency_key"] in existing_by_key:
                existing = existing_by_key[m["idempotency_key"]]
                existing.duplicate = True
                result.append(existing)
                continue
            message_id = m["id"] or uuid.uuid4()
            if m["parent_given"]:
                parent_id = m["parent"]
                parent_row = rows.get(parent_id)
                # A parent is read like message_get reads: within this thread. A message of
                # any other thread is unknown here, whether or not the key could read it.
                if parent_row is None or parent_row["thread_id"] != thread.pk:
                    errors[f"messages[{index}].parent"] = [PARENT_UNKNOWN]
                    continue
            else:
                parent_id = newest.get(m["node_id"])
                parent_row = rows.get(parent_id)

            if m["role"] == "tool":
                # The call must be on this branch: walk up over sibling tool results.
                ancestor = parent_row
                hops = 0
                while ancestor is not None and ancestor["role"] == "tool" and hops < 128:
                    ancestor = lookup(ancestor["parent_id"])
                    hops += 1
                call_ids = {c["id"] for c in (ancestor or {}).get("tool_calls") or []}
                if ancestor is None or ancestor["role"] != "assistant" or m["tool_call_id"] not in call_ids:
                    errors[f"messages[{index}].tool_call_id"] = [
                        TOOL_RESULT_WITHOUT_CALL.format(call_id=m["tool_call_id"])
                    ]
                    continue

            archived = m["role"] == "tool" and len(m["content"]) > settings.THREADS_TOOL_RESULT_ARCHIVE_CHARS
            window_text = (
                archived_reference(message_id=message_id, thread_id=thread.pk, content=m["content"])
                if archived
                else m["content"]
            )
            tokens = count_message_tokens(
                content=window_text, tool_calls=m["tool_calls"], name=m["name"], model=model
            )
            parent = nodes.get(parent_id) if parent_id else None
            parent_jump = None
            if parent is not None:
                parent_jump = nodes.get(parent.jump_id)
                if parent_jump is None and parent.jump_id is not None:
                    # The jump target of a jump target: rarely needed, fetched once.
                    jump_row = lookup(parent.jump_id)
                    if jump_row is not None:
                        parent_jump = nodes[parent.jump_id] = _tree_node(jump_row)
            depth, jump_id, jump_depth = child_position(parent, parent_jump, own_id=message_id)
            seq += 1
            message = Message(
                id=message_id,
                updated_at=now,
                workspace_id=thread.workspace_id,
                thread_id=thread.pk,
                role=m["role"],
                content=m["content"],
                parent_id=parent_id,
                metadata=m["metadata"],
                created_at=m["created_at"] or now,
                seq=seq,
                depth=depth,
                jump_id=jump_id,
                jump_depth=jump_depth,
                token_count=tokens,
                branch_tokens=(parent.branch_tokens if parent else 0) + tokens,
                node_id=m["node_id"],
                author_agent=m["author_agent"],
                delegation_id=m["delegation_id"],
                name=m["name"],
                tool_calls=m["tool_calls"],
                tool_call_id=m["tool_call_id"],
                files=m["files"],
                idempotency_key=m["idempotency_key"],
                archived=archived,
            )
            message.duplicate = False
            created.append(message)
            result.append(message)
            row = {
                "id": message_id,
                "depth": depth,
                "jump_id": jump_id,
                "jump_depth": jump_depth,
                "branch_tokens": message.branch_tokens,
                "parent_id": parent_id,
                "thread_id": thread.pk,
                "role": m["role"],
                "tool_calls": m["tool_calls"],
                "node_id": m["node_id"],
            }
            rows[message_id] = row
            nodes[message_id] = _tree_node(row)
            newest[m["node_id"]] = message_id

        if errors:
            raise ApplicationError(MESSAGES_INVALID, fields=errors)
        if not created:
            return result

        _messages_insert(created)
        Thread.objects.filter(pk=thread.pk).update(
            message_seq=seq, message_count=F("message_count") + len(created), last_activity_at=now
        )
        thread.message_seq = seq
        thread.last_activity_at = now
        main_leaf = next((m for m in reversed(created) if not m.node_id), None)
        if main_leaf is not None:
            _compaction_request_if_needed(thread=thread, locked=locked, leaf=main_leaf)
        _semantic_recall_embed(thread=thread, messages=created)
    return result


def _semantic_recall_embed(*, thread: Thread, messages: list[Message]) -> None:
    """Queue the vectors semantic recall needs, once the messages commit.

    Only agents with semantic recall on pay for embeddings; the periodic sweep
    (runtime.tasks.embeddings_sweep_task) catches anything a lost task missed.
    """
    if thread.memory_user_id is None or not memory_settings_for(thread.agent).semantic_recall:
        return
    ids = [str(m.pk) for m in messages if m.role in (Message.Role.USER, Message.Role.ASSISTANT) and m.content]
    if ids:
        from threads.tasks import message_embed_task

        message_embed_task.delay_on_commit(ids)


def context_window_for(thread: Thread) -> int:
    table = settings.THREADS_MODEL_CONTEXT_WINDOWS
    if thread.model and thread.model in table:
        return table[thread.model]
    return memory_settings_for(thread.agent).model_context_window


def _compaction_request_if_needed(*, thread: Thread, locked: Thread, leaf: Message) -> bool:
    """Enqueue one compaction when the branch's token estimate passes the threshold."""
    covered = locked.summary_covers_tokens if locked.summary_upto_id else 0
    estimate = leaf.branch_tokens - covered + (locked.summary_tokens if locked.summary_upto_id else 0)
    agent_settings = memory_settings_for(thread.agent)
    if estimate <= agent_settings.compaction_threshold * context_window_for(thread):
        return False
    now = timezone.now()
    claimed = (
        Thread.objects.filter(pk=thread.pk)
        .filter(
            Q(compaction_requested_at__isnull=True)
            | Q(compaction_requested_at__lt=now - COMPACTION_REQUEST_TTL)
        )
        .update(compaction_requested_at=now)
    )
    if claimed:
        from threads.tasks import thread_compact_task

        thread_compact_task.delay_on_commit(str(thread.pk))
    return bool(claimed)


def thread_messages_clear(*, thread: Thread, node_id: str, actor: str = "system") -> int:
    """Delete one node's messages (Dify's `clear`); other scopes' children become roots."""
    if not node_id:
        raise ApplicationError(NODE_REQUIRED, fields={"node": [NODE_REQUIRED]})
    with transaction.atomic():
        Thread.objects.select_for_update().only("id").get(pk=thread.pk)
        node_messages = Message.objects.filter(thread=thread, node_id=node_id)
        Message.objects.filter(thread=thread, parent__in=node_messages.values("pk")).exclude(
            node_id=node_id
        ).update(parent=None)
        deleted, _ = node_messages.delete()
        Thread.objects.filter(pk=thread.pk).update(message_count=F("message_count") - deleted)
        audit_record(
            workspace=thread.workspace,
            actor=actor,
            action="delete",
            entity_type="thread_node_messages",
            entity_id=thread.pk,
            changes={"node": node_id, "messages": deleted},
        )
    return deleted


# --- plan, run snapshots, iteration logs -------------------------------------------------------


def thread_plan_set(*, thread: Thread, plan, actor: str = "system") -> ThreadPlan:
    """Store a new version of the plan; earlier versions are kept."""
    if not isinstance(plan, (dict, list)):
        raise ApplicationError(PLAN_INVALID, fields={"plan": [PLAN_INVALID]})
    with transaction.atomic():
        Thread.objects.select_for_update().only("id").get(pk=thread.pk)
        current = ThreadPlan.objects.filter(thread=thread).aggregate(v=Max("version"))["v"] or 0
        version = ThreadPlan.objects.create(
            workspace_id=thread.workspace_id, thread=thread, version=current + 1, plan=plan, actor=actor
        )
        Thread.objects.filter(pk=thread.pk).update(last_activity_at=timezone.now())
    return version


def run_snapshot_put(*, thread: Thread, run_id: str, snapshot) -> tuple[RunSnapshot, bool]:
    """Keep the latest snapshot of a run (an upsert); returns (snapshot, created)."""
    if not run_id or len(run_id) > 200:
        raise ApplicationError(RUN_ID_INVALID, fields={"run_id": [RUN_ID_INVALID]})
    if not isinstance(snapshot, (dict, list)):
        raise ApplicationError(
            "The snapshot must be a JSON object or list.", fields={"snapshot": ["Invalid."]}
        )
    now = timezone.now()
    obj, created = RunSnapshot.objects.update_or_create(
        thread=thread,
        run_id=run_id,
        defaults={"snapshot": snapshot, "updated_at": now, "workspace_id": thread.workspace_id},
        create_defaults={
            "snapshot": snapshot,
            "updated_at": now,
            "created_at": now,
            "workspace_id": thread.workspace_id,
        },
    )
    return obj, created


def iteration_log_append(
    *,
    thread: Thread,
    task_key: str,
    outcome: str,
    error: str = "",
    attempt: int | None = None,
    detail=None,
    at=None,
) -> IterationLog:
    """Record one attempt; `attempt` defaults to the task's previous attempt + 1."""
    if outcome not in IterationLog.Outcome.values:
        message = "Outcome must be one of: " + ", ".join(IterationLog.Outcome.values) + "."
        raise ApplicationError(message, fields={"outcome": [message]})
    with transaction.atomic():
        Thread.objects.select_for_update().only("id").get(pk=thread.pk)
        if attempt is None:
            previous = IterationLog.objects.filter(thread=thread, task_key=task_key).aggregate(
                a=Max("attempt")
            )
            attempt = (previous["a"] or 0) + 1
        log = IterationLog(
            workspace_id=thread.workspace_id,
            thread=thread,
            task_key=task_key,
            attempt=attempt,
            outcome=outcome,
            error=error or "",
            detail=detail or {},
            at=at or timezone.now(),
        )
        log.full_clean(exclude=["workspace", "thread"])
        log.save()
    return log


# --- compaction --------------------------------------------------------------------------------


@dataclass
class CompactionPlan:
    previous_summary: str
    previous_upto_id: object
    messages: list[dict]
    upto: dict


def _compaction_plan(thread: Thread) -> CompactionPlan | None:
    """What a compaction of the newest branch would cover, or None when nothing is new.

    The recent tail is what the history window would send with the agent's settings; the
    messages between the current summary (when it is on this branch) and that tail are
    folded into the summary, at most THREADS_COMPACTION_MAX_MESSAGES of the newest of them.
    """
    from threads.selectors import branch_walk, message_history_window

    window = message_history_window(thread=thread)
    if not window.message_ids:
        return None
    oldest = Message.objects.filter(pk=window.message_ids[0]).values("id", "depth", "parent_id").first()
    if oldest is None or oldest["parent_id"] is None:
        return None
    previous, previous_upto, stop_depth = "", None, -1
    depth = thread.summary_upto_depth
    if (
        thread.summary_upto_id
        and depth is not None
        and ancestor_at_depth(start_id=oldest["id"], target_depth=depth) == thread.summary_upto_id
    ):
        previous, previous_upto, stop_depth = thread.summary, thread.summary_upto_id, depth
    rows = branch_walk(
        start_id=oldest["parent_id"],
        stop_depth=stop_depth,
        limit=settings.THREADS_COMPACTION_MAX_MESSAGES,
        full_content=True,
    )
    if not rows:
        return None
    rows.reverse()
    return CompactionPlan(
        previous_summary=previous, previous_upto_id=previous_upto, messages=rows, upto=rows[-1]
    )


def thread_summarize(*, thread: Thread, previous: str, messages: list[dict]) -> tuple[str, str]:
    """(summary, method): the workspace's chat endpoint, or the extractive fallback.

    Raises LLMError when a configured endpoint fails, so the caller can retry.
    """
    max_tokens = settings.THREADS_SUMMARY_MAX_TOKENS
    try:
        text = chat_complete(
            workspace=thread.workspace,
            messages=summary_prompt(previous=previous, messages=messages),
            max_tokens=max_tokens,
        ).strip()
    except LLMUnavailable:
        return summary_extractive(previous=previous, messages=messages, max_tokens=max_tokens), "extractive"
    if not text:
        raise LLMError("The chat endpoint returned an empty summary.")
    return text, "llm"


def thread_compact(*, thread_id) -> str:
    """Fold the messages older than the recent tail into the thread's cumulative summary.

    One compaction per thread at a time: a lease is taken by compare-and-set, and a second
    caller returns "locked" at once. Re-running with nothing new returns "up_to_date".
    When the summarizer fails, the previous summary stays and LLMError propagates so the
    task retries with backoff. Raw messages are never changed.
    """
    now = timezone.now()
    lease = now + COMPACTION_LEASE
    claimed = (
        Thread.objects.filter(pk=thread_id)
        .filter(Q(compaction_lease_until__isnull=True) | Q(compaction_lease_until__lt=now))
        .update(compaction_lease_until=lease)
    )
    if not claimed:
        return "locked" if Thread.objects.filter(pk=thread_id).exists() else "missing"
    try:
        thread = Thread.objects.select_related("workspace", "agent").get(pk=thread_id)
        plan = _compaction_plan(thread)
        if plan is None:
            Thread.objects.filter(pk=thread_id).update(compaction_requested_at=None)
            return "up_to_date"
        try:
            summary, method = thread_summarize(
                thread=thread, previous=plan.previous_summary, messages=plan.messages
            )
        except LLMError as exc:
            Thread.objects.filter(pk=thread_id).update(compaction_error=str(exc)[:2000])
            raise
        # Compare-and-set on the summary it extends: a summary written meanwhile is not lost.
        Thread.objects.filter(pk=thread_id, summary_upto_id=thread.summary_upto_id).update(
            summary=summary,
            summary_upto_id=plan.upto["id"],
            summary_upto_depth=plan.upto["depth"],
            summary_covers_tokens=plan.upto["branch_tokens"],
            summary_tokens=count_tokens(summary) + 4,
            summary_method=method,
            compacted_at=timezone.now(),
            compaction_error="",
            compaction_requested_at=None,
        )
        return "compacted"
    finally:
        Thread.objects.filter(pk=thread_id, compaction_lease_until=lease).update(compaction_lease_until=None)


def thread_compact_request(*, thread: Thread) -> None:
    """Enqueue a compaction now (after commit), whatever the branch's size."""
    from threads.tasks import thread_compact_task

    Thread.objects.filter(pk=thread.pk).update(compaction_requested_at=timezone.now())
    thread_compact_task.delay_on_commit(str(thread.pk))


# --- message vectors for semantic recall ---------------------------------------------------------

EMBEDDABLE_ROLES = ("user", "assistant")


def message_embedding_texts(message, previous) -> tuple[str, str]:
    """The text of a message as embedded alone (dated) and after its predecessor."""
    speaker = message.name or message.role
    text = f"{speaker}: {message.content}"
    dated = f"[{message.created_at:%d %B %Y}] {text}"
    if previous is None:
        return dated, text
    return dated, f"{previous.name or previous.role}: {previous.content}\n{text}"


def message_embed_batch(*, message_ids, provider=None) -> int:
    """Embed user and assistant messages of `message_ids` that have no vector under the model.

    Each message gets two vectors (alone, and read after the previous message of its
    thread); idempotent like `entry_embed_batch`. Returns rows written.
    """
    from threads.models import Message

    messages = list(
        Message.objects.filter(pk__in=list(message_ids), role__in=EMBEDDABLE_ROLES)
        .exclude(content="")
        .select_related("thread", "thread__workspace")
        .order_by("thread_id", "seq")
    )
    written = 0
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
        rows = [
            MessageEmbedding(
                message=m,
                thread_id=m.thread_id,
                workspace_id=m.workspace_id,
                agent_id=m.thread.agent_id,
                memory_user_id=m.thread.memory_user_id,
                model=model,
                dimensions=len(v),
                embedding=v,
                context_embedding=c,
            )
            for m, v, c in zip(todo, plain, context, strict=True)
        ]
        with transaction.atomic():
            # Messages deleted while the vectors were computed are skipped: a vector of one
            # would fail the whole batch at commit (deferred foreign key). The lock keeps the
            # others until their vectors commit; pk order, so two batches never deadlock.
            alive = set(
                Message.objects.filter(pk__in=[m.pk for m in todo])
                .order_by("pk")
                .select_for_update(no_key=True)
                .values_list("pk", flat=True)
            )
            rows = [row for row in rows if row.message_id in alive]
            MessageEmbedding.objects.bulk_create(rows, ignore_conflicts=True)
        written += len(rows)
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
        transaction.on_commit(lambda chunk=chunk: message_embed_task.delay(chunk))
    return len(ids)

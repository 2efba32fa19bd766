"""Appending messages to a thread (validation, tree position, COPY insert) and clearing a node."""

import json
import uuid

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from core.errors import ApplicationError
from core.lib.rows import ModelRows
from core.lib.tokens import count_message_tokens
from core.memory_settings import memory_settings_for
from core.services import audit_record
from threads.lib.parts import content_parts
from threads.lib.tree import TreeNode, child_position
from threads.lib.validation import MessageErrors, message_clean
from threads.models import Message, NodeSummary, SummarizedMessage, Thread
from threads.services.compaction import _compaction_request_if_needed, _node_compaction_request_if_needed

MESSAGES_REQUIRED = "Send at least one message."
BATCH_TOO_LARGE = "At most {limit} messages per request."
MESSAGES_INVALID = "Some messages are invalid; nothing was stored."
FILES_TOO_LARGE = "A file is over the size limit; nothing was stored."
PARENT_UNKNOWN = "Unknown parent message."
ID_TAKEN = "A message with this id already exists."
IDEMPOTENCY_DUPLICATE = "This idempotency key is used twice in the batch."
TOOL_RESULT_WITHOUT_CALL = "No earlier assistant message on this branch made the tool call `{call_id}`."
NODE_REQUIRED = "Name the node whose memory to clear (`node`)."


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
# Whether a summary holds the row alone (SummarizedMessage): an append that forks from such a
# message clears the marks at and above the fork.
_ROW_SELECT = ", ".join(
    [
        *(f"{{t}}.{c}" for c in _ROW_COLUMNS),
        "EXISTS (SELECT 1 FROM threads_summarizedmessage h WHERE h.message_id = {t}.id)",
    ]
)
_ROW_COLUMNS = (*_ROW_COLUMNS, "summary_held")

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


# The thread's row, locked by every append, and its counters after it: statements built once
# (compiled by the ORM, the two took ~0.75 ms more; docs/speed.md, "The thread every thread
# call reads").
_THREAD_LOCKED = ModelRows(
    Thread,
    only=("message_seq", "summary_upto_id", "summary_upto_depth", "summary_covers_tokens", "summary_tokens"),
)
_THREAD_APPENDED = (
    "UPDATE threads_thread SET message_seq = %s, message_count = message_count + %s, last_activity_at = %s "
    "WHERE id = %s"
)


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
    too_large = False
    for index, raw in enumerate(messages):
        try:
            cleaned.append(message_clean(raw))
        except MessageErrors as exc:
            errors.update({f"messages[{index}].{key}": value for key, value in exc.fields.items()})
            too_large = too_large or exc.too_large
            cleaned.append(None)
    if too_large:
        # A file's data or text over its configured cap (THREADS_FILE_DATA_MAX_BYTES,
        # THREADS_FILE_TEXT_MAX_CHARS) is a payload problem, as a body over the limit is.
        raise ApplicationError(FILES_TOO_LARGE, code="payload_too_large", fields=errors, status_code=413)
    if errors:
        raise ApplicationError(MESSAGES_INVALID, fields=errors)

    with transaction.atomic():
        # The row lock serializes appends to one thread: sequence numbers and default
        # parents stay consistent, and idempotency keys cannot race.
        [locked] = _THREAD_LOCKED.fetch("WHERE id = %s FOR UPDATE", [thread.pk])
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
                # A replayed message is stored in this thread: a new message of the batch
                # may name it as its parent, and its id is not fetched as an external one.
                rows.setdefault(row["id"], row)
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
        # {scope: depth} of the deepest message a summary held alone that this batch forks from.
        forks: dict = {}
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
            # Files count as the window renders them (threads.lib.parts): images at their
            # fixed estimate, documents by their text.
            tokens = count_message_tokens(
                content=(
                    content_parts(role=m["role"], content=window_text, files=m["files"])
                    if m["files"]
                    else window_text
                ),
                tool_calls=m["tool_calls"],
                name=m["name"],
                model=model,
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
            if parent_row and parent_row.get("summary_held") and parent_row["node_id"] == m["node_id"]:
                forks[m["node_id"]] = max(forks.get(m["node_id"], -1), depth - 1)
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
        for scope, fork_depth in forks.items():
            # The new branch reads the fork and everything above it: no summary holds those
            # alone any more. The held messages of a scope are one chain, so they are the
            # ones at or above the fork's depth.
            SummarizedMessage.objects.filter(thread=thread, node_id=scope, depth__lte=fork_depth).delete()
        with connection.cursor() as cursor:
            cursor.execute(_THREAD_APPENDED, [seq, len(created), now, thread.pk])
        thread.message_seq = seq
        thread.last_activity_at = now
        main_leaf = next((m for m in reversed(created) if not m.node_id), None)
        if main_leaf is not None:
            _compaction_request_if_needed(thread=thread, locked=locked, leaf=main_leaf)
        # Each node (a delegated sub-agent's history) is compressed past its own share.
        node_leaves = {m.node_id: m for m in created if m.node_id}
        for node_leaf in node_leaves.values():
            _node_compaction_request_if_needed(thread=thread, leaf=node_leaf)
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
        # The node's summary covered those messages: a cleared node starts without one.
        NodeSummary.objects.filter(thread=thread, node_id=node_id).delete()
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

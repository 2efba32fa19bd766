"""Reads of the thread page: one branch of the message tree, its forks, tool calls paired with
their results, the compaction summary's span, and the nodes a thread holds.

Every read is bounded by THREAD_TREE_LIMIT and the tree's jump pointers, never by the thread's
size: a page costs the same handful of queries on a 10-message and a 100,000-message thread.
"""

import contextlib
import json
from dataclasses import dataclass, field

from django.conf import settings

from core.errors import NotFoundError
from core.lib.replica import read_connection
from threads.lib.tree import ancestor_at_depth
from threads.models import Message, NodeSummary

# The thread page shows this many messages of a branch, newest first; older ones are a page
# away. Rendering dominates the page: 300 rows took ~3x as long as 100, and 50 take ~0.7x of
# 100 (p50 87 against 122 ms, alternating, at load 10 on 2 cores; bench/browser_thread.py).
THREAD_TREE_LIMIT = 50
# Arguments longer than this are cut on the thread page (a model may send megabytes).
TOOL_ARGUMENTS_CHARS = 10_000
# A fork shows this many of its branches as cards (plus the shown one and its two neighbours);
# a message regenerated 500 times stays one row of cards.
FORK_CARDS = 8
# What a fork card quotes of its branch's first message.
FORK_PREVIEW_CHARS = 160
# The node filter lists at most this many nodes.
THREAD_NODES_LIMIT = 100
# A descent to a branch's newest message never takes more steps than this.
DESCENT_MAX_STEPS = 100_000

LEAF_NOT_FOUND = "No such message in this thread."


@dataclass(frozen=True)
class ToolCall:
    """One call of an assistant message, with the tool message that answered it (if shown)."""

    id: str
    name: str
    arguments: str  # pretty-printed when the model sent JSON, else as sent
    result: object = None  # the paired tool Message, or None


@dataclass(frozen=True)
class ForkCard:
    """One branch at a fork: the first message of that branch."""

    id: object
    role: str
    preview: str
    chars: int
    seq: int
    position: int  # 1-based, in write order among its siblings


@dataclass(frozen=True)
class Fork:
    """The siblings of a message on the shown branch: regenerated answers or edited questions."""

    position: int  # the shown branch's number among them
    count: int
    cards: list  # ForkCard, in write order, the shown one included
    previous: ForkCard | None
    next: ForkCard | None

    @property
    def hidden(self) -> int:
        return self.count - len(self.cards)


@dataclass
class TreeRow:
    message: object
    in_window: bool = False
    calls: list = field(default_factory=list)  # ToolCall of an assistant message
    call: ToolCall | None = None  # for a tool message: the call it answers, when shown
    fork: Fork | None = None
    covered: bool = False  # summarised by the compaction summary
    folded: bool = False  # a tool result shown inside its call


@dataclass(frozen=True)
class SummarySpan:
    """The rolling summary of the shown scope and where its span ends on this branch."""

    text: str
    method: str
    tokens: int
    covers_tokens: int
    compacted_at: object
    upto_id: object
    upto_depth: int
    on_branch: bool  # the summary's last message is on the shown branch


@dataclass
class BranchPage:
    """The newest THREAD_TREE_LIMIT messages of one branch (or those before `before`)."""

    leaf_id: object
    node: str
    covered: list  # TreeRow summarised, oldest first
    rows: list  # TreeRow after the summary (all rows when there is none), oldest first
    summary: SummarySpan | None
    older: int  # messages on the branch before the oldest shown (0: none)
    oldest_id: object = None  # the anchor of the "older messages" link
    paged: bool = False  # an older page (`before`), not the newest

    @property
    def shown(self) -> int:
        return len(self.covered) + len(self.rows)


def tool_arguments_display(arguments: str) -> str:
    """A call's arguments as indented JSON when they parse, else the text the model sent."""
    text = arguments or ""
    with contextlib.suppress(ValueError, TypeError, RecursionError):
        text = json.dumps(json.loads(text), ensure_ascii=False, indent=2)
    if len(text) > TOOL_ARGUMENTS_CHARS:
        text = f"{text[:TOOL_ARGUMENTS_CHARS]}… ({len(text) - TOOL_ARGUMENTS_CHARS:,} more characters)"
    return text


def _pair_tool_calls(rows: list[TreeRow]) -> None:
    """Give each assistant row its calls and fold each answering tool row into its call.

    `rows` are one branch, oldest first, so a tool message answers the nearest earlier
    assistant message that made a call with its `tool_call_id` (a regenerated branch may
    reuse ids, so the id alone is not enough). A call without a result on the page, and a
    result whose call is not on it, stay unpaired.
    """
    open_calls: dict = {}  # call id -> (row, index in row.calls), nearest assistant wins
    for row in rows:
        message = row.message
        if message.role == "assistant" and message.tool_calls:
            row.calls = []
            for call in message.tool_calls:
                if not isinstance(call, dict) or not call.get("id"):
                    continue
                row.calls.append(
                    ToolCall(
                        id=str(call["id"]),
                        name=str(call.get("name") or ""),
                        arguments=tool_arguments_display(call.get("arguments") or ""),
                    )
                )
                open_calls[str(call["id"])] = (row, len(row.calls) - 1)
        elif message.role == "tool" and message.tool_call_id in open_calls:
            owner, index = open_calls.pop(message.tool_call_id)
            pair = owner.calls[index]
            if pair.result is None:
                owner.calls[index] = pair = ToolCall(pair.id, pair.name, pair.arguments, message)
                row.call, row.folded = pair, True


def thread_nodes(*, thread) -> list[str]:
    """The node ids that hold messages in `thread` ("" is the main conversation), sorted.

    A skip scan over the (thread, node_id, seq) index: one index probe per distinct node,
    however many messages each holds.
    """
    sql = """
    WITH RECURSIVE nodes(node_id) AS (
        (SELECT node_id FROM threads_message WHERE thread_id = %(thread)s ORDER BY node_id LIMIT 1)
      UNION ALL
        SELECT (SELECT m.node_id FROM threads_message m
                WHERE m.thread_id = %(thread)s AND m.node_id > n.node_id ORDER BY m.node_id LIMIT 1)
        FROM nodes n WHERE n.node_id IS NOT NULL
    )
    SELECT node_id FROM nodes WHERE node_id IS NOT NULL LIMIT %(limit)s
    """
    with read_connection(Message).cursor() as cursor:
        cursor.execute(sql, {"thread": thread.pk, "limit": THREAD_NODES_LIMIT + 1})
        return [row[0] for row in cursor.fetchall()]


# The newest message below the named one: the scope's newest messages written after it are
# candidates, newest first, and jump pointers walk each up to the named message's depth
# (O(log n) steps each), so a branch that reaches the thread's newest messages costs the same
# at any depth. Only a branch none of them is on needs the step-by-step descent below.
_NEWEST_DESCENDANT_SQL = """
WITH RECURSIVE
named AS (SELECT id, depth, seq FROM threads_message WHERE id = %(leaf)s AND thread_id = %(thread)s),
cand AS (
    -- A scalar bound, so the (thread, node_id, -seq) index serves the range and the order.
    SELECT m.id, m.seq FROM threads_message m
    WHERE m.thread_id = %(thread)s AND m.node_id = %(node)s AND m.seq > (SELECT seq FROM named)
    ORDER BY m.seq DESC LIMIT %(candidates)s
),
anc(cand_id, seq, id, depth, parent_id, jump_id, jump_depth, steps) AS (
    SELECT c.id, c.seq, m.id, m.depth, m.parent_id, m.jump_id, m.jump_depth, 0
    FROM cand c JOIN threads_message m ON m.id = c.id
  UNION ALL
    SELECT a.cand_id, a.seq, m.id, m.depth, m.parent_id, m.jump_id, m.jump_depth, a.steps + 1
    FROM anc a JOIN threads_message m ON m.id = CASE
        WHEN a.jump_depth >= (SELECT depth FROM named) AND a.jump_id <> a.id THEN a.jump_id
        ELSE a.parent_id END
    WHERE a.depth > (SELECT depth FROM named) AND a.steps < 256
)
SELECT cand_id FROM anc WHERE id = (SELECT id FROM named) ORDER BY seq DESC LIMIT 1
"""
# How many of the scope's newest messages are tried as the named message's newest descendant.
DESCENDANT_CANDIDATES = 64

# From the named message down: at each step the newest child of the same scope (the latest
# regeneration), one index probe on parent_id per step.
_DESCENT_SQL = """
WITH RECURSIVE down(id, steps) AS (
    SELECT id, 0 FROM threads_message WHERE id = %(leaf)s AND thread_id = %(thread)s
  UNION ALL
    SELECT c.id, d.steps + 1
    FROM down d
    CROSS JOIN LATERAL (
        SELECT id FROM threads_message
        WHERE parent_id = d.id AND thread_id = %(thread)s AND node_id = %(node)s
        ORDER BY seq DESC LIMIT 1
    ) c
    WHERE d.steps < %(cap)s
)
SELECT id FROM down ORDER BY steps DESC LIMIT 1
"""


def thread_focus(*, thread, message_id) -> tuple[str, object, object]:
    """Where the page opens a message (the evidence of a memory links here): its node, the
    newest message of its branch, and the message after it on that branch (the page then
    ends at the focused message), or None when it is the newest."""
    row = Message.objects.filter(thread=thread, pk=message_id).values("node_id", "depth").first()
    if row is None:
        raise NotFoundError(LEAF_NOT_FOUND)
    leaf_id = thread_branch_leaf(thread=thread, node=row["node_id"], leaf=message_id)
    after = None
    if leaf_id != message_id:
        after = ancestor_at_depth(start_id=leaf_id, target_depth=row["depth"] + 1)
    return row["node_id"], leaf_id, after


def thread_branch_leaf(*, thread, node: str = "", leaf=None):
    """The last message of the branch to show.

    Without `leaf`: the newest message of the scope (`node`; "" is the main conversation),
    as the history window picks it, or None when the scope is empty. With `leaf`: that
    message's newest descendant in the scope (itself when it has none), so a link to a
    regenerated answer shows its branch down to where that conversation went on; a message
    of another thread (or none) is NotFoundError.
    """
    if leaf is None:
        return (
            Message.objects.filter(thread=thread, node_id=node)
            .order_by("-seq")
            .values_list("id", flat=True)
            .first()
        )
    params = {
        "leaf": leaf,
        "thread": thread.pk,
        "node": node,
        "cap": DESCENT_MAX_STEPS,
        "candidates": DESCENDANT_CANDIDATES,
    }
    with read_connection(Message).cursor() as cursor:
        cursor.execute(_NEWEST_DESCENDANT_SQL, params)
        row = cursor.fetchone()
        if row is None:
            cursor.execute(_DESCENT_SQL, params)
            row = cursor.fetchone()
    if row is None:
        raise NotFoundError(LEAF_NOT_FOUND)
    return row[0]


# Walks parent links up from `start`, one primary-key lookup per step; PostgreSQL evaluates
# the recursive CTE lazily, so LIMIT ends the walk once a page of the scope's rows passed.
# An archived tool result loads only its preview: its whole text never leaves the database.
_BRANCH_SQL = """
WITH RECURSIVE walk(id, parent_id, node_id, steps) AS (
    SELECT id, parent_id, node_id, 0 FROM threads_message WHERE id = %(start)s AND thread_id = %(thread)s
  UNION ALL
    SELECT m.id, m.parent_id, m.node_id, w.steps + 1
    FROM walk w JOIN threads_message m ON m.id = w.parent_id
    WHERE m.thread_id = %(thread)s AND w.steps < %(cap)s
)
SELECT m.id, m.role, m.parent_id, m.seq, m.depth, m.created_at, m.token_count, m.node_id, m.name,
       m.author_agent, m.tool_calls, m.tool_call_id, m.archived,
       CASE WHEN m.archived THEN left(m.content, %(preview)s) ELSE m.content END AS text,
       length(m.content) AS content_chars,
       (m.role = 'tool' AND (m.metadata @> '{"is_error": true}' OR m.metadata @> '{"status": "error"}'))
           AS failed
FROM (SELECT id, steps FROM walk WHERE node_id = %(node)s LIMIT %(limit)s) w
JOIN threads_message m ON m.id = w.id
ORDER BY w.steps DESC
"""

# The siblings of the shown messages, numbered in write order; for each fork only the first
# FORK_CARDS, the shown branch and its neighbours come back, however many siblings it has.
_FORKS_SQL = """
WITH kids AS (
    SELECT id, parent_id, role, left(content, %(preview)s) AS preview, length(content) AS chars, seq,
           count(*) OVER (PARTITION BY parent_id) AS n,
           row_number() OVER (PARTITION BY parent_id ORDER BY seq) AS pos
    FROM threads_message
    WHERE thread_id = %(thread)s AND parent_id = ANY(%(parents)s) AND node_id = %(node)s
),
shown AS (SELECT parent_id, pos FROM kids WHERE id = ANY(%(path)s))
SELECT k.id, k.parent_id, k.role, k.preview, k.chars, k.seq, k.pos, k.n, s.pos
FROM kids k JOIN shown s ON s.parent_id = k.parent_id
WHERE k.n > 1 AND (k.pos <= %(cards)s OR abs(k.pos - s.pos) <= 1)
ORDER BY k.parent_id, k.pos
"""


def _forks(*, thread, node: str, messages) -> dict:
    """{message id: Fork} for the shown messages that have siblings in their scope."""
    parents = [m.parent_id for m in messages if m.parent_id]
    if not parents:
        return {}
    params = {
        "thread": thread.pk,
        "node": node,
        "parents": parents,
        "path": [m.pk for m in messages],
        "cards": FORK_CARDS,
        "preview": FORK_PREVIEW_CHARS,
    }
    with read_connection(Message).cursor() as cursor:
        cursor.execute(_FORKS_SQL, params)
        fetched = cursor.fetchall()
    grouped: dict = {}
    for id_, parent_id, role, preview, chars, seq, pos, count, shown in fetched:
        group = grouped.setdefault(parent_id, {"count": count, "shown": shown, "cards": []})
        group["cards"].append(ForkCard(id_, role, preview, chars, seq, pos))
    by_parent = {m.parent_id: m.pk for m in messages if m.parent_id}
    forks = {}
    for parent_id, group in grouped.items():
        cards, shown = group["cards"], group["shown"]
        forks[by_parent[parent_id]] = Fork(
            position=shown,
            count=group["count"],
            cards=cards,
            previous=next((c for c in cards if c.position == shown - 1), None),
            next=next((c for c in cards if c.position == shown + 1), None),
        )
    return forks


def _summary(*, thread, node: str):
    if not node:
        return thread
    return NodeSummary.objects.filter(thread=thread, node_id=node).first()


def _on_branch(*, leaf_id, upto_id, upto_depth, messages) -> bool:
    """Whether the summary's last message is on the branch ending at `leaf_id`."""
    for message in messages:
        if message.depth == upto_depth:
            return message.pk == upto_id
    # Not among the shown rows: one O(log n) jump-pointer walk from the leaf answers it.
    return ancestor_at_depth(start_id=leaf_id, target_depth=upto_depth) == upto_id


def thread_message_tree(*, thread, leaf_id, node: str = "", before=None, window_ids=()) -> BranchPage:
    """A page of the branch ending at `leaf_id` (see thread_branch_leaf), oldest first.

    Only messages of the scope `node` ("" is the main conversation) are shown. `before`, a
    message of that branch, shows the page of messages before it; a message of the thread off
    the branch is ignored, anything else is NotFoundError. Each row carries its fork (when
    its parent has several children in the scope), its tool calls paired with the results
    on the page, whether the history window (`window_ids`) holds it, and whether the
    compaction summary of the scope covers it.
    """
    start, paged = leaf_id, False
    if before is not None:
        anchor = Message.objects.filter(thread=thread, pk=before).values("parent_id", "depth").first()
        if anchor is None:
            raise NotFoundError(LEAF_NOT_FOUND)
        on_branch = ancestor_at_depth(start_id=leaf_id, target_depth=anchor["depth"]) == before
        if on_branch:
            start, paged = anchor["parent_id"], True
    messages = []
    if start is not None:
        params = {
            "start": start,
            "thread": thread.pk,
            "node": node,
            "cap": DESCENT_MAX_STEPS,
            "limit": THREAD_TREE_LIMIT + 1,
            "preview": settings.THREADS_TOOL_RESULT_PREVIEW_CHARS,
        }
        messages = list(Message.objects.raw(_BRANCH_SQL, params))
    older = 0
    if len(messages) > THREAD_TREE_LIMIT:
        messages = messages[1:]
        # Everything above the oldest shown message on its branch (other scopes' too).
        older = messages[0].depth
    forks = _forks(thread=thread, node=node, messages=messages)
    window = {str(pk) for pk in window_ids}
    rows = [TreeRow(m, in_window=str(m.pk) in window, fork=forks.get(m.pk)) for m in messages]
    _pair_tool_calls(rows)

    summary = None
    source = _summary(thread=thread, node=node)
    if source is not None and source.summary and source.summary_upto_id is not None and leaf_id is not None:
        depth = source.summary_upto_depth or 0
        on_branch = _on_branch(
            leaf_id=leaf_id, upto_id=source.summary_upto_id, upto_depth=depth, messages=messages
        )
        summary = SummarySpan(
            text=source.summary,
            method=source.summary_method,
            tokens=source.summary_tokens,
            covers_tokens=source.summary_covers_tokens,
            compacted_at=source.compacted_at,
            upto_id=source.summary_upto_id,
            upto_depth=depth,
            on_branch=on_branch,
        )
        if on_branch:
            for row in rows:
                row.covered = row.message.depth <= depth
    return BranchPage(
        leaf_id=leaf_id,
        node=node,
        covered=[row for row in rows if row.covered],
        rows=[row for row in rows if not row.covered],
        summary=summary,
        older=older,
        oldest_id=messages[0].pk if messages and older else None,
        paged=paged,
    )


def thread_tool_result(*, principal, thread_id, message_id):
    """One tool message, whole, of a thread the principal may read; anything else is NotFoundError."""
    from threads.selectors import message_get, thread_get

    thread = thread_get(principal=principal, thread_id=thread_id)
    message = message_get(thread=thread, message_id=message_id)
    if message.role != "tool":
        raise NotFoundError("Tool result not found.")
    return thread, message

"""Rolling compaction: when to compact, what a compaction covers, the summary and its lease.

The main conversation's summary lives on the Thread; a node's (a delegated sub-agent's
history) in its NodeSummary row, compacted past the agent's `subagent_compress_at` share of
the context window. Both go through the same plan, summarizer, lease and compare-and-set.

Compactions wait their workspace's turn in the fair queue (core.lib.fair_queue), one queued
job per thread and node however many appends ask for it; `thread_compact_job` runs one. A
`wait` budget defers the job to the next budget day (the previous summary stays meanwhile);
other summarizer failures are retried by the task with backoff, the job keeping its slot.
"""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import ApplicationError
from core.lib.fair_queue import llm_job_begin, llm_job_defer, llm_job_enqueue, llm_job_finish, llm_job_keep
from core.lib.tokens import count_tokens
from core.llm import LLMBudgetWait, LLMError, LLMUnavailable, chat_complete
from core.memory_settings import memory_settings_for
from core.tasks import DATABASE_UNAVAILABLE
from threads.lib.summarize import summary_extractive, summary_prompt
from threads.lib.tree import ancestor_at_depth
from threads.models import Message, NodeSummary, SummarizedMessage, Thread

# A compaction holds its lease at most this long; a crashed worker's lease then expires.
COMPACTION_LEASE = timedelta(minutes=5)
# An enqueued compaction that has not finished after this long may be enqueued again.
COMPACTION_REQUEST_TTL = timedelta(minutes=10)
NODE_UNKNOWN = "The thread has no message of this node."


def context_window_for(thread: Thread) -> int:
    table = settings.THREADS_MODEL_CONTEXT_WINDOWS
    if thread.model and thread.model in table:
        return table[thread.model]
    return memory_settings_for(thread.agent).model_context_window


def _summary_over_threshold(*, leaf: Message, source, threshold: float) -> bool:
    """Whether `leaf`'s branch, shortened by `source`'s summary where it applies, passes
    `threshold` tokens.

    The summary shortens only the branch it is on: a branch edited from a turn before the
    summary's end carries all of its own tokens. The O(log n) jump-pointer check runs only
    when it decides the answer (the branch alone is past the threshold, the estimate with
    the summary is not).
    """
    if source is None or not source.summary_upto_id or source.summary_upto_depth is None:
        return leaf.branch_tokens > threshold
    if leaf.branch_tokens - source.summary_covers_tokens + source.summary_tokens > threshold:
        return True
    if leaf.branch_tokens <= threshold:
        return False
    return not (
        leaf.depth > source.summary_upto_depth
        and ancestor_at_depth(start_id=leaf.pk, target_depth=source.summary_upto_depth)
        == source.summary_upto_id
    )


def _compaction_request_if_needed(*, thread: Thread, locked: Thread, leaf: Message) -> bool:
    """Enqueue one compaction when the branch's token estimate passes the threshold."""
    from threads.selectors.window import window_uses_fallback

    agent_settings = memory_settings_for(thread.agent)
    threshold = agent_settings.compaction_threshold * context_window_for(thread)
    if not _summary_over_threshold(leaf=leaf, source=locked, threshold=threshold):
        return False
    # Inkeep's fallback window stands in for compaction when there is no summarizer model.
    if window_uses_fallback(thread=thread, agent_settings=agent_settings):
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
        thread_compact_enqueue(thread=thread)
    return bool(claimed)


def _node_compaction_request_if_needed(*, thread: Thread, leaf: Message) -> bool:
    """Enqueue one compaction of `leaf`'s node when its history passes `subagent_compress_at`.

    A node's messages chain among themselves, so `branch_tokens` is the node's history.
    """
    from threads.selectors.window import window_uses_fallback

    node = leaf.node_id
    summary = NodeSummary.objects.filter(thread=thread, node_id=node).first()
    agent_settings = memory_settings_for(thread.agent)
    threshold = agent_settings.subagent_compress_at * context_window_for(thread)
    if not _summary_over_threshold(leaf=leaf, source=summary, threshold=threshold):
        return False
    if window_uses_fallback(thread=thread, agent_settings=agent_settings):
        return False
    if summary is None:
        summary, _ = NodeSummary.objects.get_or_create(
            thread=thread, node_id=node, defaults={"workspace_id": thread.workspace_id}
        )
    now = timezone.now()
    claimed = (
        NodeSummary.objects.filter(pk=summary.pk)
        .filter(
            Q(compaction_requested_at__isnull=True)
            | Q(compaction_requested_at__lt=now - COMPACTION_REQUEST_TTL)
        )
        .update(compaction_requested_at=now)
    )
    if claimed:
        thread_compact_enqueue(thread=thread, node=node)
    return bool(claimed)


# The messages a new summary end `upto` holds alone: up its parent links, within its scope,
# until a message with another child of the scope (a fork: that branch still reads it and
# everything above) or one already held (the chain an earlier summary on this branch marked,
# which appends keep free of forks). Depth falls by one a step, so the walk ends. Each step
# is three primary-key or parent index lookups; a summary that extends the last one walks
# only what it newly covers. The statement writes the marks itself (no row comes back to
# Python) and answers the depth of the fork it stopped at, if any.
_HELD_MARK_SQL = """
WITH RECURSIVE walk(id, parent_id, node_id, depth, held, fork) AS (
    SELECT p.id, p.parent_id, p.node_id, p.depth,
        EXISTS (SELECT 1 FROM threads_summarizedmessage h WHERE h.message_id = p.id),
        EXISTS (
            SELECT 1 FROM threads_message c
            WHERE c.parent_id = p.id AND c.node_id = p.node_id AND c.id <> u.id
        )
    FROM threads_message u JOIN threads_message p ON p.id = u.parent_id AND p.node_id = u.node_id
    WHERE u.id = %(upto)s AND u.thread_id = %(thread)s
  UNION ALL
    SELECT p.id, p.parent_id, p.node_id, p.depth,
        EXISTS (SELECT 1 FROM threads_summarizedmessage h WHERE h.message_id = p.id),
        EXISTS (
            SELECT 1 FROM threads_message c
            WHERE c.parent_id = p.id AND c.node_id = p.node_id AND c.id <> w.id
        )
    FROM walk w JOIN threads_message p ON p.id = w.parent_id AND p.node_id = w.node_id AND p.depth < w.depth
    WHERE NOT w.held AND NOT w.fork
),
marked AS (
    INSERT INTO threads_summarizedmessage (message_id, thread_id, node_id, depth)
    SELECT m.id, %(thread)s, m.node_id, m.depth
    FROM walk JOIN threads_message m ON m.id = walk.id
    WHERE NOT walk.held AND NOT walk.fork
    -- A message retention is deleting meanwhile: waited for, then left out once gone (the
    -- walk saw it in its snapshot), instead of failing the compaction on the foreign key.
    FOR KEY SHARE OF m
)
SELECT max(depth) FILTER (WHERE fork) FROM walk
"""


def _summary_held_mark(*, thread_id, scope: str, upto_id, extends: bool) -> None:
    """Mark the messages the scope's new summary (ending at `upto_id`) holds alone.

    `extends`: the summary grew from the previous one on the same branch, whose marks stay.
    Otherwise, or when the walk meets a fork, no earlier mark stands: the marks of another
    branch's summary, or the ancestors of a fork, are messages some window still reads.
    Runs in the transaction that writes the summary, with the thread row locked, so no
    append forks from the chain meanwhile.
    """
    held = SummarizedMessage.objects.filter(thread_id=thread_id, node_id=scope)
    if not extends:
        held.delete()
    with connection.cursor() as cursor:
        cursor.execute(_HELD_MARK_SQL, {"upto": upto_id, "thread": thread_id})
        (fork_depth,) = cursor.fetchone()
    if extends and fork_depth is not None:
        # The earlier chain lies above the fork: every new mark is below it.
        held.filter(depth__lte=fork_depth).delete()


def thread_summary_held_rebuild(*, thread_ids) -> None:
    """Mark again, from nothing, the messages each summary of these threads (the thread's own
    and each node's) holds alone: the marks the compactions that wrote them leave.

    For summaries and messages written without a compaction (an import restoring a thread):
    a mark only ever comes from this walk, never from the rows as written. A summary whose
    end is not a message of its scope at its depth holds nothing, and a scope with no summary
    holds nothing. Each thread row is locked while its marks change, as in a compaction, so
    no append forks from a chain meanwhile.
    """
    for thread_id in thread_ids:
        with transaction.atomic():
            thread = (
                Thread.objects.select_for_update()
                .filter(pk=thread_id)
                .values("summary_upto_id", "summary_upto_depth")
                .first()
            )
            if thread is None:
                continue
            ends = {"": (thread["summary_upto_id"], thread["summary_upto_depth"])}
            for node, upto, depth in NodeSummary.objects.filter(thread_id=thread_id).values_list(
                "node_id", "summary_upto_id", "summary_upto_depth"
            ):
                ends[node] = (upto, depth)
            SummarizedMessage.objects.filter(thread_id=thread_id).exclude(node_id__in=list(ends)).delete()
            for scope, (upto, depth) in ends.items():
                end = Message.objects.filter(pk=upto, thread_id=thread_id, node_id=scope, depth=depth)
                if upto is None or depth is None or not end.exists():
                    SummarizedMessage.objects.filter(thread_id=thread_id, node_id=scope).delete()
                    continue
                _summary_held_mark(thread_id=thread_id, scope=scope, upto_id=upto, extends=False)


# Waits for an append to the thread in progress (appends hold the row FOR UPDATE for their
# whole transaction) and reads the row as it left it; KEY SHARE conflicts only with FOR
# UPDATE, and is released at once.
_APPENDS_SETTLED_SQL = "SELECT last_activity_at FROM threads_thread WHERE id = %s FOR KEY SHARE"


def _appends_settled(thread_id):
    """The thread's `last_activity_at` once every append in progress has committed, so a
    window read after this call sees every append that stamped it.

    Recorded as `compaction_checked_at`, it is compared for equality with the thread's
    `last_activity_at` (retention): any later append stamps another value. The value, not a
    clock read here, because appends stamp it with the web host's clock and this runs on a
    worker's: compared as times, an appending host whose clock runs behind stamped its next
    append "before" the check, and retention did not ask again until an append passed it.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_APPENDS_SETTLED_SQL, [thread_id])
        row = cursor.fetchone()
        return row[0] if row else None


@dataclass
class CompactionPlan:
    previous_summary: str
    previous_upto_id: object
    messages: list[dict]
    upto: dict


def _compaction_plan(thread: Thread, source=None, node: str = "") -> CompactionPlan | None:
    """What a compaction of the newest branch would cover, or None when nothing is new.

    The recent tail is what the history window would send with the agent's settings (no
    semantic recall: the summary and its end depend only on the branch's own messages); the
    messages between the current summary (when it is on this branch) and that tail are
    folded into the summary, at most THREADS_COMPACTION_MAX_MESSAGES of the newest of them.
    `source` holds the current summary: the thread, or the NodeSummary of `node`.
    """
    from threads.selectors import branch_walk, message_history_window

    source = thread if source is None else source
    # Without semantic recall: the recalled block's tokens would shorten the tail by what
    # one query happened to find, folding into the summary turns the window shows, and
    # compaction would embed and search other threads for nothing it keeps.
    if node:
        window = message_history_window(thread=thread, node=node, memory_mode="node", semantic_recall=False)
    else:
        window = message_history_window(thread=thread, semantic_recall=False)
    if not window.message_ids:
        return None
    oldest = Message.objects.filter(pk=window.message_ids[0]).values("id", "depth", "parent_id").first()
    if oldest is None or oldest["parent_id"] is None:
        return None
    previous, previous_upto, stop_depth = "", None, -1
    depth = source.summary_upto_depth
    if (
        source.summary_upto_id
        and depth is not None
        and ancestor_at_depth(start_id=oldest["id"], target_depth=depth) == source.summary_upto_id
    ):
        previous, previous_upto, stop_depth = source.summary, source.summary_upto_id, depth
    # Only the scope's own messages, as its window reads them: a branch may pass through
    # another scope (a node's first message naming the main turn that delegated to it as its
    # parent), whose messages belong to that scope's summary, not this one.
    rows = branch_walk(
        start_id=oldest["parent_id"],
        stop_depth=stop_depth,
        limit=settings.THREADS_COMPACTION_MAX_MESSAGES,
        node=node,
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
            purpose="compaction",
        ).strip()
    except LLMUnavailable:
        return summary_extractive(previous=previous, messages=messages, max_tokens=max_tokens), "extractive"
    if not text:
        raise LLMError("The chat endpoint returned an empty summary.")
    return text, "llm"


def thread_compact(*, thread_id, node: str = "") -> str:
    """Fold the messages older than the recent tail into the thread's cumulative summary
    (with `node`, into that node's NodeSummary).

    One compaction per thread at a time: a lease is taken by compare-and-set, and a second
    caller returns "locked" at once. Re-running with nothing new returns "up_to_date".
    When the summarizer fails, the previous summary stays and LLMError propagates so the
    task retries with backoff. Raw messages are never changed.

    "compacted" and "up_to_date" record `compaction_checked_at` (the thread's
    `last_activity_at` before the window was read): retention asks for another compaction
    only after a later append changed it.
    """
    now = timezone.now()
    lease = now + COMPACTION_LEASE
    # The row holding the summary, its lease and its request mark.
    rows = (
        NodeSummary.objects.filter(thread_id=thread_id, node_id=node)
        if node
        else Thread.objects.filter(pk=thread_id)
    )
    claimed = rows.filter(Q(compaction_lease_until__isnull=True) | Q(compaction_lease_until__lt=now)).update(
        compaction_lease_until=lease
    )
    if not claimed:
        return "locked" if rows.exists() else "missing"
    try:
        checked = _appends_settled(thread_id)
        thread = Thread.objects.select_related("workspace", "agent").get(pk=thread_id)
        source = rows.get() if node else thread
        plan = _compaction_plan(thread, source=source, node=node)
        if plan is None:
            rows.update(compaction_requested_at=None, compaction_checked_at=checked)
            return "up_to_date"
        try:
            summary, method = thread_summarize(
                thread=thread, previous=plan.previous_summary, messages=plan.messages
            )
        except LLMError as exc:
            rows.update(compaction_error=str(exc)[:2000])
            raise
        with transaction.atomic():
            # Appends lock the thread row: none forks from the messages marked below until
            # this commits, and one that did before is seen by the walk.
            Thread.objects.select_for_update().filter(pk=thread_id).values_list("pk").first()
            # Compare-and-set on the summary it extends: a summary written meanwhile is not lost.
            written = rows.filter(summary_upto_id=source.summary_upto_id).update(
                summary=summary,
                summary_upto_id=plan.upto["id"],
                summary_upto_depth=plan.upto["depth"],
                summary_covers_tokens=plan.upto["branch_tokens"],
                summary_tokens=count_tokens(summary) + 4,
                summary_method=method,
                compacted_at=timezone.now(),
                compaction_error="",
                compaction_requested_at=None,
                compaction_checked_at=checked,
            )
            if written:
                _summary_held_mark(
                    thread_id=thread_id,
                    scope=node,
                    upto_id=plan.upto["id"],
                    extends=plan.previous_upto_id is not None,
                )
        return "compacted"
    finally:
        rows.filter(compaction_lease_until=lease).update(compaction_lease_until=None)


def thread_compact_request(*, thread: Thread, node: str = "") -> None:
    """Enqueue a compaction now (after commit), whatever the branch's size; with `node`, of
    that node's (sub-agent's) history into its NodeSummary. A node with no message in the
    thread is a 400: there is nothing to compact and a typo should not pass silently."""
    now = timezone.now()
    if node:
        if not Message.objects.filter(thread=thread, node_id=node).exists():
            raise ApplicationError(NODE_UNKNOWN, code="node_unknown", fields={"node": [NODE_UNKNOWN]})
        summary, _ = NodeSummary.objects.get_or_create(
            thread=thread, node_id=node, defaults={"workspace_id": thread.workspace_id}
        )
        NodeSummary.objects.filter(pk=summary.pk).update(compaction_requested_at=now)
        thread_compact_enqueue(thread=thread, node=node)
        return
    Thread.objects.filter(pk=thread.pk).update(compaction_requested_at=now)
    thread_compact_enqueue(thread=thread)


def _compact_task_name() -> str:
    # Imported here: the task module imports the services. Importing it also registers the
    # task in this process, so the dispatcher finds it by name.
    from threads.tasks import thread_compact_task

    return thread_compact_task.name


def _compact_dedupe_key(thread_id, node: str) -> str:
    return f"threads.compact:{thread_id}:{node}"


def thread_compact_enqueue(*, thread: Thread, node: str = ""):
    """Queue a compaction of the thread (or its `node`) for the workspace's turn in the fair
    queue, sent after commit; a compaction of the same thread and node already queued (not
    yet sent) stands for this one. Returns the LLMJob."""
    return llm_job_enqueue(
        workspace_id=thread.workspace_id,
        task=_compact_task_name(),
        kwargs={"thread_id": str(thread.pk), "node": node},
        dedupe_key=_compact_dedupe_key(thread.pk, node),
    )


def thread_compact_job(*, thread_id, node: str = "", llm_job_id=None, retries_left: int = 0) -> str:
    """Run one queued compaction (`thread_compact`) and finish its fair-queue job.

    A `wait` budget defers the job to the next budget day ("deferred"). A summarizer or
    database failure propagates for the task's retry with backoff; while `retries_left`, the
    job stays sent (its slot taken), after the last attempt it is finished. A job no longer in
    the sent state (done or deferred by an earlier delivery) is skipped ("skipped").
    """
    if not llm_job_begin(llm_job_id):
        return "skipped"
    finish = True
    try:
        return thread_compact(thread_id=thread_id, node=node)
    except LLMBudgetWait as exc:
        workspace_id = Thread.objects.filter(pk=thread_id).values_list("workspace_id", flat=True).first()
        if workspace_id is None:
            return "missing"
        llm_job_defer(
            llm_job_id,
            not_before=exc.retry_at,
            workspace_id=workspace_id,
            task=_compact_task_name(),
            kwargs={"thread_id": str(thread_id), "node": node},
            dedupe_key=_compact_dedupe_key(thread_id, node),
        )
        finish = False
        return "deferred"
    except (LLMError, *DATABASE_UNAVAILABLE):
        if retries_left > 0:
            finish = False
            llm_job_keep(llm_job_id)
        raise
    finally:
        if finish:
            llm_job_finish(llm_job_id)

"""Reads behind context assembly: each block of the turn's context, built within a token cap.

`context_build` is the one read an agent makes per turn. It never writes; the optional
append of the incoming message happens in `runtime.services.context_assemble` first.
"""

import itertools
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from django.db.models import TextField
from django.db.models.functions import Cast

from core.errors import ApplicationError
from core.lib.tokens import count_message_tokens, count_tokens
from core.memory_settings import memory_settings_for
from facts.models import Fact
from facts.selectors import MemoryContext, with_effective_confidence
from runtime.rendering import escape_text, fit_block

SECTIONS = ("user_profile", "session_memory", "memory", "procedures", "history")

# The documented allocation (docs/runtime.md): each block may use at most this share of the
# budget left after the incoming message; what a block leaves unused goes to the history.
DEFAULT_ALLOCATION = {
    "user_profile": 0.15,
    "session_memory": 0.15,
    "memory": 0.20,
    "procedures": 0.10,
}

# Facts a block considers at most (fewer for smaller caps, see _candidate_limit): the default
# 4,000-token budget gives the profile 600 tokens, about 100 fact lines.
FACT_CANDIDATES = 200
PROCEDURE_CANDIDATES = 5
# Characters of one item's value; a longer value is cut with an ellipsis.
ITEM_VALUE_CHARS = 500
PROCEDURE_CONTENT_CHARS = 800
MIN_FACT_CONFIDENCE = 0.5

USER_PROFILE_HEADER = "What is known about the person you are talking to (stored facts, most certain first):"
SESSION_MEMORY_HEADER = "State of this conversation:"
PROCEDURES_HEADER = "Procedures that apply to this request (follow them when relevant):"


@dataclass
class Section:
    text: str = ""
    tokens: int = 0
    cap: int = 0
    items: list = field(default_factory=list)
    omitted: int = 0
    summary_included: bool = False
    embedding_ms: float = 0.0
    # Rows fetched for the block, kept so a re-render (summary moved in) needs no query.
    candidates: list = field(default_factory=list, repr=False)
    plan: object = None

    def as_dict(self) -> dict:
        return {
            "text": self.text,
            "tokens": self.tokens,
            "cap": self.cap,
            "items": self.items,
            "omitted": self.omitted,
        }


def _fact_value(fact: dict):
    # Values arrive as JSON text (value_json) and are decoded only for the lines a block
    # reads: a heavy person's candidates are mostly never rendered.
    if "value" not in fact:
        fact["value"] = json.loads(fact["value_json"])
    return fact["value"]


def _fact_line(fact: dict) -> str:
    # Kept on the row: <session-memory> renders its candidates again when the summary moves in.
    if "line" not in fact:
        value = escape_text(_fact_value(fact), limit=ITEM_VALUE_CHARS)
        fact["line"] = f"- {escape_text(fact['key'], limit=200)}: {value}"
    return fact["line"]


def _fact_item(fact: dict) -> dict:
    return {
        "id": str(fact["id"]),
        "key": fact["key"],
        "value": _fact_value(fact),
        "fact_type": fact["fact_type"],
        "confidence": round(fact["effective_confidence"], 4),
    }


def _candidate_limit(cap: int) -> int:
    # A fact line costs at least ~5 tokens ("- a: b"), so a block of `cap` tokens never
    # holds more than cap / 5 of them; fetching more would only be thrown away.
    return max(1, min(FACT_CANDIDATES, cap // 5))


def _current_facts(context: MemoryContext, **filters):
    """Current facts above MIN_FACT_CONFIDENCE (after decay), as dicts: rendering needs five
    columns, and building model instances for hundreds of rows costs more than the query."""
    queryset = Fact.objects.filter(workspace=context.workspace, valid_to__isnull=True, **filters)
    return (
        with_effective_confidence(queryset)
        .filter(effective_confidence__gte=MIN_FACT_CONFIDENCE)
        .annotate(value_json=Cast("value", TextField()))
    )


FACT_COLUMNS = ("id", "key", "value_json", "fact_type", "effective_confidence")
# Session facts are fetched for at least this many tokens, so a re-render with the summary
# moved in (a larger cap) can reuse them.
SESSION_FACTS_TOKENS = 1000


def context_user_profile(*, context: MemoryContext, cap: int) -> Section:
    """User-scope facts of the person: preferences first, then the other facts; within each,
    by confidence, then recency.

    Candidates are the most recent current versions of each kind (as many as the cap can
    hold), read backwards along the facts_user index: ranking all of a heavy person's facts
    by confidence would sort every one of them (9 ms at 9,000 facts) for a block that holds
    a few dozen. For the usual person with fewer facts than that, nothing is left out.
    `MemoryUser.preferences` mirrors the `user_preference` facts, so it is not repeated.
    """
    section = Section(cap=cap)
    if context.memory_user is None or cap <= 0:
        return section
    limit = _candidate_limit(cap)
    base = _current_facts(context, scope=Fact.Scope.USER, memory_user=context.memory_user).order_by(
        "-valid_from"
    )
    preference = Fact.FactType.USER_PREFERENCE
    # Both candidate sets in one statement, each read newest first along the index and
    # appended in that order; the stable sort keeps it among equal confidences.
    rows = (
        base.filter(fact_type=preference)
        .values(*FACT_COLUMNS)[:limit]
        .union(base.exclude(fact_type=preference).values(*FACT_COLUMNS)[:limit], all=True)
    )
    facts = sorted(rows, key=lambda f: (f["fact_type"] != preference, -f["effective_confidence"]))
    header = USER_PROFILE_HEADER
    if context.memory_user.display_name:
        header += f"\n- name: {escape_text(context.memory_user.display_name, limit=200)}"
    lines = (_fact_line(f) for f in facts)
    section.text, section.tokens, kept = fit_block("user-profile", header, lines, cap)
    section.items = [_fact_item(f) for f in facts[:kept]]
    section.omitted = len(facts) - kept
    return section


def _plan_lines(plan) -> list[str]:
    if plan in (None, {}, []):
        return []
    return [f"- plan: {escape_text(plan, limit=4 * ITEM_VALUE_CHARS)}"]


def context_session_memory(
    *, context: MemoryContext, cap: int, plan=None, summary: str = "", facts: list | None = None
) -> Section:
    """The thread's plan, its compaction summary (when the history window applied it) and
    its session-scope facts, in that order of priority. `facts` reuses an earlier fetch."""
    section = Section(cap=cap)
    if context.thread is None or cap <= 0:
        return section
    if facts is None:
        facts = list(
            _current_facts(context, scope=Fact.Scope.SESSION, thread=context.thread)
            .order_by("-effective_confidence", "-valid_from")
            .values(*FACT_COLUMNS)[: _candidate_limit(max(cap, SESSION_FACTS_TOKENS))]
        )
    section.candidates = facts
    lines = _plan_lines(plan)
    fixed = len(lines)
    if summary:
        lines.append(f"- summary of earlier messages: {escape_text(summary)}")
        fixed += 1
    all_lines = itertools.chain(lines, (_fact_line(f) for f in facts))
    section.text, section.tokens, kept = fit_block("session-memory", SESSION_MEMORY_HEADER, all_lines, cap)
    section.summary_included = bool(summary) and kept >= fixed
    kept_facts = max(0, kept - fixed)
    section.items = [_fact_item(f) for f in facts[:kept_facts]]
    section.omitted = fixed + len(facts) - kept
    return section


def _procedure_line(match) -> str:
    procedure = match.procedure
    text = f"- {escape_text(procedure.name, limit=200)} ({procedure.procedure_type})"
    if procedure.description:
        text += f": {escape_text(procedure.description, limit=ITEM_VALUE_CHARS)}"
    text += f" | steps: {escape_text(procedure.content, limit=PROCEDURE_CONTENT_CHARS)}"
    return text


def context_procedures(*, context: MemoryContext, goal: str, channel: str = "", cap: int) -> Section:
    """Procedures whose trigger conditions fire for the incoming message, best first."""
    from procedures.selectors import procedure_match

    section = Section(cap=cap)
    if not goal or cap <= 0:
        return section
    match_context = {"channel": channel} if channel else {}
    matches = procedure_match(
        workspace=context.workspace,
        goal=goal,
        agent=context.agent,
        context=match_context,
        limit=PROCEDURE_CANDIDATES,
    )
    lines = [_procedure_line(m) for m in matches]
    section.text, section.tokens, kept = fit_block("procedures", PROCEDURES_HEADER, lines, cap)
    section.items = [
        {
            "id": str(m.procedure.pk),
            "name": m.procedure.name,
            "procedure_type": m.procedure.procedure_type,
            "score": m.score,
            "matched": m.matched,
        }
        for m in matches[:kept]
    ]
    section.omitted = len(matches) - kept
    return section


def message_tokens(text: str) -> int:
    return count_message_tokens(content=text) if text else 0


@dataclass(frozen=True)
class MemoryQuery:
    text: str
    vector: list
    model: str
    top_k: int
    embedding_ms: float


def memory_query(*, context: MemoryContext, message: str) -> MemoryQuery | None:
    """The auto-inject query for `<memory>` (the user's message, cut to what a search accepts)
    and its embedding, or None when the agent's settings turn auto-inject off
    (`episodic_memory`, `auto_inject`) or there is no person or message."""
    if context.memory_user is None or context.agent is None or not message:
        return None
    agent_settings = memory_settings_for(context.agent)
    if not (agent_settings.episodic_memory and agent_settings.auto_inject):
        return None
    from django.conf import settings

    from core.embeddings import embedding_provider_for

    text = message.strip()[: settings.EPISODIC_QUERY_MAX_LENGTH]
    if not text:
        return None
    started = time.perf_counter()
    provider = embedding_provider_for(context.workspace)
    vector = provider.embed([text])[0]
    return MemoryQuery(
        text=text,
        vector=vector,
        model=provider.model_name,
        top_k=agent_settings.auto_inject_top_k,
        embedding_ms=(time.perf_counter() - started) * 1000,
    )


def context_memory(*, context: MemoryContext, query: MemoryQuery | None, cap: int) -> Section:
    """Episodic entries for (agent, person) relevant to the incoming message: the auto-inject
    of `<memory>`, at most `auto_inject_top_k`. The block is rendered by the episodic tier;
    entries are dropped from the least relevant end until it fits `cap`."""
    section = Section(cap=cap)
    if query is None or cap <= 0:
        return section
    from episodic.selectors import entry_render_memory_block, entry_search_hybrid

    section.embedding_ms = query.embedding_ms
    hits = entry_search_hybrid(
        agent=context.agent,
        memory_user=context.memory_user,
        query=query.text,
        top_k=query.top_k,
        query_vector=query.vector,
        model=query.model,
    ).hits
    entries = [getattr(hit, "entry", hit) for hit in hits]
    kept = len(entries)
    while kept > 0:
        text = entry_render_memory_block(entries=entries[:kept])
        tokens = count_tokens(text)
        if tokens <= cap:
            section.text, section.tokens = text, tokens
            break
        kept -= 1
    section.items = [
        {
            "id": str(entry.pk),
            "content": entry.content,
            "source": entry.source,
            "created_at": entry.created_at.isoformat(),
        }
        for entry in entries[:kept]
    ]
    section.omitted = len(entries) - kept
    return section


ALLOCATION_INVALID = (
    "allocation maps user_profile, session_memory, memory and procedures to shares that sum to at most 1."
)
BUDGET_TOO_SMALL = "The token budget does not even cover the incoming message ({tokens} tokens)."


def allocation_clean(allocation) -> dict:
    if allocation is None:
        return dict(DEFAULT_ALLOCATION)
    if not isinstance(allocation, dict) or set(allocation) - set(DEFAULT_ALLOCATION):
        raise ApplicationError(ALLOCATION_INVALID, fields={"allocation": [ALLOCATION_INVALID]})
    merged = {**DEFAULT_ALLOCATION, **allocation}
    for value in merged.values():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ApplicationError(ALLOCATION_INVALID, fields={"allocation": [ALLOCATION_INVALID]})
    if sum(merged.values()) > 1 + 1e-9:
        raise ApplicationError(ALLOCATION_INVALID, fields={"allocation": [ALLOCATION_INVALID]})
    return {key: float(value) for key, value in merged.items()}


@dataclass
class ContextResult:
    context: MemoryContext
    token_budget: int
    allocation: dict
    sections: dict
    history: dict
    message_tokens: int
    appended: object = None
    # Milliseconds per part; "query_embedding" is inside "memory".
    timings: dict = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.message_tokens + sum(s.tokens for s in self.sections.values()) + self.history["tokens"]

    @property
    def system_prompt(self) -> str:
        """The blocks in prompt order, ready to prepend to the agent's own instructions."""
        order = ("user_profile", "session_memory", "memory", "procedures")
        return "\n\n".join(self.sections[name].text for name in order if self.sections[name].text)


def _trim_history(history: dict, excess: int) -> dict:
    """Drop the oldest stored messages (never leaving a leading orphan tool result), then the
    recalled and summary messages, until `excess` tokens are freed. The budget invariant is
    enforced here whatever the parts measured."""
    ids = list(history["message_ids"])
    split = len(history["messages"]) - len(ids)
    leading, recent = list(history["messages"][:split]), list(history["messages"][split:])
    freed = 0
    while recent and freed < excess:
        freed += chat_message_tokens(recent.pop(0))
        ids.pop(0)
        while recent and recent[0].get("role") == "tool":
            freed += chat_message_tokens(recent.pop(0))
            ids.pop(0)
    while leading and freed < excess:
        freed += chat_message_tokens(leading.pop())
    return {
        **history,
        "messages": leading + recent,
        "message_ids": ids,
        "tokens": max(0, history["tokens"] - freed),
        "cut_count": history["cut_count"] + (len(history["message_ids"]) - len(ids)),
    }


def _calls(message: dict) -> list:
    return [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in message.get("tool_calls") or ()
    ]


def context_build(
    *,
    context: MemoryContext,
    message: str,
    token_budget: int,
    message_in_history: bool = False,
    appended=None,
    channel: str = "",
    node: str | None = None,
    allocation: dict | None = None,
    include=(),
) -> ContextResult:
    """The context for one turn, never over `token_budget` tokens in total.

    Allocation (docs/runtime.md): the incoming message is reserved first when it is not
    already the newest history message; of the rest, each block may use at most its share
    (`DEFAULT_ALLOCATION`); the history window gets everything the blocks left unused,
    capped by the agent's `recent_messages`. When the window applies the compaction summary
    it moves into `<session-memory>`, so it is sent once.
    """
    shares = allocation_clean(allocation)
    wanted = set(include or SECTIONS)
    reserved = 0 if message_in_history else message_tokens(message)
    if reserved > token_budget:
        raise ApplicationError(
            BUDGET_TOO_SMALL.format(tokens=reserved),
            fields={"token_budget": [BUDGET_TOO_SMALL.format(tokens=reserved)]},
        )
    available = token_budget - reserved
    caps = {name: int(available * share) if name in wanted else 0 for name, share in shares.items()}
    # The query is embedded first, on its own: the model saturates the CPU while it runs, and
    # its time is then reported apart from the database work (timings["query_embedding"]).
    query = memory_query(context=context, message=message) if caps["memory"] > 0 else None
    parallel = _parallel_enabled()
    jobs = {
        "user_profile": (context_user_profile, {"context": context, "cap": caps["user_profile"]}),
        "memory": (context_memory, {"context": context, "query": query, "cap": caps["memory"]}),
        "procedures": (
            context_procedures,
            {"context": context, "goal": message, "channel": channel, "cap": caps["procedures"]},
        ),
        "session_memory": (
            _session_memory_job,
            {"context": context, "cap": caps["session_memory"], "wanted": "session_memory" in wanted},
        ),
    }
    if parallel and "history" in wanted:
        # The window is read at the same time as the blocks, for every token they might leave
        # unused, then cut from its oldest end to what they actually left (below).
        jobs["history"] = (
            _history,
            {"context": context, "node": node, "max_tokens": available, "message": message, "query": query},
        )
    parts, timings = _run_parts(jobs, parallel=parallel)
    sections = {name: parts[name] for name in ("user_profile", "memory", "procedures", "session_memory")}
    plan = sections["session_memory"].plan
    timings["query_embedding"] = round(query.embedding_ms, 3) if query is not None else 0.0
    remaining = available - sum(s.tokens for s in sections.values())
    if "history" not in wanted:
        history = _no_history()
    elif parallel:
        history = parts["history"]
        if history["tokens"] > remaining:
            history = _trim_history(history, history["tokens"] - remaining)
    else:
        started = time.perf_counter()
        history = _history(context=context, node=node, max_tokens=remaining, message=message, query=query)
        timings["history"] = round((time.perf_counter() - started) * 1000, 3)

    if (
        history["summary_applied"]
        and "session_memory" in wanted
        and context.thread is not None
        and history["messages"]
    ):
        # Move the summary from the window into <session-memory>: the block may grow by what
        # the window frees plus what the window left unused, so the total cannot grow.
        summary_tokens = chat_message_tokens(history["messages"][0])
        session = sections["session_memory"]
        room = session.tokens + summary_tokens + max(0, remaining - history["tokens"])
        moved = context_session_memory(
            context=context, cap=room, plan=plan, summary=context.thread.summary, facts=session.candidates
        )
        if moved.summary_included:
            moved.cap = session.cap
            moved.plan = plan
            sections["session_memory"] = moved
            history = {
                **history,
                "messages": history["messages"][1:],
                "tokens": history["tokens"] - summary_tokens,
                "summary_in_session_memory": True,
            }

    result = ContextResult(
        context=context,
        token_budget=token_budget,
        allocation={**caps, "history": max(0, remaining)},
        sections=sections,
        history=history,
        message_tokens=reserved,
        appended=appended,
        timings=timings,
    )
    excess = result.tokens - token_budget
    if excess > 0:
        result.history = _trim_history(result.history, excess)
    return result


def _session_memory_job(*, context: MemoryContext, cap: int, wanted: bool) -> Section:
    if not wanted:
        return Section(cap=0)
    plan = _thread_plan(context.thread)
    section = context_session_memory(context=context, cap=cap, plan=plan)
    section.plan = plan
    return section


def _parallel_enabled() -> bool:
    from django.conf import settings
    from django.db import connection

    # Rows written in an open transaction (a caller's atomic block, a TestCase) are
    # invisible to the pool threads' own connections, so such callers read sequentially.
    return getattr(settings, "CONTEXT_PARALLEL_WORKERS", 0) > 0 and not connection.in_atomic_block


_executor = None
_executor_slots = None
_executor_lock = threading.Lock()


def _pool() -> tuple[ThreadPoolExecutor, threading.Semaphore]:
    global _executor, _executor_slots
    from django.conf import settings

    with _executor_lock:
        if _executor is None:
            workers = settings.CONTEXT_PARALLEL_WORKERS
            _executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="context-part")
            _executor_slots = threading.Semaphore(workers)
    return _executor, _executor_slots


def _submit(fn, kwargs):
    """The part's future when a pool thread is free, else None (run it inline): with several
    requests at once (gunicorn threads), a part must not queue behind other requests'."""
    executor, slots = _pool()
    if not slots.acquire(blocking=False):
        return None
    try:
        return executor.submit(_in_pool_thread, fn, kwargs, slots)
    except BaseException:
        slots.release()
        raise


def _in_pool_thread(fn, kwargs, slots):
    from django.db import close_old_connections

    try:
        # Pool threads keep one connection each across requests; this applies CONN_MAX_AGE
        # and the health check the request cycle applies to request threads.
        close_old_connections()
        started = time.perf_counter()
        return fn(**kwargs), round((time.perf_counter() - started) * 1000, 3)
    finally:
        slots.release()


# Parts that are mostly database time (the episodic search, the history window): with a
# pool they run on it while the calling thread builds the other, Python-heavy parts. Moving
# those too was measured no faster: their threads only queue for the GIL.
BACKGROUND_PARTS = ("memory", "history")


def _run_parts(jobs: dict, *, parallel: bool) -> tuple[dict, dict]:
    """Run the independent parts; with `parallel`, BACKGROUND_PARTS on the pool meanwhile
    (those that find no free pool thread run in the calling thread like the others)."""
    results, timings, futures = {}, {}, {}
    if parallel:
        for name in BACKGROUND_PARTS:
            if name in jobs:
                future = _submit(*jobs[name])
                if future is not None:
                    futures[name] = future
    for name, (fn, kwargs) in jobs.items():
        if name in futures:
            continue
        started = time.perf_counter()
        results[name] = fn(**kwargs)
        timings[name] = round((time.perf_counter() - started) * 1000, 3)
    for name, future in futures.items():
        results[name], timings[name] = future.result()
    return results, timings


def _thread_plan(thread):
    if thread is None:
        return None
    from threads.models import ThreadPlan

    row = ThreadPlan.objects.filter(thread=thread).order_by("-version").values("plan").first()
    return row["plan"] if row else None


def _no_history() -> dict:
    return {
        "messages": [],
        "message_ids": [],
        "tokens": 0,
        "summary_applied": False,
        "cut_count": 0,
        "recalled": [],
        "leaf_id": None,
        "summary_in_session_memory": False,
    }


def _history(
    *, context: MemoryContext, node: str | None, max_tokens: int, message: str = "", query=None
) -> dict:
    """The history window; with semantic recall on, older messages related to the incoming
    `message` (reusing the `<memory>` query's vector when there is one)."""
    if context.thread is None or max_tokens <= 0:
        return _no_history()
    from threads.selectors import message_history_window

    recall = {}
    if query is not None:
        recall = {"recall_query": query.text, "recall_vector": query.vector, "recall_model": query.model}
    elif message.strip():
        recall = {"recall_query": message}
    window = message_history_window(thread=context.thread, node=node, max_tokens=max_tokens, **recall)
    data = window.as_dict()
    data.pop("summary_id", None)
    data.pop("max_tokens", None)
    data.pop("max_messages", None)
    data["summary_in_session_memory"] = False
    # Counted again as sent (archived results become references, tool calls carry JSON), so
    # the reported total is what the model will actually be charged.
    data["tokens"] = sum(chat_message_tokens(m) for m in data["messages"])
    return data


def chat_message_tokens(message: dict) -> int:
    return count_message_tokens(
        content=message.get("content") or "", tool_calls=_calls(message), name=message.get("name") or ""
    )

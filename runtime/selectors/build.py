"""`context_build`: the one read an agent makes per turn, fitting the blocks and the history
window into the token budget (in parallel when a pool is configured).

It never writes; the optional append of the incoming message happens in
`runtime.services.context_assemble` first. With `explain` it also says why each item was
chosen and what the budget cut (the /memories context preview).
"""

import time
from dataclasses import dataclass, field

from core.errors import ApplicationError
from core.lib.escaping import strip_invisible_json
from core.lib.side_reads import side_read_started, side_reads_enabled
from core.lib.tokens import count_message_tokens
from core.memory_settings import memory_settings_for
from runtime.selectors.sections import (
    BLOCK_NOT_INCLUDED,
    DEFAULT_ALLOCATION,
    SECTIONS,
    Section,
    context_memory,
    context_procedures,
    context_session_memory,
    context_user_profile,
    memory_query,
    memory_query_skipped,
    message_tokens,
)
from threads.lib.parts import content_parts
from threads.selectors import CONVERSATION_MEMORY_OFF, MemoryContext, chat_system_message, system_as_clean

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
    # "user": the blocks travel as the first history message (context_message_id), not as
    # system_prompt, for providers that ignore the system role.
    system_as: str = "system"
    explained: bool = False

    @property
    def tokens(self) -> int:
        if self.system_as == "user":
            # The blocks are inside the history's first message, counted there.
            return self.message_tokens + self.history["tokens"]
        return self.message_tokens + sum(s.tokens for s in self.sections.values()) + self.history["tokens"]

    @property
    def blocks_text(self) -> str:
        """The blocks in prompt order."""
        order = ("user_profile", "session_memory", "memory", "procedures")
        return "\n\n".join(self.sections[name].text for name in order if self.sections[name].text)

    @property
    def system_prompt(self) -> str:
        """The blocks, ready to prepend to the agent's own instructions ("" with system_as=user:
        they are the history's first message then)."""
        return "" if self.system_as == "user" else self.blocks_text

    @property
    def explanation(self) -> dict:
        """Per block (built with `explain`): why each kept item was chosen (`chosen`, in the
        block's item order), what the cap cut (`cut`) and why an empty block is empty (`note`)."""
        blocks = {
            name: {"chosen": section.why, "cut": section.cut, "note": section.note}
            for name, section in self.sections.items()
        }
        history = self.history
        if history.get("off_reason"):
            note = "The agent's conversation_memory setting is off."
        elif self.context.thread is None:
            note = "No thread: there is no conversation to send."
        elif not history["messages"]:
            note = "Nothing left of the budget for the history, or the thread is empty."
        else:
            note = ""
        recalled = [
            {
                "id": hit["id"],
                "label": hit["content"][:120],
                "lexical": None,
                "vector": None,
                "recency": None,
                "score": hit.get("score"),
                "reason": "Recalled: an older message of this person related to the incoming one.",
            }
            for hit in history.get("recalled") or ()
        ]
        blocks["history"] = {
            "chosen": recalled,
            "cut": [],
            "cut_count": history["cut_count"],
            "note": note,
        }
        return blocks


def context_result_data(result: ContextResult) -> dict:
    """The context as POST /api/v1/context/ and the `context` tool answer it. Everything in it
    is for a model, items and history included, so no invisible or bidi control character
    leaves here."""
    context = result.context
    user = context.memory_user
    return strip_invisible_json(
        {
            "agent": context.agent.slug,
            "memory_user": (
                {"id": str(user.pk), "canonical_id": user.canonical_id, "display_name": user.display_name}
                if user is not None
                else None
            ),
            "thread": str(context.thread.pk) if context.thread is not None else None,
            "appended_message": str(result.appended.pk) if result.appended is not None else None,
            "token_budget": result.token_budget,
            "tokens": result.tokens,
            "message_tokens": result.message_tokens,
            "allocation": result.allocation,
            "system_prompt": result.system_prompt,
            **{name: section.as_dict() for name, section in result.sections.items()},
            "history": result.history,
            "timings_ms": result.timings,
        }
    )


def context_message_id(context: MemoryContext) -> str:
    """The stable id of the blocks sent as a user message: one per thread (or person, or
    agent without one), the same every turn, so a client replaces it rather than adding one."""
    if context.thread is not None:
        return f"context-{context.thread.pk}"
    if context.memory_user is not None:
        return f"context-{context.memory_user.pk}"
    return f"context-{context.agent.pk}"


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
    memory_mode: str | None = None,
    allocation: dict | None = None,
    include=(),
    system_as: str = "system",
    content_format: str = "plain",
    tool_format: str = "native",
    explain: bool = False,
) -> ContextResult:
    """The context for one turn, never over `token_budget` tokens in total.

    Allocation (docs/runtime.md): the incoming message is reserved first when it is not
    already the newest history message; of the rest, each block may use at most its share
    (`DEFAULT_ALLOCATION`); the history window gets everything the blocks left unused,
    capped by the agent's `recent_messages`. When the window applies the compaction summary
    it moves into `<session-memory>`, so it is sent once.

    With the agent's `conversation_memory` off there is no history (`off_reason` says why)
    and the message is reserved even when appended. With `system_as="user"` the blocks are
    sent as the history's first message, a user message with a stable id.

    `explain` changes nothing in the result's blocks: it adds, per block, the scores and
    reasons of the items kept and the candidates the caps cut (`ContextResult.explanation`).
    """
    shares = allocation_clean(allocation)
    system_as_clean(system_as)
    wanted = set(include or SECTIONS)
    history_off = (
        "history" in wanted
        and context.agent is not None
        and not memory_settings_for(context.agent).conversation_memory
    )
    if history_off:
        wanted.discard("history")
        message_in_history = False
    reserved = 0 if message_in_history else message_tokens(message)
    if reserved > token_budget:
        raise ApplicationError(
            BUDGET_TOO_SMALL.format(tokens=reserved),
            fields={"token_budget": [BUDGET_TOO_SMALL.format(tokens=reserved)]},
        )
    available = token_budget - reserved
    blocks_wanted = len(wanted & set(DEFAULT_ALLOCATION))
    if system_as == "user" and blocks_wanted:
        # The blocks travel as one more message: its overhead and the blank lines between the
        # blocks come out of the blocks' room, or the last guard would drop the message whole.
        available -= min(available, count_message_tokens(content="") + blocks_wanted - 1)
    caps = {name: int(available * share) if name in wanted else 0 for name, share in shares.items()}
    # The query is embedded first, on its own: the model saturates the CPU while it runs, and
    # its time is then reported apart from the database work (timings["query_embedding"]).
    query = memory_query(context=context, message=message) if caps["memory"] > 0 else None
    parallel = side_reads_enabled()
    jobs = {
        "user_profile": (
            context_user_profile,
            {"context": context, "cap": caps["user_profile"], "explain": explain},
        ),
        "memory": (
            context_memory,
            {"context": context, "query": query, "cap": caps["memory"], "explain": explain},
        ),
        "procedures": (
            context_procedures,
            {
                "context": context,
                "goal": message,
                "channel": channel,
                "cap": caps["procedures"],
                "explain": explain,
            },
        ),
        "session_memory": (
            _session_memory_job,
            {
                "context": context,
                "cap": caps["session_memory"],
                "wanted": "session_memory" in wanted,
                "explain": explain,
            },
        ),
    }
    if parallel and "history" in wanted:
        # The window is read at the same time as the blocks, for every token they might leave
        # unused, then cut from its oldest end to what they actually left (below).
        jobs["history"] = (
            _history,
            {
                "context": context,
                "node": node,
                "memory_mode": memory_mode,
                "max_tokens": available,
                "message": message,
                "query": query,
                "system_as": system_as,
                "content_format": content_format,
                "tool_format": tool_format,
            },
        )
    parts, timings = _run_parts(jobs, parallel=parallel)
    sections = {name: parts[name] for name in ("user_profile", "memory", "procedures", "session_memory")}
    if explain and query is None and caps["memory"] > 0:
        sections["memory"].note = memory_query_skipped(context=context, message=message)
    plan = sections["session_memory"].plan
    timings["query_embedding"] = round(query.embedding_ms, 3) if query is not None else 0.0
    remaining = available - sum(s.tokens for s in sections.values())
    if "history" not in wanted:
        history = _no_history(off_reason=CONVERSATION_MEMORY_OFF if history_off else None)
    elif parallel:
        history = parts["history"]
        if history["tokens"] > remaining:
            history = _trim_history(history, history["tokens"] - remaining)
    else:
        started = time.perf_counter()
        history = _history(
            context=context,
            node=node,
            memory_mode=memory_mode,
            max_tokens=remaining,
            message=message,
            query=query,
            system_as=system_as,
            content_format=content_format,
            tool_format=tool_format,
        )
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
            context=context,
            cap=room,
            plan=plan,
            summary=context.thread.summary,
            facts=session.candidates,
            attempts=session.attempts,
            explain=explain,
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
        explained=explain,
    )
    blocks = result.blocks_text
    if system_as == "user" and blocks:
        wrapped = chat_system_message(content=blocks, stable_id=context_message_id(context), system_as="user")
        result.system_as = "user"
        result.history = {
            **history,
            "messages": [wrapped, *history["messages"]],
            "tokens": history["tokens"] + chat_message_tokens(wrapped),
        }
    excess = result.tokens - token_budget
    if excess > 0:
        result.history = _trim_history(result.history, excess)
    return result


def _session_memory_job(*, context: MemoryContext, cap: int, wanted: bool, explain: bool = False) -> Section:
    if not wanted:
        return Section(cap=0, note=BLOCK_NOT_INCLUDED)
    plan = _thread_plan(context.thread)
    section = context_session_memory(context=context, cap=cap, plan=plan, explain=explain)
    section.plan = plan
    return section


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
                fn, kwargs = jobs[name]
                future = side_read_started(fn, **kwargs)
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
    from threads.selectors import thread_plan_current

    return thread_plan_current(thread=thread)


def _no_history(*, off_reason: str | None = None) -> dict:
    return {
        "messages": [],
        "message_ids": [],
        "tokens": 0,
        "summary_applied": False,
        "cut_count": 0,
        "recalled": [],
        "leaf_id": None,
        "summary_in_session_memory": False,
        "off_reason": off_reason,
    }


def _history(
    *,
    context: MemoryContext,
    node: str | None,
    max_tokens: int,
    message: str = "",
    query=None,
    memory_mode: str | None = None,
    system_as: str = "system",
    content_format: str = "plain",
    tool_format: str = "native",
) -> dict:
    """The history window; with semantic recall on, older messages related to the incoming
    `message` (reusing the `<memory>` query's vector when there is one)."""
    if context.thread is None or max_tokens <= 0:
        return _no_history()
    from threads.selectors import message_history_window

    # The incoming message is the person's own words (their "my" names them).
    recall = {"recall_query_by_person": True}
    if query is not None:
        recall.update(recall_query=query.text, recall_vector=query.vector, recall_model=query.model)
    elif message.strip():
        recall.update(recall_query=message)
    window = message_history_window(
        thread=context.thread,
        node=node,
        memory_mode=memory_mode,
        max_tokens=max_tokens,
        system_as=system_as,
        content_format=content_format,
        tool_format=tool_format,
        **recall,
    )
    data = window.as_dict()
    for key in ("summary_id", "max_tokens", "max_messages", "memory_mode", "node"):
        data.pop(key, None)
    data["summary_in_session_memory"] = False
    # Counted again as sent (archived results become references, tool calls carry JSON), so
    # the reported total is what the model will actually be charged.
    data["tokens"] = sum(chat_message_tokens(m) for m in data["messages"])
    return data


def chat_message_tokens(message: dict) -> int:
    content = message.get("content") or ""
    if message.get("files") and isinstance(content, str):
        # References in `files` (content_format=plain) count as the parts they render to.
        content = content_parts(role=message.get("role", "user"), content=content, files=message["files"])
    return count_message_tokens(content=content, tool_calls=_calls(message), name=message.get("name") or "")

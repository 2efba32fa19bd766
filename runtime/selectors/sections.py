"""Each block of a turn's context (user profile, session memory, <memory>, procedures), built
within its token cap."""

import itertools
import json
import logging
import time
from dataclasses import dataclass, field

from django.db.models import TextField
from django.db.models.functions import Cast

from core.lib.escaping import strip_invisible
from core.lib.tokens import count_message_tokens, count_tokens
from core.memory_settings import memory_settings_for
from facts.models import Fact
from facts.selectors import with_effective_confidence
from reflection.selectors import reflection_profile_for
from runtime.rendering import escape_text, fit_block
from threads.selectors import MemoryContext

logger = logging.getLogger(__name__)

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
# The retry history in <session-memory> (n8n appends it to a sub-agent's briefing): the newest
# attempts, at most this many lines and this share of the block's cap, so facts keep room.
ATTEMPT_LINES = 10
ATTEMPT_SHARE = 0.5
ATTEMPT_DETAIL_CHARS = 200

USER_PROFILE_HEADER = "What is known about the person you are talking to (stored facts, most certain first):"
SESSION_MEMORY_HEADER = "State of this conversation:"
PROCEDURES_HEADER = "Procedures that apply to this request (follow them when relevant):"

# Why a block is empty or an item was left out, for `explain` (the /memories context preview).
CUT_BY_CAP = "Left out: the block with it would pass its cap of {cap} tokens."
CUT_BY_ATTEMPT_SHARE = "Left out: older than the retry attempts that fit half of the block."
BLOCK_NOT_INCLUDED = "Not requested, or given no tokens by the allocation."
NO_PERSON = "No person is named: there is nothing to recall about them."
NO_THREAD = "No thread: there is no conversation state."
NO_MESSAGE = "No incoming message to match against."
MEMORY_OFF = "The agent's episodic_memory or auto_inject setting is off."
NOTHING_STORED = "Nothing stored qualifies."
# Characters of an item's label in an explanation.
LABEL_CHARS = 120


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
    attempts: list | None = field(default=None, repr=False)
    plan: object = None
    # With `explain` only: why each kept item was chosen (in `items` order), the candidates
    # the cap cut with the reason, and why the block is empty when it is.
    why: list = field(default_factory=list, repr=False)
    cut: list = field(default_factory=list, repr=False)
    note: str = ""

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


def _why(item_id, label: str, reason: str, *, score=None, lexical=None, vector=None, recency=None) -> dict:
    """One row of an explanation: what the item is, its scores (None where a part does not
    apply to its block) and the reason in words."""
    return {
        "id": str(item_id),
        "label": label,
        "lexical": lexical,
        "vector": vector,
        "recency": recency,
        "score": score,
        "reason": reason,
    }


def _label(value) -> str:
    """An item as an operator reads it in an explanation: one line, cut, no invisible text
    (not escaped for a model: the page escapes it as HTML)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = strip_invisible(" ".join(text.split()))
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _fact_label(fact: dict) -> str:
    return _label(f"{fact['key']}: {_label(_fact_value(fact))}")


def _fact_why(fact: dict, rank: int, *, order: str) -> dict:
    confidence = round(fact["effective_confidence"], 4)
    kind = fact["fact_type"].replace("_", " ")
    reason = f"{kind}, rank {rank} ({order}); confidence {confidence} after decay"
    return _why(fact["id"], _fact_label(fact), reason, score=confidence)


def _fact_cut(fact: dict, cap: int) -> dict:
    confidence = round(fact["effective_confidence"], 4)
    return _why(fact["id"], _fact_label(fact), CUT_BY_CAP.format(cap=cap), score=confidence)


def _empty_note(section: "Section", default: str = NOTHING_STORED) -> str:
    return "" if section.text else default


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


def _cached_profile(context: MemoryContext, facts):
    """The agent's reflection profile of the person, when no user fact changed after it was
    written (then the facts themselves are fresher and the block is built from them)."""
    profile = reflection_profile_for(agent=context.agent, memory_user=context.memory_user)
    if profile is None or not profile.text.strip():
        return None
    newest = facts.values_list("valid_from", flat=True).first()
    if newest is not None and newest > profile.refreshed_at:
        return None
    return profile


def _cached_profile_section(section: "Section", profile, *, explain: bool) -> "Section":
    # The profile may come from a chat model: each line passes the sanitiser like any fact.
    lines = [
        f"- {escape_text(line.lstrip('- '), limit=300)}"
        for line in profile.text.splitlines()
        if line.strip().lstrip("- ")
    ]
    section.text, section.tokens, kept = fit_block("user-profile", USER_PROFILE_HEADER, lines, section.cap)
    section.items = [
        {
            "id": str(profile.pk),
            "kind": "reflection_profile",
            "refreshed_at": profile.refreshed_at.isoformat(),
        }
    ]
    section.omitted = len(lines) - kept
    if explain:
        reason = f"the cached profile of reflection ({profile.method}), newer than every user fact"
        section.why = [_why(profile.pk, "cached profile", reason)]
        section.cut = [_why(profile.pk, line, CUT_BY_CAP.format(cap=section.cap)) for line in lines[kept:]]
        section.note = _empty_note(section)
    return section


def context_user_profile(*, context: MemoryContext, cap: int, explain: bool = False) -> Section:
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
        section.note = BLOCK_NOT_INCLUDED if cap <= 0 else NO_PERSON
        return section
    limit = _candidate_limit(cap)
    base = _current_facts(context, scope=Fact.Scope.USER, memory_user=context.memory_user).order_by(
        "-valid_from"
    )
    cached = _cached_profile(context, base)
    if cached is not None:
        return _cached_profile_section(section, cached, explain=explain)
    preference = Fact.FactType.USER_PREFERENCE
    # Both candidate sets in one statement, each read newest first along the index and
    # appended in that order; the stable sort keeps it among equal confidences.
    rows = (
        base.filter(fact_type=preference)
        .values(*FACT_COLUMNS)[:limit]
        .union(base.exclude(fact_type=preference).values(*FACT_COLUMNS)[:limit], all=True)
    )
    facts = sorted(rows, key=lambda f: (f["fact_type"] != preference, -f["effective_confidence"]))
    # The name is the block's first line, not part of its header: a person known only by
    # name still gets a profile (an empty block renders as nothing).
    name = context.memory_user.display_name
    named = [f"- name: {escape_text(name, limit=200)}"] if name else []
    lines = itertools.chain(named, (_fact_line(f) for f in facts))
    section.text, section.tokens, kept = fit_block("user-profile", USER_PROFILE_HEADER, lines, cap)
    kept_facts = max(kept - len(named), 0)
    section.items = [_fact_item(f) for f in facts[:kept_facts]]
    section.omitted = len(facts) - kept_facts
    if explain:
        order = "preferences first, then by confidence"
        section.why = [_fact_why(f, rank, order=order) for rank, f in enumerate(facts[:kept_facts], 1)]
        section.cut = [_fact_cut(f, cap) for f in facts[kept_facts:]]
        section.note = _empty_note(section)
    return section


def _plan_lines(plan) -> list[str]:
    if plan in (None, {}, []):
        return []
    return [f"- plan: {escape_text(plan, limit=4 * ITEM_VALUE_CHARS)}"]


def _attempt_line(row: dict) -> str:
    if "line" not in row:
        detail = row["error"] or (row["detail"] if row["detail"] not in (None, {}, [], "") else "")
        task, outcome = escape_text(row["task_key"], limit=200), escape_text(row["outcome"], limit=20)
        text = f"- attempt: {task} #{row['attempt']} {outcome}"
        if detail:
            text += f": {escape_text(detail, limit=ATTEMPT_DETAIL_CHARS)}"
        row["line"] = text
    return row["line"]


def _attempt_item(row: dict) -> dict:
    return {
        "id": str(row["id"]),
        "kind": "attempt",
        "task_key": row["task_key"],
        "attempt": row["attempt"],
        "outcome": row["outcome"],
        "error": row["error"],
        "at": row["at"].isoformat(),
    }


def _attempt_lines(attempts: list[dict], cap: int) -> list[str]:
    """The newest attempts' lines within ATTEMPT_SHARE of the cap (at least the newest one
    when it fits the block at all: the last failure is what a retry needs most)."""
    budget = int(cap * ATTEMPT_SHARE)
    lines, used = [], 0
    for row in attempts:
        line = _attempt_line(row)
        cost = count_tokens(line) + 1
        if lines and used + cost > budget:
            break
        lines.append(line)
        used += cost
    return lines


def context_session_memory(
    *,
    context: MemoryContext,
    cap: int,
    plan=None,
    summary: str = "",
    facts: list | None = None,
    attempts: list | None = None,
    explain: bool = False,
) -> Section:
    """The thread's plan, its compaction summary (when the history window applied it), its
    retry history (the newest iteration logs, newest first) and its session-scope facts, in
    that order of priority. `facts` and `attempts` reuse an earlier fetch."""
    from threads.selectors import iteration_log_recent

    section = Section(cap=cap)
    if context.thread is None or cap <= 0:
        section.note = BLOCK_NOT_INCLUDED if cap <= 0 else NO_THREAD
        return section
    if facts is None:
        facts = list(
            _current_facts(context, scope=Fact.Scope.SESSION, thread=context.thread)
            .order_by("-effective_confidence", "-valid_from")
            .values(*FACT_COLUMNS)[: _candidate_limit(max(cap, SESSION_FACTS_TOKENS))]
        )
    if attempts is None:
        attempts = iteration_log_recent(thread=context.thread, limit=ATTEMPT_LINES)
    section.candidates = facts
    section.attempts = attempts
    lines = _plan_lines(plan)
    fixed = len(lines)
    if summary:
        lines.append(f"- summary of earlier messages: {escape_text(summary)}")
        fixed += 1
    attempt_lines = _attempt_lines(attempts, cap)
    all_lines = itertools.chain(lines, attempt_lines, (_fact_line(f) for f in facts))
    section.text, section.tokens, kept = fit_block("session-memory", SESSION_MEMORY_HEADER, all_lines, cap)
    section.summary_included = bool(summary) and kept >= fixed
    kept_attempts = min(len(attempt_lines), max(0, kept - fixed))
    kept_facts = max(0, kept - fixed - len(attempt_lines))
    section.items = [_attempt_item(a) for a in attempts[:kept_attempts]] + [
        _fact_item(f) for f in facts[:kept_facts]
    ]
    section.omitted = fixed + len(attempts) + len(facts) - kept
    if explain:
        _session_memory_explain(section, attempts, len(attempt_lines), kept_attempts, facts, kept_facts)
    return section


def _attempt_label(row: dict) -> str:
    return _label(f"attempt {row['task_key']} #{row['attempt']} {row['outcome']}")


def _session_memory_explain(section, attempts, attempt_lines, kept_attempts, facts, kept_facts) -> None:
    why = [
        _why(a["id"], _attempt_label(a), f"Retry history, newest first: attempt {rank} of {len(attempts)}.")
        for rank, a in enumerate(attempts[:kept_attempts], 1)
    ]
    order = "session facts by confidence, then recency"
    why += [_fact_why(f, rank, order=order) for rank, f in enumerate(facts[:kept_facts], 1)]
    by_cap = CUT_BY_CAP.format(cap=section.cap)
    cut = [_why(a["id"], _attempt_label(a), by_cap) for a in attempts[kept_attempts:attempt_lines]]
    cut += [_why(a["id"], _attempt_label(a), CUT_BY_ATTEMPT_SHARE) for a in attempts[attempt_lines:]]
    cut += [_fact_cut(f, section.cap) for f in facts[kept_facts:]]
    section.why, section.cut = why, cut
    section.note = _empty_note(section)


def _procedure_line(match) -> str:
    procedure = match.procedure
    text = f"- {escape_text(procedure.name, limit=200)} ({procedure.procedure_type})"
    if procedure.description:
        text += f": {escape_text(procedure.description, limit=ITEM_VALUE_CHARS)}"
    text += f" | steps: {escape_text(procedure.content, limit=PROCEDURE_CONTENT_CHARS)}"
    return text


def context_procedures(
    *, context: MemoryContext, goal: str, channel: str = "", cap: int, explain: bool = False
) -> Section:
    """Procedures whose trigger conditions fire for the incoming message, best first."""
    from procedures.selectors import procedure_match

    section = Section(cap=cap)
    if not goal or cap <= 0:
        section.note = BLOCK_NOT_INCLUDED if cap <= 0 else NO_MESSAGE
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
    if explain:
        section.why = [_procedure_why(m, rank, len(matches)) for rank, m in enumerate(matches[:kept], 1)]
        section.cut = [
            _why(m.procedure.pk, _label(m.procedure.name), CUT_BY_CAP.format(cap=cap), score=m.score)
            for m in matches[kept:]
        ]
        section.note = _empty_note(section, "No active procedure's trigger conditions fire for this message.")
    return section


def _procedure_why(match, rank: int, total: int) -> dict:
    matched = ", ".join(match.matched) or "none: it always applies"
    reason = f"Trigger conditions matched: {matched}; rank {rank} of {total} by condition score."
    return _why(match.procedure.pk, _label(match.procedure.name), reason, score=match.score)


def message_tokens(text: str) -> int:
    return count_message_tokens(content=text) if text else 0


@dataclass(frozen=True)
class MemoryQuery:
    text: str
    # None when the provider could not embed it: the block then ranks by words.
    vector: list | None
    model: str
    top_k: int
    embedding_ms: float


def memory_query_skipped(*, context: MemoryContext, message: str) -> str:
    """Why there is no `<memory>` query for this turn, or "" when there is one."""
    if context.memory_user is None or context.agent is None:
        return NO_PERSON
    if not message.strip():
        return NO_MESSAGE
    agent_settings = memory_settings_for(context.agent)
    if not (agent_settings.episodic_memory and agent_settings.auto_inject):
        return MEMORY_OFF
    return ""


def memory_query(*, context: MemoryContext, message: str) -> MemoryQuery | None:
    """The auto-inject query for `<memory>` (the user's message, cut to what a search accepts)
    and its embedding, or None when the agent's settings turn auto-inject off
    (`episodic_memory`, `auto_inject`) or there is no person or message."""
    if memory_query_skipped(context=context, message=message or ""):
        return None
    from django.conf import settings

    from core.embeddings import EmbeddingError, embedding_provider_for

    agent_settings = memory_settings_for(context.agent)
    text = message.strip()[: settings.EPISODIC_QUERY_MAX_LENGTH]
    started = time.perf_counter()
    provider = embedding_provider_for(context.workspace)
    try:
        vector = provider.embed_query(text)
    except EmbeddingError as exc:
        # As every search does without its vector: the memory block ranks by words.
        logger.warning("context: the memory query could not be embedded, words only: %s", exc)
        vector = None
    return MemoryQuery(
        text=text,
        vector=vector,
        model=provider.model_name,
        top_k=agent_settings.auto_inject_top_k,
        embedding_ms=(time.perf_counter() - started) * 1000,
    )


def context_memory(
    *, context: MemoryContext, query: MemoryQuery | None, cap: int, explain: bool = False
) -> Section:
    """Episodic entries for (agent, person) relevant to the incoming message: the auto-inject
    of `<memory>`, at most `auto_inject_top_k`. The block is rendered by the episodic tier;
    entries are dropped from the least relevant end until it fits `cap`."""
    section = Section(cap=cap)
    if query is None or cap <= 0:
        # context_build fills in why there was no query (it knows the message).
        section.note = BLOCK_NOT_INCLUDED if cap <= 0 else ""
        return section
    from episodic.selectors import entry_render_memory_block, entry_search_hybrid

    section.embedding_ms = query.embedding_ms
    search = entry_search_hybrid(
        agent=context.agent,
        memory_user=context.memory_user,
        query=query.text,
        top_k=query.top_k,
        # Without a vector (the provider failed it just now) the words rank, and the provider
        # is not asked a second time.
        mode="hybrid" if query.vector is not None else "lexical",
        query_vector=query.vector,
        model=query.model,
        # The incoming message is the person's own words: its "my" names them.
        asked_by_person=True,
    )
    hits = search.hits
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
    if explain:
        _memory_explain(section, hits, kept, query=query, candidates=search.candidates)
    return section


def _entry_why(hit, reason: str) -> dict:
    entry = getattr(hit, "entry", hit)
    parts = getattr(hit, "parts", {}) or {}

    def rounded(value):
        return None if value is None else round(value, 4)

    return _why(
        entry.pk,
        _label(entry.content),
        reason,
        score=rounded(getattr(hit, "score", None)),
        lexical=rounded(parts.get("lexical")),
        vector=rounded(parts.get("vector")),
        recency=rounded(parts.get("recency")),
    )


def _memory_explain(section: Section, hits: list, kept: int, *, query: MemoryQuery, candidates) -> None:
    pool = f" of {candidates} candidates" if candidates is not None else ""
    section.why = [
        _entry_why(hit, f"Rank {rank}{pool} by fused score; the agent takes the top {query.top_k}.")
        for rank, hit in enumerate(hits[:kept], 1)
    ]
    section.cut = [_entry_why(hit, CUT_BY_CAP.format(cap=section.cap)) for hit in hits[kept:]]
    section.note = _empty_note(section, "No active entry of this person matches the message.")

"""The agent tools behind the MCP server, as plain functions of a `Principal`.

Each tool validates its arguments, resolves the agent / person / thread it names inside
the caller's workspace (`threads.selectors.memory_context_resolve`: an agent-bound key
always acts for its agent, a row of another workspace is a 404) and calls the same
service or selector the REST endpoint calls. Results are compact JSON for a model, with
every string passed through `core.lib.escaping.strip_invisible` (`_for_model`).
"""

import functools
import uuid
from dataclasses import dataclass, field
from datetime import datetime, time
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from core.access import Principal, require_write
from core.counters import RECALLS_CONTEXT, RECALLS_RECALL, RECALLS_SEARCH, recall_served
from core.errors import ApplicationError, NotFoundError
from core.lib.escaping import strip_invisible_json
from runtime import tool_schemas

TOOL_QUERY_MAX_CHARS = 2000
LIMIT_INVALID = "limit must be between 1 and 100."
QUERY_TOO_LONG = f"A query is at most {TOOL_QUERY_MAX_CHARS} characters."


def _for_model(tool):
    """The tool with its result read by a model: every string in it (stored values, message
    contents, the <memory> block) without invisible or bidi control characters."""

    @functools.wraps(tool)
    def wrapper(**kwargs):
        return strip_invisible_json(tool(**kwargs))

    return wrapper


@dataclass(frozen=True)
class ToolSpec:
    """One agent tool: what the MCP server lists, `GET /api/v1/tools/` renders in every vendor
    shape (runtime.tool_schemas) and `POST /api/v1/tools/call/` executes."""

    name: str
    fn: Any
    description: str
    read_only: bool
    # JSON Schema of the arguments; None: derived from `fn`'s signature.
    parameters: dict | None = None
    # argument -> core.memory_settings.MemorySettings field giving its default for an agent.
    setting_defaults: dict = field(default_factory=dict)
    destructive: bool = False
    # The tool runs its own transactions with an embedding or chat model call between them
    # (context's query after its append, record_turn's extraction, store_memory's vectors and
    # consolidation before its insert, remember's cross-key consolidation before its write).
    # One transaction around the whole call (runtime.tool_calls) would hold its locks, or an
    # idle transaction, through that model call, and turn off side reads
    # (core.lib.side_reads), so such a tool is not wrapped.
    commits_in_steps: bool = False


def _check_limit(limit: int) -> int:
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ApplicationError(LIMIT_INVALID, fields={"limit": [LIMIT_INVALID]})
    return limit


def _check_query(query: str | None) -> str | None:
    if query is not None and len(query) > TOOL_QUERY_MAX_CHARS:
        raise ApplicationError(QUERY_TOO_LONG, fields={"query": [QUERY_TOO_LONG]})
    return query


TIME_INVALID = "must be an ISO 8601 date or date and time, e.g. 2026-11-01 or 2026-11-01T09:00:00Z."


def _check_time(name: str, value: str | None) -> datetime | None:
    """`value` as an aware datetime (a date is its midnight, a time without an offset is in
    the server's zone), or None when not given."""
    if value is None:
        return None
    parsed = None
    if isinstance(value, str):
        try:
            parsed = parse_datetime(value)
            if parsed is None and (day := parse_date(value)) is not None:
                parsed = datetime.combine(day, time.min)
        except ValueError:
            parsed = None
    if parsed is None:
        raise ApplicationError(f"{name} {TIME_INVALID}", fields={name: [TIME_INVALID]})
    return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed)


def _entry_filters(created_after: str | None, created_before: str | None, source, metadata: dict | None):
    from episodic.selectors import EntrySearchFilters

    return EntrySearchFilters(
        created_after=_check_time("created_after", created_after),
        created_before=_check_time("created_before", created_before),
        # Repeated kinds once; anything but a list of strings reaches the filter as it came, refused.
        sources=tuple(dict.fromkeys(source))
        if isinstance(source, list) and all(isinstance(kind, str) for kind in source)
        else source,
        metadata=metadata,
    )


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def fact_json(fact) -> dict:
    data = {
        "id": str(fact.pk),
        "key": fact.key,
        "value": fact.value,
        "fact_type": fact.fact_type,
        "scope": fact.scope,
        "confidence": round(getattr(fact, "effective_confidence", fact.confidence), 4),
        "times_confirmed": fact.times_confirmed,
        "valid_from": _iso(fact.valid_from),
    }
    if fact.valid_to is not None:
        data["valid_to"] = _iso(fact.valid_to)
    return data


def memory_user_json(memory_user) -> dict:
    return {
        "id": str(memory_user.pk),
        "canonical_id": memory_user.canonical_id,
        "display_name": memory_user.display_name,
    }


def episode_json(episode) -> dict:
    return {
        "id": str(episode.pk),
        "trigger_type": episode.trigger_type,
        "outcome": episode.outcome,
        "final_output": episode.final_output,
        "started_at": _iso(episode.started_at),
        "rating": episode.rating,
    }


def procedure_json(procedure) -> dict:
    return {
        "id": str(procedure.pk),
        "name": procedure.name,
        "description": procedure.description,
        "procedure_type": procedure.procedure_type,
        "content": procedure.content,
    }


def _context(principal: Principal, *, agent=None, memory_user=None, thread=None):
    """The context a tool reads in. A write that registers its agent resolves with
    threads.selectors.memory_context_for_write instead, so a refused call leaves no agent."""
    from threads.selectors import memory_context_resolve

    return memory_context_resolve(principal=principal, agent=agent, memory_user=memory_user, thread=thread)


@_for_model
def identify_user(
    *,
    principal: Principal,
    channel: str,
    external_id: str,
    profile: dict[str, Any] | None = None,
    agent: str | None = None,
) -> dict:
    """Find or create the person behind a channel identity (e.g. channel "telegram",
    external_id "12345") and return what is known about them: user-scope facts, cached
    preferences and recent episodes. Call it when a conversation starts."""
    from facts.selectors import memory_user_context
    from identities.services import memory_user_identify

    require_write(principal)
    context = _context(principal, agent=agent) if (agent or principal.agent) else None
    result = memory_user_identify(
        workspace=principal.workspace,
        channel=channel,
        external_id=external_id,
        profile=profile,
        actor=principal.actor,
    )
    known = memory_user_context(memory_user=result.memory_user, agent=context.agent if context else None)
    return {
        "memory_user": memory_user_json(result.memory_user),
        "created": result.created,
        "facts": [fact_json(f) for f in known["facts"][:50]],
        "preferences": known["preferences"],
        "episodes": [episode_json(e) for e in known["episodes"]],
    }


REMEMBER_KEPT = "A different value is already stored under this key; it was kept (overwrite is false)."


@_for_model
def remember(
    *,
    principal: Principal,
    key: str,
    value: Any,
    scope: str = "global",
    fact_type: str = "world_knowledge",
    memory_user: str | None = None,
    thread: str | None = None,
    agent: str | None = None,
    confidence: float | None = None,
    evidence: str = "",
    overwrite: bool = True,
) -> dict:
    """Store a fact under `key` (snake_case, e.g. "preferred_language"). scope: "user" (about
    this person; needs memory_user), "session" (this conversation; needs thread), "agent"
    (yourself) or "global" (the whole workspace; the default). The same value again raises
    its confidence; a new value supersedes the old one, unless overwrite is false: then the
    stored value is kept and the result says so. A key bound to one agent does not change a
    global value every agent reads: its new value waits for an operator's review ("held")."""
    from facts.models import Fact
    from facts.services import OUTCOME_SKIPPED, fact_remember
    from threads.selectors import memory_context_for_write

    require_write(principal)
    # An agent named for the first time is registered by fact_remember's write, not before.
    context = memory_context_for_write(
        principal=principal, agent=agent, memory_user=memory_user, thread=thread
    )
    result = fact_remember(
        workspace=principal.workspace,
        key=key,
        value=value,
        scope=scope,
        fact_type=fact_type,
        agent=context.agent,
        memory_user=context.memory_user,
        thread=context.thread,
        confidence=confidence,
        source=Fact.Source.AGENT_TOOL,
        evidence=evidence,
        overwrite=overwrite,
        actor=principal.actor,
        principal=principal,
    )
    data = {"outcome": result.outcome, "fact": fact_json(result.fact)}
    if result.previous is not None:
        data["previous"] = fact_json(result.previous)
    if result.outcome == OUTCOME_SKIPPED:
        data["kept"] = True
        data["message"] = REMEMBER_KEPT
    return data


@_for_model
def recall(
    *,
    principal: Principal,
    key: str | None = None,
    query: str | None = None,
    memory_type: str | None = None,
    limit: int | None = None,
    min_confidence: float | None = None,
    memory_user: str | None = None,
    thread: str | None = None,
    agent: str | None = None,
) -> dict:
    """Look up what is remembered. With `key`: that fact from the most specific scope
    (session, user, agent, global), else keys that look alike. With `query`: text search over
    facts, procedures and episodes (memory_type: facts, procedures, episodes or all). With
    neither: the facts visible in this context, most certain first. memory_type, limit and
    min_confidence default to the agent's memory settings (all, 10 and 0.5 unless changed)."""
    from core.memory_settings import memory_settings_for
    from runtime.selectors import recall as memory_recall

    context = _context(principal, agent=agent, memory_user=memory_user, thread=thread)
    defaults = memory_settings_for(context.agent)
    result = memory_recall(
        context=context,
        key=key,
        query=_check_query(query),
        memory_type=memory_type if memory_type is not None else defaults.recall_memory_type,
        limit=_check_limit(limit if limit is not None else defaults.recall_limit),
        min_confidence=min_confidence if min_confidence is not None else defaults.recall_min_confidence,
    )
    recall_served(context=context, metric=RECALLS_RECALL)
    return {
        "mode": result.mode,
        "facts": [fact_json(f) for f in result.facts],
        "procedures": [procedure_json(p) for p in result.procedures],
        "episodes": [episode_json(e) for e in result.episodes],
    }


RECALL_MEMORY_NEEDS_PERSON = "recall_memory needs the person: pass memory_user or a thread of theirs."


@_for_model
def recall_memory(
    *,
    principal: Principal,
    query: str,
    memory_user: str | None = None,
    thread: str | None = None,
    top_k: int | None = None,
    agent: str | None = None,
    created_after: str | None = None,
    created_before: str | None = None,
    source: list[str] | None = None,
    metadata: dict | None = None,
) -> dict:
    """Search this person's episodic memories (things they told you or agreed to in earlier
    conversations) for `query`; best matches first, with how long ago each was stored and
    the <memory> block to quote from. `created_after` / `created_before` (ISO 8601) keep
    only the memories stored in that time, e.g. for "what did I tell you last week";
    `source` only those of these kinds (e.g. ["user_assertion"]: what the person said
    themselves); `metadata` only those stored with these labels (`store_memory`'s metadata)."""
    from core.memory_settings import memory_settings_for
    from episodic.selectors import entry_render_memory_block, entry_search_hybrid

    filters = _entry_filters(created_after, created_before, source, metadata)
    context = _person_context(principal, agent=agent, memory_user=memory_user, thread=thread)
    top_k = _check_limit(top_k) if top_k is not None else memory_settings_for(context.agent).auto_inject_top_k
    result = entry_search_hybrid(
        agent=context.agent,
        memory_user=context.memory_user,
        query=_check_query(query),
        top_k=top_k,
        filters=filters,
    )
    recall_served(context=context, metric=RECALLS_SEARCH)
    entries = [hit.entry for hit in result.hits]
    return {
        "results": [
            {
                "id": str(hit.entry.pk),
                "content": hit.entry.content,
                "source": hit.entry.source,
                "evidence": hit.entry.evidence,
                "created_at": _iso(hit.entry.created_at),
                "score": round(hit.score, 6),
            }
            for hit in result.hits
        ],
        "memory": entry_render_memory_block(entries),
    }


def _person_context(principal: Principal, *, agent, memory_user, thread):
    """The (agent, person) pair an episodic search reads; both are required."""
    context = _context(principal, agent=agent, memory_user=memory_user, thread=thread)
    if context.agent is None:
        from core.access import agent_resolve

        agent_resolve(principal, None)
    if context.memory_user is None:
        raise ApplicationError(
            RECALL_MEMORY_NEEDS_PERSON, fields={"memory_user": [RECALL_MEMORY_NEEDS_PERSON]}
        )
    return context


@_for_model
def search(
    *,
    principal: Principal,
    query: str,
    memory_user: str | None = None,
    thread: str | None = None,
    top_k: int | None = None,
    mode: str = "hybrid",
    agent: str | None = None,
    created_after: str | None = None,
    created_before: str | None = None,
    source: list[str] | None = None,
    metadata: dict | None = None,
) -> dict:
    """Search this person's episodic memories for `query` and get each match with its score:
    mode "hybrid" (words and meaning, the default), "lexical" (words) or "vector" (meaning);
    `created_after` / `created_before` (ISO 8601) keep only the memories stored in that time,
    `source` only those of these kinds, `metadata` only those stored with these labels. Use
    the ids with `forget` to drop a memory that is wrong."""
    from core.memory_settings import memory_settings_for
    from episodic.selectors import entry_search_hybrid

    if mode not in SEARCH_MODES:
        raise ApplicationError(SEARCH_MODE_UNKNOWN, fields={"mode": [SEARCH_MODE_UNKNOWN]})
    filters = _entry_filters(created_after, created_before, source, metadata)
    context = _person_context(principal, agent=agent, memory_user=memory_user, thread=thread)
    top_k = _check_limit(top_k) if top_k is not None else memory_settings_for(context.agent).auto_inject_top_k
    result = entry_search_hybrid(
        agent=context.agent,
        memory_user=context.memory_user,
        query=_check_query(query),
        top_k=top_k,
        mode=mode,
        filters=filters,
    )
    recall_served(context=context, metric=RECALLS_SEARCH)
    return {
        "results": [
            {
                "id": str(hit.entry.pk),
                "content": hit.entry.content,
                "source": hit.entry.source,
                "evidence": hit.entry.evidence,
                "created_at": _iso(hit.entry.created_at),
                "score": round(hit.score, 6),
            }
            for hit in result.hits
        ],
        "plan": result.plan,
    }


SEARCH_MODES = ("hybrid", "lexical", "vector")
SEARCH_MODE_UNKNOWN = "mode must be hybrid, lexical or vector."
FORGET_WHAT = "Name one thing to forget: `key` or `fact` (a fact id), or `memory` (an episodic entry id)."
FORGET_NOT_FOUND = "Nothing to forget: no such fact or memory is visible here."
FORGET_SCOPE_NEEDS_KEY = "scope is only used with key."


def _uuid_or_404(value: str, field_name: str):
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFoundError(FORGET_NOT_FOUND, fields={field_name: [FORGET_NOT_FOUND]}) from None


@_for_model
def forget(
    *,
    principal: Principal,
    key: str | None = None,
    scope: str | None = None,
    fact: str | None = None,
    memory: str | None = None,
    memory_user: str | None = None,
    thread: str | None = None,
    agent: str | None = None,
) -> dict:
    """Forget one thing that is wrong or that the person asked you to forget: the fact under
    `key` (from the most specific scope holding it, or from `scope`), a fact by id (`fact`)
    or an episodic memory by id (`memory`, from recall_memory or search). The deletion is
    audited; the fact's older versions stay in its history."""
    from episodic.selectors import entry_get
    from episodic.services import entry_delete
    from facts.selectors import fact_get, fact_lookup
    from facts.services import fact_delete

    require_write(principal)
    named = [name for name, value in (("key", key), ("fact", fact), ("memory", memory)) if value]
    if len(named) != 1:
        raise ApplicationError(FORGET_WHAT, fields={name: [FORGET_WHAT] for name in named or ["key"]})
    if scope and not key:
        raise ApplicationError(FORGET_SCOPE_NEEDS_KEY, fields={"scope": [FORGET_SCOPE_NEEDS_KEY]})
    context = _context(principal, agent=agent, memory_user=memory_user, thread=thread)
    person = context.memory_user

    if memory:
        entry_id = _uuid_or_404(memory, "memory")
        try:
            entry = entry_get(principal=principal, entry_id=entry_id)
        except NotFoundError:
            entry = None
        if entry is None or (person is not None and entry.memory_user_id != person.pk):
            raise NotFoundError(FORGET_NOT_FOUND, fields={"memory": [FORGET_NOT_FOUND]})
        entry_delete(entry=entry, actor=principal.actor)
        return {"forgotten": {"kind": "memory", "id": str(entry_id), "content": entry.content}}

    if fact:
        fact_id = _uuid_or_404(fact, "fact")
        try:
            found = fact_get(principal=principal, fact_id=fact_id)
        except NotFoundError:
            found = None
        # A person named in the call limits the facts about people to theirs.
        if found is not None and person is not None and found.memory_user_id not in (None, person.pk):
            found = None
    else:
        references = {
            "session": {"thread": context.thread},
            "user": {"memory_user": person},
            "agent": {"agent": context.agent},
            "global": {},
        }
        everywhere = {"agent": context.agent, "memory_user": person, "thread": context.thread}
        lookup = references.get(scope, everywhere)
        found = fact_lookup(workspace=principal.workspace, key=key, **lookup)
        if found is not None and scope and found.scope != scope:
            found = None
    if found is None:
        field_name = "fact" if fact else "key"
        raise NotFoundError(FORGET_NOT_FOUND, fields={field_name: [FORGET_NOT_FOUND]})
    fact_delete(fact=found, actor=principal.actor, principal=principal)
    return {
        "forgotten": {
            "kind": "fact",
            "id": str(found.pk),
            "key": found.key,
            "scope": found.scope,
            "value": found.value,
        }
    }


@_for_model
def history(
    *,
    principal: Principal,
    thread: str,
    max_tokens: int | None = None,
    max_messages: int | None = None,
    node: str | None = None,
    leaf: str | None = None,
) -> dict:
    """The conversation window to send to the model for a thread: the newest messages of
    the current branch that fit the limits (defaults from the agent's settings), with the
    compaction summary first when older messages were summarized."""
    from threads.selectors import message_history_window, thread_get

    thread_obj = thread_get(principal=principal, thread_id=thread)
    window = message_history_window(
        thread=thread_obj, leaf=leaf, node=node, max_tokens=max_tokens, max_messages=max_messages
    )
    data = window.as_dict()
    data.pop("summary_id", None)
    return data


@_for_model
def context(
    *,
    principal: Principal,
    message: str = "",
    memory_user: str | None = None,
    channel: str | None = None,
    external_id: str | None = None,
    thread: str | None = None,
    channel_chat_id: str | None = None,
    token_budget: int = 4000,
    append: bool = False,
    idempotency_key: str | None = None,
    agent: str | None = None,
) -> dict:
    """Everything to send to the model this turn, within token_budget: <user-profile>,
    <session-memory>, <memory> (episodic entries relevant to `message`), triggered
    procedures and the history window. Name the person by memory_user or by channel +
    external_id. With append=true the user's message is stored in the thread first."""
    from runtime.apis import ContextAssembleApi, context_result_data
    from runtime.services import ContextRequest, context_assemble

    serializer = ContextAssembleApi.InputSerializer(
        data={
            key: value
            for key, value in {
                "agent": agent,
                "memory_user": memory_user,
                "channel": channel,
                "external_id": external_id,
                "thread": thread,
                "channel_chat_id": channel_chat_id,
                "message": message,
                "token_budget": token_budget,
                "append": append,
                "idempotency_key": idempotency_key,
            }.items()
            if value is not None
        }
    )
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    result = context_assemble(principal=principal, request=ContextRequest.from_validated(data))
    recall_served(context=result.context, metric=RECALLS_CONTEXT)
    return context_result_data(result)


RECORD_TURN_EMPTY = "Send the assistant's reply, the user's message, or both."


@_for_model
def record_turn(
    *,
    principal: Principal,
    thread: str,
    assistant_message: str = "",
    user_message: str = "",
    idempotency_key: str | None = None,
    extract: bool = True,
    candidates: list[dict[str, Any]] | None = None,
    last_messages: int = 20,
) -> dict:
    """Store the end of a turn: the user's message (unless `context` already appended it) and
    your reply, then extract episodic memories from the recent conversation (things the person
    asserted or accepted, each backed by an exact quote). Optional `candidates`
    ({content, source, evidence}) are validated the same way. Call it after every reply."""
    from episodic.services import entry_extract
    from runtime.services import replayed_messages_check
    from threads.models import Message
    from threads.selectors import thread_get
    from threads.services import thread_append_messages

    require_write(principal)
    thread_obj = thread_get(principal=principal, thread_id=thread)
    messages = []
    for role, content in (("user", user_message), ("assistant", assistant_message)):
        if content:
            message = {"role": role, "content": content}
            if idempotency_key:
                message["idempotency_key"] = f"{idempotency_key}:{role}"
            messages.append(message)
    if not messages:
        raise ApplicationError(RECORD_TURN_EMPTY, fields={"assistant_message": [RECORD_TURN_EMPTY]})
    with transaction.atomic():
        stored = thread_append_messages(thread=thread_obj, messages=messages, actor=principal.actor)
        # A key sent again with another message stores nothing, not even the turn's other half.
        replayed_messages_check(sent=messages, stored=stored)
    data = {"message_ids": [str(m.pk) for m in stored], "extraction": None}
    if not extract or thread_obj.memory_user is None:
        return data
    rows = (
        Message.objects.filter(thread=thread_obj, role__in=("user", "assistant"))
        .exclude(content="")
        .order_by("-seq")
        .values("id", "role", "content")[: max(1, min(last_messages, 200))]
    )
    transcript = [{**row, "id": str(row["id"])} for row in reversed(rows)]
    result = entry_extract(
        agent=thread_obj.agent,
        memory_user=thread_obj.memory_user,
        thread=thread_obj,
        transcript=transcript,
        candidates=[dict(c) for c in candidates or []],
        actor=principal.actor,
    )
    data["extraction"] = {
        "stored": [
            {"id": str(entry.pk), "content": entry.content, "source": entry.source} for entry in result.stored
        ],
        "rejected": result.rejected,
        "facts": result.facts,
        "llm_used": result.llm_used,
    }
    return data


STORE_MEMORY_NEEDS_PERSON = "store_memory needs the person: pass memory_user or a thread of theirs."
STORE_MEMORY_MESSAGE_NOT_FOUND = "Message not found."


@_for_model
def store_memory(
    *,
    principal: Principal,
    content: str,
    evidence: str = "",
    source: str = "agent_direct",
    memory_user: str | None = None,
    thread: str | None = None,
    source_message: str | None = None,
    agent: str | None = None,
    metadata: dict | None = None,
) -> dict:
    """Remember something about this person that you already know, as one short
    self-contained sentence in the third person (an event, plan, decision or situation of
    theirs). Optional `evidence`: an exact quote that proves it (needed for the sources
    user_assertion, user_accepted_assistant_proposal and verified_assistant_finding). A note
    already stored, or nearly the same, is not stored twice: the answer then has created
    false and the stored note. A note that changes a stored one (a move, a new value)
    replaces it; `consolidation` then says what happened to the older note and why. Optional
    `metadata`: labels stored with the note ({"project": "alpha"}), which recall_memory and
    search can filter by. Stable preferences belong in `remember` as facts."""
    from core.access import reference_resolve
    from episodic.apis import EntryListApi
    from episodic.services import entry_create
    from threads.models import Message
    from threads.selectors import memory_context_for_write

    require_write(principal)
    serializer = EntryListApi.InputSerializer(
        data={
            key: value
            for key, value in {
                "agent": agent,
                "memory_user": memory_user,
                "thread": thread,
                "content": content,
                "evidence": evidence,
                "source": source,
                "source_message": source_message,
                "metadata": metadata,
            }.items()
            if value is not None
        }
    )
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    context = memory_context_for_write(
        principal=principal,
        agent=data.get("agent") or None,
        memory_user=data.get("memory_user"),
        thread=data.get("thread"),
    )
    if context.agent is None:
        from core.access import agent_resolve

        agent_resolve(principal, None)
    if context.memory_user is None:
        raise ApplicationError(STORE_MEMORY_NEEDS_PERSON, fields={"memory_user": [STORE_MEMORY_NEEDS_PERSON]})
    # Resolved in the key's read scope: another agent's message answers like an unknown id.
    message = reference_resolve(
        Message.objects.select_related("thread"),
        principal,
        data.get("source_message"),
        agent_field="thread__agent",
        not_found=NotFoundError(
            STORE_MEMORY_MESSAGE_NOT_FOUND, fields={"source_message": [STORE_MEMORY_MESSAGE_NOT_FOUND]}
        ),
    )
    # A new agent is registered by entry_create, in the transaction that stores the note: a
    # call refused anywhere (here or by the service) registers none.
    result = entry_create(
        agent=context.agent,
        memory_user=context.memory_user,
        thread=context.thread,
        content=data["content"],
        source=data["source"],
        evidence=data["evidence"],
        source_message=message,
        metadata=data.get("metadata"),
        actor=principal.actor,
    )
    entry = result.entry
    data = {
        "created": result.created,
        "entry": {
            "id": str(entry.pk),
            "content": entry.content,
            "source": entry.source,
            "evidence": entry.evidence,
            "created_at": _iso(entry.created_at),
            "embedded": bool(entry.embedding_model),
        },
    }
    if not result.created:
        data["reason"] = result.reason
        if result.similarity is not None:
            data["similarity"] = result.similarity
    if result.consolidation:
        # Reconciled with a similar stored memory: superseded, updated, kept or confirmed.
        data["consolidation"] = {k: result.consolidation[k] for k in ("decision", "reason", "old")}
    return data


# The first three are the ones GET /api/v1/tools/ always served, in that order.
TOOLS = [
    ToolSpec(
        "recall",
        recall,
        recall.__doc__,
        read_only=True,
        parameters=tool_schemas.RECALL,
        setting_defaults={
            "memory_type": "recall_memory_type",
            "limit": "recall_limit",
            "min_confidence": "recall_min_confidence",
        },
    ),
    ToolSpec(
        "remember",
        remember,
        remember.__doc__,
        read_only=False,
        parameters=tool_schemas.REMEMBER,
        commits_in_steps=True,
    ),
    ToolSpec(
        "identify_user",
        identify_user,
        identify_user.__doc__,
        read_only=False,
        parameters=tool_schemas.IDENTIFY_USER,
    ),
    ToolSpec(
        "recall_memory",
        recall_memory,
        recall_memory.__doc__,
        read_only=True,
        parameters=tool_schemas.RECALL_MEMORY,
        setting_defaults={"top_k": "auto_inject_top_k"},
    ),
    ToolSpec(
        "search",
        search,
        search.__doc__,
        read_only=True,
        parameters=tool_schemas.SEARCH,
        setting_defaults={"top_k": "auto_inject_top_k"},
    ),
    ToolSpec(
        "forget", forget, forget.__doc__, read_only=False, parameters=tool_schemas.FORGET, destructive=True
    ),
    ToolSpec("history", history, history.__doc__, read_only=True, parameters=tool_schemas.HISTORY),
    ToolSpec(
        "context",
        context,
        context.__doc__,
        read_only=False,
        parameters=tool_schemas.CONTEXT,
        commits_in_steps=True,
    ),
    ToolSpec(
        "record_turn",
        record_turn,
        record_turn.__doc__,
        read_only=False,
        parameters=tool_schemas.RECORD_TURN,
        commits_in_steps=True,
    ),
    # Arguments derived from the signature (runtime.tool_schemas.tool_input_schema).
    ToolSpec(
        "store_memory",
        store_memory,
        store_memory.__doc__,
        read_only=False,
        parameters=tool_schemas.STORE_MEMORY,
        commits_in_steps=True,
    ),
]

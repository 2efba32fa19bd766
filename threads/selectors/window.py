"""The history window: what to send to a model for one branch, cut to the token and message budget."""

from dataclasses import asdict, dataclass, field

from django.conf import settings

from core.errors import ApplicationError
from core.lib.escaping import escape_text, strip_invisible
from core.lib.tokens import MESSAGE_OVERHEAD_TOKENS, content_tokens
from core.llm import chat_endpoint
from core.memory_settings import MEMORY_MODES, memory_settings_for
from threads.lib.parts import CONTENT_FORMATS, content_parts, files_parts
from threads.models import NodeSummary, Thread
from threads.selectors.branch import _window_rows
from threads.selectors.chat import chat_system_message, system_as_clean
from threads.selectors.recall import _recalled_section
from threads.selectors.transfers import transfer_handed_away

LEAF_UNKNOWN = "Unknown leaf message for this thread."
FILES_MODES = ("include", "omit")
CONTENT_FORMAT_INVALID = "content_format must be plain, parts or anthropic."
MEMORY_MODE_INVALID = "memory_mode must be conversation or node."
# Why a window holds no messages although the thread has some (HistoryWindow.off_reason).
CONVERSATION_MEMORY_OFF = "conversation_memory_off"
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
# How the window was chosen (HistoryWindow.window): the agent's limits and the rolling
# summary, or Inkeep's fixed fallback when no summarizer model is configured.
WINDOW_STANDARD = "standard"
WINDOW_FALLBACK = "fallback"
# How a tool call and its results reach the model: as tool-role messages, or as one
# assistant text (models without tool roles; the reference's plain-text form).
TOOL_FORMATS = ("native", "text")
TOOL_FORMAT_INVALID = "tool_format must be native or text."
# Extra rows fetched past max_messages so a tool call whose results straddle the limit is whole.
WINDOW_SLACK_ROWS = 32


@dataclass
class HistoryWindow:
    """What to send to the model, and how it was cut.

    `messages` are chat-format dicts (role, content, tool_calls, tool_call_id, name, files),
    the summary first when applied; `message_ids` are the ids of the stored messages
    included, oldest first (the summary and recalled messages are not among them).
    """

    messages: list[dict]
    message_ids: list[str]
    tokens: int
    summary_applied: bool
    cut_count: int
    recalled: list[dict] = field(default_factory=list)
    leaf_id: str | None = None
    summary_id: str | None = None
    max_tokens: int = 0
    max_messages: int = 0
    # The mode the scope was chosen by, and the node read (None: the main conversation).
    memory_mode: str = "node"
    node: str | None = None
    # CONVERSATION_MEMORY_OFF when the agent's `conversation_memory` setting is off.
    off_reason: str | None = None
    window: str = WINDOW_STANDARD
    # The agent whose view this is (`agent=`), and the depth after which other agents'
    # turns are hidden from it because it transferred the thread away (None: nothing hidden).
    agent: str | None = None
    handed_away_at: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _chat_message(row: dict, *, thread_id, files: str, content_format: str = "plain") -> dict:
    from threads.services import archived_reference

    content = row["content"] or ""
    if row["archived"]:
        # The walk returned only the preview; the reference is rebuilt from it.
        content = archived_reference(
            message_id=row["id"], thread_id=thread_id, content=content, length=row["content_chars"]
        )
    # The window is sent to a model: stored text loses its invisible and bidi control
    # characters here (core.lib.escaping), the stored rows keep them.
    message = {"role": row["role"], "content": strip_invisible(content)}
    if row["tool_calls"]:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": strip_invisible(c["arguments"])},
            }
            for c in row["tool_calls"]
        ]
    if row["tool_call_id"]:
        message["tool_call_id"] = row["tool_call_id"]
    if row["name"]:
        message["name"] = row["name"]
    if files == "include" and row["files"]:
        if content_format == "plain":
            message["files"] = row["files"]
        else:
            # Rendered into content parts (threads.lib.parts): text first, then the files.
            message["content"] = content_parts(
                role=row["role"],
                content=message["content"],
                files=row["files"],
                content_format=content_format,
            )
    return message


def _row_tokens(row: dict, *, files: str) -> int:
    """The stored count (text, tool calls and files as parts), less the files when omitted."""
    if files == "include" or not row["files"]:
        return row["token_count"]
    without = row["token_count"] - content_tokens(files_parts(row["files"], role=row["role"]))
    return max(MESSAGE_OVERHEAD_TOKENS, without)


def _answered_calls_only(row: dict, *, answered: set) -> dict | None:
    """`row` (an assistant message) without its tool calls that no result answers, or None
    when nothing of it is left (no answered call, text or file)."""
    calls = [c for c in row["tool_calls"] if c["id"] in answered]
    if len(calls) == len(row["tool_calls"]):
        return row
    if not calls and not row["content"] and not row["files"]:
        return None
    return {**row, "tool_calls": calls}


def _units(rows: list[dict]) -> list[list[dict]]:
    """Group newest-first rows so a tool call and its results are one unit.

    A run of tool results belongs to the assistant message just older than them; a run
    whose call is not among the rows (cut off, or filtered) is dropped, so the window never
    starts with an orphan tool result. An older turn's call that no result answers (a run
    interrupted before its tool returned) is dropped from its message, since OpenAI and
    Anthropic refuse a call without its result; the newest unit keeps its pending calls,
    the state an agent works on between a call and its results.
    """
    units, pending = [], []
    for row in rows:
        if row["role"] == "tool":
            pending.append(row)
            continue
        if units and row["role"] == "assistant" and row["tool_calls"]:
            row = _answered_calls_only(row, answered={r["tool_call_id"] for r in pending})
            if row is None:
                pending = []
                continue
        if pending:
            call_ids = {c["id"] for c in row["tool_calls"]}
            if row["role"] == "assistant" and all(r["tool_call_id"] in call_ids for r in pending):
                units.append([*pending, row])
            else:
                units.append([row])
            pending = []
        else:
            units.append([row])
    return units


def _text_of(content) -> str:
    """A message's text whether its content is a string or content parts."""
    if isinstance(content, list):
        return "\n".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return content or ""


def _tool_calls_as_text(messages: list[dict]) -> list[dict]:
    """Each assistant tool call and its results as one assistant message, for models without
    tool roles: `tool: <name>` / `input: <arguments>` / `output: <result>`, one block per call
    after the assistant's own text. Every value passes through escape_text (one line, markup
    escaped), so a result cannot forge another `tool:` line; an archived result is its
    reference with the preview, as the native form sends it.
    """
    results = {m["tool_call_id"]: m for m in messages if m["role"] == "tool" and m.get("tool_call_id")}
    out = []
    for message in messages:
        if message["role"] == "tool":
            continue
        calls = message.get("tool_calls") or []
        if message["role"] != "assistant" or not calls:
            out.append(message)
            continue
        blocks = [_text_of(message["content"])] if _text_of(message["content"]) else []
        for call in calls:
            function = call["function"]
            block = f"tool: {escape_text(function['name'])}\ninput: {escape_text(function['arguments'])}"
            result = results.get(call["id"])
            if result is not None:
                block += f"\noutput: {escape_text(_text_of(result['content']))}"
            blocks.append(block)
        text = {"role": "assistant", "content": "\n\n".join(blocks)}
        if message.get("name"):
            text["name"] = message["name"]
        out.append(text)
    return out


def _window_assemble(*, summary: dict | None, recalled: list[dict], recent: list[dict]) -> list[dict]:
    """The one place the window's sections are ordered: summary, recalled, recent."""
    return ([summary] if summary else []) + list(recalled) + list(recent)


def window_uses_fallback(*, thread: Thread, agent_settings=None) -> bool:
    """Inkeep's fallback applies: the agent opted in and the workspace has no summarizer model."""
    agent_settings = agent_settings or memory_settings_for(thread.agent)
    return agent_settings.fallback_window and chat_endpoint(workspace=thread.workspace_id) is None


def memory_scope(*, agent, node: str | None, memory_mode: str | None = None) -> tuple[str, str | None]:
    """(mode, node to read and append to) for a request naming `node` (or none).

    `memory_mode` is the request's; without it the agent's `memory_mode` setting decides.
    In `node` mode a named node reads its own messages (Dify's node memory); in
    `conversation` mode it shares the thread's main conversation. Without a node both read
    the main conversation.
    """
    if memory_mode is not None and memory_mode not in MEMORY_MODES:
        raise ApplicationError(MEMORY_MODE_INVALID, fields={"memory_mode": [MEMORY_MODE_INVALID]})
    mode = memory_mode or memory_settings_for(agent).memory_mode
    return mode, (node or None) if mode == "node" else None


def message_history_window(
    *,
    thread: Thread,
    leaf=None,
    node: str | None = None,
    max_tokens: int | None = None,
    max_messages: int | None = None,
    delegation: str | None = None,
    files: str = "include",
    content_format: str = "plain",
    system_as: str = "system",
    memory_mode: str | None = None,
    semantic_recall: bool | None = None,
    recall_query: str | None = None,
    recall_vector: list | None = None,
    recall_model: str | None = None,
    recall_query_by_person: bool = False,
    agent: str | None = None,
    tool_format: str = "native",
) -> HistoryWindow:
    """The messages to send to the model for the branch ending at `leaf`.

    1. The branch is found by walking parent links from `leaf` (default: the newest message
       of the scope), so regenerated answers on other branches are left out.
    2. `node` restricts the window to that node's messages (Dify's node memory); otherwise
       only the main conversation (messages without a node) is used. In `conversation`
       memory mode (`memory_mode`, default the agent's setting) a named node reads the main
       conversation too (`memory_scope`).
    3. The newest messages that fit both `max_tokens` and `max_messages` (defaults: the
       agent's `token_limit` and `recent_messages`) are kept; a tool call and its results
       stay together, and the newest unit is always included even when it alone is larger.
    4. The compaction summary comes first, as a system message (or a user message with a
       stable id when `system_as="user"`), when it covers older messages of this branch;
       its tokens count against `max_tokens`.
    5. With semantic recall (the agent's `semantic_recall`, or `semantic_recall=True`), the
       `semantic_recall_top_k` older messages of the same person's threads most related to
       `recall_query` (default: the newest user message; cut to EPISODIC_QUERY_MAX_LENGTH
       characters) come next, in one clearly marked block, and their tokens count against
       `max_tokens` too (at most a quarter of it). `recall_vector` / `recall_model`, the
       query's embedding when the caller already has it, save embedding it again. The
       newest user message is the person's own words, and so is `recall_query` when
       `recall_query_by_person` says so: their "I" and "my" then name them
       (`core.ranking.hybrid_search`'s `asked_by_person`).

    A message's files (`files="include"`) come as stored references in `files`
    (`content_format="plain"`) or rendered into its content parts (`parts`: OpenAI's shape,
    `anthropic`; threads.lib.parts); either way they count against `max_tokens` (images at
    core.lib.tokens.IMAGE_TOKENS, documents by their text), so a message whose files do not
    fit is cut like any other.

    With the agent's `conversation_memory` off the window is empty and says so
    (`off_reason`); the messages stay stored.

    With the agent's `fallback_window` on and no chat endpoint for the workspace (no
    summarizer model), the limits default to `fallback_window_messages` /
    `fallback_window_tokens` and no summary is applied (`window="fallback"`); compaction
    is not enqueued either (threads.services.compaction). A node's window carries the node's
    own summary (`NodeSummary`, written when it passes `subagent_compress_at`).

    `agent=<slug>` reads the window as that agent sees it after transfers
    (threads.selectors.transfers.transfer_handed_away). `tool_format="text"` renders each tool
    call and its results as one assistant message (`_tool_calls_as_text`).

    Reads a handful of rows, never the whole thread: one query for the leaf, one
    O(log n) ancestor lookup for the summary, one bounded walk.
    """
    if files not in FILES_MODES:
        raise ApplicationError(
            "files must be include or omit.", fields={"files": ["Must be include or omit."]}
        )
    if content_format not in CONTENT_FORMATS:
        raise ApplicationError(CONTENT_FORMAT_INVALID, fields={"content_format": [CONTENT_FORMAT_INVALID]})
    if tool_format not in TOOL_FORMATS:
        raise ApplicationError(TOOL_FORMAT_INVALID, fields={"tool_format": [TOOL_FORMAT_INVALID]})
    system_as_clean(system_as)
    agent_settings = memory_settings_for(thread.agent)
    fallback = window_uses_fallback(thread=thread, agent_settings=agent_settings)
    if fallback:
        default_tokens, default_messages = (
            agent_settings.fallback_window_tokens,
            agent_settings.fallback_window_messages,
        )
    else:
        default_tokens, default_messages = agent_settings.token_limit, agent_settings.recent_messages
    max_tokens = default_tokens if max_tokens is None else max_tokens
    max_messages = default_messages if max_messages is None else max_messages
    memory_mode, node = memory_scope(agent=thread.agent, node=node, memory_mode=memory_mode)
    scope = node or ""
    shape = {
        "max_tokens": max_tokens,
        "max_messages": max_messages,
        "memory_mode": memory_mode,
        "node": node,
        "window": WINDOW_FALLBACK if fallback else WINDOW_STANDARD,
        "agent": agent or None,
    }
    if not agent_settings.conversation_memory:
        return HistoryWindow(
            messages=[],
            message_ids=[],
            tokens=0,
            summary_applied=False,
            cut_count=0,
            off_reason=CONVERSATION_MEMORY_OFF,
            **shape,
        )

    # The main conversation's summary is the thread's; a node's is its NodeSummary.
    source = NodeSummary.objects.filter(thread=thread, node_id=scope).first() if scope else thread
    has_summary = bool(
        not fallback
        and source is not None
        and source.summary
        and source.summary_upto_id
        and source.summary_upto_depth is not None
    )
    handed_away = transfer_handed_away(thread=thread, viewer=agent, scope=scope, leaf=leaf) if agent else None
    shape["handed_away_at"] = handed_away[1] if handed_away else None
    limit = max_messages + WINDOW_SLACK_ROWS
    while True:
        rows, leaf_id, stop_depth = _window_rows(
            thread=thread,
            leaf=leaf,
            scope=scope,
            summary_id=source.summary_upto_id if has_summary else None,
            summary_depth=source.summary_upto_depth if has_summary else -1,
            limit=limit,
            delegation=delegation,
            handed_away=handed_away,
        )
        # Every row read is a tool result: the newest unit (a call with more parallel results
        # than the slack) is not whole yet, and it is always included. Rare, so read again
        # with a larger limit rather than read more rows on every window.
        if len(rows) < limit or any(r["role"] != "tool" for r in rows):
            break
        limit *= 4
    if leaf_id is None:
        if leaf:
            raise ApplicationError(LEAF_UNKNOWN, fields={"leaf": [LEAF_UNKNOWN]})
        return HistoryWindow(
            messages=[],
            message_ids=[],
            tokens=0,
            summary_applied=False,
            cut_count=0,
            **shape,
        )

    summary_message, summary_tokens, summary_id = None, 0, None
    if has_summary and stop_depth == source.summary_upto_depth:
        summary_tokens = source.summary_tokens
        summary_id = f"summary-{thread.pk}" + (f"-{scope}" if scope else "")
        summary_message = chat_system_message(
            content=SUMMARY_PREFIX + strip_invisible(source.summary),
            stable_id=summary_id,
            system_as=system_as,
        )

    recalled: list[dict] = []
    recalled_message, recalled_tokens = None, 0
    wants_recall = agent_settings.semantic_recall if semantic_recall is None else semantic_recall
    if wants_recall and thread.memory_user_id and not scope:
        query = recall_query or next((r["content"] for r in rows if r["role"] == "user" and r["content"]), "")
        query = query.strip()[: settings.EPISODIC_QUERY_MAX_LENGTH]
        if query:
            recalled, recalled_message, recalled_tokens = _recalled_section(
                thread=thread,
                query=query,
                exclude_ids=[r["id"] for r in rows],
                top_k=agent_settings.semantic_recall_top_k,
                max_tokens=max_tokens // 4,
                system_as=system_as,
                query_vector=recall_vector if recall_query else None,
                model=recall_model if recall_query else None,
                asked_by_person=recall_query_by_person or not recall_query,
            )

    budget = max_tokens - summary_tokens - recalled_tokens
    chosen: list[dict] = []
    used = 0
    for unit in _units(rows):
        unit_tokens = sum(_row_tokens(r, files=files) for r in unit)
        if chosen and (len(chosen) + len(unit) > max_messages or used + unit_tokens > budget):
            break
        chosen.extend(unit)
        used += unit_tokens
    if not chosen:
        return HistoryWindow(
            messages=[summary_message] if summary_message else [],
            message_ids=[],
            tokens=summary_tokens if summary_message else 0,
            summary_applied=summary_message is not None,
            cut_count=0,
            leaf_id=str(leaf_id),
            summary_id=summary_id,
            **shape,
        )
    chosen.reverse()
    oldest_depth = chosen[0]["depth"]
    cut_count = max(0, oldest_depth - (stop_depth + 1))
    recent = [
        _chat_message(row, thread_id=thread.pk, files=files, content_format=content_format) for row in chosen
    ]
    if tool_format == "text":
        recent = _tool_calls_as_text(recent)
    return HistoryWindow(
        messages=_window_assemble(
            summary=summary_message, recalled=[recalled_message] if recalled_message else [], recent=recent
        ),
        message_ids=[str(row["id"]) for row in chosen],
        tokens=used + (summary_tokens if summary_message else 0) + recalled_tokens,
        summary_applied=summary_message is not None,
        cut_count=cut_count,
        recalled=recalled,
        leaf_id=str(leaf_id),
        summary_id=summary_id,
        **shape,
    )

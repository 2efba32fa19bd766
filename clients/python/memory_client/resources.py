"""One class per API area. Methods build a `Request`; the client runs it.

The same classes serve `MemoryClient` (methods return the decoded JSON) and
`AsyncMemoryClient` (methods return an awaitable of it). Keyword arguments the
server accepts but a method does not name pass through ``**extra`` unchanged, so
a new server field never needs a client release.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from memory_client._core import Request

JSON = dict[str, Any]


def _body(**fields: Any) -> JSON:
    return {key: value for key, value in fields.items() if value is not None}


def _pk(value: Any) -> str:
    return str(value)


class Resource:
    def __init__(self, run: Callable[[Request], Any]) -> None:
        self._run = run


class CrudResource(Resource):
    """List (paginated), retrieve, create, update, delete and batch delete under `prefix`."""

    prefix = ""

    def list(self, *, limit: int | None = None, offset: int | None = None, **filters: Any) -> JSON:
        """One page: ``{"count", "limit", "offset", "next", "previous", "results"}``."""
        return self._run(
            Request("GET", f"{self.prefix}/", params={"limit": limit, "offset": offset, **filters})
        )

    def get(self, id: Any) -> JSON:
        return self._run(Request("GET", f"{self.prefix}/{_pk(id)}/"))

    def create(self, **fields: Any) -> JSON:
        return self._run(Request("POST", f"{self.prefix}/", json=fields))

    def update(self, id: Any, **fields: Any) -> JSON:
        return self._run(Request("PATCH", f"{self.prefix}/{_pk(id)}/", json=fields, idempotent=True))

    def delete(self, id: Any) -> None:
        return self._run(Request("DELETE", f"{self.prefix}/{_pk(id)}/", expect_empty=True))

    def batch_delete(self, ids: Iterable[Any]) -> JSON:
        """Delete all of `ids` or nothing (404 when one is not visible to the key)."""
        return self._run(
            Request(
                "POST", f"{self.prefix}/batch-delete/", json={"ids": [_pk(i) for i in ids]}, idempotent=True
            )
        )


class Agents(Resource):
    def list(self, **params: Any) -> JSON:
        return self._run(Request("GET", "agents/", params=params))

    def get(self, slug: str) -> JSON:
        return self._run(Request("GET", f"agents/{slug}/"))

    def create(self, slug: str, **fields: Any) -> JSON:
        return self._run(Request("POST", "agents/", json={"slug": slug, **fields}))

    def update(self, slug: str, **fields: Any) -> JSON:
        return self._run(Request("PATCH", f"agents/{slug}/", json=fields, idempotent=True))


def _with_idempotency_keys(messages: Sequence[Mapping[str, Any]]) -> list[JSON]:
    """Give every message a client idempotency key, generated once per call.

    The transport retries the same body, so a retried append reuses the keys and the
    server stores each message once.
    """
    keyed = []
    for message in messages:
        message = dict(message)
        message.setdefault("idempotency_key", uuid.uuid4().hex)
        keyed.append(message)
    return keyed


class Threads(CrudResource):
    prefix = "threads"

    def create(
        self,
        *,
        agent: str | None = None,
        memory_user: Any = None,
        channel: str | None = None,
        channel_chat_id: str | None = None,
        client_key: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        resolve: bool = False,
        **extra: Any,
    ) -> JSON:
        body = _body(
            agent=agent,
            memory_user=_pk(memory_user) if memory_user is not None else None,
            channel=channel,
            channel_chat_id=channel_chat_id,
            client_key=client_key,
            title=title,
            metadata=metadata,
            **extra,
        )
        if resolve:
            body["resolve"] = True
        # Resolving is find-or-create, so repeating it is harmless.
        return self._run(Request("POST", "threads/", json=body, idempotent=resolve))

    def resolve(self, **fields: Any) -> JSON:
        """The existing thread for (agent, memory user, chat id or client key), else a new one."""
        return self.create(resolve=True, **fields)

    def append_messages(self, thread_id: Any, messages: Sequence[Mapping[str, Any]]) -> JSON:
        """Append a batch atomically; retries are safe (see `_with_idempotency_keys`)."""
        body = {"messages": _with_idempotency_keys(messages)}
        return self._run(Request("POST", f"threads/{_pk(thread_id)}/messages/", json=body, idempotent=True))

    def append_message(self, thread_id: Any, *, role: str, content: str = "", **fields: Any) -> JSON:
        return self.append_messages(thread_id, [{"role": role, "content": content, **fields}])

    def messages(
        self, thread_id: Any, *, limit: int | None = None, offset: int | None = None, **filters: Any
    ) -> JSON:
        params = {"limit": limit, "offset": offset, **filters}
        return self._run(Request("GET", f"threads/{_pk(thread_id)}/messages/", params=params))

    def message(self, thread_id: Any, message_id: Any) -> JSON:
        return self._run(Request("GET", f"threads/{_pk(thread_id)}/messages/{_pk(message_id)}/"))

    def clear_node(self, thread_id: Any, node: str) -> Any:
        return self._run(Request("DELETE", f"threads/{_pk(thread_id)}/messages/", params={"node": node}))

    def history(
        self,
        thread_id: Any,
        *,
        leaf: Any = None,
        node: str | None = None,
        max_tokens: int | None = None,
        max_messages: int | None = None,
        delegation: str | None = None,
        files: str | None = None,
        content_format: str | None = None,
        system_as: str | None = None,
        memory_mode: str | None = None,
        semantic_recall: bool | None = None,
        recall_query: str | None = None,
        recall_query_by_person: bool | None = None,
        agent: str | None = None,
        tool_format: str | None = None,
    ) -> JSON:
        """The window to send to the model. `semantic_recall` also recalls the person's related
        older messages for `recall_query` (default: the newest user message, which is the
        person's own words; `recall_query_by_person=True` says a given query is too)."""
        params = {
            "leaf": _pk(leaf) if leaf is not None else None,
            "node": node,
            "max_tokens": max_tokens,
            "max_messages": max_messages,
            "delegation": delegation,
            "files": files,
            "content_format": content_format,
            "system_as": system_as,
            "memory_mode": memory_mode,
            "semantic_recall": semantic_recall,
            "recall_query": recall_query,
            "recall_query_by_person": recall_query_by_person,
            "agent": agent,
            "tool_format": tool_format,
        }
        return self._run(Request("GET", f"threads/{_pk(thread_id)}/history/", params=params))

    def get_plan(self, thread_id: Any) -> JSON:
        return self._run(Request("GET", f"threads/{_pk(thread_id)}/plan/"))

    def put_plan(self, thread_id: Any, plan: Any, **fields: Any) -> JSON:
        return self._run(Request("PUT", f"threads/{_pk(thread_id)}/plan/", json={"plan": plan, **fields}))

    def plan_versions(self, thread_id: Any, **params: Any) -> JSON:
        return self._run(Request("GET", f"threads/{_pk(thread_id)}/plan/versions/", params=params))

    def put_snapshot(self, thread_id: Any, run_id: str, snapshot: Any, **fields: Any) -> JSON:
        path = f"threads/{_pk(thread_id)}/runs/{run_id}/snapshot/"
        return self._run(Request("PUT", path, json={"snapshot": snapshot, **fields}))

    def get_snapshot(self, thread_id: Any, run_id: str) -> JSON:
        return self._run(Request("GET", f"threads/{_pk(thread_id)}/runs/{run_id}/snapshot/"))

    def add_iteration(self, thread_id: Any, **fields: Any) -> JSON:
        return self._run(Request("POST", f"threads/{_pk(thread_id)}/iterations/", json=fields))

    def iterations(self, thread_id: Any, *, task: str | None = None, **params: Any) -> JSON:
        return self._run(
            Request("GET", f"threads/{_pk(thread_id)}/iterations/", params={"task": task, **params})
        )

    def derived(self, thread_id: Any, *, message: Any = None) -> JSON:
        """Preview what the thread (or one of its messages) backs: entries, facts, proposed procedures."""
        params = {"message": _pk(message)} if message is not None else None
        return self._run(Request("GET", f"threads/{_pk(thread_id)}/derived/", params=params))

    def purge_derived(self, thread_id: Any, *, message: Any = None) -> JSON:
        """Delete what the thread (or one of its messages) backs; the messages stay."""
        body = {"message": _pk(message)} if message is not None else {}
        return self._run(Request("POST", f"threads/{_pk(thread_id)}/derived/", json=body, idempotent=True))

    def compact(self, thread_id: Any, *, node: str | None = None) -> JSON:
        """Queue a compaction now (202); with ``node``, of that node's (sub-agent's) history.
        Compaction is idempotent, so retries are safe."""
        body = {"node": node} if node else {}
        return self._run(Request("POST", f"threads/{_pk(thread_id)}/compact/", json=body, idempotent=True))

    def tool_result(self, thread_id: Any, result_id: Any) -> JSON:
        """An archived tool result, whole."""
        return self._run(Request("GET", f"threads/{_pk(thread_id)}/tool-results/{_pk(result_id)}/"))

    def transfers(self, thread_id: Any, *, limit: int | None = None, offset: int | None = None) -> JSON:
        """The thread's hand-overs between agents, oldest first."""
        params = {"limit": limit, "offset": offset}
        return self._run(Request("GET", f"threads/{_pk(thread_id)}/transfers/", params=params))

    def transfer(
        self,
        thread_id: Any,
        *,
        to_agent: str,
        from_agent: str | None = None,
        reason: str | None = None,
        message: str | None = None,
        shared: Sequence[str] | None = None,
        **extra: Any,
    ) -> JSON:
        """Hand the thread from one agent to another (docs/threads.md); records one transfer
        each call, so it is not retried once it may have reached the server."""
        body = _body(
            to_agent=to_agent,
            from_agent=from_agent,
            reason=reason,
            message=message,
            shared=list(shared) if shared is not None else None,
            **extra,
        )
        return self._run(Request("POST", f"threads/{_pk(thread_id)}/transfers/", json=body))


class Checkpoints(Resource):
    """The checkpoint API a LangGraph saver needs, per thread and namespace."""

    def put(
        self,
        thread_id: Any,
        *,
        checkpoint_id: str,
        checkpoint: Mapping[str, Any],
        checkpoint_ns: str = "",
        parent_checkpoint_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> JSON:
        body = {
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "parent_checkpoint_id": parent_checkpoint_id,
            "checkpoint": dict(checkpoint),
            "metadata": dict(metadata or {}),
        }
        return self._run(Request("PUT", f"threads/{_pk(thread_id)}/checkpoints/", json=body))

    def latest(self, thread_id: Any, *, checkpoint_ns: str = "") -> JSON:
        path = f"threads/{_pk(thread_id)}/checkpoints/latest/"
        return self._run(Request("GET", path, params={"checkpoint_ns": checkpoint_ns}))

    def get(self, thread_id: Any, checkpoint_id: str, *, checkpoint_ns: str = "") -> JSON:
        path = f"threads/{_pk(thread_id)}/checkpoints/{checkpoint_id}/"
        return self._run(Request("GET", path, params={"checkpoint_ns": checkpoint_ns}))

    def list(
        self,
        thread_id: Any,
        *,
        checkpoint_ns: str | None = None,
        checkpoint_id: str | None = None,
        before: str | None = None,
        limit: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> JSON:
        """Newest first; ``checkpoint_ns=""`` is the root graph's alone, left out every namespace."""
        params = {
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "before": before,
            "limit": limit,
            "metadata": json.dumps(metadata, separators=(",", ":")) if metadata else None,
        }
        return self._run(Request("GET", f"threads/{_pk(thread_id)}/checkpoints/", params=params))

    def put_writes(
        self,
        thread_id: Any,
        checkpoint_id: str,
        *,
        task_id: str,
        writes: Sequence[Mapping[str, Any]],
        checkpoint_ns: str = "",
        task_path: str = "",
    ) -> JSON:
        body = {
            "checkpoint_ns": checkpoint_ns,
            "task_id": task_id,
            "task_path": task_path,
            "writes": list(writes),
        }
        path = f"threads/{_pk(thread_id)}/checkpoints/{checkpoint_id}/writes/"
        return self._run(Request("PUT", path, json=body))

    def delete_thread(self, thread_id: Any) -> Any:
        return self._run(Request("DELETE", f"threads/{_pk(thread_id)}/checkpoints/"))

    def list_all(self, *, limit: int | None = None, offset: int | None = None, **filters: Any) -> JSON:
        return self._run(Request("GET", "checkpoints/", params={"limit": limit, "offset": offset, **filters}))

    def batch_delete(self, ids: Iterable[Any]) -> JSON:
        body = {"ids": [_pk(i) for i in ids]}
        return self._run(Request("POST", "checkpoints/batch-delete/", json=body, idempotent=True))


class Facts(CrudResource):
    prefix = "facts"

    def lookup(self, key: str, **context: Any) -> JSON:
        """The current version of `key` from the most specific scope (session, user, agent, global)."""
        return self._run(Request("GET", "facts/lookup/", params={"key": key, **context}))

    def remember(self, *, key: str, value: Any, scope: str = "user", **fields: Any) -> JSON:
        # Not idempotent: the same value again counts a confirmation, so it is never blindly retried.
        return self._run(
            Request("POST", "facts/remember/", json={"key": key, "value": value, "scope": scope, **fields})
        )

    def history(self, id: Any, **params: Any) -> JSON:
        return self._run(Request("GET", f"facts/{_pk(id)}/history/", params=params))


class Episodes(CrudResource):
    prefix = "episodes"

    def close(self, id: Any, **fields: Any) -> JSON:
        return self._run(Request("POST", f"episodes/{_pk(id)}/close/", json=fields))

    def feedback(self, id: Any, *, rating: int, comment: str | None = None) -> JSON:
        body = _body(rating=rating, comment=comment)
        return self._run(Request("POST", f"episodes/{_pk(id)}/feedback/", json=body, idempotent=True))

    def search(self, *, query: str, **fields: Any) -> JSON:
        """Past runs by meaning and text; ``fields``: ``agent``, ``memory_user``, ``top_k``,
        ``mode``, ``outcome``, ``trigger_type``, ``started_after`` / ``started_before``."""
        body = {"query": query, **fields}
        return self._run(Request("POST", "episodes/search/", json=body, idempotent=True))

    def extract_facts(self, id: Any, **fields: Any) -> JSON:
        """Learn facts from the episode (``candidates``, ``use_llm``)."""
        return self._run(Request("POST", f"episodes/{_pk(id)}/extract-facts/", json=fields))


class Procedures(CrudResource):
    prefix = "procedures"

    def match(self, *, goal: str, **context: Any) -> JSON:
        return self._run(
            Request("POST", "procedures/match/", json={"goal": goal, **context}, idempotent=True)
        )

    def record_run(self, id: Any, *, success: bool, **fields: Any) -> JSON:
        body = {"success": success, **fields}
        return self._run(Request("POST", f"procedures/{_pk(id)}/runs/", json=body))

    def learn(self, *, agent: str | None = None) -> JSON:
        """Learn procedures from the agent's episodes now."""
        return self._run(Request("POST", "procedures/learn/", json=_body(agent=agent)))


class MemoryUsers(CrudResource):
    prefix = "memory-users"

    def identify(self, *, channel: str, external_id: str, **fields: Any) -> JSON:
        """Find or create the person behind a channel identity (safe to retry)."""
        body = {"channel": channel, "external_id": external_id, **fields}
        return self._run(Request("POST", "memory-users/identify/", json=body, idempotent=True))

    def merge(self, id: Any, *, target: Any) -> JSON:
        """Merge `id` into `target`; idempotent on the server."""
        body = {"target": _pk(target)}
        return self._run(Request("POST", f"memory-users/{_pk(id)}/merge/", json=body, idempotent=True))

    def place_legal_hold(self, id: Any, *, reason: str) -> JSON:
        """Keep everything of this person: retention skips them and erasure answers 409."""
        body = {"reason": reason}
        return self._run(Request("POST", f"memory-users/{_pk(id)}/legal-hold/", json=body, idempotent=True))

    def legal_holds(self, id: Any) -> JSON:
        """Every hold covering this person: their own, then those of people merged into them."""
        return self._run(Request("GET", f"memory-users/{_pk(id)}/legal-hold/"))

    def release_legal_hold(self, id: Any, *, placed_on: Any = None) -> JSON:
        """Release the person's own hold, or with `placed_on` the hold of someone merged into them."""
        params = {"placed_on": _pk(placed_on)} if placed_on is not None else None
        return self._run(
            Request("DELETE", f"memory-users/{_pk(id)}/legal-hold/", params=params, idempotent=True)
        )


class Evidence(Resource):
    def get(self, tier: str, id: Any) -> JSON:
        """Why the agent believes an `entry`, `fact`, `episode` or `procedure` (docs/provenance.md)."""
        return self._run(Request("GET", f"evidence/{tier}/{_pk(id)}/"))


class Retention(Resource):
    """Retention rules per tier (workspace keys only): docs/retention.md."""

    def get(self) -> JSON:
        """The rules, what the next run deletes per tier, and the latest runs."""
        return self._run(Request("GET", "retention/"))

    def set_rule(
        self,
        *,
        tier: str,
        agent: str | None = None,
        max_age_days: int | None = None,
        keep_latest: int | None = None,
    ) -> JSON:
        """Create or replace the rule of `tier` for the workspace (no agent) or one agent."""
        # max_age_days is always sent: null says "no age limit" (keep_latest then required).
        body = {"max_age_days": max_age_days, **_body(tier=tier, agent=agent, keep_latest=keep_latest)}
        return self._run(Request("POST", "retention/rules/", json=body, idempotent=True))

    def delete_rule(self, id: Any) -> JSON:
        return self._run(Request("DELETE", f"retention/rules/{_pk(id)}/", idempotent=True))

    def runs(self) -> JSON:
        return self._run(Request("GET", "retention/runs/"))

    def run(self) -> JSON:
        """Queue a run now (202); a ConflictError while one runs."""
        return self._run(Request("POST", "retention/runs/"))


class EpisodicEntries(CrudResource):
    prefix = "episodic-entries"

    def create(
        self,
        *,
        content: str,
        memory_user: Any = None,
        agent: str | None = None,
        thread: Any = None,
        source: str | None = None,
        evidence: str | None = None,
        source_message: Any = None,
        metadata: Mapping[str, Any] | None = None,
        **extra: Any,
    ) -> JSON:
        """Store one entry about a person directly; `evidence` is optional (source then
        ``agent_direct``). A duplicate of a stored entry (same normal form, or as similar as
        the agent's ``dedupe_threshold``) is not stored: the answer is that entry with
        ``"created": False``, which also makes a retry harmless."""
        body = _body(
            agent=agent,
            memory_user=_pk(memory_user) if memory_user is not None else None,
            thread=_pk(thread) if thread is not None else None,
            content=content,
            source=source,
            evidence=evidence,
            source_message=_pk(source_message) if source_message is not None else None,
            metadata=dict(metadata) if metadata is not None else None,
            **extra,
        )
        return self._run(Request("POST", "episodic-entries/", json=body, idempotent=True))

    def create_batch(
        self,
        items: Sequence[Mapping[str, Any]],
        *,
        memory_user: Any = None,
        agent: str | None = None,
        thread: Any = None,
        **extra: Any,
    ) -> JSON:
        """Store several entries of one person, all or none: ``{"created", "duplicates",
        "results"}`` with one result per item (``created`` or ``duplicate``). An invalid item
        refuses the whole batch (`ValidationError` naming ``items[<index>].<field>``)."""
        body = _body(
            agent=agent,
            memory_user=_pk(memory_user) if memory_user is not None else None,
            thread=_pk(thread) if thread is not None else None,
            items=[dict(item) for item in items],
            **extra,
        )
        return self._run(Request("POST", "episodic-entries/batch/", json=body, idempotent=True))

    def search(self, *, query: str, **fields: Any) -> JSON:
        """``recall_memory(query)``: hybrid search over one (agent, person) scope.

        ``fields`` are the API's: ``agent``, ``memory_user`` or ``thread``, ``top_k``, ``mode``,
        ``render``, ``asked_by_person``, and the filters ``created_after`` / ``created_before``
        (ISO 8601), ``source`` (a list) and ``metadata`` (an object the entry's metadata contains).
        """
        body = {"query": query, **fields}
        return self._run(Request("POST", "episodic-entries/search/", json=body, idempotent=True))

    def extract(self, **fields: Any) -> JSON:
        """Extract entries from a transcript or a thread range; exact-hash dedupe makes retries harmless."""
        return self._run(Request("POST", "episodic-entries/extract/", json=fields, idempotent=True))


class Memory(Resource):
    """The agent tools that span tiers: recall, the tool schemas, and running a tool call."""

    def recall(self, **fields: Any) -> JSON:
        return self._run(Request("POST", "recall/", json=fields, idempotent=True))

    def tools(self, *, schema: str | None = None, agent: str | None = None) -> Any:
        """The tools in one SDK's function-calling shape: `openai` (the default), `anthropic` or
        `mcp`, with `agent`'s recall defaults in their schemas."""
        return self._run(Request("GET", "tools/", params={"schema": schema, "agent": agent}))

    def call_tool(self, call: Any) -> Any:
        """Run a tool call as the model gave it (an OpenAI tool call, an Anthropic `tool_use`
        block, an MCP call, or a list of them); answers the result(s) in the same shape, to
        send back to the model as they are. Not retried: a tool may write (remember)."""
        return self._run(Request("POST", "tools/call/", json=call, idempotent=False))


class Context(Resource):
    def assemble(
        self,
        *,
        agent: str | None = None,
        memory_user: Any = None,
        channel: str | None = None,
        external_id: str | None = None,
        thread: Any = None,
        message: str | None = None,
        token_budget: int | None = None,
        append: bool = False,
        **extra: Any,
    ) -> JSON:
        """Everything the agent sends to its model this turn, in one round trip.

        With ``append=True`` the incoming message is stored in the thread in the same call;
        the client attaches an idempotency key so a retried call stores it once.
        """
        body = _body(
            agent=agent,
            memory_user=_pk(memory_user) if memory_user is not None else None,
            channel=channel,
            external_id=external_id,
            thread=_pk(thread) if thread is not None else None,
            message=message,
            token_budget=token_budget,
            **extra,
        )
        if append:
            body["append"] = True
            body.setdefault("idempotency_key", uuid.uuid4().hex)
        return self._run(Request("POST", "context/", json=body, idempotent=True))


ReviewItems = Iterable[Mapping[str, Any] | tuple[str, Any]]


def _review_items(items: ReviewItems) -> list[JSON]:
    """``{"tier", "id"}`` objects from such objects or ``(tier, id)`` pairs."""
    out = []
    for item in items:
        if isinstance(item, Mapping):
            out.append({"tier": item["tier"], "id": _pk(item["id"])})
        else:
            tier, id = item
            out.append({"tier": tier, "id": _pk(id)})
    return out


class Review(Resource):
    """Memories held for a person to approve before agents use them (docs/review.md)."""

    def list(self, *, limit: int | None = None, offset: int | None = None, **filters: Any) -> JSON:
        """The queue; ``filters``: ``state``, ``tier``, ``agent``, ``memory_user``."""
        return self._run(Request("GET", "review/", params={"limit": limit, "offset": offset, **filters}))

    def get(self, tier: str, id: Any) -> JSON:
        return self._run(Request("GET", f"review/{tier}/{_pk(id)}/"))

    def edit(self, tier: str, id: Any, **fields: Any) -> JSON:
        """Change a held item (``content``, ``value``, ...), which approves it."""
        return self._run(Request("PATCH", f"review/{tier}/{_pk(id)}/", json=fields, idempotent=True))

    def approve(self, items: ReviewItems) -> JSON:
        """Approve items given as ``(tier, id)`` pairs or ``{"tier", "id"}`` objects."""
        body = {"items": _review_items(items)}
        return self._run(Request("POST", "review/approve/", json=body))

    def reject(self, items: ReviewItems, *, reason: str | None = None) -> JSON:
        body = _body(items=_review_items(items), reason=reason)
        return self._run(Request("POST", "review/reject/", json=body))

    def merge(self, items: ReviewItems) -> JSON:
        """Merge held items of one tier into one."""
        body = {"items": _review_items(items)}
        return self._run(Request("POST", "review/merge/", json=body))


class Reflection(Resource):
    """Reflection runs and the profiles they write (docs/reflection.md)."""

    def profiles(self, *, limit: int | None = None, offset: int | None = None, **filters: Any) -> JSON:
        params = {"limit": limit, "offset": offset, **filters}
        return self._run(Request("GET", "reflection/profiles/", params=params))

    def runs(self, *, limit: int | None = None, offset: int | None = None, **filters: Any) -> JSON:
        params = {"limit": limit, "offset": offset, **filters}
        return self._run(Request("GET", "reflection/runs/", params=params))

    def get_run(self, run_id: Any) -> JSON:
        return self._run(Request("GET", f"reflection/runs/{_pk(run_id)}/"))

    def run(self, *, agent: str | None = None) -> JSON:
        """Start a run for the agent (the one already running, if any, is answered)."""
        return self._run(Request("POST", "reflection/runs/", json=_body(agent=agent)))


class Webhooks(Resource):
    """Subscriptions to memory events and their deliveries (workspace keys; docs/webhooks.md).
    Verify what arrives with `memory_client.webhooks.signature_verify`."""

    def list(self, *, limit: int | None = None, offset: int | None = None) -> JSON:
        return self._run(Request("GET", "webhooks/", params={"limit": limit, "offset": offset}))

    def get(self, id: Any) -> JSON:
        return self._run(Request("GET", f"webhooks/{_pk(id)}/"))

    def create(
        self, *, url: str, events: Sequence[str] | None = None, description: str | None = None, **extra: Any
    ) -> JSON:
        """Subscribe ``url``; the answer holds the signing ``secret``, shown this once."""
        body = _body(url=url, events=list(events) if events is not None else None, description=description)
        return self._run(Request("POST", "webhooks/", json={**body, **extra}))

    def update(self, id: Any, **fields: Any) -> JSON:
        """Change ``url``, ``events`` or ``description``; ``is_active`` pauses or re-enables it."""
        return self._run(Request("PATCH", f"webhooks/{_pk(id)}/", json=fields, idempotent=True))

    def delete(self, id: Any) -> None:
        return self._run(Request("DELETE", f"webhooks/{_pk(id)}/", expect_empty=True))

    def deliveries(
        self, id: Any, *, limit: int | None = None, offset: int | None = None, **filters: Any
    ) -> JSON:
        """Newest first; ``filters``: ``status``, ``event_type``, ``created_after``, ``created_before``."""
        params = {"limit": limit, "offset": offset, **filters}
        return self._run(Request("GET", f"webhooks/{_pk(id)}/deliveries/", params=params))

    def ping(self, id: Any) -> JSON:
        """Send a ping event to the subscription now."""
        return self._run(Request("POST", f"webhooks/{_pk(id)}/ping/"))

    def rotate_secret(self, id: Any) -> JSON:
        """A new signing secret, answered once."""
        return self._run(Request("POST", f"webhooks/{_pk(id)}/rotate-secret/"))


def _dotted(namespace: Sequence[str] | str | None) -> str | None:
    if namespace is None or isinstance(namespace, str):
        return namespace
    return ".".join(namespace)


class Store(Resource):
    """The long-term store, item by item (docs/store.md); `memory_client.store.MemoryServerStore`
    is the same API as a LangGraph ``BaseStore``. Namespaces are sequences of labels."""

    def put(self, namespace: Sequence[str], key: str, value: Mapping[str, Any], **fields: Any) -> JSON:
        """Create or replace an item; ``fields``: ``agent``, ``memory_user``, ``index``, ``ttl``,
        ``wait``."""
        body = {"namespace": list(namespace), "key": key, "value": dict(value), **fields}
        return self._run(Request("PUT", "store/item/", json=body))

    def get(self, namespace: Sequence[str], key: str, **params: Any) -> JSON:
        """The item (`NotFoundError` when there is none); ``params``: ``agent``, ``refresh_ttl``."""
        query = {"namespace": _dotted(namespace), "key": key, **params}
        return self._run(Request("GET", "store/item/", params=query))

    def delete(self, namespace: Sequence[str], key: str, *, agent: str | None = None) -> Any:
        query = {"namespace": _dotted(namespace), "key": key, "agent": agent}
        return self._run(Request("DELETE", "store/item/", params=query))

    def list(
        self,
        *,
        namespace_prefix: Sequence[str] | str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        **filters: Any,
    ) -> JSON:
        """One page of items, newest first; ``filters``: ``agent``, ``memory_user``, ``key``,
        ``q``, ``shared``, ``updated_after``, ``updated_before``."""
        params = {"namespace_prefix": _dotted(namespace_prefix), "limit": limit, "offset": offset, **filters}
        return self._run(Request("GET", "store/items/", params=params))

    def search(
        self, namespace_prefix: Sequence[str] = (), *, query: str | None = None, **fields: Any
    ) -> JSON:
        """Items under the prefix, by meaning when ``query`` is given; ``fields``: ``filter``,
        ``limit``, ``offset``, ``agent``, ``refresh_ttl``."""
        body = _body(namespace_prefix=list(namespace_prefix), query=query, **fields)
        return self._run(Request("POST", "store/search/", json=body, idempotent=True))

    def namespaces(self, **fields: Any) -> JSON:
        """The namespaces in use; ``fields``: ``match_conditions``, ``max_depth``, ``limit``,
        ``offset``, ``agent``."""
        return self._run(Request("POST", "store/namespaces/", json=fields, idempotent=True))

    def batch(self, ops: Sequence[Mapping[str, Any]], **fields: Any) -> JSON:
        """Several get/put/search/list_namespaces operations in one call, in order."""
        body = {"ops": [dict(op) for op in ops], **fields}
        return self._run(Request("POST", "store/batch/", json=body, idempotent=True))

    def batch_delete(self, ids: Iterable[Any]) -> JSON:
        body = {"ids": [_pk(i) for i in ids]}
        return self._run(Request("POST", "store/items/batch-delete/", json=body, idempotent=True))


NDJSON = "application/x-ndjson"


class Portability(Resource):
    """A workspace's memory out and in as JSON lines (docs/export.md)."""

    def export(
        self,
        *,
        agent: str | None = None,
        memory_user: Any = None,
        history: bool | None = None,
        vectors: bool | None = None,
    ) -> str:
        """The export (the workspace's, an agent's or a person's) as JSON lines, held in memory;
        `import_` takes it as it is."""
        params = {
            "agent": agent,
            "memory_user": _pk(memory_user) if memory_user is not None else None,
            "history": history,
            "vectors": vectors,
        }
        return self._run(Request("GET", "export/", params=params, text=True))

    def import_(
        self, data: str | bytes, *, dry_run: bool | None = None, file_name: str | None = None
    ) -> JSON:
        """Queue an import of an export into this workspace: the job, to poll with
        `import_job` until its ``status`` is ``done`` or ``failed``. Not retried once it may
        have reached the server (each call is a job)."""
        content = data.encode() if isinstance(data, str) else bytes(data)
        params = {"dry_run": dry_run, "file_name": file_name}
        return self._run(Request("POST", "import/", params=params, content=content, content_type=NDJSON))

    def import_job(self, job_id: Any) -> JSON:
        return self._run(Request("GET", f"import/{_pk(job_id)}/"))

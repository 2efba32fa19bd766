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

    def delete(self, slug: str) -> None:
        return self._run(Request("DELETE", f"agents/{slug}/", expect_empty=True))


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
        before: str | None = None,
        limit: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> JSON:
        """Newest first."""
        params = {
            "checkpoint_ns": checkpoint_ns,
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


class Procedures(CrudResource):
    prefix = "procedures"

    def match(self, *, goal: str, **context: Any) -> JSON:
        return self._run(
            Request("POST", "procedures/match/", json={"goal": goal, **context}, idempotent=True)
        )

    def record_run(self, id: Any, *, success: bool, **fields: Any) -> JSON:
        body = {"success": success, **fields}
        return self._run(Request("POST", f"procedures/{_pk(id)}/runs/", json=body))


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

    def release_legal_hold(self, id: Any) -> JSON:
        return self._run(Request("DELETE", f"memory-users/{_pk(id)}/legal-hold/", idempotent=True))


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

"""The client covers the server's API, operation for operation, and calls nothing it lacks.

Every operation of today's OpenAPI schema has a row below naming the client method that sends
it; every public method of every resource has a row; and each row's call, run against a
recorder instead of a server, sends that operation's method and path. A route added to the
server, or a client method left behind by a removed one, fails here until the client follows.
"""

import inspect
import re

import pytest

from memory_client import MemoryClient
from memory_client._core import Request

ID = "00000000-0000-4000-8000-000000000001"
NS = ("prefs", "ui")

# (HTTP method, the schema's path, the client's "resource.method", its arguments)
OPERATIONS = [
    ("GET", "/api/v1/agents/", "agents.list", (), {}),
    ("POST", "/api/v1/agents/", "agents.create", ("bot",), {}),
    ("GET", "/api/v1/agents/{slug}/", "agents.get", ("bot",), {}),
    ("PATCH", "/api/v1/agents/{slug}/", "agents.update", ("bot",), {"name": "Bot"}),
    ("GET", "/api/v1/checkpoints/", "checkpoints.list_all", (), {}),
    ("POST", "/api/v1/checkpoints/batch-delete/", "checkpoints.batch_delete", ([ID],), {}),
    ("POST", "/api/v1/context/", "context.assemble", (), {"agent": "bot", "message": "hi"}),
    ("GET", "/api/v1/episodes/", "episodes.list", (), {}),
    ("POST", "/api/v1/episodes/", "episodes.create", (), {"agent": "bot"}),
    ("GET", "/api/v1/episodes/{episode_id}/", "episodes.get", (ID,), {}),
    ("PATCH", "/api/v1/episodes/{episode_id}/", "episodes.update", (ID,), {"summary": "s"}),
    ("DELETE", "/api/v1/episodes/{episode_id}/", "episodes.delete", (ID,), {}),
    ("POST", "/api/v1/episodes/{episode_id}/close/", "episodes.close", (ID,), {}),
    ("POST", "/api/v1/episodes/{episode_id}/extract-facts/", "episodes.extract_facts", (ID,), {}),
    ("POST", "/api/v1/episodes/{episode_id}/feedback/", "episodes.feedback", (ID,), {"rating": 1}),
    ("POST", "/api/v1/episodes/batch-delete/", "episodes.batch_delete", ([ID],), {}),
    ("POST", "/api/v1/episodes/search/", "episodes.search", (), {"query": "q"}),
    ("GET", "/api/v1/episodic-entries/", "episodic_entries.list", (), {}),
    ("POST", "/api/v1/episodic-entries/", "episodic_entries.create", (), {"content": "c"}),
    ("GET", "/api/v1/episodic-entries/{entry_id}/", "episodic_entries.get", (ID,), {}),
    ("PATCH", "/api/v1/episodic-entries/{entry_id}/", "episodic_entries.update", (ID,), {"content": "c"}),
    ("DELETE", "/api/v1/episodic-entries/{entry_id}/", "episodic_entries.delete", (ID,), {}),
    ("POST", "/api/v1/episodic-entries/batch/", "episodic_entries.create_batch", ([{"content": "c"}],), {}),
    ("POST", "/api/v1/episodic-entries/batch-delete/", "episodic_entries.batch_delete", ([ID],), {}),
    ("POST", "/api/v1/episodic-entries/extract/", "episodic_entries.extract", (), {"transcript": "t"}),
    ("POST", "/api/v1/episodic-entries/search/", "episodic_entries.search", (), {"query": "q"}),
    ("GET", "/api/v1/evidence/{tier}/{item_id}/", "evidence.get", ("fact", ID), {}),
    ("GET", "/api/v1/export/", "portability.export", (), {}),
    ("GET", "/api/v1/facts/", "facts.list", (), {}),
    ("POST", "/api/v1/facts/", "facts.create", (), {"key": "k", "value": "v"}),
    ("GET", "/api/v1/facts/{fact_id}/", "facts.get", (ID,), {}),
    ("PATCH", "/api/v1/facts/{fact_id}/", "facts.update", (ID,), {"value": "v"}),
    ("DELETE", "/api/v1/facts/{fact_id}/", "facts.delete", (ID,), {}),
    ("GET", "/api/v1/facts/{fact_id}/history/", "facts.history", (ID,), {}),
    ("POST", "/api/v1/facts/batch-delete/", "facts.batch_delete", ([ID],), {}),
    ("GET", "/api/v1/facts/lookup/", "facts.lookup", ("k",), {}),
    ("POST", "/api/v1/facts/remember/", "facts.remember", (), {"key": "k", "value": "v"}),
    ("POST", "/api/v1/import/", "portability.import_", ('{"format": "memory-export"}\n',), {}),
    ("GET", "/api/v1/import/{job_id}/", "portability.import_job", (ID,), {}),
    ("GET", "/api/v1/memory-users/", "memory_users.list", (), {}),
    ("POST", "/api/v1/memory-users/", "memory_users.create", (), {"canonical_id": "a"}),
    ("GET", "/api/v1/memory-users/{memory_user_id}/", "memory_users.get", (ID,), {}),
    ("PATCH", "/api/v1/memory-users/{memory_user_id}/", "memory_users.update", (ID,), {"display_name": "A"}),
    ("DELETE", "/api/v1/memory-users/{memory_user_id}/", "memory_users.delete", (ID,), {}),
    (
        "POST",
        "/api/v1/memory-users/{memory_user_id}/legal-hold/",
        "memory_users.place_legal_hold",
        (ID,),
        {"reason": "r"},
    ),
    ("GET", "/api/v1/memory-users/{memory_user_id}/legal-hold/", "memory_users.legal_holds", (ID,), {}),
    (
        "DELETE",
        "/api/v1/memory-users/{memory_user_id}/legal-hold/",
        "memory_users.release_legal_hold",
        (ID,),
        {"placed_on": ID},
    ),
    ("POST", "/api/v1/memory-users/{memory_user_id}/merge/", "memory_users.merge", (ID,), {"target": ID}),
    ("POST", "/api/v1/memory-users/batch-delete/", "memory_users.batch_delete", ([ID],), {}),
    (
        "POST",
        "/api/v1/memory-users/identify/",
        "memory_users.identify",
        (),
        {"channel": "c", "external_id": "e"},
    ),
    ("GET", "/api/v1/procedures/", "procedures.list", (), {}),
    ("POST", "/api/v1/procedures/", "procedures.create", (), {"name": "n"}),
    ("GET", "/api/v1/procedures/{procedure_id}/", "procedures.get", (ID,), {}),
    ("PATCH", "/api/v1/procedures/{procedure_id}/", "procedures.update", (ID,), {"name": "n"}),
    ("DELETE", "/api/v1/procedures/{procedure_id}/", "procedures.delete", (ID,), {}),
    ("POST", "/api/v1/procedures/{procedure_id}/runs/", "procedures.record_run", (ID,), {"success": True}),
    ("POST", "/api/v1/procedures/batch-delete/", "procedures.batch_delete", ([ID],), {}),
    ("POST", "/api/v1/procedures/learn/", "procedures.learn", (), {"agent": "bot"}),
    ("POST", "/api/v1/procedures/match/", "procedures.match", (), {"goal": "g"}),
    ("POST", "/api/v1/recall/", "memory.recall", (), {"query": "q"}),
    ("GET", "/api/v1/reflection/profiles/", "reflection.profiles", (), {}),
    ("GET", "/api/v1/reflection/runs/", "reflection.runs", (), {}),
    ("POST", "/api/v1/reflection/runs/", "reflection.run", (), {"agent": "bot"}),
    ("GET", "/api/v1/reflection/runs/{run_id}/", "reflection.get_run", (ID,), {}),
    ("GET", "/api/v1/retention/", "retention.get", (), {}),
    ("POST", "/api/v1/retention/rules/", "retention.set_rule", (), {"tier": "facts", "max_age_days": 30}),
    ("DELETE", "/api/v1/retention/rules/{rule_id}/", "retention.delete_rule", (ID,), {}),
    ("GET", "/api/v1/retention/runs/", "retention.runs", (), {}),
    ("POST", "/api/v1/retention/runs/", "retention.run", (), {}),
    ("GET", "/api/v1/review/", "review.list", (), {}),
    ("GET", "/api/v1/review/{tier}/{item_id}/", "review.get", ("fact", ID), {}),
    ("PATCH", "/api/v1/review/{tier}/{item_id}/", "review.edit", ("fact", ID), {"value": "v"}),
    ("POST", "/api/v1/review/approve/", "review.approve", ([("fact", ID)],), {}),
    ("POST", "/api/v1/review/merge/", "review.merge", ([("fact", ID), ("fact", ID)],), {}),
    ("POST", "/api/v1/review/reject/", "review.reject", ([{"tier": "fact", "id": ID}],), {}),
    ("POST", "/api/v1/store/batch/", "store.batch", ([{"op": "get"}],), {}),
    ("GET", "/api/v1/store/item/", "store.get", (NS, "k"), {}),
    ("PUT", "/api/v1/store/item/", "store.put", (NS, "k", {"v": 1}), {}),
    ("DELETE", "/api/v1/store/item/", "store.delete", (NS, "k"), {}),
    ("GET", "/api/v1/store/items/", "store.list", (), {}),
    ("POST", "/api/v1/store/items/batch-delete/", "store.batch_delete", ([ID],), {}),
    ("POST", "/api/v1/store/namespaces/", "store.namespaces", (), {}),
    ("POST", "/api/v1/store/search/", "store.search", (NS,), {"query": "q"}),
    ("GET", "/api/v1/threads/", "threads.list", (), {}),
    ("POST", "/api/v1/threads/", "threads.create", (), {"agent": "bot"}),
    ("POST", "/api/v1/threads/", "threads.resolve", (), {"agent": "bot"}),
    ("GET", "/api/v1/threads/{thread_id}/", "threads.get", (ID,), {}),
    ("PATCH", "/api/v1/threads/{thread_id}/", "threads.update", (ID,), {"title": "t"}),
    ("DELETE", "/api/v1/threads/{thread_id}/", "threads.delete", (ID,), {}),
    ("GET", "/api/v1/threads/{thread_id}/checkpoints/", "checkpoints.list", (ID,), {}),
    (
        "PUT",
        "/api/v1/threads/{thread_id}/checkpoints/",
        "checkpoints.put",
        (ID,),
        {"checkpoint_id": "c1", "checkpoint": {}},
    ),
    ("DELETE", "/api/v1/threads/{thread_id}/checkpoints/", "checkpoints.delete_thread", (ID,), {}),
    ("GET", "/api/v1/threads/{thread_id}/checkpoints/{checkpoint_id}/", "checkpoints.get", (ID, "c1"), {}),
    (
        "PUT",
        "/api/v1/threads/{thread_id}/checkpoints/{checkpoint_id}/writes/",
        "checkpoints.put_writes",
        (ID, "c1"),
        {"task_id": "t", "writes": []},
    ),
    ("GET", "/api/v1/threads/{thread_id}/checkpoints/latest/", "checkpoints.latest", (ID,), {}),
    ("POST", "/api/v1/threads/{thread_id}/compact/", "threads.compact", (ID,), {}),
    ("GET", "/api/v1/threads/{thread_id}/derived/", "threads.derived", (ID,), {}),
    ("POST", "/api/v1/threads/{thread_id}/derived/", "threads.purge_derived", (ID,), {}),
    ("GET", "/api/v1/threads/{thread_id}/history/", "threads.history", (ID,), {}),
    ("GET", "/api/v1/threads/{thread_id}/iterations/", "threads.iterations", (ID,), {}),
    ("POST", "/api/v1/threads/{thread_id}/iterations/", "threads.add_iteration", (ID,), {"task": "t"}),
    ("GET", "/api/v1/threads/{thread_id}/messages/", "threads.messages", (ID,), {}),
    (
        "POST",
        "/api/v1/threads/{thread_id}/messages/",
        "threads.append_messages",
        (ID, [{"role": "user"}]),
        {},
    ),
    ("POST", "/api/v1/threads/{thread_id}/messages/", "threads.append_message", (ID,), {"role": "user"}),
    ("DELETE", "/api/v1/threads/{thread_id}/messages/", "threads.clear_node", (ID, "planner"), {}),
    ("GET", "/api/v1/threads/{thread_id}/messages/{message_id}/", "threads.message", (ID, ID), {}),
    ("GET", "/api/v1/threads/{thread_id}/plan/", "threads.get_plan", (ID,), {}),
    ("PUT", "/api/v1/threads/{thread_id}/plan/", "threads.put_plan", (ID, {}), {}),
    ("GET", "/api/v1/threads/{thread_id}/plan/versions/", "threads.plan_versions", (ID,), {}),
    ("GET", "/api/v1/threads/{thread_id}/runs/{run_id}/snapshot/", "threads.get_snapshot", (ID, "r1"), {}),
    (
        "PUT",
        "/api/v1/threads/{thread_id}/runs/{run_id}/snapshot/",
        "threads.put_snapshot",
        (ID, "r1", {}),
        {},
    ),
    ("GET", "/api/v1/threads/{thread_id}/tool-results/{message_id}/", "threads.tool_result", (ID, ID), {}),
    ("GET", "/api/v1/threads/{thread_id}/transfers/", "threads.transfers", (ID,), {}),
    ("POST", "/api/v1/threads/{thread_id}/transfers/", "threads.transfer", (ID,), {"to_agent": "b"}),
    ("POST", "/api/v1/threads/batch-delete/", "threads.batch_delete", ([ID],), {}),
    ("GET", "/api/v1/tools/", "memory.tools", (), {}),
    ("POST", "/api/v1/tools/call/", "memory.call_tool", ({"name": "recall", "arguments": "{}"},), {}),
    ("GET", "/api/v1/webhooks/", "webhooks.list", (), {}),
    ("POST", "/api/v1/webhooks/", "webhooks.create", (), {"url": "https://example.com/hook"}),
    ("GET", "/api/v1/webhooks/{subscription_id}/", "webhooks.get", (ID,), {}),
    ("PATCH", "/api/v1/webhooks/{subscription_id}/", "webhooks.update", (ID,), {"is_active": False}),
    ("DELETE", "/api/v1/webhooks/{subscription_id}/", "webhooks.delete", (ID,), {}),
    ("GET", "/api/v1/webhooks/{subscription_id}/deliveries/", "webhooks.deliveries", (ID,), {}),
    ("POST", "/api/v1/webhooks/{subscription_id}/ping/", "webhooks.ping", (ID,), {}),
    ("POST", "/api/v1/webhooks/{subscription_id}/rotate-secret/", "webhooks.rotate_secret", (ID,), {}),
]


@pytest.fixture(scope="module")
def schema_operations():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    return {
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    }


def _recording_client() -> tuple[MemoryClient, list[Request]]:
    sent: list[Request] = []
    client = MemoryClient.__new__(MemoryClient)
    client._bind(sent.append)
    return client, sent


def _resource_methods(client) -> set[str]:
    """Every public method of every resource, as "resource.method"."""
    names = set()
    for resource_name, resource in vars(client).items():
        for name, _ in inspect.getmembers(type(resource), inspect.isfunction):
            if not name.startswith("_"):
                names.add(f"{resource_name}.{name}")
    return names


def test_every_operation_of_the_schema_has_a_client_method(schema_operations):
    covered = {(method, path) for method, path, *_ in OPERATIONS}
    assert sorted(schema_operations - covered) == []
    assert sorted(covered - schema_operations) == []


def test_every_client_method_is_an_operation_of_the_schema():
    client, _ = _recording_client()
    assert sorted(_resource_methods(client) - {name for _, _, name, *_ in OPERATIONS}) == []


@pytest.mark.parametrize(
    ("method", "path", "call", "args", "kwargs"), OPERATIONS, ids=[row[2] for row in OPERATIONS]
)
def test_each_method_sends_its_operation(method, path, call, args, kwargs):
    client, sent = _recording_client()
    resource, name = call.split(".")
    getattr(getattr(client, resource), name)(*args, **kwargs)
    (request,) = sent
    pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path.removeprefix("/api/v1/")))
    assert request.method == method
    assert re.fullmatch(pattern, request.path), (request.path, path)

"""The route table the reliability suites share: every /api/v1/ and /memories/ route, how to
build its path and a valid request from one seeded world, and how its rows are snapshotted.

The world: workspace W1 with agents a1 (`support-bot`, owns every seeded memory row) and a2
(`sales-bot`, owns one empty thread), memory users P1 (talks to a1) and P2, and workspace W2
with its own agent. Keys: W1-wide writable, bound to a1, bound to a2, W1 read-only, W2-wide.
Operators: W1 admin, editor and viewer; W2 admin (the outsider).

A route without a row in `API_CASES` / `BROWSER_CASES` fails `test_every_route_has_a_case`.
"""

import json
import logging
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlencode

from django.apps import apps
from django.db import connection, transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from checkpoints.services import checkpoint_put, checkpoint_writes_put
from core.access import principal_for_api_key
from core.models import Membership
from core.services import agent_get_or_create, api_key_create, operator_create, workspace_create
from episodes.services import episode_create
from episodic.models import EpisodicEntry
from episodic.services import entry_content_hash, entry_normalize
from facts.services import fact_remember
from identities.services import memory_user_create, memory_user_identify
from procedures.services import procedure_create
from reflection.models import ReflectionRun
from retention.models import RetentionRule
from store.services import store_item_put
from threads.services import (
    iteration_log_append,
    run_snapshot_put,
    thread_append_messages,
    thread_create,
    thread_plan_set,
)
from webhooks.services import webhook_subscription_create

PASSWORD = "correct-horse-battery-staple"
A1_SLUG = "support-bot"
A2_SLUG = "sales-bot"
CHECKPOINT_ID = "cp-alpha-1"
RUN_ID = "run-alpha-1"
STORE_NAMESPACE = ("memories", "ada")
STORE_KEY = "city"
UNSAFE = ("post", "put", "patch", "delete")
TIER_APPS = ("identities", "threads", "facts", "episodes", "procedures", "checkpoints", "store")
# Columns a request may legitimately refresh without writing memory (authentication's
# last_used_at); everything else of a row is part of its fingerprint.
API_KEY_COLUMNS = "t.id, t.agent_id, t.name, t.prefix, t.read_only, t.expires_at, t.revoked_at"


@dataclass
class World:
    w1: object
    w2: object
    a1: object
    a2: object
    w2_agent: object
    p1: object
    p2: object
    thread: object
    a2_thread: object
    m_user: object
    m_assistant: object
    m_tool: object
    m_node: object
    fact_agent: object
    fact_session: object
    fact_user: object
    episode: object
    procedure: object
    entry: object
    checkpoint: object
    keys: dict  # persona -> secret
    spare_key: object
    operators: dict  # persona -> user
    memberships: dict  # persona -> Membership
    a1_rows: set = field(default_factory=set)  # (table, pk) of every row agent a1 owns
    a1_ids: list = field(default_factory=list)  # texts naming a1's rows (never shown to a2)
    w1_ids: list = field(default_factory=list)  # texts naming W1's rows (never shown to W2)
    store_item: object = None  # a1's long-term store item, about P1
    webhook: object = None  # a W1 webhook subscription (workspace-level)
    reflection_run: object = None  # a finished reflection run of a1
    held_entry: object = None  # a1's entry about P1 waiting for review (docs/review.md)
    retention_rule: object = None  # a W1 retention rule (workspace-level)


def seed_world() -> World:
    """Everything through the tiers' own services, as an agent would have written it."""
    w1 = workspace_create(name="Acme")
    w2 = workspace_create(name="Globex")
    a1 = agent_get_or_create(workspace=w1, slug=A1_SLUG)
    a2 = agent_get_or_create(workspace=w1, slug=A2_SLUG)
    w2_agent = agent_get_or_create(workspace=w2, slug="ops-bot")
    p1 = memory_user_identify(
        workspace=w1, channel="telegram", external_id="1001", profile={"name": "Ada"}
    ).memory_user
    p2 = memory_user_create(workspace=w1, canonical_id="email:bo@example.com", display_name="Bo")
    thread = thread_create(
        workspace=w1, agent=a1, memory_user=p1, channel="telegram", channel_chat_id="chat-1", title="Trip"
    )
    a2_thread = thread_create(workspace=w1, agent=a2, memory_user=p2, title="Lead")
    m_user, m_assistant, m_tool = thread_append_messages(
        thread=thread,
        messages=[
            {"role": "user", "content": "I moved to Lisbon. My timezone is WET."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "call-1", "type": "function", "function": {"name": "f"}}],
            },
            {"role": "tool", "tool_call_id": "call-1", "content": "ok"},
        ],
    )
    (m_node,) = thread_append_messages(
        thread=thread, messages=[{"role": "assistant", "content": "Noted.", "node_id": "researcher"}]
    )
    episode = episode_create(
        workspace=w1, agent=a1, memory_user=p1, thread=thread, trigger_type="chat", input={"q": "move"}
    )
    fact_agent = fact_remember(workspace=w1, key="tone", value="friendly", scope="agent", agent=a1).fact
    fact_session = fact_remember(
        workspace=w1,
        key="timezone",
        value="WET",
        scope="session",
        thread=thread,
        source_message=m_user,
        source_episode=episode,
    ).fact
    fact_user = fact_remember(workspace=w1, key="city", value="Lisbon", scope="user", memory_user=p1).fact
    procedure = procedure_create(
        workspace=w1,
        agent=a1,
        name="Refund",
        procedure_type="prompt_template",
        content="Say sorry, then refund.",
        trigger_conditions={"goal_contains": ["refund"]},
        source_episode_ids=[episode.pk],
    )
    content = entry_normalize("Ada moved to Lisbon in May.")
    entry = EpisodicEntry.objects.create(
        workspace=w1,
        agent=a1,
        memory_user=p1,
        content=content,
        content_hash=entry_content_hash(content),
        source=EpisodicEntry.Source.USER_ASSERTION,
        evidence=content,
        source_thread=thread,
        source_message_ids=[str(m_user.pk)],
    )
    held_content = entry_normalize("Ada keeps bees on her roof.")
    held_entry = EpisodicEntry.objects.create(
        workspace=w1,
        agent=a1,
        memory_user=p1,
        content=held_content,
        content_hash=entry_content_hash(held_content),
        source=EpisodicEntry.Source.USER_ASSERTION,
        evidence=held_content,
        source_thread=thread,
        review=EpisodicEntry.Review.HELD,
    )
    checkpoint, _ = checkpoint_put(
        thread=thread,
        checkpoint_ns="",
        checkpoint_id=CHECKPOINT_ID,
        parent_checkpoint_id=None,
        type="msgpack",
        data=b"state",
        metadata={"step": 1},
    )
    checkpoint_writes_put(
        checkpoint=checkpoint,
        task_id="task-0",
        writes=[{"idx": 0, "channel": "messages", "type": "msgpack", "data": b"x"}],
    )
    run_snapshot_put(thread=thread, run_id=RUN_ID, snapshot={"step": 1})
    iteration_log_append(thread=thread, task_key="fetch", outcome="success", detail={"n": 1})
    thread_plan_set(thread=thread, plan={"steps": ["book"]})
    store_item, _ = store_item_put(
        workspace=w1,
        agent=a1,
        namespace=STORE_NAMESPACE,
        key=STORE_KEY,
        value={"text": "Ada moved to Lisbon in May."},
        memory_user=p1,
    )

    keys = {
        "owner": api_key_create(workspace=w1, name="owner")[1],
        "a1": api_key_create(workspace=w1, agent=a1, name="a1")[1],
        "other_agent": api_key_create(workspace=w1, agent=a2, name="a2")[1],
        "read_only": api_key_create(workspace=w1, read_only=True, name="ro")[1],
        "other_workspace": api_key_create(workspace=w2, name="w2")[1],
    }
    spare_key, _ = api_key_create(workspace=w1, name="spare")
    memberships = {
        "owner": operator_create(workspace=w1, username="ada-owner", password=PASSWORD, role="admin"),
        "editor": operator_create(workspace=w1, username="bo-editor", password=PASSWORD, role="editor"),
        "viewer": operator_create(workspace=w1, username="cy-viewer", password=PASSWORD, role="viewer"),
        "outsider": operator_create(
            workspace=w2, username="dee-outsider", password=PASSWORD, role=Membership.Role.ADMIN
        ),
    }
    world = World(
        w1=w1,
        w2=w2,
        a1=a1,
        a2=a2,
        w2_agent=w2_agent,
        p1=p1,
        p2=p2,
        thread=thread,
        a2_thread=a2_thread,
        m_user=m_user,
        m_assistant=m_assistant,
        m_tool=m_tool,
        m_node=m_node,
        fact_agent=fact_agent,
        fact_session=fact_session,
        fact_user=fact_user,
        episode=episode,
        procedure=procedure,
        entry=entry,
        checkpoint=checkpoint,
        keys=keys,
        spare_key=spare_key,
        operators={name: m.user for name, m in memberships.items()},
        memberships=memberships,
        store_item=store_item,
        held_entry=held_entry,
    )
    world.a1_rows = a1_owned_rows(world)
    # Only uuids and the two free-text ids: small integer keys would match any number.
    world.a1_ids = sorted({pk for _, pk in world.a1_rows if _is_uuid(pk)} | {CHECKPOINT_ID, RUN_ID})
    world.w1_ids = sorted({pk for _, pk in snapshot(w1) if _is_uuid(pk)} | {CHECKPOINT_ID, RUN_ID})
    # Nothing listens on port 9: a delivery fails at once, without a DNS lookup or a timeout.
    world.webhook = webhook_subscription_create(
        principal=principal_for_api_key(spare_key), url="http://127.0.0.1:9/hook", events=["fact.created"]
    )[0]
    world.w1_ids.append(str(world.webhook.pk))
    world.reflection_run = ReflectionRun.objects.create(workspace=w1, agent=a1, state="done")
    world.a1_ids.append(str(world.reflection_run.pk))
    world.w1_ids.append(str(world.reflection_run.pk))
    world.retention_rule = RetentionRule.objects.create(workspace=w1, tier="checkpoints", max_age_days=3650)
    world.w1_ids.append(str(world.retention_rule.pk))
    return world


# Rows of agent a1, found from the columns that tie a row to its agent (directly, through
# its thread, or through its parent row). Workspace-level rows (memory users, user-scope
# facts, the key dictionary) are not a1's.
_A1_SQL = """
WITH th AS (SELECT id FROM threads_thread WHERE agent_id = %(a1)s),
     f AS (SELECT id FROM facts_fact WHERE agent_id = %(a1)s OR thread_id IN (SELECT id FROM th)),
     cp AS (SELECT id FROM checkpoints_checkpoint WHERE thread_id IN (SELECT id FROM th)),
     pr AS (SELECT id FROM procedures_procedure WHERE agent_id = %(a1)s)
SELECT 'core_agent', id::text FROM core_agent WHERE id = %(a1)s
UNION ALL SELECT 'threads_thread', id::text FROM th
UNION ALL SELECT 'threads_message', id::text FROM threads_message WHERE thread_id IN (SELECT id FROM th)
UNION ALL SELECT 'threads_threadplan', id::text FROM threads_threadplan WHERE thread_id IN (SELECT id FROM th)
UNION ALL SELECT 'threads_runsnapshot', id::text FROM threads_runsnapshot
    WHERE thread_id IN (SELECT id FROM th)
UNION ALL SELECT 'threads_iterationlog', id::text FROM threads_iterationlog
    WHERE thread_id IN (SELECT id FROM th)
UNION ALL SELECT 'facts_fact', id::text FROM f
UNION ALL SELECT 'facts_factembedding', id::text FROM facts_factembedding WHERE fact_id IN (SELECT id FROM f)
UNION ALL SELECT 'episodes_episode', id::text FROM episodes_episode WHERE agent_id = %(a1)s
UNION ALL SELECT 'episodes_episodeembedding', id::text FROM episodes_episodeembedding
    WHERE episode_id IN (SELECT id FROM episodes_episode WHERE agent_id = %(a1)s)
UNION ALL SELECT 'episodes_episodicentry', id::text FROM episodes_episodicentry WHERE agent_id = %(a1)s
UNION ALL SELECT 'episodes_entryembedding', id::text FROM episodes_entryembedding WHERE agent_id = %(a1)s
UNION ALL SELECT 'episodes_messageembedding', id::text FROM episodes_messageembedding WHERE agent_id = %(a1)s
UNION ALL SELECT 'procedures_procedure', id::text FROM pr
UNION ALL SELECT 'procedures_procedureembedding', id::text FROM procedures_procedureembedding
    WHERE procedure_id IN (SELECT id FROM pr)
UNION ALL SELECT 'checkpoints_checkpoint', id::text FROM cp
UNION ALL SELECT 'checkpoints_checkpointwrite', id::text FROM checkpoints_checkpointwrite
    WHERE checkpoint_id IN (SELECT id FROM cp)
UNION ALL SELECT 'store_storeitem', id::text FROM store_storeitem WHERE agent_id = %(a1)s
UNION ALL SELECT 'store_storeitemembedding', id::text FROM store_storeitemembedding WHERE agent_id = %(a1)s
"""


def a1_owned_rows(world: World) -> set:
    with connection.cursor() as cursor:
        cursor.execute(_A1_SQL, {"a1": world.a1.pk})
        return {(table, pk) for table, pk in cursor.fetchall()}


def _snapshot_sql() -> str:
    parts = []
    models = [m for app in TIER_APPS for m in apps.get_app_config(app).get_models()]
    models += [apps.get_model("core", name) for name in ("Agent", "Membership", "ProviderCredential")]
    models.append(apps.get_model("core", "AuditEvent"))
    for model in models:
        table, pk = model._meta.db_table, model._meta.pk.column
        fields = {f.name for f in model._meta.get_fields()}
        # A row without a workspace of its own (a summary's mark) is its thread's.
        owner = (
            "t.workspace_id = %(ws)s"
            if "workspace" in fields
            else "t.thread_id IN (SELECT id FROM threads_thread WHERE workspace_id = %(ws)s)"
        )
        parts.append(f"SELECT '{table}', t.{pk}::text, md5(t::text) FROM {table} t WHERE {owner}")
    parts.append(
        f"SELECT 'core_apikey', t.id::text, md5(ROW({API_KEY_COLUMNS})::text) "
        "FROM core_apikey t WHERE t.workspace_id = %(ws)s"
    )
    parts.append(
        "SELECT 'core_workspace', t.id::text, md5(t::text) FROM core_workspace t WHERE t.id = %(ws)s"
    )
    return "\nUNION ALL ".join(parts)


_SNAPSHOT_SQL = None


def snapshot(workspace) -> dict:
    """{(table, pk): md5 of the row} for every row of `workspace` in the memory tables, in one
    round trip (tens of rows here, ~2 ms)."""
    global _SNAPSHOT_SQL
    if _SNAPSHOT_SQL is None:
        _SNAPSHOT_SQL = _snapshot_sql()
    with connection.cursor() as cursor:
        cursor.execute(_SNAPSHOT_SQL, {"ws": workspace.pk})
        return {(table, pk): digest for table, pk, digest in cursor.fetchall()}


def snapshot_diff(before: dict, after: dict, only: set | None = None) -> list[str]:
    """Readable differences, restricted to the rows in `only` when given."""
    keys = set(before) | set(after)
    if only is not None:
        keys &= only
    out = []
    for key in sorted(keys):
        if key not in after:
            out.append(f"deleted {key[0]} {key[1]}")
        elif key not in before:
            out.append(f"created {key[0]} {key[1]}")
        elif before[key] != after[key]:
            out.append(f"changed {key[0]} {key[1]}")
    return out


# ---------------------------------------------------------------------------------------------
# Cases


@dataclass(frozen=True)
class Ref:
    """A request whose body names a row of agent a1; sent with a2's key it must answer exactly
    like the same request naming a random id, and store nothing."""

    method: str
    body: Callable[[World], dict]
    path: Callable[[World], dict] | None = None  # default: the case's path


@dataclass(frozen=True)
class ApiCase:
    path: Callable[[World], dict]  # URL kwargs
    bodies: dict = field(default_factory=dict)  # method -> World -> JSON body
    query: dict = field(default_factory=dict)  # method -> World -> query parameters
    agent_field: str | None = "agent"  # body field naming the acting agent (an agent-bound key omits it)
    workspace_level: tuple = ()  # methods that act on the whole workspace: 403 for an agent-bound key
    refs: tuple = ()
    free_json: tuple = ()  # body fields that accept any JSON value


def _none(w):
    return {}


def _thread(w):
    return {"thread_id": w.thread.pk}


def _webhook(w):
    return {"subscription_id": w.webhook.pk}


def _ctx(w, **extra):
    return {"agent": A1_SLUG, "memory_user": str(w.p1.pk), **extra}


def _remember(w, **extra):
    return {
        "agent": A1_SLUG,
        "key": "tone",
        "value": "formal",
        "scope": "agent",
        "evidence": "said so",
        **extra,
    }


REMEMBER_REFS = (
    Ref("post", lambda w: _remember(w, source_message=str(w.m_user.pk))),
    Ref("post", lambda w: _remember(w, source_episode=str(w.episode.pk))),
    Ref("post", lambda w: _remember(w, scope="session", thread=str(w.thread.pk))),
)
CONTEXT_REF = (
    Ref("post", lambda w: {"thread": str(w.thread.pk), "memory_user": str(w.p1.pk), "query": "x"}),
)


def _procedure_body(w, **extra):
    return {
        "agent": A1_SLUG,
        "name": "Refund v2",
        "description": "How to refund.",
        "trigger_conditions": {"goal_contains": ["refund"]},
        "procedure_type": "prompt_template",
        "content": "Say sorry.",
        "source_episode_ids": [str(w.episode.pk)],
        **extra,
    }


def _episode_body(w, **extra):
    now = timezone.now()
    return {
        **_ctx(w),
        "trigger_type": "chat",
        "trigger_payload": {"k": "v"},
        "input": {"q": "hi"},
        "messages": [{"role": "user", "content": "hi"}],
        "actions": [{"tool": "search"}],
        "started_at": (now - timedelta(seconds=5)).isoformat(),
        "outcome": "success",
        "final_output": {"answer": 1},
        "error": "",
        "ended_at": now.isoformat(),
        **extra,
    }


def _entry_item(w, **extra):
    return {
        "content": "Ada's timezone is WET.",
        "source": "user_assertion",
        "evidence": "My timezone is WET",
        "metadata": {"k": "v"},
        **extra,
    }


def _entry_create_body(w, **extra):
    return {**_ctx(w), **_entry_item(w), **extra}


def _extract_body(w, **extra):
    return {
        **_ctx(w),
        "transcript": [{"id": "t1", "role": "user", "content": "I adopted a cat named Miso."}],
        "candidates": [
            {"content": "Ada adopted a cat named Miso.", "source": "user_assertion", "evidence": "adopted"}
        ],
        "use_llm": False,
        "known_memory": "",
        "known_profile": "",
        "sync": True,
        **extra,
    }


def _review_items(w):
    return {
        "items": [{"tier": "entry", "id": str(w.held_entry.pk)}, {"tier": "fact", "id": str(w.fact_agent.pk)}]
    }


API_CASES: dict[str, ApiCase] = {
    "api:agents:list": ApiCase(
        path=_none,
        bodies={
            "post": lambda w: {"slug": "new-bot", "name": "New", "memory_settings": {"recent_messages": 5}}
        },
        agent_field=None,
        free_json=("memory_settings",),
        workspace_level=("post",),
    ),
    "api:agents:detail": ApiCase(
        path=lambda w: {"slug": A1_SLUG},
        bodies={"patch": lambda w: {"name": "Support", "memory_settings": {"recent_messages": 10}}},
        agent_field=None,
    ),
    "api:identities:list": ApiCase(
        path=_none,
        bodies={
            "post": lambda w: {
                "canonical_id": "email:new@example.com",
                "display_name": "New",
                "identities": [{"channel": "email", "external_id": "new@example.com", "profile": {"a": 1}}],
            }
        },
    ),
    "api:runtime:identify": ApiCase(
        path=_none,
        bodies={"post": lambda w: {"channel": "telegram", "external_id": "1001", "profile": {"name": "Ada"}}},
    ),
    "api:identities:batch-delete": ApiCase(
        path=_none, bodies={"post": lambda w: {"ids": [str(w.p2.pk)]}}, workspace_level=("post",)
    ),
    "api:identities:detail": ApiCase(
        path=lambda w: {"memory_user_id": w.p1.pk},
        bodies={"patch": lambda w: {"display_name": "Ada L."}},
        # Renaming a person renames them for every agent, so PATCH is workspace-level like DELETE.
        workspace_level=("delete", "patch"),
    ),
    "api:identities:merge": ApiCase(
        path=lambda w: {"memory_user_id": w.p1.pk},
        bodies={"post": lambda w: {"target": str(w.p2.pk)}},
        workspace_level=("post",),
    ),
    "api:identities:legal-hold": ApiCase(
        path=lambda w: {"memory_user_id": w.p1.pk},
        bodies={"post": lambda w: {"reason": "Case 114: preserve"}},
        workspace_level=("post", "delete"),
    ),
    "api:threads:list": ApiCase(
        path=_none,
        bodies={
            "post": lambda w: {
                **_ctx(w),
                "channel": "telegram",
                "channel_chat_id": "chat-9",
                "client_key": "ck-9",
                "title": "New",
                "metadata": {"k": "v"},
                "model": "gpt",
            }
        },
    ),
    "api:threads:batch-delete": ApiCase(path=_none, bodies={"post": lambda w: {"ids": [str(w.thread.pk)]}}),
    "api:threads:detail": ApiCase(
        path=_thread,
        bodies={"patch": lambda w: {"title": "Renamed", "metadata": {"k": "v"}, "model": "gpt"}},
    ),
    "api:threads:messages": ApiCase(
        path=_thread,
        bodies={
            "post": lambda w: {
                "messages": [{"role": "user", "content": "And Porto?", "metadata": {"k": "v"}}]
            }
        },
        query={"delete": lambda w: {"node": "researcher"}},
        refs=(
            Ref(
                "post",
                lambda w: {"role": "user", "content": "hi", "parent": str(w.m_user.pk)},
                path=lambda w: {"thread_id": w.a2_thread.pk},
            ),
        ),
    ),
    "api:threads:message-detail": ApiCase(
        path=lambda w: {"thread_id": w.thread.pk, "message_id": w.m_user.pk}
    ),
    "api:threads:tool-result": ApiCase(path=lambda w: {"thread_id": w.thread.pk, "message_id": w.m_tool.pk}),
    "api:threads:history": ApiCase(
        path=_thread,
        query={
            "get": lambda w: {
                "max_messages": "10",
                "tool_format": "text",
                "agent": A2_SLUG,
                "recall_query": "Lisbon",
                "recall_query_by_person": "true",
            }
        },
    ),
    "api:threads:compact": ApiCase(path=_thread),
    "api:threads:plan": ApiCase(
        path=_thread, bodies={"put": lambda w: {"plan": {"steps": ["book", "pay"]}}}, free_json=("plan",)
    ),
    "api:threads:plan-versions": ApiCase(path=_thread),
    "api:threads:run-snapshot": ApiCase(
        path=lambda w: {"thread_id": w.thread.pk, "run_id": RUN_ID},
        bodies={"put": lambda w: {"snapshot": {"step": 2}}},
        free_json=("snapshot",),
    ),
    "api:threads:iterations": ApiCase(
        path=_thread,
        bodies={
            "post": lambda w: {
                "task": "fetch",
                "outcome": "retry",
                "error": "timeout",
                "attempt": 2,
                "detail": {"k": "v"},
            }
        },
    ),
    "api:threads:transfers": ApiCase(
        path=_thread,
        bodies={
            "post": lambda w: {
                "from_agent": A1_SLUG,
                "to_agent": A2_SLUG,
                "reason": "billing question",
                "message": str(w.m_user.pk),
            }
        },
        agent_field="from_agent",
        refs=(
            Ref(
                "post",
                lambda w: {"to_agent": A1_SLUG, "message": str(w.m_user.pk)},
                path=lambda w: {"thread_id": w.a2_thread.pk},
            ),
        ),
    ),
    "api:facts:list": ApiCase(
        path=_none, bodies={"post": _remember}, refs=REMEMBER_REFS[:1], free_json=("value",)
    ),
    "api:facts:lookup": ApiCase(path=_none, query={"get": lambda w: {"key": "tone", "agent": A1_SLUG}}),
    "api:facts:remember": ApiCase(
        path=_none, bodies={"post": _remember}, refs=REMEMBER_REFS, free_json=("value",)
    ),
    "api:facts:batch-delete": ApiCase(path=_none, bodies={"post": lambda w: {"ids": [str(w.fact_agent.pk)]}}),
    "api:facts:detail": ApiCase(
        path=lambda w: {"fact_id": w.fact_agent.pk},
        bodies={"patch": lambda w: {"value": "formal", "fact_type": "world_knowledge", "confidence": 0.7}},
        free_json=("value",),
    ),
    "api:facts:history": ApiCase(path=lambda w: {"fact_id": w.fact_agent.pk}),
    "api:runtime:recall": ApiCase(
        path=_none,
        bodies={"post": lambda w: {**_ctx(w), "query": "timezone", "semantic": False, "limit": 10}},
        refs=CONTEXT_REF,
    ),
    "api:runtime:tools": ApiCase(path=_none, query={"get": lambda w: {"schema": "mcp", "agent": A1_SLUG}}),
    # One OpenAI tool call; the agent and the person are arguments of the tool, not the body's.
    "api:runtime:tool-call": ApiCase(
        path=_none,
        bodies={
            "post": lambda w: {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "remember",
                    "arguments": json.dumps(
                        {"key": "tool_probe", "value": "yes", "scope": "user", "memory_user": str(w.p1.pk)}
                    ),
                },
            }
        },
        agent_field=None,
    ),
    "api:episodes:list": ApiCase(
        path=_none,
        bodies={"post": _episode_body},
        refs=(Ref("post", lambda w: {"thread": str(w.thread.pk), "trigger_type": "chat"}),),
        free_json=("input", "final_output"),
    ),
    "api:episodes:batch-delete": ApiCase(path=_none, bodies={"post": lambda w: {"ids": [str(w.episode.pk)]}}),
    "api:episodes:detail": ApiCase(
        path=lambda w: {"episode_id": w.episode.pk},
        bodies={"patch": lambda w: {"trigger_type": "email", "input": {"q": "x"}, "error": ""}},
        free_json=("input", "final_output"),
    ),
    "api:episodes:close": ApiCase(
        path=lambda w: {"episode_id": w.episode.pk},
        bodies={"post": lambda w: {"outcome": "success", "final_output": {"a": 1}, "actions": [{"t": 1}]}},
        free_json=("final_output",),
    ),
    "api:episodes:feedback": ApiCase(
        path=lambda w: {"episode_id": w.episode.pk},
        bodies={"post": lambda w: {"rating": 4, "comment": "Good."}},
    ),
    # A read (read_only_safe); `agent` and `memory_user` narrow the key's scope, never widen it.
    "api:episodes:search": ApiCase(
        path=_none,
        bodies={
            "post": lambda w: {
                "query": "refund order",
                "mode": "hybrid",
                "top_k": 5,
                "agent": A1_SLUG,
                "memory_user": str(w.p1.pk),
                "outcome": "success",
            }
        },
    ),
    "api:facts:episode-extract-facts": ApiCase(
        path=lambda w: {"episode_id": w.episode.pk},
        bodies={
            "post": lambda w: {
                "candidates": [{"key": "probe", "value": "yes", "evidence": "not in the episode"}],
                "use_llm": False,
            }
        },
        agent_field=None,
    ),
    "api:episodic_entries:list": ApiCase(
        path=_none,
        bodies={"post": _entry_create_body},
        refs=(
            Ref("post", lambda w: _entry_create_body(w, source_message=str(w.m_user.pk))),
            Ref("post", lambda w: _entry_create_body(w, thread=str(w.thread.pk))),
        ),
    ),
    "api:episodic_entries:batch": ApiCase(
        path=_none,
        bodies={
            "post": lambda w: {
                **_ctx(w),
                "items": [_entry_item(w), _entry_item(w, content="Ada keeps bees.")],
            }
        },
        refs=(
            Ref("post", lambda w: {**_ctx(w), "items": [_entry_item(w, source_message=str(w.m_user.pk))]}),
            Ref("post", lambda w: {**_ctx(w), "thread": str(w.thread.pk), "items": [_entry_item(w)]}),
        ),
    ),
    "api:episodic_entries:extract": ApiCase(
        path=_none,
        bodies={"post": _extract_body},
        refs=(Ref("post", lambda w: _extract_body(w, thread=str(w.thread.pk))),),
    ),
    "api:episodic_entries:search": ApiCase(
        path=_none,
        bodies={
            "post": lambda w: {
                **_ctx(w),
                "query": "Lisbon",
                "mode": "lexical",
                "render": True,
                "top_k": 5,
                "asked_by_person": True,
                "created_after": "2000-01-01T00:00:00Z",
                "created_before": "2100-01-01T00:00:00Z",
                "source": list(EpisodicEntry.Source.values),
                "metadata": {},
            }
        },
        refs=(Ref("post", lambda w: {"thread": str(w.thread.pk), "query": "Lisbon", "mode": "lexical"}),),
    ),
    "api:episodic_entries:batch-delete": ApiCase(
        path=_none, bodies={"post": lambda w: {"ids": [str(w.entry.pk)]}}
    ),
    "api:episodic_entries:detail": ApiCase(
        path=lambda w: {"entry_id": w.entry.pk},
        bodies={
            "patch": lambda w: {"content": "Ada lives in Lisbon.", "status": "active", "metadata": {"k": "v"}}
        },
    ),
    "api:procedures:list": ApiCase(
        path=_none,
        bodies={"post": _procedure_body},
        refs=(
            Ref("post", _procedure_body),
            Ref("post", lambda w: _procedure_body(w, source_episode_ids=[], parent=str(w.procedure.pk))),
        ),
        free_json=("content", "trigger_conditions"),
    ),
    "api:procedures:match": ApiCase(
        path=_none,
        bodies={"post": lambda w: {"goal": "I need a refund", "agent": A1_SLUG, "context": {"channel": "x"}}},
    ),
    "api:procedures:batch-delete": ApiCase(
        path=_none, bodies={"post": lambda w: {"ids": [str(w.procedure.pk)]}}
    ),
    "api:procedures:detail": ApiCase(
        path=lambda w: {"procedure_id": w.procedure.pk},
        bodies={"patch": lambda w: {"name": "Refund", "content": {"steps": ["sorry"]}, "is_active": True}},
        free_json=("content", "trigger_conditions"),
    ),
    "api:procedures:runs": ApiCase(
        path=lambda w: {"procedure_id": w.procedure.pk},
        bodies={"post": lambda w: {"success": True, "duration_ms": 1200}},
    ),
    # An agent-bound key learns from its own agent's episodes only (naming another is a 404).
    "api:procedures:learn": ApiCase(path=_none, bodies={"post": lambda w: {"agent": A1_SLUG}}),
    # The review queue (docs/review.md): a1's held entry, and an approved fact a key that sees it
    # is answered `not_held` for; any other key gets `not_found`, exactly as for a random id.
    "api:review:list": ApiCase(path=_none, agent_field=None),
    "api:review:approve": ApiCase(path=_none, agent_field=None, bodies={"post": _review_items}),
    "api:review:reject": ApiCase(
        path=_none,
        agent_field=None,
        bodies={"post": lambda w: {**_review_items(w), "reason": "Not about Ada"}},
    ),
    "api:review:merge": ApiCase(
        path=_none,
        agent_field=None,
        bodies={
            "post": lambda w: {
                "items": [{"tier": "entry", "id": str(w.held_entry.pk), "into": str(w.entry.pk)}]
            }
        },
    ),
    "api:review:item": ApiCase(
        path=lambda w: {"tier": "entry", "item_id": w.held_entry.pk},
        bodies={"patch": lambda w: {"content": "Ada keeps two beehives on her roof."}},
        agent_field=None,
    ),
    "api:checkpoints:list": ApiCase(path=_none),
    "api:checkpoints:batch-delete": ApiCase(
        path=_none, bodies={"post": lambda w: {"ids": [str(w.checkpoint.pk)]}}
    ),
    "api:checkpoints:thread-list": ApiCase(
        path=_thread,
        bodies={
            "put": lambda w: {
                "checkpoint_ns": "",
                "checkpoint_id": "cp-alpha-2",
                "parent_checkpoint_id": CHECKPOINT_ID,
                "checkpoint": {"type": "msgpack", "data": "c3RhdGU="},
                "metadata": {"step": 2},
            }
        },
    ),
    "api:checkpoints:thread-latest": ApiCase(path=_thread, query={"get": lambda w: {"checkpoint_ns": ""}}),
    "api:checkpoints:thread-detail": ApiCase(
        path=lambda w: {"thread_id": w.thread.pk, "checkpoint_id": CHECKPOINT_ID}
    ),
    "api:checkpoints:thread-writes": ApiCase(
        path=lambda w: {"thread_id": w.thread.pk, "checkpoint_id": CHECKPOINT_ID},
        bodies={
            "put": lambda w: {
                "checkpoint_ns": "",
                "task_id": "task-1",
                "task_path": "",
                "writes": [{"idx": 0, "channel": "messages", "value": {"type": "msgpack", "data": "eA=="}}],
            }
        },
    ),
    "api:provenance:evidence": ApiCase(
        path=lambda w: {"tier": "entry", "item_id": w.entry.pk}, agent_field=None
    ),
    "api:provenance:thread-derived": ApiCase(
        path=_thread, bodies={"post": lambda w: {"message": str(w.m_user.pk)}}, agent_field=None
    ),
    "api:retention:overview": ApiCase(path=_none, agent_field=None, workspace_level=("get",)),
    "api:retention:rules": ApiCase(
        path=_none,
        bodies={"post": lambda w: {"tier": "episodes", "agent": A1_SLUG, "max_age_days": 3650}},
        agent_field=None,
        workspace_level=("post",),
    ),
    "api:retention:rule": ApiCase(
        path=lambda w: {"rule_id": w.retention_rule.pk}, agent_field=None, workspace_level=("delete",)
    ),
    "api:retention:runs": ApiCase(path=_none, agent_field=None, workspace_level=("get", "post")),
    "api:reflection:runs": ApiCase(
        path=_none,
        bodies={"post": lambda w: {"agent": A1_SLUG}},
        query={"get": lambda w: {"agent": A1_SLUG, "state": "done"}},
    ),
    "api:reflection:run": ApiCase(path=lambda w: {"run_id": w.reflection_run.pk}),
    "api:reflection:profiles": ApiCase(
        path=_none, query={"get": lambda w: {"memory_user": str(w.p1.pk), "agent": A1_SLUG}}
    ),
    "api:webhooks:list": ApiCase(
        path=_none,
        bodies={"post": lambda w: {"url": "https://example.com/h2", "events": ["entry.created"]}},
        agent_field=None,
        workspace_level=("get", "post"),
    ),
    "api:webhooks:detail": ApiCase(
        path=_webhook,
        bodies={"patch": lambda w: {"events": [], "description": "All events", "is_active": True}},
        agent_field=None,
        workspace_level=("get", "patch", "delete"),
    ),
    "api:webhooks:rotate-secret": ApiCase(path=_webhook, agent_field=None, workspace_level=("post",)),
    "api:webhooks:ping": ApiCase(path=_webhook, agent_field=None, workspace_level=("post",)),
    "api:webhooks:deliveries": ApiCase(
        path=_webhook,
        query={"get": lambda w: {"status": "succeeded", "event_type": "fact.created"}},
        agent_field=None,
        workspace_level=("get",),
    ),
    "api:store:item": ApiCase(
        path=_none,
        bodies={
            "put": lambda w: {
                "agent": A1_SLUG,
                "namespace": list(STORE_NAMESPACE),
                "key": STORE_KEY,
                "value": {"text": "Ada lives in Porto."},
                "index": ["text"],
                "ttl": 60,
                "memory_user": str(w.p1.pk),
            }
        },
        query={
            "get": lambda w: {"agent": A1_SLUG, "namespace": ".".join(STORE_NAMESPACE), "key": STORE_KEY},
            "delete": lambda w: {"agent": A1_SLUG, "namespace": ".".join(STORE_NAMESPACE), "key": STORE_KEY},
        },
        free_json=("value", "index"),
    ),
    "api:store:list": ApiCase(path=_none),
    "api:store:batch-delete": ApiCase(path=_none, bodies={"post": lambda w: {"ids": [str(w.store_item.pk)]}}),
    "api:store:search": ApiCase(
        path=_none,
        bodies={
            "post": lambda w: {
                "agent": A1_SLUG,
                "namespace_prefix": ["memories"],
                "query": "Lisbon",
                "filter": {"text": {"$ne": "x"}},
                "limit": 5,
            }
        },
        free_json=("filter",),
    ),
    "api:store:namespaces": ApiCase(
        path=_none,
        bodies={
            "post": lambda w: {
                "agent": A1_SLUG,
                "match_conditions": [{"match_type": "prefix", "path": ["memories"]}],
                "max_depth": 2,
            }
        },
    ),
    # Reads only: a batch with puts is a write, and the matrix sends this body with a
    # read-only key too (the batch route is read-only-safe; its puts need a writable key).
    "api:store:batch": ApiCase(
        path=_none,
        bodies={
            "post": lambda w: {
                "agent": A1_SLUG,
                "ops": [
                    {"op": "get", "namespace": list(STORE_NAMESPACE), "key": STORE_KEY},
                    {"op": "search", "namespace_prefix": ["memories"], "query": "Lisbon"},
                    {"op": "list_namespaces"},
                ],
            }
        },
    ),
    "api:runtime:context": ApiCase(
        path=_none,
        bodies={
            "post": lambda w: {
                **_ctx(w),
                "thread": str(w.thread.pk),
                "message": "Where do I live?",
                "token_budget": 2000,
                "include": ["user_profile", "session_memory", "procedures", "history"],
            }
        },
        refs=(
            Ref(
                "post",
                lambda w: {
                    "thread": str(w.thread.pk),
                    "message": "hi",
                    "include": ["history", "session_memory"],
                },
            ),
        ),
    ),
}


@dataclass(frozen=True)
class BrowserCase:
    """A /memories route. `levels` maps each method to the role it needs: read, edit or admin."""

    path: Callable[[World], dict]  # URL kwargs besides workspace_id
    levels: dict
    data: dict = field(default_factory=dict)  # method -> World -> form data
    in_workspace: bool = True
    # The matrix cannot send the form whole (a file): a role allowed in gets the form's 400
    # with its errors, as a plain form post does (browser.lib.rendering.refused).
    form_incomplete: bool = False


def _pk(attr):
    return lambda w: {"pk": getattr(w, attr).pk}


def _ids(attr):
    return lambda w: {"ids": [str(getattr(w, attr).pk)], "confirmed": "on"}


def _tab(slug, attr, edit_data=None, deletable=True):
    cases = {
        f"memories:{slug}s" if slug != "entry" else "memories:entries": BrowserCase(
            path=_none, levels={"get": "read"}
        ),
        f"memories:{slug}": BrowserCase(path=_pk(attr), levels={"get": "read"}),
    }
    plural = "entries" if slug == "entry" else f"{slug}s"
    if deletable:
        cases[f"memories:{plural}-delete"] = BrowserCase(
            path=_none, levels={"post": "edit"}, data={"post": _ids(attr)}
        )
    if edit_data is not None:
        name = "memories:episode-edit" if slug == "episode" else f"memories:{slug}-edit"
        cases[name] = BrowserCase(
            path=_pk(attr), levels={"get": "edit", "post": "edit"}, data={"post": edit_data}
        )
    return cases


BROWSER_CASES: dict[str, BrowserCase] = {
    "memories:home": BrowserCase(path=_none, levels={"get": "read"}, in_workspace=False),
    "memories:workspace": BrowserCase(path=_none, levels={"get": "read"}),
    # The landing page: counts, charts and latest changes from the activity aggregates.
    "memories:overview": BrowserCase(path=_none, levels={"get": "read"}),
    # One search across tiers, and the audit trail with its CSV export (editors and admins).
    "memories:search": BrowserCase(path=_none, levels={"get": "read"}),
    "memories:audit": BrowserCase(path=_none, levels={"get": "edit"}),
    "memories:audit-export": BrowserCase(path=_none, levels={"get": "edit"}),
    **_tab(
        "fact",
        "fact_agent",
        lambda w: {"value": "formal", "fact_type": "world_knowledge", "confidence": "0.7", "evidence": ""},
    ),
    **_tab("episode", "episode", lambda w: {"rating": "4", "comment": "Good."}),
    "memories:episode-record-edit": BrowserCase(
        path=_pk("episode"),
        levels={"get": "edit", "post": "edit"},
        data={
            "post": lambda w: {
                "trigger_type": "chat",
                "error": "",
                "input": '{"q": "move"}',
                "final_output": "",
            }
        },
    ),
    **_tab("entry", "entry", lambda w: {"content": "Ada lives in Lisbon.", "status": "active"}),
    **_tab("thread", "thread", lambda w: {"title": "Renamed"}),
    "memories:thread-tool-result": BrowserCase(
        path=lambda w: {"pk": w.thread.pk, "message_id": w.m_tool.pk}, levels={"get": "read"}
    ),
    # The filter pickers' suggestions; with no query, the newest rows of the workspace.
    "memories:user-pick": BrowserCase(path=_none, levels={"get": "read"}),
    "memories:thread-pick": BrowserCase(path=_none, levels={"get": "read"}),
    # The context preview: read-only (a read-only transaction, rolled back) for every role.
    "memories:context-preview": BrowserCase(path=_none, levels={"get": "read"}),
    **_tab("checkpoint", "checkpoint"),
    "memories:checkpoint-edit": BrowserCase(
        path=_pk("checkpoint"),
        levels={"get": "edit", "post": "edit"},
        data={"post": lambda w: {"metadata": '{"source": "update", "step": 2}'}},
    ),
    "memories:checkpoint-state": BrowserCase(path=_pk("checkpoint"), levels={"get": "read"}),
    "memories:store": BrowserCase(path=_none, levels={"get": "read"}),
    "memories:store-item": BrowserCase(path=_pk("store_item"), levels={"get": "read"}),
    "memories:store-item-edit": BrowserCase(
        path=_pk("store_item"),
        levels={"get": "edit", "post": "edit"},
        data={"post": lambda w: {"value": '{"text": "Ada lives in Porto."}'}},
    ),
    "memories:store-delete": BrowserCase(
        path=_none, levels={"post": "edit"}, data={"post": _ids("store_item")}
    ),
    **_tab(
        "procedure",
        "procedure",
        lambda w: {
            "name": "Refund",
            "description": "",
            "procedure_type": "prompt_template",
            "content": "Say sorry.",
            "trigger_conditions": "",
            "is_active": "on",
        },
    ),
    **_tab("user", "p1", lambda w: {"display_name": "Ada", "canonical_id": "telegram:1001"}),
    "memories:entry-create": BrowserCase(
        path=_none,
        levels={"get": "edit", "post": "edit"},
        data={
            "post": lambda w: {
                "agent": A1_SLUG,
                "memory_user": str(w.p1.pk),
                "content": "Ada keeps bees on her roof.",
                "evidence": "",
                "source": "agent_direct",
            }
        },
    ),
    "memories:user-merge": BrowserCase(
        path=_pk("p1"), levels={"post": "edit"}, data={"post": lambda w: {"target": str(w.p2.pk)}}
    ),
    # The person page's erasure: GET is the preview of what it deletes, POST erases.
    "memories:user-erase": BrowserCase(path=_pk("p2"), levels={"get": "admin", "post": "admin"}),
    # The person page's legal holds: releases the person's own hold (none here: a no-op).
    "memories:user-hold-release": BrowserCase(
        path=_pk("p1"), levels={"post": "admin"}, data={"post": lambda w: {"placed_on": ""}}
    ),
    "memories:members": BrowserCase(path=_none, levels={"get": "admin"}),
    "memories:member-add": BrowserCase(
        path=_none,
        levels={"post": "admin"},
        data={"post": lambda w: {"username": "newbie", "role": "viewer", "password": "long-password-123"}},
    ),
    "memories:member-role": BrowserCase(
        path=lambda w: {"membership_id": w.memberships["editor"].pk},
        levels={"post": "admin"},
        data={"post": lambda w: {"role": "admin"}},
    ),
    "memories:member-remove": BrowserCase(
        path=lambda w: {"membership_id": w.memberships["viewer"].pk}, levels={"post": "admin"}
    ),
    "memories:api-keys": BrowserCase(path=_none, levels={"get": "admin"}),
    "memories:api-key-create": BrowserCase(
        path=_none, levels={"post": "admin"}, data={"post": lambda w: {"name": "ci"}}
    ),
    "memories:api-key-revoke": BrowserCase(
        path=lambda w: {"api_key_id": w.spare_key.pk}, levels={"post": "admin"}
    ),
    "memories:reflection": BrowserCase(path=_none, levels={"get": "read"}),
    "memories:reflection-start": BrowserCase(
        path=_none, levels={"post": "edit"}, data={"post": lambda w: {"agent": A1_SLUG}}
    ),
    "memories:webhooks": BrowserCase(path=_none, levels={"get": "admin"}),
    # The review queue: the seeded entry is approved, so deciding or editing it changes nothing.
    "memories:review": BrowserCase(path=_none, levels={"get": "read"}),
    "memories:review-decide": BrowserCase(
        path=_none,
        levels={"post": "edit"},
        data={"post": lambda w: {"items": f"entry:{w.entry.pk}", "action": "approve"}},
    ),
    "memories:review-edit": BrowserCase(
        path=lambda w: {"tier": "entry", "pk": w.entry.pk},
        levels={"get": "edit", "post": "edit"},
        data={"post": lambda w: {"content": "Ada lives in Lisbon."}},
    ),
    "memories:evidence": BrowserCase(
        path=lambda w: {"tier": "entry", "pk": w.entry.pk}, levels={"get": "read"}
    ),
    "memories:thread-derived": BrowserCase(path=_pk("thread"), levels={"get": "edit"}),
    "memories:thread-derived-delete": BrowserCase(
        path=_pk("thread"), levels={"post": "edit"}, data={"post": lambda w: {"message": str(w.m_user.pk)}}
    ),
    "memories:retention": BrowserCase(path=_none, levels={"get": "admin"}),
    "memories:retention-rule-save": BrowserCase(
        path=_none,
        levels={"post": "admin"},
        data={"post": lambda w: {"tier": "episodes", "agent": A1_SLUG, "max_age_days": "3650"}},
    ),
    "memories:retention-rule-remove": BrowserCase(
        path=lambda w: {"rule_id": w.retention_rule.pk}, levels={"post": "admin"}
    ),
    "memories:retention-run": BrowserCase(path=_none, levels={"post": "admin"}),
    "memories:legal-hold-place": BrowserCase(
        path=_none,
        levels={"post": "admin"},
        data={"post": lambda w: {"person": str(w.p2.pk), "reason": "Case 114"}},
    ),
    "memories:legal-hold-release": BrowserCase(
        path=lambda w: {"memory_user_id": w.p2.pk}, levels={"post": "admin"}
    ),
    "memories:webhook-create": BrowserCase(
        path=_none,
        levels={"post": "admin"},
        data={"post": lambda w: {"url": "https://example.com/h3", "events": ["fact.created"]}},
    ),
    "memories:webhook": BrowserCase(path=_webhook, levels={"get": "admin"}),
    "memories:webhook-toggle": BrowserCase(path=_webhook, levels={"post": "admin"}),
    "memories:webhook-ping": BrowserCase(path=_webhook, levels={"post": "admin"}),
    "memories:webhook-rotate": BrowserCase(path=_webhook, levels={"post": "admin"}),
    "memories:webhook-delete": BrowserCase(path=_webhook, levels={"post": "admin"}),
}
# The users tab's batch delete is named after the tab, not the item.
BROWSER_CASES["memories:users-delete"] = BrowserCase(
    path=_none, levels={"post": "admin"}, data={"post": lambda w: {"ids": [str(w.p2.pk)], "confirmed": "on"}}
)


# Export and import (portability/): a JSON object body is an export's header alone, an empty
# export; the job is made on first use (no tier row, so no snapshot sees it).
def _import_header(w):
    return {
        "format": "memory-export",
        "version": 1,
        "embedding_model": "all-MiniLM-L6-v2",
        "dimensions": 384,
        "scope": {"kind": "workspace", "history": False, "vectors": False},
        "exported_at": "2026-01-01T00:00:00+00:00",
        "source": "seed-export",
    }


def _import_job(w):
    from portability.models import ImportJob

    job, _ = ImportJob.objects.get_or_create(
        workspace=w.w1, file_name="seed.jsonl", defaults={"status": "done", "report": {"created": {}}}
    )
    return {"job_id": job.pk}


API_CASES["api:portability:export"] = ApiCase(
    path=_none, query={"get": lambda w: {"history": "true", "vectors": "true"}}
)
API_CASES["api:portability:import"] = ApiCase(
    path=_none,
    bodies={"post": _import_header},
    agent_field=None,
    workspace_level=("post",),
    free_json=("scope",),
)
API_CASES["api:portability:import-detail"] = ApiCase(path=_import_job)
BROWSER_CASES["memories:portability"] = BrowserCase(path=_none, levels={"get": "admin"})
BROWSER_CASES["memories:portability-export"] = BrowserCase(path=_none, levels={"get": "admin"})
# Form data only (the matrix sends no files): the form is re-rendered with its error.
BROWSER_CASES["memories:portability-import"] = BrowserCase(
    path=_none, levels={"post": "admin"}, data={"post": lambda w: {"dry_run": "on"}}, form_incomplete=True
)
BROWSER_CASES["memories:portability-job"] = BrowserCase(path=_import_job, levels={"get": "admin"})


# ---------------------------------------------------------------------------------------------
# The URL configuration, walked


@dataclass(frozen=True)
class Route:
    route: str  # "api/v1/threads/<uuid:thread_id>/"
    name: str  # "api:threads:detail"
    callback: Callable
    methods: tuple  # lower-case HTTP methods the view answers

    @property
    def view_class(self):
        return getattr(self.callback, "view_class", None) or getattr(self.callback, "cls", None)

    @property
    def read_only_safe(self) -> bool:
        return bool(getattr(self.view_class, "read_only_safe", False))


def _walk(patterns, prefix="", namespace=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            ns = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern), ns)
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), f"{namespace}{pattern.name}", pattern.callback


def _restricted_methods(callback) -> tuple | None:
    """The methods `require_http_methods` (require_POST, ...) lets through, or None when the
    function view does not restrict them."""
    func = callback
    while func is not None:
        for cell in func.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if isinstance(value, list) and value and all(isinstance(v, str) and v.isupper() for v in value):
                return tuple(sorted(v.lower() for v in value))
        func = getattr(func, "__wrapped__", None)
    return None


def routes(prefixes=("api/v1/", "memories/")) -> list[Route]:
    found = []
    for route, name, callback in _walk(get_resolver().url_patterns):
        if not route.startswith(prefixes):
            continue
        view_class = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
        if view_class is not None:
            methods = tuple(m for m in ("get", "post", "put", "patch", "delete") if hasattr(view_class, m))
        else:
            restricted = _restricted_methods(callback)
            declared = tuple(BROWSER_CASES[name].levels) if name in BROWSER_CASES else ("get",)
            methods = restricted or declared
        found.append(Route(route=route, name=name, callback=callback, methods=methods))
    return found


def json_bytes(value) -> bytes:
    return json.dumps(value).encode()


def random_twin(text: str, originals) -> tuple[str, dict]:
    """`text` with every original id replaced by a fresh random one; returns the mapping back."""
    back = {}
    for original in sorted(originals, key=len, reverse=True):
        if original and original in text:
            fake = str(uuid.uuid4()) if _is_uuid(original) else f"x{uuid.uuid4().hex[: len(original) - 1]}"
            text = text.replace(original, fake)
            back[fake] = original
    return text, back


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Requests


class _Rollback(Exception):
    pass


@contextmanager
def quiet_request_log():
    """Expected 4xx/5xx responses would otherwise log a line each."""
    logger = logging.getLogger("django.request")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def isolated(fn):
    """Run `fn` in a savepoint that is always rolled back; return its result."""
    box = {}
    try:
        with transaction.atomic():
            box["value"] = fn()
            raise _Rollback
    except _Rollback:
        pass
    return box["value"]


def api_request(method, path, *, body=None, key=None, query=None):
    client = Client(raise_request_exception=False)
    if query:
        path = f"{path}?{urlencode(query)}"
    extra = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    data = b"" if body is None else (body if isinstance(body, bytes) else json_bytes(body))
    return client.generic(method.upper(), path, data=data, content_type="application/json", **extra)


def response_json(response):
    try:
        return json.loads(response.content)
    except ValueError:
        return None


def error_shape_problem(response) -> str | None:
    body = response_json(response)
    error = body.get("error") if isinstance(body, dict) else None
    if (
        not isinstance(error, dict)
        or not isinstance(error.get("code"), str)
        or not isinstance(error.get("message"), str)
    ):
        return f"{response.status_code} body is not the documented error shape: {response.content[:300]!r}"
    return None

"""Shared test base: personas owner, teammate and outsider, with API keys for each.

Every tier's tests subclass `MemoryTestCase` so isolation is checked the same way everywhere.
"""

import socket
import threading
import time
from contextlib import contextmanager
from unittest import mock

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import TestCase, override_settings
from rest_framework.test import APIClient

from core import ranking
from core.models import Membership
from core.services import agent_get_or_create, api_key_create, operator_create, workspace_create

PASSWORD = "correct-horse-battery-staple"


def database_url() -> str:
    """The test database's URL, for the processes a test starts (a worker, a server)."""
    params = connection.settings_dict
    return f"postgresql://{params['USER']}@/{params['NAME']}?host={params['HOST']}"


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def statements_sent(containing: str):
    """The (sql, params) of every statement sent on the default connection while the block
    runs whose text contains `containing`: the statement a search built, to EXPLAIN it."""
    sent: list[tuple[str, object]] = []

    def capture(execute, sql, params, many, context):
        if containing in sql:
            sent.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        yield sent


def thread_started(target, errors: list) -> threading.Thread:
    """`target()` running on a thread of its own, for race tests (TransactionTestCase): it
    opens its own database connection and closes it at the end, and whatever it raises is
    appended to `errors`."""

    def run():
        try:
            target()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def until_a_backend_waits(timeout: float = 30) -> None:
    """Return once a backend of the test database waits on a lock (or after `timeout`): a race
    test's cue that the other thread has reached the lock it is meant to wait on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.02)


def plan_nodes(sql: str, params) -> list[dict]:
    """Every node of the plan PostgreSQL ran `sql` with (`EXPLAIN (ANALYZE, FORMAT JSON)`), the
    top one first: a test reads from them what a statement read, whatever the plan's shape."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        return _plan_nodes(cursor.fetchone()[0][0]["Plan"])


def bitmap_only_plan(sql: str, params) -> list[dict]:
    """Every node of the plan PostgreSQL would choose for `sql` with only bitmap scans left
    (sequential and plain index scans off until the test's transaction ends): whether an index
    can answer a condition, whatever the planner would pick on a test's few rows."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        return _plan_nodes(cursor.fetchone()[0][0]["Plan"])


def _plan_nodes(plan: dict) -> list[dict]:
    nodes, pending = [], [plan]
    while pending:
        node = pending.pop(0)
        nodes.append(node)
        pending.extend(node.get("Plans", ()))
    return nodes


def hnsw_above(scope_size: int):
    """Settings under which a scope of more than `scope_size` vectors takes the HNSW plan
    whatever its table's size (core.ranking.exact_scope_max without its cost model)."""
    return override_settings(
        EPISODIC_EXACT_SCOPE_MAX=scope_size, EPISODIC_HNSW_FIXED_COST_ROWS=0, EPISODIC_HNSW_RATIO_COST_ROWS=0
    )


def cache_down():
    """Settings under which every call to the Django cache fails, as while Valkey restarts:
    nothing listens at its address."""
    return override_settings(
        CACHES={
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": "unix:///nonexistent/valkey.sock",
            }
        }
    )


def workspace_api_client(*, name: str = "Acme", agent_slug: str = "assistant"):
    """(workspace, agent, client) for tests outside MemoryTestCase (a TransactionTestCase that
    needs real commits): a new workspace with an agent, and an API client sending a
    workspace-wide key that answers errors instead of raising them."""
    workspace = workspace_create(name=name)
    agent = agent_get_or_create(workspace=workspace, slug=agent_slug)
    _, key = api_key_create(workspace=workspace)
    client = APIClient(SERVER_NAME="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    client.raise_request_exception = False
    return workspace, agent, client


def celery_pools_reset() -> None:
    """Forget the app's broker connections and producers: they are cached with the broker they
    were made for (and in kombu's global registry, keyed by URL), so a test that points the app
    at another broker starts from none, and a later eager task does not take a closed one."""
    from celery import current_app
    from kombu import pools

    app = current_app._get_current_object()
    if app._pool is not None:
        app._pool.force_close_all()
    app._pool = None
    app.amqp._producer_pool = None
    pools.reset()


@contextmanager
def celery_broker(url: str):
    """Tasks are sent to the broker at `url` (not run inline) while the block runs."""
    from celery import current_app

    app = current_app._get_current_object()
    previous = {key: app.conf[key] for key in ("broker_url", "task_always_eager")}
    celery_pools_reset()
    app.conf.update(broker_url=url, task_always_eager=False)
    try:
        yield app
    finally:
        celery_pools_reset()
        app.conf.update(**previous)


def migrate_to(targets=None) -> None:
    """Migrate the test database to `targets` ([(app, migration)]), or to the latest state;
    migration tests go back to a release's state, store rows there, and come forward."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets or executor.loader.graph.leaf_nodes())


@contextmanager
def fused_candidates():
    """{id: Candidate} of every candidate `core.ranking.fuse` ranks while the block runs: what
    a search read of each row (speaker, neighbours, channel scores)."""
    captured: dict = {}
    fuse = ranking.fuse

    def capture(candidates, **kwargs):
        captured.update({c.id: c for c in candidates})
        return fuse(candidates, **kwargs)

    with mock.patch.object(ranking, "fuse", capture):
        yield captured


class MemoryTestCase(TestCase):
    """Personas:

    - owner: admin of `workspace`; `owner_key` is a workspace-wide writable key.
    - teammate: editor of `workspace`; `agent_key` is bound to `agent`.
    - viewer: viewer of `workspace`; `read_only_key` is a read-only workspace key.
    - outsider: admin of `other_workspace`; `outsider_key` is their workspace key.
    """

    @classmethod
    def setUpTestData(cls):
        cls.workspace = workspace_create(name="Acme")
        cls.other_workspace = workspace_create(name="Globex")
        cls.agent = agent_get_or_create(workspace=cls.workspace, slug="assistant")
        cls.other_agent = agent_get_or_create(workspace=cls.workspace, slug="researcher")
        cls.outsider_agent = agent_get_or_create(workspace=cls.other_workspace, slug="assistant")
        cls.owner = operator_create(
            workspace=cls.workspace, username="owner", password=PASSWORD, role=Membership.Role.ADMIN
        ).user
        cls.teammate = operator_create(
            workspace=cls.workspace, username="teammate", password=PASSWORD, role=Membership.Role.EDITOR
        ).user
        cls.viewer = operator_create(
            workspace=cls.workspace, username="viewer", password=PASSWORD, role=Membership.Role.VIEWER
        ).user
        cls.outsider = operator_create(
            workspace=cls.other_workspace, username="outsider", password=PASSWORD, role=Membership.Role.ADMIN
        ).user
        cls.owner_api_key, cls.owner_key = api_key_create(workspace=cls.workspace, name="owner")
        cls.agent_api_key, cls.agent_key = api_key_create(workspace=cls.workspace, agent=cls.agent)
        cls.read_only_api_key, cls.read_only_key = api_key_create(workspace=cls.workspace, read_only=True)
        cls.outsider_api_key, cls.outsider_key = api_key_create(workspace=cls.other_workspace)

    def api(self, key: str | None = None) -> APIClient:
        """An API client sending `key` (default: the owner's workspace key)."""
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key or self.owner_key}")
        return client

    def login(self, user) -> None:
        self.client.force_login(user)

"""A live server for the client's tests: gunicorn on a free port against the test database.

The server is started once per session; each test creates its own workspace and keys,
committed (`transactional_db`) so the server process sees them.
"""

import itertools

import pytest

from memory_client import AsyncMemoryClient, MemoryClient

_workspace_names = itertools.count(1)


@pytest.fixture(scope="session")
def live_server_url(django_db_setup, django_db_blocker):
    from runtime.testing import live_api_server

    with django_db_blocker.unblock(), live_api_server() as server:
        yield server.url


@pytest.fixture
def workspace_keys(transactional_db):
    """A fresh workspace with a writable key, an agent-bound key and a read-only key."""
    from core.services import agent_get_or_create, api_key_create, workspace_create

    workspace = workspace_create(name=f"client-tests-{next(_workspace_names)}")
    agent = agent_get_or_create(workspace=workspace, slug="assistant")
    _, key = api_key_create(workspace=workspace, name="client tests")
    _, agent_key = api_key_create(workspace=workspace, agent=agent)
    _, read_only_key = api_key_create(workspace=workspace, read_only=True)
    return {
        "workspace": workspace,
        "agent": agent,
        "key": key,
        "agent_key": agent_key,
        "read_only_key": read_only_key,
    }


@pytest.fixture
def client(live_server_url, workspace_keys):
    # Generous: the first request to a fresh server process loads the local embedding model.
    with MemoryClient(live_server_url, workspace_keys["key"], timeout=180) as client:
        yield client


@pytest.fixture
def async_client_factory(live_server_url, workspace_keys):
    def make(key=None):
        return AsyncMemoryClient(live_server_url, key or workspace_keys["key"], timeout=180)

    return make

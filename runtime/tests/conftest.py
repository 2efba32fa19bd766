"""Live processes for the runtime's end-to-end tests (see runtime/testing.py), and the MCP
app in this process."""

import itertools
from types import SimpleNamespace
from unittest import mock

import pytest

_names = itertools.count(1)


@pytest.fixture(scope="session")
def live_api(django_db_setup, django_db_blocker):
    from runtime.testing import live_api_server

    with django_db_blocker.unblock(), live_api_server() as server:
        yield server


@pytest.fixture(scope="session")
def live_mcp(django_db_setup, django_db_blocker):
    from runtime.testing import live_mcp_server

    with django_db_blocker.unblock(), live_mcp_server() as server:
        yield server


@pytest.fixture
def fresh_workspace(transactional_db):
    """A new workspace with a writable workspace key, an agent-bound key and a read-only key."""
    from core.services import agent_get_or_create, api_key_create, workspace_create

    workspace = workspace_create(name=f"runtime-e2e-{next(_names)}")
    agent = agent_get_or_create(workspace=workspace, slug="concierge")
    _, key = api_key_create(workspace=workspace, name="e2e")
    _, agent_key = api_key_create(workspace=workspace, agent=agent)
    _, read_only_key = api_key_create(workspace=workspace, read_only=True)
    other = workspace_create(name=f"runtime-e2e-outsider-{next(_names)}")
    _, outsider_key = api_key_create(workspace=other)
    return {
        "workspace": workspace,
        "agent": agent,
        "key": key,
        "agent_key": agent_key,
        "read_only_key": read_only_key,
        "outsider_key": outsider_key,
    }


@pytest.fixture
def mcp_http():
    """The MCP app in this process, its key check answered without the database; post to it
    with runtime.testing.mcp_http_post."""
    from starlette.testclient import TestClient

    from runtime import mcp

    with (
        mock.patch.object(mcp, "_principal_for_secret", return_value=SimpleNamespace(api_key=None)),
        mock.patch.object(mcp, "api_key_budget_wait", return_value=None),
        TestClient(mcp.mcp_app(), base_url="http://127.0.0.1:8765") as client,
    ):
        yield client

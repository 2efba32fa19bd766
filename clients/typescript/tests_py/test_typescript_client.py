"""The TypeScript client (clients/typescript), driven from the Python suite.

Installs its npm packages (`npm ci`, skipped while node_modules matches package-lock.json),
checks the committed types against the server's current OpenAPI schema, compiles, and runs
its Node test files against a live server started here (gunicorn on the test database).
"""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
STAMP = PACKAGE / "node_modules" / ".package-lock.sha256"

pytestmark = pytest.mark.slow


def _run(command, *, env=None, timeout=600):
    result = subprocess.run(
        command,
        cwd=PACKAGE,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}:\n{output[-6000:]}"
    return output


@pytest.fixture(scope="module")
def node_package():
    """node_modules installed from package-lock.json, and the package compiled into dist/."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are not installed (scripts/test installs them)")
    lock_hash = hashlib.sha256((PACKAGE / "package-lock.json").read_bytes()).hexdigest()
    if not STAMP.exists() or STAMP.read_text().strip() != lock_hash:
        _run(["npm", "ci", "--no-audit", "--no-fund"])
        STAMP.write_text(lock_hash)
    # The library, then the compile-time checks of its public types (test/types.check.ts).
    _run(["npm", "run", "compile"])
    return PACKAGE


def test_generated_types_match_the_server_schema(node_package):
    """openapi.json and src/schema.ts are what `npm run generate` makes from today's API."""
    _run(["node", "scripts/generate.mjs", "--check"], env={"PYTHON": sys.executable})


@pytest.fixture
def live_server_url(django_db_setup, django_db_blocker):
    from runtime.testing import live_api_server

    with django_db_blocker.unblock(), live_api_server() as server:
        yield server.url


@pytest.fixture
def api_key(transactional_db):
    """A writable key of a fresh workspace holding the agent "assistant", committed for the server."""
    from core.services import agent_get_or_create, api_key_create, workspace_create

    workspace = workspace_create(name="typescript-client-tests")
    agent_get_or_create(workspace=workspace, slug="assistant")
    _, key = api_key_create(workspace=workspace, name="typescript client tests")
    return key


def test_node_suite_passes(node_package, live_server_url, api_key):
    """test/*.test.mjs: the agent loop against the live server, error bodies, and retries on
    429/503 with Retry-After against a local scripted server."""
    test_files = sorted(str(path.relative_to(PACKAGE)) for path in (PACKAGE / "test").glob("*.test.mjs"))
    output = _run(
        ["node", "--test", "--test-reporter=tap", *test_files],
        env={"MEMORY_SERVER_URL": live_server_url, "MEMORY_API_KEY": api_key},
    )
    assert "# fail 0" in output and "# skipped 0" in output, output[-3000:]
    assert "ok 1 - identify, context, append, extract, search, recall" in output, output[-3000:]

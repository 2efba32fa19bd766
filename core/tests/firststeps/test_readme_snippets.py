"""The README's "Connect an agent" snippets, run as written against live servers (issue 16).

Each snippet follows a `<!-- readme-snippet: NAME -->` marker in README.md and is read from
there, so what the README shows is what runs. Every one runs with a key made the way
`serve` makes the demo key (a new workspace, no agent), given as `MEMORY_API_KEY`, and with
the documented address replaced by the live server's: Python and LangGraph in a fresh
interpreter, TypeScript type-checked and compiled with the client's own `tsc` against its
built package, then run by Node, and the MCP host configuration used as a host would, by the
official MCP SDK. Each test then checks the rows the snippet left on the server.
"""

import asyncio
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.tests.firststeps.serving import ROOT

pytestmark = pytest.mark.slow

README = ROOT / "README.md"
TYPESCRIPT_PACKAGE = ROOT / "clients" / "typescript"
# The addresses the README documents: `serve`'s defaults (web, and MCP on web + 765).
DOCUMENTED_WEB = "http://127.0.0.1:8000"
DOCUMENTED_MCP = "http://127.0.0.1:8765"
# Every snippet the README must show, with the language of its fenced block.
EXPECTED_SNIPPETS = {"python": "python", "typescript": "ts", "langgraph": "python", "mcp": "json"}
# Each client under clients/ and the snippets that show it; a new client needs its own.
CLIENT_SNIPPETS = {"python": ("python", "langgraph"), "typescript": ("typescript",)}
SNIPPET = re.compile(r"<!-- readme-snippet: ([\w-]+) -->\n```(\w*)[^\n]*\n(.*?)^```$", re.S | re.M)
ENV_VAR = re.compile(r"\$\{(\w+)\}")


def readme_snippets() -> dict[str, tuple[str, str]]:
    """Marker name -> (language, code) for every marked block of README.md."""
    found: dict[str, tuple[str, str]] = {}
    for name, language, code in SNIPPET.findall(README.read_text()):
        assert name not in found, f"README.md marks two snippets {name!r}"
        found[name] = (language, code)
    return found


def snippet(name: str, *, documented_url: str, live_url: str) -> str:
    """The snippet's code, talking to `live_url` where the README says `documented_url`."""
    language, code = readme_snippets()[name]
    assert language == EXPECTED_SNIPPETS[name], (name, language)
    assert documented_url in code, f"the {name} snippet does not use the documented {documented_url}"
    return code.replace(documented_url, live_url)


def _run(command: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}:\n{output[-6000:]}"
    return result.stdout


# -- the README shows one snippet per client ------------------------------------------------


def test_every_client_has_its_snippet():
    snippets = readme_snippets()
    missing = sorted(set(EXPECTED_SNIPPETS) - set(snippets))
    assert not missing, f"README.md lacks the marked snippets {missing} (`<!-- readme-snippet: NAME -->`)"
    untested = sorted(set(snippets) - set(EXPECTED_SNIPPETS))
    assert not untested, f"README.md marks {untested}, which this module does not run: add a test"
    for name, (language, code) in snippets.items():
        assert language == EXPECTED_SNIPPETS[name], f"the {name} snippet is ```{language}"
        assert "MEMORY_API_KEY" in code, f"the {name} snippet does not read the key from MEMORY_API_KEY"
        assert "mem_" not in code, f"the {name} snippet holds a key; it reads MEMORY_API_KEY"

    clients = sorted(path.name for path in (ROOT / "clients").iterdir() if path.is_dir())
    assert sorted(CLIENT_SNIPPETS) == clients, (
        f"clients/ holds {clients}: give each a README snippet and a test here (CLIENT_SNIPPETS)"
    )
    # The MCP server and the LangGraph integrations are clients' ways in, too.
    assert (ROOT / "runtime" / "mcp.py").exists() and "mcp" in snippets
    for module in ("langgraph.py", "store.py"):
        assert (ROOT / "clients" / "python" / "memory_client" / module).exists()


def test_the_snippets_come_first_after_the_walkthrough():
    """The section sits right after the first screen's walkthrough, before the reference."""
    text = README.read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "Connect an agent", headings[:3]
    section = text.split("\n## Connect an agent\n", 1)[1].split("\n## ", 1)[0]
    assert {name for name, _, _ in SNIPPET.findall(section)} == set(EXPECTED_SNIPPETS)


# -- live servers and a demo key --------------------------------------------------------------


@pytest.fixture(scope="module")
def live_api(django_db_setup, django_db_blocker):
    from runtime.testing import live_api_server

    with django_db_blocker.unblock(), live_api_server() as server:
        yield server


@pytest.fixture(scope="module")
def live_mcp(django_db_setup, django_db_blocker):
    from runtime.testing import live_mcp_server

    with django_db_blocker.unblock(), live_mcp_server() as server:
        yield server


@pytest.fixture
def demo(transactional_db, request):
    """A workspace and key as `serve` makes the demo's: no agent, a writable workspace key."""
    from core.services import api_key_create, workspace_create

    workspace = workspace_create(name=f"readme-{request.node.name}")
    _, key = api_key_create(workspace=workspace, name="demo")
    return {"workspace": workspace, "env": {"MEMORY_API_KEY": key}}


def assert_turn_stored(workspace, code: str, output: str) -> None:
    """A person was identified and a fact about them remembered, a thread of the snippet's
    agent holds its user message, and the system prompt it printed shows the fact."""
    from facts.models import Fact
    from identities.models import ChannelIdentity
    from threads.models import Message

    identity = ChannelIdentity.objects.get(workspace=workspace)
    assert f'"{identity.channel}"' in code and f'"{identity.external_id}"' in code
    fact = Fact.objects.get(workspace=workspace, memory_user=identity.memory_user_id)
    assert f'"{fact.key}"' in code and f'"{fact.value}"' in code, (fact.key, fact.value)
    assert "<user-profile>" in output and f"{fact.key}: {fact.value}" in output, output
    message = Message.objects.select_related("thread__agent").get(workspace=workspace)
    assert message.role == "user" and f'"{message.content}"' in code, message.content
    assert message.thread.memory_user_id == identity.memory_user_id
    assert f'"{message.thread.agent.slug}"' in code


# -- each snippet, run --------------------------------------------------------------------------


def test_python_snippet(live_api, demo, tmp_path):
    code = snippet("python", documented_url=DOCUMENTED_WEB, live_url=live_api.url)
    output = _run([sys.executable, "-c", code], cwd=tmp_path, env=demo["env"])
    assert_turn_stored(demo["workspace"], code, output)


def test_langgraph_snippet(live_api, demo, tmp_path):
    from checkpoints.models import Checkpoint
    from store.models import StoreItem

    code = snippet("langgraph", documented_url=DOCUMENTED_WEB, live_url=live_api.url)
    output = _run([sys.executable, "-c", code], cwd=tmp_path, env=demo["env"])

    item = StoreItem.objects.select_related("agent").get(workspace=demo["workspace"])
    assert f'"{item.agent.slug}"' in code and f'"{item.key}"' in code
    # The graph answered from the store's search: the item's text is what it printed.
    assert item.value["text"] in output, output
    checkpoints = Checkpoint.objects.filter(workspace=demo["workspace"]).select_related("thread")
    assert checkpoints.exists()
    assert {f'"{checkpoint.thread.client_key}"' in code for checkpoint in checkpoints} == {True}


@pytest.fixture(scope="module")
def typescript_client():
    """The client built into dist/ from the installed lock, as clients/typescript/tests_py does."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are not installed (scripts/test installs them)")
    stamp = TYPESCRIPT_PACKAGE / "node_modules" / ".package-lock.sha256"
    lock_hash = hashlib.sha256((TYPESCRIPT_PACKAGE / "package-lock.json").read_bytes()).hexdigest()
    if not stamp.exists() or stamp.read_text().strip() != lock_hash:
        _run(["npm", "ci", "--no-audit", "--no-fund"], cwd=TYPESCRIPT_PACKAGE)
        stamp.write_text(lock_hash)
    _run(["node_modules/.bin/tsc", "-p", "tsconfig.json"], cwd=TYPESCRIPT_PACKAGE)
    return TYPESCRIPT_PACKAGE


def test_typescript_snippet(typescript_client, live_api, demo, tmp_path):
    """Type-checked against the client's published types (strict), then run by Node."""
    code = snippet("typescript", documented_url=DOCUMENTED_WEB, live_url=live_api.url)
    package = json.loads((typescript_client / "package.json").read_text())
    # An app that installed the package: node_modules/<name> is the package directory.
    installed = tmp_path / "node_modules" / package["name"]
    installed.parent.mkdir(parents=True)
    installed.symlink_to(typescript_client, target_is_directory=True)
    (tmp_path / "package.json").write_text(json.dumps({"type": "module", "private": True}))
    (tmp_path / "snippet.ts").write_text(code)
    # Node's `process`, declared here: the package does not depend on @types/node.
    node_globals = "declare const process: { env: Record<string, string | undefined> };\n"
    (tmp_path / "node.d.ts").write_text(node_globals)
    tsconfig = {
        "compilerOptions": {
            "target": "ES2022",
            "lib": ["ES2022", "DOM"],
            "types": [],
            "module": "NodeNext",
            "moduleResolution": "NodeNext",
            "strict": True,
            "skipLibCheck": True,
            "outDir": "out",
        },
        "files": ["snippet.ts", "node.d.ts"],
    }
    (tmp_path / "tsconfig.json").write_text(json.dumps(tsconfig))
    _run([str(typescript_client / "node_modules" / ".bin" / "tsc"), "-p", "tsconfig.json"], cwd=tmp_path)
    output = _run(["node", "out/snippet.js"], cwd=tmp_path, env=demo["env"])
    assert_turn_stored(demo["workspace"], code, output)


def test_mcp_snippet(live_mcp, demo):
    """The host configuration, used as a host uses it: its URL and headers, the key expanded."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from facts.models import Fact

    config = json.loads(snippet("mcp", documented_url=DOCUMENTED_MCP, live_url=live_mcp.url))
    [(name, server)] = config["mcpServers"].items()
    assert server["type"] == "http", server
    headers = {
        header: ENV_VAR.sub(lambda match: demo["env"][match.group(1)], value)
        for header, value in server["headers"].items()
    }
    # The tools the paragraph before the block names (`lower_case` words) are the server's.
    paragraph = README.read_text().split("<!-- readme-snippet: mcp -->", 1)[0].rstrip().rsplit("\n\n", 1)[-1]
    documented_tools = set(re.findall(r"`([a-z_]+)`", paragraph))

    async def scenario():
        # Generous: the first call in a fresh process loads the local embedding model.
        http = httpx2.AsyncClient(headers=headers, timeout=180)
        async with Client(streamable_http_client(server["url"], http_client=http)) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            person = await client.call_tool("identify_user", {"channel": "telegram", "external_id": "12345"})
            user = person.structured_content["memory_user"]["id"]
            stored = await client.call_tool(
                "remember", {"key": "favourite_tea", "value": "sencha", "scope": "user", "memory_user": user}
            )
            found = await client.call_tool("recall", {"key": "favourite_tea", "memory_user": user})
            return tools, stored, found

    tools, stored, found = asyncio.run(scenario())
    assert documented_tools and documented_tools <= tools, (documented_tools, tools)
    assert not stored.is_error and stored.structured_content["outcome"] == "created"
    assert [fact["value"] for fact in found.structured_content["facts"]] == ["sencha"]
    fact = Fact.objects.get(workspace=demo["workspace"], key="favourite_tea")
    assert fact.value == "sencha" and fact.memory_user.canonical_id == "telegram:12345"

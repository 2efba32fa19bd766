"""The whole agent loop against live server processes, in a fresh workspace.

Through the REST API (Python client + LangGraph saver, one process per step) and through
the MCP server (official SDK client): identify the person, assemble context, append the
turn, extract episodic entries, recall them in the next turn, checkpoint and resume.
The extraction model is a local HTTP server speaking the OpenAI protocol.
"""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from core.services import provider_credential_set
from core.testing_openai import OpenAITestServer
from memory_client import MemoryClient

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SEAT_QUOTE = "I always want a window seat when I fly"


def extractor(body: dict) -> str:
    """The model's side of extraction: one entry quoting the user, one profile fact."""
    conversation = body["messages"][-1]["content"]
    if "<conversation>" not in conversation:
        return "A short summary."
    entries, facts = [], []
    if SEAT_QUOTE in conversation:
        entries.append(
            {
                "content": "Wants a window seat on every flight.",
                "source": "user_assertion",
                "evidence": SEAT_QUOTE,
            }
        )
        facts.append({"key": "home_airport", "value": "LIS", "evidence": "I fly from Lisbon"})
    return json.dumps({"entries": entries, "facts": facts})


@pytest.fixture
def model_server(fresh_workspace):
    with OpenAITestServer() as server:
        server.chat_handler = extractor
        provider_credential_set(
            workspace=fresh_workspace["workspace"],
            purpose="chat",
            base_url=server.url,
            model="test-chat",
            api_key="k",
        )
        yield server


def agent_step(*args) -> dict:
    done = subprocess.run(
        # As a module from the repository root: the test directory's `selectors` package would
        # shadow the standard library's if the script's own directory came first on sys.path.
        [sys.executable, "-m", "runtime.tests.agent_graph", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_agent_loop_through_the_rest_api(live_api, fresh_workspace, model_server):
    key = fresh_workspace["key"]
    first_message = f"{SEAT_QUOTE}. I fly from Lisbon. Please book me to Porto on Friday."

    # Turn 1, process A: identify + context + append, then stop for human approval.
    started = agent_step("start", live_api.url, key, "booking-1", "555", first_message)
    assert started["next"] == ["approve"]
    assert started["interrupt"]["reply"] == "I will book any seat for you."

    # Process B resumes from the checkpoint in the server, replies and extracts.
    resumed = agent_step("resume", live_api.url, key, "booking-1", "yes")
    assert resumed["stored"] == ["Wants a window seat on every flight."]

    with MemoryClient(live_api.url, key, timeout=180) as client:
        user = client.memory_users.identify(channel="telegram", external_id="555")["memory_user"]
        messages = client.threads.messages(resumed["thread"])["results"]
        assert [m["role"] for m in messages] == ["user", "assistant"]
        recalled = client.episodic_entries.search(
            agent="concierge", memory_user=user["id"], query="seat on flights"
        )
        assert recalled["results"][0]["entry"]["content"] == "Wants a window seat on every flight."
        lookup = client.facts.lookup("home_airport", memory_user=user["id"], agent="concierge")
        assert lookup["value"] == "LIS"

    # Turn 2, a new graph thread: the <memory> block now carries the entry, so the reply uses it.
    second = agent_step(
        "start", live_api.url, key, "booking-2", "555", "Book me a flight to Madrid next week."
    )
    assert second["interrupt"]["reply"] == "I will book a window seat for you."
    done = agent_step("resume", live_api.url, key, "booking-2", "yes")
    assert done["thread"] == resumed["thread"]

    with MemoryClient(live_api.url, key, timeout=180) as client:
        context = client.context.assemble(
            agent="concierge",
            channel="telegram",
            external_id="555",
            message="and the hotel?",
            token_budget=2000,
        )
    assert "window seat" in context["memory"]["text"]
    assert "home_airport: LIS" in context["user_profile"]["text"]
    assert [m["role"] for m in context["history"]["messages"]] == ["user", "assistant", "user", "assistant"]
    assert context["tokens"] <= 2000


def test_agent_loop_through_mcp(live_mcp, fresh_workspace, model_server):
    key = fresh_workspace["agent_key"]

    async def scenario():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=180)
        async with Client(streamable_http_client(live_mcp.url + "/mcp", http_client=http)) as mcp:

            async def call(name, **arguments):
                result = await mcp.call_tool(name, arguments)
                assert not result.is_error, result.content
                return result.structured_content

            person = await call("identify_user", channel="whatsapp", external_id="+351900")
            user_id = person["memory_user"]["id"]
            turn = await call(
                "context",
                memory_user=user_id,
                message=f"{SEAT_QUOTE}. I fly from Lisbon.",
                append=True,
                idempotency_key="t1",
            )
            assert turn["memory"]["text"] == ""
            thread = turn["thread"]
            recorded = await call(
                "record_turn", thread=thread, assistant_message="Noted, window seats it is."
            )
            assert [e["content"] for e in recorded["extraction"]["stored"]] == [
                "Wants a window seat on every flight."
            ]

            nxt = await call("context", memory_user=user_id, message="Book a flight to Rome", append=True)
            assert "Wants a window seat on every flight." in nxt["memory"]["text"]
            assert "home_airport: LIS" in nxt["user_profile"]["text"]
            found = await call("recall_memory", memory_user=user_id, query="window seat")
            assert found["results"][0]["content"] == "Wants a window seat on every flight."
            fact = await call("recall", key="home airport", memory_user=user_id)
            assert fact["facts"][0]["value"] == "LIS"
            window = await call("history", thread=thread)
            return window

    window = asyncio.run(scenario())
    assert [m["content"] for m in window["messages"]][-1] == "Book a flight to Rome"
    assert len(window["message_ids"]) == 3

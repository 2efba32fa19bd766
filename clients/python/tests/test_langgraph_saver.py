"""MemoryServerSaver against a live server: the checkpoint contract and a real interrupted graph."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from memory_client.langgraph import MemoryServerSaver

pytestmark = pytest.mark.slow

HITL = Path(__file__).with_name("hitl_graph.py")


def _load_hitl_graph():
    import importlib.util

    spec = importlib.util.spec_from_file_location("hitl_graph", HITL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_step(*args) -> dict:
    done = subprocess.run(
        [sys.executable, str(HITL), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_graph_interrupts_and_resumes_in_a_later_process(live_server_url, workspace_keys):
    """Process 1 runs until the human-approval interrupt; process 2 resumes from the server."""
    key = workspace_keys["key"]
    started = run_step("start", live_server_url, key, "ticket-42")
    assert started["next"] == ["ask_human"]
    assert started["interrupts"][0]["question"] == "Approve this refund?"

    finished = run_step("resume", live_server_url, key, "ticket-42", "yes")
    assert finished == {"result": "Refund 40 EUR for: broken kettle -> sent", "next": []}

    # The server holds the whole run under one thread named by the LangGraph thread id.
    from checkpoints.models import Checkpoint
    from threads.models import Thread

    thread = Thread.objects.get(workspace=workspace_keys["workspace"], client_key="ticket-42")
    assert thread.agent.slug == "assistant"
    assert Checkpoint.objects.filter(thread=thread).count() >= 4


def test_async_graph_resumes_with_a_fresh_saver(live_server_url, workspace_keys):
    from langgraph.types import Command

    hitl_graph = _load_hitl_graph()

    async def scenario():
        config = {"configurable": {"thread_id": "async-ticket"}}
        first = MemoryServerSaver(live_server_url, workspace_keys["key"], agent="assistant")
        out = await hitl_graph.build(first).ainvoke({"request": "late parcel"}, config)
        assert out["__interrupt__"][0].value["question"] == "Approve this refund?"
        await first.aclose()
        second = MemoryServerSaver(live_server_url, workspace_keys["key"], agent="assistant")
        graph = hitl_graph.build(second)
        out = await graph.ainvoke(Command(resume="no"), config)
        assert out["result"] == "Refund 40 EUR for: late parcel -> cancelled"
        history = [state async for state in graph.aget_state_history(config)]
        await second.aclose()
        return history

    history = asyncio.run(scenario())
    assert len(history) >= 4
    assert history[0].next == ()


def _checkpoint(saver, config, step):
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"step": step}
    return saver.put(config, checkpoint, {"source": "loop", "step": step, "writer": f"w{step % 2}"}, {})


def test_put_get_list_writes_and_delete(live_server_url, workspace_keys):
    saver = MemoryServerSaver(live_server_url, workspace_keys["key"], agent="assistant")
    root = {"configurable": {"thread_id": "contract", "checkpoint_ns": ""}}
    assert saver.get_tuple(root) is None

    configs = []
    config = root
    for step in range(5):
        config = _checkpoint(saver, config, step)
        configs.append(config)

    latest = saver.get_tuple(root)
    assert latest.checkpoint["channel_values"] == {"step": 4}
    assert (
        latest.parent_config["configurable"]["checkpoint_id"] == configs[3]["configurable"]["checkpoint_id"]
    )
    assert latest.metadata["step"] == 4

    exact = saver.get_tuple(configs[1])
    assert exact.checkpoint["channel_values"] == {"step": 1}

    steps = [t.metadata["step"] for t in saver.list(root)]
    assert steps == [4, 3, 2, 1, 0]
    assert [t.metadata["step"] for t in saver.list(root, limit=2)] == [4, 3]
    assert [t.metadata["step"] for t in saver.list(root, before=configs[2])] == [1, 0]
    assert [t.metadata["step"] for t in saver.list(root, filter={"writer": "w1"})] == [3, 1]
    # A config naming a checkpoint lists that one, whatever the limit (it had been looked for
    # among the newest `limit` only), and a limit of 0 lists none, as LangGraph's SQL savers do.
    assert [t.metadata["step"] for t in saver.list(configs[1], limit=1)] == [1]
    assert [t.metadata["step"] for t in saver.list(configs[1])] == [1]
    assert list(saver.list(root, limit=0)) == []

    saver.put_writes(configs[4], [("messages", {"text": "hi"}), ("__error__", "boom")], task_id="task-1")
    # A retried put_writes stores nothing twice.
    saver.put_writes(configs[4], [("messages", {"text": "hi"}), ("__error__", "boom")], task_id="task-1")
    pending = saver.get_tuple(configs[4]).pending_writes
    assert sorted(pending, key=lambda w: w[1]) == [
        ("task-1", "__error__", "boom"),
        ("task-1", "messages", {"text": "hi"}),
    ]

    saver.delete_thread("contract")
    assert saver.get_tuple(root) is None
    saver.close()


def test_namespaces_are_separate(live_server_url, workspace_keys):
    saver = MemoryServerSaver(live_server_url, workspace_keys["key"], agent="assistant")
    parent = _checkpoint(saver, {"configurable": {"thread_id": "ns", "checkpoint_ns": ""}}, 1)
    child = _checkpoint(saver, {"configurable": {"thread_id": "ns", "checkpoint_ns": "sub:1"}}, 2)
    assert saver.get_tuple({"configurable": {"thread_id": "ns", "checkpoint_ns": ""}}).metadata["step"] == 1
    assert (
        saver.get_tuple({"configurable": {"thread_id": "ns", "checkpoint_ns": "sub:1"}}).metadata["step"] == 2
    )
    assert parent != child
    saver.close()


def test_agent_bound_key_and_outsider(live_server_url, workspace_keys):
    """An agent-bound key needs no agent; another workspace cannot see the checkpoints."""
    bound = MemoryServerSaver(live_server_url, workspace_keys["agent_key"])
    _checkpoint(bound, {"configurable": {"thread_id": "bound", "checkpoint_ns": ""}}, 7)
    same = MemoryServerSaver(live_server_url, workspace_keys["key"], agent="assistant")
    assert same.get_tuple({"configurable": {"thread_id": "bound"}}).metadata["step"] == 7

    from core.services import api_key_create, workspace_create

    _, outsider_key = api_key_create(workspace=workspace_create(name="saver-outsider"))
    outsider = MemoryServerSaver(live_server_url, outsider_key, agent="assistant")
    assert outsider.get_tuple({"configurable": {"thread_id": "bound"}}) is None
    for saver in (bound, same, outsider):
        saver.close()

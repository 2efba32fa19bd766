"""A LangGraph agent that keeps long-term memory in the server's store: what it learns in
one thread it recalls, by meaning, in another."""

import uuid

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from typing_extensions import TypedDict

from memory_client.langgraph import MemoryServerSaver
from memory_client.store import MemoryServerStore

pytestmark = pytest.mark.slow


class State(TypedDict, total=False):
    user_id: str
    message: str
    answer: str


def remember_or_recall(state: State, *, store: BaseStore) -> State:
    namespace = ("memories", state["user_id"])
    message = state["message"]
    if message.startswith("remember:"):
        store.put(namespace, str(uuid.uuid4()), {"text": message.removeprefix("remember:").strip()})
        return {"answer": "noted"}
    hits = store.search(namespace, query=message, limit=1)
    return {"answer": hits[0].value["text"] if hits else "I don't know."}


def build(store, checkpointer):
    builder = StateGraph(State)
    builder.add_node("agent", remember_or_recall)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(store=store, checkpointer=checkpointer)


def test_memory_written_in_one_thread_is_found_in_another(live_server_url, workspace_keys):
    key = workspace_keys["key"]
    store = MemoryServerStore(live_server_url, key, agent="assistant")
    saver = MemoryServerSaver(live_server_url, key, agent="assistant")
    graph = build(store, saver)
    for fact in ("My favourite drink is green tea.", "I live in Lisbon.", "My cat is called Miso."):
        out = graph.invoke(
            {"user_id": "ada", "message": f"remember: {fact}"}, {"configurable": {"thread_id": "A"}}
        )
        assert out["answer"] == "noted"

    # A fresh graph and store, another thread: only the server connects the two.
    other = build(MemoryServerStore(live_server_url, key, agent="assistant"), saver)
    thread_b = {"configurable": {"thread_id": "B"}}
    assert other.invoke({"user_id": "ada", "message": "what is my pet's name?"}, thread_b)["answer"] == (
        "My cat is called Miso."
    )
    assert (
        other.invoke({"user_id": "ada", "message": "which city am I in?"}, thread_b)["answer"]
        == "I live in Lisbon."
    )
    # Another user's namespace holds nothing.
    assert (
        other.invoke({"user_id": "bo", "message": "what is my pet's name?"}, thread_b)["answer"]
        == "I don't know."
    )

    from store.models import StoreItem

    assert (
        StoreItem.objects.filter(workspace=workspace_keys["workspace"], agent__slug="assistant").count() == 3
    )
    store.close()
    saver.close()

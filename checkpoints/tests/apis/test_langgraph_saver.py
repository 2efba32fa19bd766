"""Real LangGraph graphs over MemoryServerSaver, served in-process (httpx's WSGI transport):
the behaviours a graph depends on, end to end. Committed data (TransactionTestCase): LangGraph
writes from its own executor threads, each with its own database connection."""

import operator
from typing import Annotated, TypedDict

import httpx
from django.core.wsgi import get_wsgi_application
from django.test import TransactionTestCase
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from core.services import agent_get_or_create, api_key_create, workspace_create
from memory_client import MemoryClient
from memory_client.langgraph import MemoryServerSaver

BASE_URL = "http://testserver"


class State(TypedDict, total=False):
    answers: Annotated[list, operator.add]
    log: Annotated[list, operator.add]


def ask_three(state: State) -> State:
    # Three questions from one node: each resume re-runs it and replays the earlier answers.
    first = interrupt("first?")
    second = interrupt("second?")
    third = interrupt("third?")
    return {"answers": [first, second, third]}


def inner(state: State) -> State:
    return {"log": ["inner"]}


def outer(state: State) -> State:
    return {"log": ["outer"]}


class LangGraphOverTheApiTests(TransactionTestCase):
    def setUp(self):
        workspace = workspace_create(name="graphs")
        agent_get_or_create(workspace=workspace, slug="assistant")
        _, key = api_key_create(workspace=workspace, name="graphs")
        http = httpx.Client(transport=httpx.WSGITransport(app=get_wsgi_application()), base_url=BASE_URL)
        self.addCleanup(http.close)
        self.saver = MemoryServerSaver(
            BASE_URL, key, agent="assistant", client=MemoryClient(BASE_URL, key, http_client=http)
        )

    def test_a_node_asking_three_questions_resumes_to_the_end(self):
        builder = StateGraph(State)
        builder.add_node("ask", ask_three)
        builder.add_edge(START, "ask")
        builder.add_edge("ask", END)
        graph = builder.compile(checkpointer=self.saver)
        config = {"configurable": {"thread_id": "three-questions"}}

        asked = graph.invoke({"answers": []}, config, durability="sync")
        assert [i.value for i in asked["__interrupt__"]] == ["first?"]
        asked = graph.invoke(Command(resume="a"), config, durability="sync")
        assert [i.value for i in asked["__interrupt__"]] == ["second?"]
        asked = graph.invoke(Command(resume="b"), config, durability="sync")
        assert [i.value for i in asked["__interrupt__"]] == ["third?"]
        done = graph.invoke(Command(resume="c"), config, durability="sync")
        assert done["answers"] == ["a", "b", "c"]

    def test_the_root_history_holds_no_subgraph_checkpoints(self):
        sub = StateGraph(State)
        sub.add_node("inner", inner)
        sub.add_edge(START, "inner")
        sub.add_edge("inner", END)
        builder = StateGraph(State)
        builder.add_node("outer", outer)
        builder.add_node("sub", sub.compile())
        builder.add_edge(START, "outer")
        builder.add_edge("outer", "sub")
        builder.add_edge("sub", END)
        graph = builder.compile(checkpointer=self.saver)
        config = {"configurable": {"thread_id": "with-subgraph"}}
        graph.invoke({"log": []}, config, durability="sync")

        history = list(graph.get_state_history(config))
        assert {state.config["configurable"]["checkpoint_ns"] for state in history} == {""}
        # input, outer, sub, and the final loop step: the root graph's four checkpoints.
        assert len(history) == 4
        assert history[0].next == ()
        assert history[-1].next == ("__start__",)

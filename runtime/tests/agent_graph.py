"""A small agent built on the memory client, run as a script so each step is its own process.

The graph for one turn: `recall` assembles the context from the server (identify, profile,
<memory>, history) and appends the user's message; `approve` interrupts for a human to
approve the reply; `respond` stores the reply and extracts episodic memories. Its LangGraph
state is checkpointed in the server, so `resume` may run in a later process.

    python -m runtime.tests.agent_graph start  URL KEY GRAPH_THREAD EXTERNAL_ID MESSAGE
    python -m runtime.tests.agent_graph resume URL KEY GRAPH_THREAD ANSWER
"""

import json
import sys
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from memory_client import MemoryClient
from memory_client.langgraph import MemoryServerSaver

AGENT = "concierge"


class Turn(TypedDict, total=False):
    external_id: str
    message: str
    thread: str
    memory_user: str
    memory_block: str
    reply: str
    approved: bool
    stored: list


def build(client: MemoryClient, saver: MemoryServerSaver):
    def recall(state: Turn) -> Turn:
        context = client.context.assemble(
            agent=AGENT,
            channel="telegram",
            external_id=state["external_id"],
            message=state["message"],
            token_budget=3000,
            append=True,
        )
        # A real agent sends context["system_prompt"] and context["history"]["messages"] to its
        # model; this one drafts its reply from what the memory told it.
        seat = "a window seat" if "window seat" in context["memory"]["text"] else "any seat"
        return {
            "thread": context["thread"],
            "memory_user": context["memory_user"]["id"],
            "memory_block": context["memory"]["text"],
            "reply": f"I will book {seat} for you.",
        }

    def approve(state: Turn) -> Turn:
        answer = interrupt({"question": "Send this reply?", "reply": state["reply"]})
        return {"approved": answer == "yes"}

    def respond(state: Turn) -> Turn:
        if not state["approved"]:
            return {"stored": []}
        client.threads.append_message(state["thread"], role="assistant", content=state["reply"])
        extracted = client.episodic_entries.extract(
            agent=AGENT, memory_user=state["memory_user"], thread=state["thread"], sync=True
        )
        return {"stored": [entry["content"] for entry in extracted["stored"]]}

    graph = StateGraph(Turn)
    graph.add_node("recall", recall)
    graph.add_node("approve", approve)
    graph.add_node("respond", respond)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "approve")
    graph.add_edge("approve", "respond")
    graph.add_edge("respond", END)
    return graph.compile(checkpointer=saver)


def main(argv):
    mode, url, key, graph_thread = argv[:4]
    # Generous: the first request to a fresh server process loads the local embedding model.
    client = MemoryClient(url, key, timeout=180)
    saver = MemoryServerSaver(url, key, agent=AGENT, client=client)
    graph = build(client, saver)
    config = {"configurable": {"thread_id": graph_thread}}
    if mode == "start":
        out = graph.invoke({"external_id": argv[4], "message": argv[5]}, config)
        print(
            json.dumps(
                {"interrupt": out["__interrupt__"][0].value, "next": list(graph.get_state(config).next)}
            )
        )
    else:
        out = graph.invoke(Command(resume=argv[4]), config)
        print(json.dumps({"reply": out["reply"], "stored": out["stored"], "thread": out["thread"]}))
    client.close()


if __name__ == "__main__":
    main(sys.argv[1:])

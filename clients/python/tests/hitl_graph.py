"""A LangGraph graph that stops for human approval; run as a script so each step is its own process.

python hitl_graph.py start  URL KEY THREAD   -> runs until the interrupt, prints the question
python hitl_graph.py resume URL KEY THREAD ANSWER -> resumes from the server, prints the result
"""

import json
import sys
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from memory_client.langgraph import MemoryServerSaver


class State(TypedDict, total=False):
    request: str
    draft: str
    approval: str
    result: str


def draft(state: State) -> State:
    return {"draft": f"Refund 40 EUR for: {state['request']}"}


def ask_human(state: State) -> State:
    answer = interrupt({"question": "Approve this refund?", "draft": state["draft"]})
    return {"approval": answer}


def finish(state: State) -> State:
    verdict = "sent" if state["approval"] == "yes" else "cancelled"
    return {"result": f"{state['draft']} -> {verdict}"}


def build(saver):
    graph = StateGraph(State)
    graph.add_node("draft", draft)
    graph.add_node("ask_human", ask_human)
    graph.add_node("finish", finish)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "ask_human")
    graph.add_edge("ask_human", "finish")
    graph.add_edge("finish", END)
    return graph.compile(checkpointer=saver)


def main(argv):
    mode, url, key, thread_id = argv[:4]
    saver = MemoryServerSaver(url, key, agent="assistant")
    graph = build(saver)
    config = {"configurable": {"thread_id": thread_id}}
    if mode == "start":
        out = graph.invoke({"request": "broken kettle"}, config)
        interrupts = [i.value for i in out.get("__interrupt__", [])]
        print(json.dumps({"interrupts": interrupts, "next": list(graph.get_state(config).next)}))
    else:
        out = graph.invoke(Command(resume=argv[4]), config)
        print(json.dumps({"result": out["result"], "next": list(graph.get_state(config).next)}))
    saver.close()


if __name__ == "__main__":
    main(sys.argv[1:])

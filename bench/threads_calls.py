"""The agents' most frequent thread calls, one at a time, through the REST API in-process.

    python -m bench.threads_calls                     # a 200-message thread, 300 calls each
    python -m bench.threads_calls --messages 2000 --repeat 500 --json var/threads_calls.json

Every call under `/api/v1/threads/<id>/` reads its thread in the key's scope first; an append
then locks the thread's row and writes its counters. This measures what those fixed costs
weigh in whole calls: append one message, and read the default history window, through
Django's test client (middleware, API-key authentication, throttle, JSON; no socket), with
an agent-bound key as agents use. To compare two trees, run it in each checkout in turn,
several times alternated (docs/speed.md, "Thread calls").
"""

import argparse
import os
import time

from bench.harness import measure, print_table, setup_django, write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200, help="messages in the thread before measuring")
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--json")
    args = parser.parse_args()
    setup_django()

    from rest_framework.test import APIClient

    from core.services import agent_get_or_create, api_key_create, workspace_create
    from identities.services import memory_user_create
    from threads.services import thread_append_messages, thread_create

    workspace = workspace_create(name=f"bench-calls-{time.time_ns()}")
    agent = agent_get_or_create(workspace=workspace, slug="bench")
    person = memory_user_create(workspace=workspace, canonical_id="bench:1", display_name="Ada")
    thread = thread_create(workspace=workspace, agent=agent, memory_user=person, title="calls")
    for start in range(0, args.messages, 500):
        batch = [
            {"role": ("user", "assistant")[i % 2], "content": f"Message {i} about the Lisbon flight."}
            for i in range(start, min(args.messages, start + 500))
        ]
        thread_append_messages(thread=thread, messages=batch)
    _key, raw = api_key_create(workspace=workspace, agent=agent)
    client = APIClient(HTTP_HOST="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    messages_url = f"/api/v1/threads/{thread.pk}/messages/"
    history_url = f"/api/v1/threads/{thread.pk}/history/"

    def append_one():
        response = client.post(messages_url, {"role": "user", "content": "Any news on Porto?"}, format="json")
        assert response.status_code == 201, response.content

    def history():
        response = client.get(history_url)
        assert response.status_code == 200, response.content

    load_before = os.getloadavg()[0]
    rows = [
        ("append one message", measure(append_one, repeat=args.repeat, warmup=30)),
        ("history window (defaults)", measure(history, repeat=args.repeat, warmup=30)),
    ]
    load = f"load {load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    print_table(f"thread calls through the API, {args.messages}-message thread ({load})", rows)
    write_json(args.json, {"messages": args.messages, "load": load, "rows": dict(rows)})


if __name__ == "__main__":
    main()

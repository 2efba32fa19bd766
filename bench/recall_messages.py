"""Semantic recall's message search for a person with a long history, in a table of many people.

    python -m bench.recall_messages                                   # 10,000 of 200,000
    python -m bench.recall_messages --people 100 --per-person 10000   # 10,000 of 1,000,000
    python -m bench.recall_messages --data ../shared/data/locomo/locomo-dev.json   # LoCoMo's turns

`threads.selectors.message_search_related` (the history window's recalled block) ranks a
person's older messages. Its lexical part reads the person's messages, so it grows with their
history; it must not grow with everyone else's (docs/speed.md, "Semantic recall's messages").

Data: `--people` people, each with `--per-person` messages in threads of 500, appended through
`thread_append_messages` (so the stored tsvectors are production's), alternately user and
assistant. Each query leaves out a window of `--window` messages (default 20) that ends at a
random point of the person's newest thread, as the history window leaves out what it already
holds, turn after turn (`--window 0`: none). The text is the `bench.peers` generator's
sentences, or with `--data` the turns of a LoCoMo file (read from where it lies, never copied;
the questions are its questions). Timed: `message_search_related(mode="lexical")` for a person
drawn in turn, `--queries` queries twice, after `VACUUM ANALYZE`. No vectors are stored, so
the hybrid mode's vector channels would find nothing: the lexical scope is what is measured. A
throwaway embedded PostgreSQL unless DATABASE_URL is set.
"""

import argparse
import json
import random
import time

from bench.harness import machine_reference_ms, print_table, setup_django, summarize, write_json

THREAD_SIZE = 500


def texts_and_questions(data: str | None, rng: random.Random, count: int) -> tuple[list[str], list[str]]:
    if data:
        with open(data) as handle:
            samples = json.load(handle)
        turns = [
            turn["text"]
            for sample in samples
            for key, session in sample["conversation"].items()
            if key.startswith("session_") and isinstance(session, list)
            for turn in session
        ]
        questions = [
            qa["question"] for sample in samples for qa in sample["qa"] if qa.get("category") in (1, 2, 3, 4)
        ]
        return turns, rng.sample(questions, min(count, len(questions)))
    from bench.peers import dataset

    memories = dataset.memories(4000)
    return [m.content for m in memories], [q.text for q in dataset.queries(memories)][:count]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--people", type=int, default=20)
    parser.add_argument("--per-person", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument(
        "--data", help="A LoCoMo JSON file: its turns as the messages, its questions as queries."
    )
    parser.add_argument("--window", type=int, default=20, help="Messages each query leaves out.")
    parser.add_argument("--json")
    args = parser.parse_args()

    setup_django()
    from django.db import connection

    from core.services import agent_get_or_create, workspace_create
    from identities.services import memory_user_create
    from threads.models import Message
    from threads.selectors import message_search_related
    from threads.services import thread_append_messages, thread_create

    rng = random.Random(7)
    texts, questions = texts_and_questions(args.data, rng, args.queries)
    workspace = workspace_create(name="bench-recall-messages")
    agent = agent_get_or_create(workspace=workspace, slug="recall")
    people = []
    started = time.perf_counter()
    for index in range(args.people):
        person = memory_user_create(
            workspace=workspace, canonical_id=f"bench:{index}", display_name=f"P{index}"
        )
        people.append(person)
        for first in range(0, args.per_person, THREAD_SIZE):
            thread = thread_create(workspace=workspace, agent=agent, memory_user=person)
            size = min(THREAD_SIZE, args.per_person - first)
            messages = [
                {"role": "user" if i % 2 == 0 else "assistant", "content": rng.choice(texts)}
                for i in range(size)
            ]
            thread_append_messages(thread=thread, messages=messages)
    build_s = round(time.perf_counter() - started, 1)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) threads_message")
        cursor.execute("VACUUM (ANALYZE) threads_thread")
    print(f"built {args.people * args.per_person} messages in {build_s} s")
    newest = {
        person.pk: list(
            Message.objects.filter(thread__memory_user=person)
            .order_by("-created_at", "-seq")
            .values_list("pk", flat=True)[:THREAD_SIZE]
        )
        for person in people
    }

    samples = []
    for _round in range(2):
        for index, query in enumerate(questions):
            person = people[index % len(people)]
            ids = newest[person.pk]
            end = rng.randrange(args.window, len(ids) + 1) if args.window else 0
            window = ids[end - args.window : end] if args.window else []
            begun = time.perf_counter()
            message_search_related(
                workspace=workspace,
                agent=agent,
                memory_user=person,
                query=query,
                top_k=10,
                mode="lexical",
                exclude_message_ids=window,
            )
            samples.append((time.perf_counter() - begun) * 1000)
    stats = summarize(samples)
    results = {
        "scale": vars(args),
        "build_s": build_s,
        "lexical_search": stats,
        "machine_reference_ms": machine_reference_ms(),
    }
    print_table(
        f"Semantic recall: {args.per_person} messages a person, {args.people * args.per_person} in the table",
        [("message_search_related, lexical", stats)],
    )
    write_json(args.json, results)


if __name__ == "__main__":
    main()

"""Export and import throughput (docs/export.md): records per second both ways.

    python -m bench.portability                    # ~34,000 records (10,000 messages, vectors)
    python -m bench.portability --threads 400      # twice the messages
    python -m bench.portability --without-vectors  # rows only (an import then re-embeds)
    python -m bench.portability --json var/portability.json

A workspace is bulk-seeded (people with identities, threads of 50 messages each with their
384-d vectors, user facts, episodes, episodic entries with vectors, store items), then
exported with history and vectors to a file, imported into an empty workspace (vectors of the
same model are kept; the embedding task an import queues afterwards is left out of the
timing), imported again (every record already there: the idempotent path), and dry-run.
"""

import argparse
import os
import random
import tempfile
import time
import uuid
from datetime import timedelta

from bench.harness import setup_django, write_json

MESSAGES_PER_THREAD = 50


def seed(n_threads: int, seed_value: int = 7):
    from django.utils import timezone

    from core.embeddings import LOCAL_MODEL_DIMENSIONS, LOCAL_MODEL_NAME
    from core.services import agent_get_or_create, workspace_create
    from episodes.models import Episode
    from episodic.models import EntryEmbedding, EpisodicEntry
    from episodic.services import entry_content_hash
    from facts.models import Fact, FactEmbedding, key_normalize
    from facts.services import fact_search_text
    from identities.models import ChannelIdentity, MemoryUser
    from store.models import StoreItem
    from threads.models import Message, MessageEmbedding, Thread

    rng = random.Random(seed_value)
    now = timezone.now()
    workspace = workspace_create(name=f"bench-{uuid.uuid4().hex[:6]}")
    agent = agent_get_or_create(workspace=workspace, slug="support-bot")

    def vector():
        return [rng.uniform(-1, 1) for _ in range(LOCAL_MODEL_DIMENSIONS)]

    people = MemoryUser.objects.bulk_create(
        MemoryUser(workspace=workspace, canonical_id=f"telegram:{i}", display_name=f"Person {i}")
        for i in range(n_threads)
    )
    ChannelIdentity.objects.bulk_create(
        ChannelIdentity(workspace=workspace, memory_user=p, channel="telegram", external_id=str(i))
        for i, p in enumerate(people)
    )
    threads = Thread.objects.bulk_create(
        Thread(
            workspace=workspace,
            agent=agent,
            memory_user=p,
            title=f"Thread {i}",
            message_seq=MESSAGES_PER_THREAD,
            message_count=MESSAGES_PER_THREAD,
            created_at=now - timedelta(minutes=n_threads - i),
        )
        for i, p in enumerate(people)
    )
    for thread in threads:
        parent = None
        messages = []
        for seq in range(1, MESSAGES_PER_THREAD + 1):
            message = Message(
                workspace=workspace,
                thread=thread,
                role="user" if seq % 2 else "assistant",
                content=f"Message {seq} of {thread.title}: "
                + " ".join(rng.choice("abcdefgh") * 5 for _ in range(30)),
                parent=parent,
                seq=seq,
                depth=seq - 1,
                token_count=40,
                branch_tokens=40 * seq,
            )
            messages.append(message)
            parent = message
        Message.objects.bulk_create(messages)
        MessageEmbedding.objects.bulk_create(
            MessageEmbedding(
                message=m,
                thread=thread,
                workspace=workspace,
                agent=agent,
                memory_user=thread.memory_user,
                model=LOCAL_MODEL_NAME,
                dimensions=LOCAL_MODEL_DIMENSIONS,
                embedding=vector(),
            )
            for m in messages
        )
    facts = []
    for i, p in enumerate(people):
        for k in range(10):
            key = f"preference_{k}"
            facts.append(
                Fact(
                    workspace=workspace,
                    scope="user",
                    memory_user=p,
                    key=key,
                    key_normalized=key_normalize(key),
                    value=f"value {i}-{k}",
                    search_text=fact_search_text(key, f"value {i}-{k}"),
                )
            )
    Fact.objects.bulk_create(facts, batch_size=1000)
    FactEmbedding.objects.bulk_create(
        (
            FactEmbedding(
                fact=f,
                workspace=workspace,
                model=LOCAL_MODEL_NAME,
                dimensions=LOCAL_MODEL_DIMENSIONS,
                embedding=vector(),
            )
            for f in facts
        ),
        batch_size=1000,
    )
    Episode.objects.bulk_create(
        Episode(
            workspace=workspace, agent=agent, memory_user=p, thread=t, trigger_type="chat", input={"q": i}
        )
        for i, (p, t) in enumerate(zip(people, threads, strict=True))
        for _ in range(5)
    )
    entries = []
    for i, (p, t) in enumerate(zip(people, threads, strict=True)):
        for k in range(10):
            content = f"Person {i} said thing {k}."
            entries.append(
                EpisodicEntry(
                    workspace=workspace,
                    agent=agent,
                    memory_user=p,
                    content=content,
                    content_hash=entry_content_hash(content),
                    source="user_assertion",
                    evidence=content,
                    source_thread=t,
                    embedding_model=LOCAL_MODEL_NAME,
                )
            )
    EpisodicEntry.objects.bulk_create(entries, batch_size=1000)
    EntryEmbedding.objects.bulk_create(
        (EntryEmbedding.of(e, vector(), model=LOCAL_MODEL_NAME) for e in entries),
        batch_size=1000,
    )
    StoreItem.objects.bulk_create(
        StoreItem(
            workspace=workspace,
            agent=agent,
            memory_user=p,
            namespace=["memories", str(i)],
            namespace_path=f"memories.{i}",
            key="profile",
            value={"text": f"Person {i}"},
        )
        for i, p in enumerate(people)
    )
    return workspace


def run(n_threads: int, *, vectors: bool = True) -> dict:
    from django.db import connection

    from core.services import workspace_create
    from portability import tasks
    from portability.registry import Scope
    from portability.services import export_stream, import_run, lines_read

    # The vectors are kept (same model): the embedding task an import queues would only find
    # them there; it is not part of the import's time.
    tasks.import_embed_task.delay_on_commit = lambda *args, **kwargs: None
    workspace = seed(n_threads)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    path = os.path.join(tempfile.mkdtemp(prefix="bench-portability-"), "export.jsonl")
    started = time.perf_counter()
    records = 0
    with open(path, "wb") as out:
        for line in export_stream(scope=Scope(workspace=workspace, history=True, vectors=vectors)):
            out.write(line)
            records += 1
    export_s = time.perf_counter() - started
    records -= 2  # header and closing line
    size = os.path.getsize(path)
    target = workspace_create(name=f"target-{uuid.uuid4().hex[:6]}")
    results = {"vectors": vectors, "records": records, "bytes": size, "export_s": round(export_s, 2)}
    for label, dry_run in (("dry_run", True), ("import", False), ("import_again", False)):
        started = time.perf_counter()
        with open(path, "rb") as stream:
            report = import_run(workspace=target, lines=lines_read(stream), actor="bench", dry_run=dry_run)
        elapsed = time.perf_counter() - started
        results[f"{label}_s"] = round(elapsed, 2)
        results[f"{label}_records_per_s"] = round(records / elapsed)
        results[f"{label}_created"] = sum(report["created"].values())
    results["export_records_per_s"] = round(records / export_s)
    results["export_mb_per_s"] = round(size / export_s / 1e6, 1)
    results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return results


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=200, help=f"threads of {MESSAGES_PER_THREAD} messages")
    parser.add_argument("--without-vectors", action="store_true", help="export and import no vectors")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    setup_django()
    results = run(args.threads, vectors=not args.without_vectors)
    for key, value in results.items():
        print(f"{key:32} {value}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()

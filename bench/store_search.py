"""The LangGraph store's search by value filter, and its puts, through the REST API.

    python -m bench.store_search                          # 100,000 items, 1,000 people
    python -m bench.store_search --items 200000 --people 2000 --json var/store.json

LangGraph's `store.search(prefix, filter={...})` matches items by the fields of their JSON
value. The items are bulk-loaded with COPY into the workspace's partition, under
("memories", <person>) as LangGraph's memory examples store them, each value a small memory
(`kind`, `person`, `text`, `n`, `tags`), then ANALYZEd. Timed through Django's test client
(middleware, API-key authentication, JSON, no socket):
- a filter across every person's memories that 1 % of the items match, one that none
  match, and one a single item matches (`n`);
- the same 1 % filter inside one person's namespace (the namespace's B-tree range);
- the namespaces (LangGraph's `list_namespaces`): the first 100, the first 100 under
  ("memories",), cut to one label, and one person's;
- a put of a small value and of a large one (100 objects of two fields), which pay for
  whatever the value's indexes hold;
- with `--embedded N` (default 20,000), N more items whose text is indexed and embedded by the
  local model (a memory from templates, as an agent would write it, spread over the same
  people): a search by meaning across every person's memories, one filtered by value, and one
  inside one person's namespace.
"""

import argparse
import json
import random
import time
import uuid

from bench.harness import measure, print_table, setup_django, write_json
from bench.threads_cpu import load_average

# 1 % of the items are of the rare kind; the others share the common ones.
KINDS = ["preference"] * 33 + ["fact"] * 33 + ["event"] * 33 + ["rare"]

# The embedded items' texts: what an agent remembers of a person, with the queries that look
# for each kind of memory.
TEMPLATES = [
    ("{p} drinks {drink} every morning before work", "what does the user drink in the morning"),
    ("{p} works as a {job} in {city}", "where does the user work and as what"),
    ("{p} is allergic to {allergen} and avoids it", "is the user allergic to any food"),
    ("{p} is planning a trip to {city} in {month}", "which trip is the user planning"),
    ("{p} plays {sport} with friends on weekends", "what sport does the user play"),
    ("{p} has a {pet} called {name}", "does the user have a pet"),
    ("{p} prefers replies that are {style}", "how does the user like replies written"),
    ("{p} is learning {language} for a move to {city}", "which language is the user learning"),
]
WORDS = {
    "drink": ["green tea", "black coffee", "an espresso", "orange juice", "matcha"],
    "job": ["nurse", "software engineer", "teacher", "carpenter", "lawyer", "chef"],
    "city": ["Lisbon", "Osaka", "Toronto", "Nairobi", "Berlin", "Lima", "Hanoi"],
    "allergen": ["peanuts", "shellfish", "gluten", "milk", "sesame"],
    "month": ["March", "June", "September", "December"],
    "sport": ["tennis", "football", "climbing", "badminton", "chess"],
    "pet": ["dog", "cat", "parrot", "rabbit"],
    "name": ["Milo", "Luna", "Pico", "Bruno", "Nala"],
    "style": ["short and direct", "detailed with examples", "formal", "in bullet points"],
    "language": ["Portuguese", "Japanese", "French", "Swahili", "German"],
}


def copy_items(*, workspace, items) -> None:
    """COPY `items`, (id, person, key, value, indexed text or ""), under ("memories", <person>)."""
    from django.db import connection
    from django.utils import timezone

    now = timezone.now()
    columns = (
        "id, workspace_id, namespace, namespace_path, key, value, index_fields, search_text, "
        "embedding_model, created_at, updated_at"
    )
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY store_storeitem ({columns}) FROM STDIN") as copy:
            for pk, person, key, value, text in items:
                index_fields = '["text"]' if text else "[]"
                row = (pk, workspace.pk, ["memories", person], f"memories.{person}", key)
                copy.write_row((*row, json.dumps(value), index_fields, text, "", now, now))
        cursor.execute("ANALYZE store_storeitem")


def embedded_load(*, workspace, n_items: int, n_people: int) -> float:
    """`n_items` indexed items under ("memories", <person>), embedded; the seconds it took."""
    from django.db import connection

    from core.services import vector_graph_extend
    from store.models import StoreItem, StoreItemEmbedding
    from store.services import store_items_embed

    rng = random.Random(7)
    started = time.perf_counter()
    items = []
    for n in range(n_items):
        person = f"person-{n % n_people}"
        template, _query = rng.choice(TEMPLATES)
        text = template.format(p="The user", **{k: rng.choice(v) for k, v in WORDS.items()})
        items.append(
            (uuid.uuid4(), person, f"t{n}", {"kind": rng.choice(KINDS), "person": person, "text": text}, text)
        )
    copy_items(workspace=workspace, items=items)
    ids = [item[0] for item in items]
    for start in range(0, len(ids), 512):
        store_items_embed(item_ids=ids[start : start + 512])
    assert StoreItem.objects.filter(workspace=workspace).exclude(embedding_model="").count() == n_items
    # Into the HNSW graph, as a worker puts them once a search asks (core.ranking).
    model = StoreItemEmbedding.objects.filter(workspace=workspace).values_list("model", flat=True).first()
    vector_graph_extend(table="store_storeitemembedding", model=model, scope={"workspace_id": workspace.pk})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE store_storeitem")
        cursor.execute("ANALYZE store_storeitemembedding")
    return time.perf_counter() - started


def build(*, n_items: int, n_people: int):
    from core.services import workspace_create

    workspace = workspace_create(name=f"bench-store-{time.time_ns()}")
    rng = random.Random(5)
    started = time.perf_counter()
    items = []
    for n in range(n_items):
        person = f"person-{n % n_people}"
        value = {
            "kind": rng.choice(KINDS),
            "person": person,
            "text": f"memory {n} of {person}",
            "n": n,
            "tags": [rng.choice(["home", "work", "travel"])],
        }
        items.append((uuid.uuid4(), person, f"m{n}", value, ""))
    copy_items(workspace=workspace, items=items)
    return workspace, time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--people", type=int, default=1_000)
    parser.add_argument("--embedded", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--json")
    args = parser.parse_args()
    setup_django()

    from rest_framework.test import APIClient

    from core.services import api_key_create

    workspace, load_seconds = build(n_items=args.items, n_people=args.people)
    print(f"loaded {args.items:,} items over {args.people:,} people in {load_seconds:.1f} s (COPY)")
    if args.embedded:
        embed_seconds = embedded_load(workspace=workspace, n_items=args.embedded, n_people=args.people)
        print(f"loaded and embedded {args.embedded:,} indexed items in {embed_seconds:.1f} s")
    _key, secret = api_key_create(workspace=workspace)
    client = APIClient(SERVER_NAME="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    rng = random.Random(13)
    counter = [0]

    def search(filter_, *, prefix=("memories",), at_least: int, at_most: int = 10):
        body = {"namespace_prefix": list(prefix), "filter": filter_, "limit": 10}
        response = client.post("/api/v1/store/search/", body, format="json")
        assert response.status_code == 200, response.content[:300]
        assert at_least <= len(response.json()["items"]) <= at_most, len(response.json()["items"])

    def rare_across_people():
        search({"kind": "rare"}, at_least=10)

    def absent_across_people():
        search({"kind": "none-hold-this"}, at_least=0, at_most=0)

    def one_item_across_people():
        search({"n": rng.randrange(args.items)}, at_least=1, at_most=1)

    def common_in_one_namespace():
        person = f"person-{rng.randrange(args.people)}"
        search({"kind": "fact"}, prefix=("memories", person), at_least=0)

    def by_meaning(prefix, filter_=None):
        _template, query = rng.choice(TEMPLATES)
        body = {"namespace_prefix": list(prefix), "query": query, "limit": 10}
        if filter_:
            body["filter"] = filter_
        response = client.post("/api/v1/store/search/", body, format="json")
        assert response.status_code == 200, response.content[:300]
        items = response.json()["items"]
        assert len(items) == 10 and items[0]["score"] is not None, items[:1]

    def query_across_people():
        by_meaning(("memories",))

    def query_filtered_across_people():
        by_meaning(("memories",), {"kind": "fact"})

    def query_in_one_namespace():
        by_meaning(("memories", f"person-{rng.randrange(args.people)}"))

    def namespaces(body, *, expected: int):
        response = client.post("/api/v1/store/namespaces/", body, format="json")
        assert response.status_code == 200, response.content[:300]
        assert len(response.json()["namespaces"]) == expected, len(response.json()["namespaces"])

    def namespaces_all():
        namespaces({"limit": 100}, expected=min(100, args.people))

    def namespaces_under_memories():
        prefix = [{"match_type": "prefix", "path": ["memories"]}]
        namespaces({"match_conditions": prefix, "limit": 100}, expected=min(100, args.people))

    def namespaces_depth_one():
        namespaces({"max_depth": 1}, expected=1)

    def namespaces_of_one_person():
        prefix = [{"match_type": "prefix", "path": ["memories", f"person-{rng.randrange(args.people)}"]}]
        namespaces({"match_conditions": prefix}, expected=1)

    def put(value):
        counter[0] += 1
        body = {"namespace": ["memories", "puts"], "key": f"p{counter[0]}", "value": value, "index": False}
        response = client.put("/api/v1/store/item/", body, format="json")
        assert response.status_code in (200, 201), response.content[:300]

    small = {"kind": "preference", "person": "puts", "text": "likes tea", "n": -1, "tags": ["home"]}
    large = {f"field_{i}": {"value": i, "label": f"label {i}"} for i in range(100)}

    rows = [
        ("search, filter 1 % match, all people", measure(rare_across_people, repeat=args.repeat)),
        ("search, filter none match, all people", measure(absent_across_people, repeat=args.repeat)),
        ("search, filter one item matches, all people", measure(one_item_across_people, repeat=args.repeat)),
        ("search, filter 33 %, one person's namespace", measure(common_in_one_namespace, repeat=args.repeat)),
        *(
            [
                ("search by meaning, all people", measure(query_across_people, repeat=args.repeat)),
                (
                    "search by meaning, filter 33 %, all people",
                    measure(query_filtered_across_people, repeat=args.repeat),
                ),
                (
                    "search by meaning, one person's namespace",
                    measure(query_in_one_namespace, repeat=args.repeat),
                ),
            ]
            if args.embedded
            else []
        ),
        ("namespaces, the first 100", measure(namespaces_all, repeat=args.repeat // 4)),
        (
            'namespaces, prefix ("memories",), the first 100',
            measure(namespaces_under_memories, repeat=args.repeat // 4),
        ),
        ("namespaces, max_depth 1", measure(namespaces_depth_one, repeat=args.repeat // 4)),
        ("namespaces, prefix one person's", measure(namespaces_of_one_person, repeat=args.repeat // 4)),
        ("put, a small value (5 fields)", measure(lambda: put(small), repeat=args.repeat)),
        ("put, a large value (100 objects, 200 values)", measure(lambda: put(large), repeat=args.repeat)),
    ]
    print_table(
        f"Store search by value filter through the API, {args.items:,} items "
        f"(load average {load_average():.1f})",
        rows,
    )
    write_json(
        args.json,
        {
            "items": args.items,
            "people": args.people,
            "embedded": args.embedded,
            "load_seconds": round(load_seconds, 1),
            "load_average": round(load_average(), 2),
            "results": dict(rows),
        },
    )


if __name__ == "__main__":
    main()

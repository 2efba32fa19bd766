"""The cost of an add (issue 17): queries per single and batch add, one embedding call, no
vector search or transaction when the exact hash decides, and the hand-written entry body
equal to the serializer's."""

import json
import threading
from unittest import mock

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from core.embeddings import EmbeddingError, LocalEmbeddingProvider
from core.memory_settings import memory_settings_for
from core.models import AuditEvent
from core.services import agent_get_or_create, api_key_create, workspace_create
from core.testing_openai import OpenAITestServer
from episodic.apis import EntryOutputSerializer, _entry_output
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services import entries_create, storing
from episodic.services.storing import NEAREST_STATE_PROBES
from episodic.services.storing import _person_lock as person_lock
from episodic.tests.factories import (
    TEST_EMBEDDING_MODEL,
    bag_of_words_vectors,
    entry_factory,
    memory_user_factory,
    use_test_chat,
    use_test_embeddings,
)
from threads.services import thread_append_messages, thread_create

LIST = reverse("api:episodic_entries:list")
BATCH = reverse("api:episodic_entries:batch")

# Measured with the test settings (no key or provider cache: each request reads them):
# key, person, exact hash, embedding provider, chat provider (none: consolidation by rule);
# then a SAVEPOINT (a BEGIN in a server, which Django does not count), and under the lock:
# lock, hash, nearest stored, and the entry, its vector and its audit event in one INSERT;
# RELEASE. Before issue 17: 19. A server answers both providers from its cache. It was 14
# while the nearest stored entry was also looked up before the lock, and 13 while the entry,
# its vector and its event were three INSERTs.
ADD_QUERIES = 11
# Key, person, hash, stored entry: no embedding, vector search, transaction or lock. Before: 9.
REPEAT_QUERIES = 4
# A batch costs what one add costs, plus the CLOSE of the binary cursor that reads the
# person's vectors, however many items it holds (before: 154 for 100 items); its rows go by
# one COPY a table where one add's go in one INSERT (12 before the COPY).
BATCH_QUERIES = 14


@pytest.fixture
def setup(db):
    workspace = workspace_create(name="Acme")
    agent = agent_get_or_create(workspace=workspace, slug="assistant")
    _, key = api_key_create(workspace=workspace, agent=agent)
    person = memory_user_factory(workspace)
    with OpenAITestServer() as server:
        use_test_embeddings(server, workspace)
        for index in range(5):
            entry_factory(agent=agent, memory_user=person, content=f"Ada keeps {index} hens in the garden.")
        setup = {"server": server, "key": key, "person": person, "agent": agent, "workspace": workspace}
        # The key's first use records its last_used_at (one UPDATE, then at most once a minute).
        _post(Client(), setup, LIST, {"content": "Ada keeps 0 hens in the garden."})
        server.requests.clear()
        yield setup


def _post(client, setup, path, body):
    return client.post(
        path,
        {"memory_user": str(setup["person"].pk), **body},
        content_type="application/json",
        headers={"Authorization": f"Bearer {setup['key']}"},
    )


def _embedding_calls(server) -> list:
    return [body["input"] for path, body in server.requests if path.endswith("/embeddings")]


def test_one_add_embeds_once_within_the_query_ceiling(setup, client, django_assert_max_num_queries):
    """A new entry: one embedding call, the stored vector written with the row."""
    with django_assert_max_num_queries(ADD_QUERIES):
        response = _post(client, setup, LIST, {"content": "Ada booked a flight to Lisbon."})
    assert response.status_code == 201, response.json()
    assert _embedding_calls(setup["server"]) == [["Ada booked a flight to Lisbon."]]
    entry = EpisodicEntry.objects.get(pk=response.json()["id"])
    assert entry.embedding_model == "test-bag-of-words" and response.json()["embedded"] is True
    assert EntryEmbedding.objects.filter(entry=entry, model=entry.embedding_model).count() == 1


def test_a_workspace_key_naming_its_agent_adds_one_lookup(setup, client, django_assert_max_num_queries):
    """A workspace-wide key names an existing agent by slug: one statement more than an
    agent-bound key (the slug's lookup, once, though the write could register a new agent)."""
    _, key = api_key_create(workspace=setup["workspace"])
    workspace_key = {**setup, "key": key}
    # The key's first use records its last_used_at.
    _post(client, workspace_key, LIST, {"agent": "assistant", "content": "Ada keeps 1 hens in the garden."})
    with django_assert_max_num_queries(ADD_QUERIES + 1):
        response = _post(
            client, workspace_key, LIST, {"agent": "assistant", "content": "Ada flew to Lisbon."}
        )
    assert response.status_code == 201, response.json()
    assert EpisodicEntry.objects.get(pk=response.json()["id"]).agent_id == setup["agent"].pk


def test_an_exact_repeat_skips_the_embedding_and_the_vector_search(
    setup, client, django_assert_max_num_queries
):
    """The hash decides: no embedding call, no similarity query, no transaction or lock."""
    stored = _post(client, setup, LIST, {"content": "Ada booked a flight to Lisbon."}).json()
    setup["server"].requests.clear()
    with CaptureQueriesContext(connection) as queries, django_assert_max_num_queries(REPEAT_QUERIES):
        response = _post(client, setup, LIST, {"content": "ADA booked a flight  to Lisbon."})
    assert response.status_code == 200
    assert response.json()["id"] == stored["id"] and response.json()["reason"] == "duplicate_exact"
    assert _embedding_calls(setup["server"]) == []
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    assert "<=>" not in sql and "pg_advisory_xact_lock" not in sql


def _stored_checks(queries) -> tuple[list[int], int]:
    """The positions of the nearest-stored statements among `queries`, and the lock's."""
    sqls = [q["sql"] for q in queries.captured_queries]
    lock = next(i for i, sql in enumerate(sqls) if "pg_advisory_xact_lock" in sql)
    checks = [i for i, sql in enumerate(sqls) if "episodes_entryembedding v" in sql]
    return checks, lock


@pytest.mark.parametrize("items", [1, 10])
def test_by_rule_the_stored_entries_are_compared_once_under_the_lock(setup, client, items):
    """With no chat model, consolidation is decided by rule, which costs nothing under the
    person's lock: the stored entries are read once, there, for a single add or a batch."""
    contents = [f"echo{i} foxtrot{i} golf{i}" for i in range(items)]
    with CaptureQueriesContext(connection) as queries:
        if items == 1:
            response = _post(client, setup, LIST, {"content": contents[0]})
        else:
            response = _post(client, setup, BATCH, {"items": [{"content": c} for c in contents]})
    assert response.status_code == 201, response.json()
    checks, lock = _stored_checks(queries)
    assert len(checks) == 1 and checks[0] > lock


def test_by_rule_a_similar_entry_is_consolidated_under_the_lock(setup, client):
    """The decision that the check before the lock used to make is made under it."""
    response = _post(client, setup, LIST, {"content": "Ada keeps 7 hens in the garden now."})
    assert response.status_code == 201, response.json()
    consolidation = response.json()["consolidation"]
    assert consolidation["by"] == "rule" and consolidation["decision"] in ("add", "update", "supersede")
    assert EpisodicEntry.objects.filter(pk=consolidation["old"]).exists()


def test_with_a_chat_model_the_stored_check_runs_before_the_lock(setup, client):
    """A model's decision must not be awaited under the person's lock: the stored entries are
    compared (and the model asked) before it, and only the rows stored meanwhile under it."""
    use_test_chat(setup["server"], setup["workspace"])
    setup["server"].chat_replies.append(json.dumps({"decision": "add", "reason": "Another count."}))
    with CaptureQueriesContext(connection) as queries:
        response = _post(client, setup, LIST, {"content": "Ada keeps 7 hens in the garden now."})
    assert response.status_code == 201, response.json()
    assert response.json()["consolidation"]["by"] == "llm"
    checks, lock = _stored_checks(queries)
    assert len(checks) == 2 and checks[0] < lock < checks[1]


@pytest.mark.parametrize("size", [10, 100])
def test_a_batch_costs_the_same_queries_whatever_its_size(setup, client, size, django_assert_max_num_queries):
    """One embedding call, one nearest-stored read (under the lock), one COPY each for
    entries, vectors and audit events."""
    # Words of their own: no item is similar to another or to a stored entry.
    items = [{"content": f"alpha{i} bravo{i} charlie{i} delta{i}"} for i in range(size)]
    with django_assert_max_num_queries(BATCH_QUERIES):
        response = _post(client, setup, BATCH, {"items": items})
    assert response.status_code == 201, response.json()
    assert len(_embedding_calls(setup["server"])) == 1
    created = [r["entry"]["id"] for r in response.json()["results"] if r["status"] == "created"]
    assert len(created) == size
    assert EntryEmbedding.objects.filter(entry_id__in=created).count() == size
    from core.models import AuditEvent

    assert AuditEvent.objects.filter(entity_type="episodic_entry", entity_id__in=created).count() == size


def test_a_batch_still_dedupes_against_stored_entries_and_its_own_items(setup, client):
    """The one-query nearest check answers each item as the per-item queries did."""
    items = [
        {"content": "Ada keeps 3 hens in the garden."},  # exact copy of a stored entry
        {"content": "Ada keeps 3 hens in the garden!"},  # near copy of a stored entry
        {"content": "Bo plays the cello on Sundays."},
        {"content": "Bo plays the cello on Sundays!"},  # near copy of the item before
    ]
    body = _post(client, setup, BATCH, {"items": items}).json()
    assert [(r["status"], r["reason"]) for r in body["results"]] == [
        ("duplicate", "duplicate_exact"),
        ("duplicate", "duplicate_similar"),
        ("created", None),
        ("duplicate", "duplicate_similar"),
    ]
    assert body["results"][3]["entry"]["id"] == body["results"][2]["entry"]["id"]


def test_the_entry_body_equals_the_serializers(setup):
    """`_entry_output` answers what EntryOutputSerializer answers, for every field's states."""
    agent, person = setup["agent"], setup["person"]
    thread = thread_create(workspace=setup["workspace"], agent=agent, memory_user=person)
    (message,) = thread_append_messages(thread=thread, messages=[{"role": "user", "content": "I got a dog."}])
    newer = entry_factory(agent=agent, memory_user=person, content="Ada got a dog.")
    older = entry_factory(
        agent=agent,
        memory_user=person,
        content="Ada has no pets.",
        status=EpisodicEntry.Status.SUPERSEDED,
        embed=False,
    )
    EpisodicEntry.objects.filter(pk=older.pk).update(
        valid_to=timezone.now(),
        superseded_by=newer,
        source_thread=thread,
        source_message_ids=[str(message.pk)],
        times_confirmed=2,
        last_confirmed_at=timezone.now(),
        consolidation={"decision": "supersede", "old": None, "new": str(newer.pk), "similarity": 0.7},
        metadata={"origin": "direct", "k": [1, {"x": None}]},
    )
    for entry in EpisodicEntry.objects.select_related("agent").all():
        assert _entry_output(entry) == EntryOutputSerializer(entry).data


def test_nearest_stored_costs_one_probe_per_vector_without_statistics(setup):
    """The dedupe's nearest-stored query reads each stored vector's entry by primary key.
    Joined with the searchable rows, a table never ANALYZEd (a new database, a bulk load
    before autovacuum) was planned as a scan of the whole searchable index per vector: 57
    buffers per vector at 1,000 vectors, 61 ms instead of 2, growing with the square."""
    from core.ranking import vector_literal
    from episodic.services.storing import _SIMILAR_ONE_SQL
    from episodic.tests.factories import TEST_EMBEDDING_MODEL, bag_of_words_vectors

    agent, person = setup["agent"], setup["person"]
    for index in range(400):
        entry_factory(agent=agent, memory_user=person, content=f"Note {index}: Ada likes the number {index}.")
    params = {
        "agent": agent.pk,
        "memory_user": person.pk,
        "model": TEST_EMBEDDING_MODEL,
        "qvec": vector_literal(bag_of_words_vectors(["Ada likes the number 7"])[0]),
    }
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stats WHERE tablename = 'episodes_episodicentry'")
        assert cursor.fetchone()[0] == 0  # no statistics: what the planner had in the report
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + _SIMILAR_ONE_SQL, params)
        plan = cursor.fetchone()[0][0]["Plan"]
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + _SIMILAR_ONE_SQL, params)
        text = "\n".join(row[0] for row in cursor.fetchall())
    assert plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0) < 8 * 405, text
    # The state is a subplan probed by primary key: no join the planner could reorder.
    assert "SubPlan" in text and "Join" not in text, text
    assert "Index Scan using episodes_episodicentry_pkey" in text, text
    # The nearest vector's entry is active: one probe, and the whole-scope scan never runs.
    assert "Index Searches: 1\n" in text and "(never executed)" in text, text


def _nearest_exact(*, agent, person, qvec) -> tuple[str, float]:
    """The nearest active, approved entry by the obvious query: every row's state, then sort."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT v.entry_id, 1 - (v.embedding <=> %s::vector)
            FROM episodes_entryembedding v JOIN episodes_episodicentry e ON e.id = v.entry_id
            WHERE v.agent_id = %s AND v.memory_user_id = %s AND e.status = 'active' AND e.review = 'approved'
            ORDER BY v.embedding <=> %s::vector, v.entry_id
            LIMIT 1
            """,
            [qvec, agent.pk, person.pk, qvec],
        )
        entry_id, similarity = cursor.fetchone()
    return str(entry_id), similarity


@pytest.mark.parametrize("closed", [NEAREST_STATE_PROBES + delta for delta in (-2, -1, 0, 5)])
def test_nearest_stored_is_exact_when_the_nearest_entries_are_closed(setup, closed):
    """An entry revised many times leaves its closed versions nearest to a new text: the
    answer is still the nearest active entry, within the probes or beyond them."""
    from core.ranking import vector_literal
    from episodic.services.storing import _similar_stored_many
    from episodic.tests.factories import TEST_EMBEDDING_MODEL, bag_of_words_vectors

    agent, person = setup["agent"], setup["person"]
    EpisodicEntry.objects.filter(agent=agent).update(status=EpisodicEntry.Status.SUPERSEDED)
    active = entry_factory(agent=agent, memory_user=person, content="Ada owns blue bicycles.")
    for index in range(closed):
        status = EpisodicEntry.Status.SUPERSEDED if index % 2 else EpisodicEntry.Status.REJECTED
        content = f"Ada owns {index} red bicycles."
        entry_factory(agent=agent, memory_user=person, content=content, status=status)
    held = entry_factory(agent=agent, memory_user=person, content="Ada owns red bicycles, held.")
    EpisodicEntry.objects.filter(pk=held.pk).update(review=EpisodicEntry.Review.HELD)
    vector = bag_of_words_vectors(["Ada owns red bicycles"])[0]
    qvec = vector_literal(vector)
    model = TEST_EMBEDDING_MODEL
    (found,) = _similar_stored_many(agent=agent, memory_user=person, vectors=[vector], model=model)
    # The many-vector path (a batch) answers the same.
    found_many = _similar_stored_many(agent=agent, memory_user=person, vectors=[vector, vector], model=model)
    assert [entry_id for entry_id, _ in found_many] == [found[0], found[0]]
    assert [similarity for _, similarity in found_many] == pytest.approx([found[1], found[1]], abs=1e-6)
    entry_id, similarity = _nearest_exact(agent=agent, person=person, qvec=qvec)
    assert found == (str(active.pk), pytest.approx(similarity))
    assert entry_id == str(active.pk)
    # The closed versions and the held entry are all nearer than the one active entry.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM episodes_entryembedding WHERE memory_user_id = %s "
            "AND 1 - (embedding <=> %s::vector) > %s",
            [person.pk, qvec, similarity],
        )
        assert cursor.fetchone()[0] == closed + 1


def test_nearest_stored_finds_nothing_in_a_scope_of_closed_entries(setup):
    from episodic.services.storing import _similar_stored_many
    from episodic.tests.factories import TEST_EMBEDDING_MODEL, bag_of_words_vectors

    agent, person = setup["agent"], setup["person"]
    EpisodicEntry.objects.filter(agent=agent).update(status=EpisodicEntry.Status.SUPERSEDED)
    for index in range(NEAREST_STATE_PROBES + 3):
        rejected = EpisodicEntry.Status.REJECTED
        entry_factory(agent=agent, memory_user=person, content=f"Bo had {index} kites.", status=rejected)
    vector = bag_of_words_vectors(["Bo had kites"])[0]
    for count in (1, 3):
        found = _similar_stored_many(
            agent=agent,
            memory_user=person,
            vectors=[vector] * count,
            model=TEST_EMBEDDING_MODEL,
        )
        assert found == [(None, 0.0)] * count


def test_nearest_stored_for_many_vectors_is_exact_across_chunks(setup, monkeypatch):
    """A batch's vectors are compared with the scope's vectors read in chunks: each answer is
    the one the obvious query gives, whichever chunk holds it, and only active, approved
    entries of this person under this model count."""
    from core.ranking import vector_literal
    from episodic.services import storing
    from episodic.tests.factories import TEST_EMBEDDING_MODEL, bag_of_words_vectors

    monkeypatch.setattr(storing, "_SCOPE_VECTORS_CHUNK", 7)
    agent, person = setup["agent"], setup["person"]
    other = memory_user_factory(setup["workspace"], canonical_id="telegram:2")
    words = ["kites", "cello", "hens", "bicycles", "lisbon", "garden", "tea", "snow"]
    for index in range(40):
        content = f"Ada likes {words[index % 8]} and {words[(index * 3) % 8]} number {index}."
        entry_factory(agent=agent, memory_user=person, content=content)
    entry_factory(agent=agent, memory_user=other, content="Ada likes kites and cello.")  # another person
    closed = entry_factory(agent=agent, memory_user=person, content="Ada likes tea and snow.")
    EpisodicEntry.objects.filter(pk=closed.pk).update(status=EpisodicEntry.Status.SUPERSEDED)
    texts = ["Ada likes kites and cello", "Ada likes tea and snow", "number 17", "nothing shared here"]
    vectors = bag_of_words_vectors(texts)
    literals = [vector_literal(v) for v in vectors]
    found = storing._similar_stored_many(
        agent=agent, memory_user=person, vectors=vectors, model=TEST_EMBEDDING_MODEL
    )
    for (entry_id, similarity), qvec in zip(found, literals, strict=True):
        best_id, best = _nearest_exact(agent=agent, person=person, qvec=qvec)
        assert similarity == pytest.approx(best, abs=1e-6)
        if best > 0:
            # Ties aside (equal vectors), the same entry.
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT 1 - (embedding <=> %s::vector) FROM episodes_entryembedding WHERE entry_id = %s",
                    [qvec, entry_id],
                )
                assert cursor.fetchone()[0] == pytest.approx(best, abs=1e-6)
            assert EpisodicEntry.objects.get(pk=entry_id).memory_user_id == person.pk
            assert EpisodicEntry.objects.get(pk=entry_id).status == EpisodicEntry.Status.ACTIVE


def test_nearest_stored_for_vectors_still_embedding_is_what_the_vectors_give(setup, monkeypatch):
    """Vectors given as a function (a batch still embedding) are awaited once rows are read:
    within the read-ahead, past it, and in a scope with no rows, the answers and the rows
    read are those of the vectors themselves; a function that returns None compares nothing."""
    from episodic.services import storing
    from episodic.tests.factories import TEST_EMBEDDING_MODEL, bag_of_words_vectors

    monkeypatch.setattr(storing, "_SCOPE_VECTORS_CHUNK", 3)
    agent, person = setup["agent"], setup["person"]
    words = ["kites", "cello", "hens", "bicycles", "lisbon", "garden", "tea", "snow"]
    for index in range(20):
        entry_factory(agent=agent, memory_user=person, content=f"Bo likes {words[index % 8]} {index}.")
    vectors = bag_of_words_vectors(["Bo likes tea", "Bo likes snow 15", "garden hens"])
    scope = {"agent": agent, "memory_user": person, "model": TEST_EMBEDDING_MODEL}
    given_read = set()
    given = storing._similar_stored_many(**scope, vectors=vectors, read_into=given_read)
    for ahead in (1, 4, 100):
        monkeypatch.setattr(storing, "_SCOPE_READ_AHEAD", ahead)
        vectors_get, read = mock.Mock(return_value=vectors), set()
        found = storing._similar_stored_many(**scope, vectors=vectors_get, read_into=read)
        assert found == given and read == given_read
        vectors_get.assert_called_once_with()
    assert storing._similar_stored_many(**scope, vectors=lambda: None) is None
    nobody = memory_user_factory(setup["workspace"], canonical_id="telegram:9")
    assert (
        storing._similar_stored_many(
            agent=agent, memory_user=nobody, model=TEST_EMBEDDING_MODEL, vectors=lambda: vectors
        )
        == [(None, 0.0)] * 3
    )


def test_nearest_stored_for_many_vectors_compares_only_vectors_of_their_length(setup, monkeypatch):
    """A scope may hold vectors of another length under the same model name (an endpoint that
    changed its dimensions): the batch's read compares each length only with its own, and
    leaves out entries that are held or merged in review as it leaves out closed ones."""
    from episodic.services import storing
    from episodic.tests.factories import DIMENSIONS, TEST_EMBEDDING_MODEL, bag_of_words_vectors

    monkeypatch.setattr(storing, "_SCOPE_VECTORS_CHUNK", 4)
    agent, person = setup["agent"], setup["person"]
    longer = entry_factory(agent=agent, memory_user=person, content="Cy rides red bicycles.", embed=False)
    vector = bag_of_words_vectors(["Cy rides red bicycles"])[0]
    EntryEmbedding.objects.create(
        entry=longer,
        workspace=setup["workspace"],
        agent=agent,
        memory_user=person,
        model=TEST_EMBEDDING_MODEL,
        dimensions=DIMENSIONS * 2,
        embedding=vector + vector,  # The same words, twice the length: cosine 1 if compared.
    )
    near = entry_factory(agent=agent, memory_user=person, content="Cy rides red bicycles on Sundays.")
    for review in (EpisodicEntry.Review.HELD, EpisodicEntry.Review.MERGED):
        twin = entry_factory(agent=agent, memory_user=person, content="Cy rides red bicycles.")
        EpisodicEntry.objects.filter(pk=twin.pk).update(review=review)
    read = set()
    found = storing._similar_stored_many(
        agent=agent, memory_user=person, vectors=[vector, vector], model=TEST_EMBEDDING_MODEL, read_into=read
    )
    assert [entry_id for entry_id, _ in found] == [str(near.pk)] * 2
    assert found[0][1] < 0.99
    # The rows compared: every active, approved entry's vector, of either length.
    active = EntryEmbedding.objects.filter(
        memory_user=person,
        entry__status=EpisodicEntry.Status.ACTIVE,
        entry__review=EpisodicEntry.Review.APPROVED,
    )
    assert read == set(active.values_list("pk", flat=True))
    assert EntryEmbedding.objects.get(entry=longer).pk in read


def test_an_item_near_a_stored_copy_is_judged_on_its_own(setup, client):
    """An item dropped as a near copy of a stored entry takes no later item of the batch with
    it: the later item is compared with the items kept and the stored entries, not with it."""
    stored = "kilo lima mike november oscar papa quebec romeo sierra tango"
    near_stored = stored + " uniform victor whiskey"
    near_item = near_stored + " xray"
    entry_factory(agent=setup["agent"], memory_user=setup["person"], content=stored)
    threshold = memory_settings_for(setup["agent"]).dedupe_threshold
    s, a, b = bag_of_words_vectors([stored, near_stored, near_item])
    cos = lambda u, v: sum(x * y for x, y in zip(u, v, strict=True))  # noqa: E731
    assert cos(s, a) >= threshold and cos(a, b) >= threshold and cos(s, b) < threshold

    body = _post(client, setup, BATCH, {"items": [{"content": near_stored}, {"content": near_item}]}).json()
    first, second = body["results"]
    assert first["reason"] == "duplicate_similar"
    assert second["reason"] != "duplicate_similar", second


@pytest.mark.parametrize("items", [1, 3])
def test_by_rule_a_near_twin_stored_just_before_the_lock_is_a_twin(setup, items):
    """Compared only under the lock, an add still sees what another call stored while it
    was embedding (the window the lock closes), for one item or a batch."""

    class Provider:
        model_name = TEST_EMBEDDING_MODEL

        def embed(self, texts):
            return bag_of_words_vectors(texts)

    agent, person = setup["agent"], setup["person"]
    raced = []

    def lock_after_the_other_stored(**kwargs):
        raced.append(
            entry_factory(agent=agent, memory_user=person, content="Bo moved to Lisbon, works at a bakery.")
        )
        person_lock(**kwargs)

    contents = [
        "Bo moved to Lisbon and works at a bakery.",
        "Cy plays chess weekly.",
        "Di grows basil outside.",
    ]
    with mock.patch("episodic.services.storing._person_lock", lock_after_the_other_stored):
        results = entries_create(
            agent=agent,
            memory_user=person,
            items=[{"content": c} for c in contents[:items]],
            actor="test",
            provider=Provider(),
        )
    assert results[0].created is False and results[0].reason == "duplicate_similar"
    assert results[0].entry.pk == raced[0].pk
    assert all(r.created for r in results[1:])


class _GatedLocal(LocalEmbeddingProvider):
    """The local provider, embedding only once the person's lock is taken (or failing)."""

    def embed(self, texts):
        if not _lock_taken.wait(10):
            raise AssertionError("the person's lock was not taken while the text was embedding")
        if _embedding_fails.is_set():
            raise EmbeddingError("the model failed")
        return bag_of_words_vectors(texts)


_lock_taken = threading.Event()
_embedding_fails = threading.Event()


@pytest.fixture
def gates(setup):
    _lock_taken.clear()
    _embedding_fails.clear()
    yield
    _lock_taken.clear()
    _embedding_fails.clear()


@pytest.fixture
def gated(gates):
    order = []

    def lock(**kwargs):
        order.append("lock")
        person_lock(**kwargs)
        _lock_taken.set()

    real_started = storing.embed_started

    def started(provider, texts):
        order.append("embedding started")
        return real_started(provider, texts)

    with (
        mock.patch("episodic.services.storing._person_lock", lock),
        mock.patch("episodic.services.storing.embed_started", started),
    ):
        yield order


def test_by_rule_one_add_embeds_on_the_local_model_while_the_lock_is_taken(setup, gated):
    """The embedding runs beside the lock and the second exact check (it waits for the lock
    here, so run in turn the add would fail), and the vector is stored and compared."""
    agent, person = setup["agent"], setup["person"]
    (result,) = entries_create(
        agent=agent,
        memory_user=person,
        items=[{"content": "Ada booked a flight to Lisbon."}],
        actor="test",
        provider=_GatedLocal(),
    )
    assert result.created and gated == ["embedding started", "lock"]
    vector = EntryEmbedding.objects.get(entry=result.entry)
    assert vector.model == result.entry.embedding_model == _GatedLocal().model_name
    assert list(vector.embedding) == pytest.approx(
        bag_of_words_vectors(["Ada booked a flight to Lisbon."])[0]
    )
    (again,) = entries_create(
        agent=agent,
        memory_user=person,
        items=[{"content": "Ada booked a flight to Lisbon!"}],
        actor="test",
        provider=_GatedLocal(),
    )
    assert not again.created and again.reason == "duplicate_similar" and again.entry.pk == result.entry.pk


def test_a_failed_background_embedding_stores_the_entry_for_the_task(setup, gated):
    _embedding_fails.set()
    with mock.patch("episodic.tasks.entry_embed_task.delay_on_commit") as later:
        (result,) = entries_create(
            agent=setup["agent"],
            memory_user=setup["person"],
            items=[{"content": "Ada paints on Sundays."}],
            actor="test",
            provider=_GatedLocal(),
        )
    assert result.created and result.entry.embedding_model == ""
    assert not EntryEmbedding.objects.filter(entry=result.entry).exists()
    later.assert_called_once_with([str(result.entry.pk)])


class _Hung(LocalEmbeddingProvider):
    """The local provider, whose vectors come only once released (after the test)."""

    release = threading.Event()

    def embed(self, texts):
        self.release.wait(30)
        return bag_of_words_vectors(texts)


@pytest.mark.parametrize("items", [1, 3])
def test_an_embedding_that_never_returns_stores_the_entries_for_the_task(setup, items):
    """After EMBEDDING_LOCAL_WAIT_SECONDS the add goes on without vectors, as after a failed
    embedding: the entries are stored, and the task embeds them later."""
    _Hung.release.clear()
    try:
        with (
            override_settings(EMBEDDING_LOCAL_WAIT_SECONDS=0.2),
            mock.patch("episodic.tasks.entry_embed_task.delay_on_commit") as later,
        ):
            results = entries_create(
                agent=setup["agent"],
                memory_user=setup["person"],
                items=[
                    {"content": f"Ada paints {kind} on Sundays."}
                    for kind in ("birds", "boats", "barns")[:items]
                ],
                actor="test",
                provider=_Hung(),
            )
    finally:
        _Hung.release.set()
    assert all(r.created and r.entry.embedding_model == "" for r in results)
    assert not EntryEmbedding.objects.filter(entry__in=[r.entry for r in results]).exists()
    later.assert_called_once_with([str(r.entry.pk) for r in results])


class _ReadWhileEmbedding(LocalEmbeddingProvider):
    """The local provider, embedding only once the stored vectors are being read."""

    def __init__(self, order):
        super().__init__()
        self.order = order

    def embed(self, texts):
        if not _stored_read.wait(10):
            raise AssertionError("the stored vectors were not read while the batch was embedding")
        if _embedding_fails.is_set():
            raise EmbeddingError("the model failed")
        self.order.append("embedded")
        return bag_of_words_vectors(texts)


_stored_read = threading.Event()


@pytest.fixture
def reading(gates):
    _stored_read.clear()
    order = []
    real_chunks = storing._scope_vector_chunks

    def chunks(sql, params):
        rows = real_chunks(sql, params)
        first = next(rows, None)  # The cursor declared and its first rows fetched.
        if not _stored_read.is_set():
            order.append("stored vectors read")
            _stored_read.set()
        if first is not None:
            yield first
            yield from rows

    def lock(**kwargs):
        order.append("lock")
        person_lock(**kwargs)

    with (
        mock.patch("episodic.services.storing._scope_vector_chunks", chunks),
        mock.patch("episodic.services.storing._person_lock", lock),
    ):
        yield order
    _stored_read.clear()


def test_a_batch_is_embedded_while_the_stored_vectors_are_read_and_before_the_lock(setup, reading):
    """The local model embeds a batch on its own threads while the person's stored vectors
    are read; the vectors are in hand before the person's lock is taken, where only rows
    stored since are read."""
    agent, person = setup["agent"], setup["person"]
    items = [{"content": "Bo grows basil on the balcony."}, {"content": "Cy plays chess on Sundays."}]
    first = entries_create(
        agent=agent, memory_user=person, items=items, actor="test", provider=_ReadWhileEmbedding(reading)
    )
    assert all(r.created for r in first)
    assert reading == ["stored vectors read", "embedded", "lock"]
    reading.clear()
    _stored_read.clear()
    items = [{"content": "Bo grows basil on the balcony!"}, {"content": "Di swims every morning."}]
    copy, new = entries_create(
        agent=agent, memory_user=person, items=items, actor="test", provider=_ReadWhileEmbedding(reading)
    )
    assert reading == ["stored vectors read", "embedded", "lock"]
    assert not copy.created and copy.reason == "duplicate_similar" and copy.entry.pk == first[0].entry.pk
    assert new.created and EntryEmbedding.objects.filter(entry=new.entry).exists()


def test_a_batch_with_a_chat_models_consolidation_is_read_while_it_embeds(setup, reading):
    """A model's consolidation is decided before the lock: a batch's stored vectors are read
    while it is embedded there too, and a similar stored entry goes to the model."""
    agent, person = setup["agent"], setup["person"]
    provider = _ReadWhileEmbedding(reading)
    items = [{"content": "Bo lives in Lisbon now."}, {"content": "Di swims every morning."}]
    stored, _ = entries_create(agent=agent, memory_user=person, items=items, actor="test", provider=provider)
    reading.clear()
    _stored_read.clear()
    use_test_chat(setup["server"], setup["workspace"])
    setup["server"].chat_replies.append(json.dumps({"decision": "supersede", "reason": "Moved."}))
    items = [{"content": "Bo lives in Porto now."}, {"content": "Cy plays chess on Sundays."}]
    moved, other = entries_create(
        agent=agent, memory_user=person, items=items, actor="test", provider=provider
    )
    assert reading == ["stored vectors read", "embedded", "lock"]
    assert moved.created and moved.entry.consolidation["decision"] == "supersede"
    assert moved.entry.consolidation["old"] == str(stored.entry.pk) and other.created
    stored.entry.refresh_from_db()
    assert stored.entry.status == EpisodicEntry.Status.SUPERSEDED


def test_a_batch_whose_background_embedding_fails_is_stored_for_the_task(setup, reading):
    _embedding_fails.set()
    items = [{"content": "Bo grows basil."}, {"content": "Cy plays chess."}]
    with mock.patch("episodic.tasks.entry_embed_task.delay_on_commit") as later:
        results = entries_create(
            agent=setup["agent"],
            memory_user=setup["person"],
            items=items,
            actor="test",
            provider=_ReadWhileEmbedding(reading),
        )
    assert all(r.created and r.entry.embedding_model == "" for r in results)
    later.assert_called_once_with([str(r.entry.pk) for r in results])


def test_a_chat_models_consolidation_embeds_before_the_lock(setup, gates):
    """A model's decision is made before the lock, so its one text is embedded there, not
    started in the background."""
    _lock_taken.set()
    use_test_chat(setup["server"], setup["workspace"])
    setup["server"].chat_replies.append(json.dumps({"decision": "add", "reason": "New."}))
    with mock.patch("episodic.services.storing.embed_started") as started:
        (result,) = entries_create(
            agent=setup["agent"],
            memory_user=setup["person"],
            items=[{"content": "Di swims daily."}],
            actor="test",
            provider=_GatedLocal(),
        )
    assert result.created and EntryEmbedding.objects.filter(entry=result.entry).exists()
    started.assert_not_called()


@pytest.mark.django_db(transaction=True)
def test_a_supersede_commits_its_close_and_the_new_row_together():
    """The stored entry is closed, pointing at the new one, before the new row, its vector
    and its event are inserted (one statement): the deferred foreign keys hold at a real
    commit, which a test's rolled-back transaction never reaches."""
    workspace = workspace_create(name="Acme")
    agent = agent_get_or_create(workspace=workspace, slug="assistant")
    person = memory_user_factory(workspace)
    with OpenAITestServer() as server:
        use_test_embeddings(server, workspace)
        lisbon = entry_factory(agent=agent, memory_user=person, content="Ada lives in Lisbon.")
        (result,) = entries_create(
            agent=agent, memory_user=person, items=[{"content": "Ada now lives in Porto."}], actor="test"
        )
    assert result.created and result.entry.consolidation["decision"] == "supersede"
    lisbon.refresh_from_db()
    assert lisbon.status == "superseded" and lisbon.superseded_by_id == result.entry.pk
    stored = EpisodicEntry.objects.get(pk=result.entry.pk)
    assert stored.consolidation == result.entry.consolidation
    assert EntryEmbedding.objects.filter(entry=stored, model=stored.embedding_model).count() == 1
    created = AuditEvent.objects.get(entity_id=str(stored.pk), action="create")
    assert created.changes["decision"] == "supersede" and created.txid is not None

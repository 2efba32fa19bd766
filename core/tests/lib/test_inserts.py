"""Rows of several models inserted together (core.lib.inserts): one statement for single rows,
a binary COPY a table for more."""

import numpy as np
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now
from django.test import TransactionTestCase
from django.test.utils import CaptureQueriesContext

from core.lib.inserts import rows_insert
from core.models import AuditEvent
from core.services import agent_get_or_create, workspace_create
from core.testing import MemoryTestCase
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services.normalize import entry_content_hash
from episodic.tests.factories import memory_user_factory


def _entry(agent, person, content, **extra):
    return EpisodicEntry(
        workspace=agent.workspace,
        agent=agent,
        memory_user=person,
        content=content,
        content_hash=entry_content_hash(content),
        source=EpisodicEntry.Source.AGENT_DIRECT,
        **extra,
    )


def _vector(entry, value):
    return EntryEmbedding(
        entry=entry,
        workspace_id=entry.workspace_id,
        agent_id=entry.agent_id,
        memory_user_id=entry.memory_user_id,
        model="m",
        dimensions=3,
        embedding=[value, 0.5, 0.25],
    )


class RowsInsertTests(MemoryTestCase):
    def setUp(self):
        self.person = memory_user_factory(self.workspace)

    def test_three_tables_in_one_statement_as_bulk_create_stores_them(self):
        """An entry, the vector that references it and an audit event: one round trip, and
        the rows equal what `bulk_create` stores from the same objects."""
        ours = [_entry(self.agent, self.person, "Ada adopted a cat.", metadata={"tags": ["pets"]})]
        theirs = [_entry(self.agent, self.person, "Ada adopted a dog.", metadata={"tags": ["pets"]})]
        event = AuditEvent(
            workspace=self.workspace,
            actor="system",
            action="create",
            entity_type="episodic_entry",
            entity_id=str(ours[0].pk),
            changes={"source": "agent_direct"},
        )
        with self.assertNumQueries(1):
            rows_insert(
                (EpisodicEntry, ours), (EntryEmbedding, [_vector(ours[0], 0.125)]), (AuditEvent, [event])
            )
        EpisodicEntry.objects.bulk_create(theirs)
        EntryEmbedding.objects.bulk_create([_vector(theirs[0], 0.125)])

        assert not ours[0]._state.adding and ours[0]._state.db == "default"
        mine = EpisodicEntry.objects.get(pk=ours[0].pk)
        other = EpisodicEntry.objects.get(pk=theirs[0].pk)
        differ = {"id", "content", "content_hash", "created_at", "updated_at", "search_vector", "valid_from"}
        for field in EpisodicEntry._meta.concrete_fields:
            if field.name not in differ:
                assert getattr(mine, field.attname) == getattr(other, field.attname), field.name
        assert mine.created_at is not None and "cat" in mine.search_vector
        vector = EntryEmbedding.objects.get(entry=mine)
        assert list(vector.embedding) == [0.125, 0.5, 0.25] and vector.memory_user_id == self.person.pk
        stored = AuditEvent.objects.get(entity_id=str(mine.pk))
        assert stored.changes == {"source": "agent_direct"} and stored.txid is not None

    def test_a_row_referencing_a_missing_one_fails_at_commit_and_stores_nothing(self):
        """The foreign key is checked at commit (deferred), so a vector of an entry that is
        in no group fails there, with the other rows of the statement."""
        ghost = _entry(self.agent, self.person, "Never stored.")
        entry = _entry(self.agent, self.person, "Ada moved to Lisbon.")
        with self.assertRaises(IntegrityError), transaction.atomic():
            rows_insert((EpisodicEntry, [entry]), (EntryEmbedding, [_vector(ghost, 0.5)]))
            with transaction.get_connection().cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        assert not EpisodicEntry.objects.filter(pk=entry.pk).exists()

    def test_empty_groups_are_skipped_and_nothing_is_sent_for_none(self):
        with self.assertNumQueries(0):
            rows_insert((EpisodicEntry, []), (AuditEvent, []))
        entry = _entry(self.agent, self.person, "Ada likes tea.")
        with self.assertNumQueries(1):
            rows_insert((EpisodicEntry, [entry]), (AuditEvent, []))
        assert EpisodicEntry.objects.filter(pk=entry.pk).exists()

    def test_many_rows_go_by_one_binary_copy_a_table_and_auto_keys_are_left_unread(self):
        entries = [_entry(self.agent, self.person, f"Fact number {n}.") for n in range(30)]
        events = [
            AuditEvent(
                workspace=self.workspace,
                actor="system",
                action="create",
                entity_type="episodic_entry",
                entity_id=str(e.pk),
            )
            for e in entries
        ]
        with CaptureQueriesContext(connection) as queries:
            rows_insert((EpisodicEntry, entries), (AuditEvent, events))
        sent = [query["sql"] for query in queries.captured_queries]
        tables = [sql.split(" (")[0] for sql in sent]
        assert tables == ['COPY "episodes_episodicentry"', 'COPY "core_auditevent"']
        assert all(sql.endswith("FROM STDIN (FORMAT BINARY)") for sql in sent)
        assert EpisodicEntry.objects.filter(pk__in=[e.pk for e in entries]).count() == 30
        assert AuditEvent.objects.filter(entity_id__in=[str(e.pk) for e in entries]).count() == 30
        assert all(event.pk is None for event in events)
        assert all(not e._state.adding and e._state.db == "default" for e in entries + events)

    def test_copied_rows_equal_what_bulk_create_stores_from_the_same_values(self):
        """Every column of every type the three tables hold, hostile text, nulls, JSON and
        vectors (fp32 values, doubles, zeros and a value near zero) read back as `bulk_create`
        stores them."""
        hostile = "Ada's \\ path %s %(x)s $1 '); DROP TABLE x; -- ü 🐈\ttab\nline"
        rng = np.random.default_rng(5)
        values = [rng.standard_normal(384), rng.standard_normal(384).astype(np.float32), np.zeros(384)]
        values[2][7] = 1e-33

        def rows(prefix):
            entries = [
                _entry(
                    self.agent,
                    self.person,
                    f"{prefix} {n} {hostile}",
                    evidence=hostile,
                    metadata={"note": hostile, "n": [1, 2.5, None], "deep": {"a": [True, False]}},
                    source_message_ids=[n, hostile],
                    valid_to=None if n else self.person.created_at,
                    times_confirmed=n,
                )
                for n in range(3)
            ]
            vectors = [
                EntryEmbedding.of(entry, value.tolist() if n else value, model="m")
                for n, (entry, value) in enumerate(zip(entries, values, strict=True))
            ]
            return entries, vectors

        ours, our_vectors = rows("copied")
        with CaptureQueriesContext(connection) as queries:
            rows_insert((EpisodicEntry, ours), (EntryEmbedding, our_vectors))
        assert len(queries) == 2 and all(q["sql"].startswith("COPY") for q in queries.captured_queries)
        theirs, their_vectors = rows("created")
        EpisodicEntry.objects.bulk_create(theirs)
        EntryEmbedding.objects.bulk_create(their_vectors)

        differ = {"id", "content", "content_hash", "created_at", "updated_at", "search_vector", "valid_from"}
        for mine, other in zip(ours, theirs, strict=True):
            mine, other = EpisodicEntry.objects.get(pk=mine.pk), EpisodicEntry.objects.get(pk=other.pk)
            assert mine.content.endswith(hostile) and "copi" in mine.search_vector
            for field in EpisodicEntry._meta.concrete_fields:
                if field.name not in differ:
                    assert getattr(mine, field.attname) == getattr(other, field.attname), field.name
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT e.content, v.embedding::text, v.dimensions, v.model FROM episodes_entryembedding v"
                " JOIN episodes_episodicentry e ON e.id = v.entry_id WHERE e.memory_user_id = %s",
                [self.person.pk],
            )
            stored = {tuple(content.split(" ")[:2]): row for content, *row in cursor.fetchall()}
        for n in range(3):
            assert stored["copied", str(n)] == stored["created", str(n)], n

    def test_execute_wrappers_see_each_copy(self):
        seen = []

        def wrapper(execute, sql, params, many, context):
            seen.append(sql.split(" (")[0])
            return execute(sql, params, many, context)

        entries = [_entry(self.agent, self.person, f"Fact number {n}.") for n in range(2)]
        with connection.execute_wrapper(wrapper):
            rows_insert((EpisodicEntry, entries), (EntryEmbedding, [_vector(e, 0.5) for e in entries]))
        assert seen == ['COPY "episodes_episodicentry"', 'COPY "episodes_entryembedding"']

    def test_a_value_the_database_computes_sends_its_table_in_the_statement(self):
        """COPY carries values only: an expression among many rows takes the INSERT."""
        entries = [_entry(self.agent, self.person, f"Fact number {n}.") for n in range(3)]
        entries[1].valid_from = Now()
        with CaptureQueriesContext(connection) as queries:
            rows_insert((EpisodicEntry, entries))
        (query,) = queries.captured_queries
        assert query["sql"].startswith("INSERT") and "STATEMENT_TIMESTAMP()" in query["sql"]
        assert EpisodicEntry.objects.get(pk=entries[1].pk).valid_from is not None

    def test_mixed_keys_are_refused_before_anything_is_sent(self):
        kept = AuditEvent(
            pk=10**9, workspace=self.workspace, actor="a", action="create", entity_type="x", entity_id="1"
        )
        new = AuditEvent(workspace=self.workspace, actor="a", action="create", entity_type="x", entity_id="2")
        with self.assertNumQueries(0), self.assertRaises(ValueError):
            rows_insert((AuditEvent, [kept, new]))

    def test_a_column_every_object_leaves_to_its_database_default_is_left_out(self):
        """The database fills it as DEFAULT would; a column one object sets is sent for all."""
        event = {"workspace": self.workspace, "actor": "a", "action": "create"}
        events = [AuditEvent(**event, entity_type="x", entity_id=str(n)) for n in range(3)]
        with CaptureQueriesContext(connection) as queries:
            rows_insert((AuditEvent, events))
        assert '"txid"' not in queries.captured_queries[0]["sql"]
        (txid,) = set(AuditEvent.objects.filter(entity_type="x").values_list("txid", flat=True))
        assert txid is not None

        given = AuditEvent(**event, entity_type="y", entity_id="1", txid=7)
        default = AuditEvent(**event, entity_type="y", entity_id="2")
        with CaptureQueriesContext(connection) as queries:
            rows_insert((AuditEvent, [given, default]))
        assert '"txid"' in queries.captured_queries[0]["sql"]
        stored = dict(AuditEvent.objects.filter(entity_type="y").values_list("entity_id", "txid"))
        assert stored == {"1": 7, "2": txid}

    def test_values_are_sent_apart_from_the_statement_and_stored_intact(self):
        """Quotes, backslashes, placeholders and SQL in a value are data: the statement's text
        holds placeholders only, and the rows hold the values as given."""
        hostile = "Ada's \\ path %s %(x)s $1 '); DROP TABLE episodes_episodicentry; -- ü 🐈"
        entry = _entry(self.agent, self.person, hostile, metadata={"note": hostile, "n": [1, 2.5, None]})
        with CaptureQueriesContext(connection) as queries:
            rows_insert((EpisodicEntry, [entry]))
        assert "DROP TABLE" not in queries.captured_queries[0]["sql"]
        stored = EpisodicEntry.objects.get(pk=entry.pk)
        assert stored.content == hostile
        assert stored.metadata == {"note": hostile, "n": [1, 2.5, None]}
        assert stored.created_at == entry.created_at

    def test_more_values_than_one_bind_message_carries_are_bound_on_the_client(self):
        # Django sends most tables' columns as arrays, but a vector takes nine values of a
        # row, so 7,300 need more than the 65,535 one message carries. A value the database
        # computes keeps them from COPY.
        entries = [_entry(self.agent, self.person, f"Fact number {n}.") for n in range(7_300)]
        rows_insert((EpisodicEntry, entries))
        vectors = [_vector(entry, 0.5) for entry in entries]
        vectors[0].created_at = Now()
        with CaptureQueriesContext(connection) as queries:
            rows_insert((EntryEmbedding, vectors))
        assert queries.captured_queries[0]["sql"].startswith("INSERT")
        assert "$1" not in queries.captured_queries[0]["sql"]
        assert EntryEmbedding.objects.filter(entry__memory_user=self.person).count() == 7_300


class RowsInsertCommitTests(TransactionTestCase):
    """Outside a caller's transaction (autocommit), as a task or a command may call it."""

    def setUp(self):
        self.agent = agent_get_or_create(workspace=workspace_create(name="Copied"), slug="assistant")
        self.person = memory_user_factory(self.agent.workspace)

    def test_a_failing_copy_stores_none_of_the_groups(self):
        """The second table's COPY breaks a unique constraint: Django's IntegrityError, and
        the first table's rows, already sent, are not kept either."""
        entries = [_entry(self.agent, self.person, f"Fact number {n}.") for n in range(3)]
        twice = [_vector(entries[0], 0.5), _vector(entries[0], 0.25)]
        with self.assertRaises(IntegrityError):
            rows_insert((EpisodicEntry, entries), (EntryEmbedding, twice))
        assert not EpisodicEntry.objects.filter(pk__in=[e.pk for e in entries]).exists()
        assert all(e._state.adding for e in entries)

    def test_copies_commit_together_outside_a_transaction(self):
        entries = [_entry(self.agent, self.person, f"Fact number {n}.") for n in range(3)]
        rows_insert((EpisodicEntry, entries), (EntryEmbedding, [_vector(e, 0.5) for e in entries]))
        assert connection.get_autocommit() and not connection.in_atomic_block
        assert EntryEmbedding.objects.filter(entry__in=entries).count() == 3

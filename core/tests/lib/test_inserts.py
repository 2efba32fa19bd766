"""Rows of several models inserted in one statement (core.lib.inserts)."""

from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from core.lib.inserts import rows_insert
from core.models import AuditEvent
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

    def test_many_rows_and_auto_keys_left_unread(self):
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
        with self.assertNumQueries(1):
            rows_insert((EpisodicEntry, entries), (AuditEvent, events))
        assert EpisodicEntry.objects.filter(pk__in=[e.pk for e in entries]).count() == 30
        assert AuditEvent.objects.filter(entity_id__in=[str(e.pk) for e in entries]).count() == 30
        assert all(event.pk is None for event in events)

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
        # row, so 7,300 need more than the 65,535 one message carries.
        entries = [_entry(self.agent, self.person, f"Fact number {n}.") for n in range(7_300)]
        rows_insert((EpisodicEntry, entries))
        with CaptureQueriesContext(connection) as queries:
            rows_insert((EntryEmbedding, [_vector(entry, 0.5) for entry in entries]))
        assert "$1" not in queries.captured_queries[0]["sql"]
        assert EntryEmbedding.objects.filter(entry__memory_user=self.person).count() == 7_300

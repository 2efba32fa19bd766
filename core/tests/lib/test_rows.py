"""Model instances from a statement built once (core.lib.rows)."""

from django.core.exceptions import FieldDoesNotExist
from django.db import transaction

from core.lib.rows import ModelRows
from core.models import Agent, Workspace
from core.testing import MemoryTestCase
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory, memory_user_factory
from identities.models import MemoryUser
from threads.models import Thread
from threads.services import thread_create


class ModelRowsTests(MemoryTestCase):
    def test_instances_equal_the_orms_field_for_field(self):
        """JSON fields decoded, arrays, nulls and dates as the ORM loads them, and the
        instance is a saved row of the database it came from."""
        person = memory_user_factory(self.workspace)
        entry = entry_factory(
            agent=self.agent,
            memory_user=person,
            metadata={"tags": ["pets"], "n": 2, "nested": {"a": None}},
            consolidation={"decision": "add", "similarity": 0.5},
            source_message_ids=["m1", "m2"],
        )
        rows = ModelRows(EpisodicEntry, deferred=("search_vector",))
        [loaded] = rows.fetch("WHERE id = ANY(%s)", [[entry.pk]])
        expected = EpisodicEntry.objects.defer("search_vector").get(pk=entry.pk)
        for field in EpisodicEntry._meta.concrete_fields:
            if field.name == "search_vector":
                continue
            assert getattr(loaded, field.attname) == getattr(expected, field.attname), field.name
        assert loaded.metadata == {"tags": ["pets"], "n": 2, "nested": {"a": None}}
        assert loaded.valid_to is None and loaded.superseded_by_id is None
        assert loaded._state.db == "default" and not loaded._state.adding

    def test_a_deferred_column_is_read_when_first_used(self):
        person = memory_user_factory(self.workspace)
        entry = entry_factory(agent=self.agent, memory_user=person, content="Ada adopted a cat named Miso.")
        [loaded] = ModelRows(EpisodicEntry, deferred=("search_vector",)).fetch("WHERE id = %s", [entry.pk])
        assert "search_vector" in loaded.get_deferred_fields()
        with self.assertNumQueries(1):
            assert "miso" in loaded.search_vector

    def test_no_row_gives_an_empty_list_and_each_row_its_instance(self):
        first = memory_user_factory(self.workspace, canonical_id="telegram:1")
        second = memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo")
        rows = ModelRows(MemoryUser)
        assert rows.fetch("WHERE id = %s", [self.agent.pk]) == []
        loaded = rows.fetch("WHERE workspace_id = %s ORDER BY canonical_id", [self.workspace.pk])
        assert [(u.pk, u.display_name) for u in loaded] == [(first.pk, "Ada"), (second.pk, "Bo")]


class ModelRowsRelatedTests(MemoryTestCase):
    """Forward foreign keys joined into the statement, cached as select_related caches them."""

    def test_joined_rows_equal_select_related_and_need_no_further_query(self):
        person = memory_user_factory(self.workspace)
        thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=person, title="Trip")
        rows = ModelRows(Thread, related=("agent", "memory_user", "workspace"))
        [loaded] = rows.fetch('WHERE "threads_thread"."id" = %s', [thread.pk])
        expected = Thread.objects.select_related("agent", "memory_user", "workspace").get(pk=thread.pk)
        with self.assertNumQueries(0):
            for name, model in (("agent", Agent), ("memory_user", MemoryUser), ("workspace", Workspace)):
                related, wanted = getattr(loaded, name), getattr(expected, name)
                assert isinstance(related, model)
                for field in model._meta.concrete_fields:
                    value = getattr(related, field.attname)
                    assert value == getattr(wanted, field.attname), (name, field.name)
                assert related._state.db == "default" and not related._state.adding
            for field in Thread._meta.concrete_fields:
                assert getattr(loaded, field.attname) == getattr(expected, field.attname), field.name

    def test_a_null_key_is_cached_as_none(self):
        thread = thread_create(workspace=self.workspace, agent=self.agent, title="No person")
        rows = ModelRows(Thread, related=("memory_user",))
        [loaded] = rows.fetch('WHERE "threads_thread"."id" = %s', [thread.pk])
        with self.assertNumQueries(0):
            assert loaded.memory_user is None
            assert loaded.memory_user_id is None

    def test_only_forward_keys_can_be_joined(self):
        for name in ("title", "messages"):
            with self.subTest(name=name), self.assertRaises(ValueError):
                ModelRows(Thread, related=(name,))

    def test_only_reads_the_named_columns_and_the_key(self):
        thread = thread_create(workspace=self.workspace, agent=self.agent, title="Trip")
        [loaded] = ModelRows(Thread, only=("message_seq", "summary_upto_id")).fetch(
            "WHERE id = %s", [thread.pk]
        )
        assert loaded.get_deferred_fields() == {
            f.attname
            for f in Thread._meta.concrete_fields
            if f.name not in {"id", "message_seq", "summary_upto_id"}
        }
        with self.assertNumQueries(0):
            assert (loaded.pk, loaded.message_seq, loaded.summary_upto_id) == (thread.pk, 0, None)

    def test_a_misspelt_column_fails_at_once(self):
        for options in ({"only": ("summary_upto",)}, {"deferred": ("summary_upto",)}):
            with self.subTest(**options), self.assertRaises(FieldDoesNotExist):
                ModelRows(Thread, **options)

    def test_a_key_is_named_by_its_field_or_its_column(self):
        thread = thread_create(workspace=self.workspace, agent=self.agent, title="Trip")
        for name in ("agent", "agent_id"):
            with self.subTest(name=name):
                [loaded] = ModelRows(Thread, only=(name,)).fetch("WHERE id = %s", [thread.pk])
                deferred = loaded.get_deferred_fields()
                assert "agent_id" not in deferred and "title" in deferred

    def test_keys_that_cannot_be_null_are_inner_joined_so_their_rows_can_be_locked(self):
        """PostgreSQL refuses FOR UPDATE on the nullable side of an outer join."""
        thread = thread_create(workspace=self.workspace, agent=self.agent, title="Trip")
        with transaction.atomic():
            rows = ModelRows(Thread, related=("agent", "workspace"))
            [locked] = rows.fetch('WHERE "threads_thread"."id" = %s FOR UPDATE', [thread.pk])
        assert (locked.agent, locked.workspace) == (self.agent, self.workspace)

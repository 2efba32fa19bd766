"""The import's data integrity: references hidden in JSON columns, vectors of rows
the target already holds, vectors whose length is not their dimensions, id lists of the wrong
shape."""

import json

from core.services import agent_get_or_create, workspace_create
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services.review import entry_review_approve
from episodic.tests.factories import entry_factory, use_test_embeddings
from facts.models import Fact, FactEmbedding
from facts.services import fact_remember
from identities.services import memory_user_create
from portability.models import ImportIdMap
from portability.registry import Scope
from portability.services import ImportFailed
from portability.tests.helpers import export_bytes, import_bytes, records
from procedures.models import Procedure, ProcedureEmbedding
from procedures.services import procedure_create
from store.models import StoreItem, StoreItemEmbedding
from store.services import store_item_put


def lines(rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def replaced(rows, type_name, **changes):
    return [{**r, **changes} if r.get("type") == type_name else r for r in rows]


class ImportIntegrityTestCase(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.target = workspace_create(name="Target")
        use_test_embeddings(self.server, self.target)

    def refused(self, data: bytes, code: str) -> ImportFailed:
        with self.assertRaises(ImportFailed) as caught:
            import_bytes(self.target, data)
        assert caught.exception.code == code, (caught.exception.code, caught.exception.message)
        assert not ImportIdMap.objects.filter(workspace=self.target).exists()
        assert not Fact.objects.filter(workspace=self.target).exists()
        assert not EpisodicEntry.objects.filter(workspace=self.target).exists()
        return caught.exception


class ConsolidationReferenceTests(ImportIntegrityTestCase):
    """A held entry's `consolidation.old` names the stored entry it would replace: approving it
    closes that entry. An import must make it name the imported copy, never a source row."""

    def held_with_old(self, workspace_agent=None, old=None):
        ada = memory_user_create(workspace=self.workspace, canonical_id="ada")
        old = old or entry_factory(agent=self.agent, memory_user=ada, content="Ada lives in Porto.")
        held = entry_factory(agent=self.agent, memory_user=ada, content="Ada lives in Lisbon now.")
        consolidation = {
            "decision": "supersede",
            "reason": "She moved.",
            "by": "rule",
            "old": str(old.pk),
            "new": None,
            "similarity": 0.9,
        }
        EpisodicEntry.objects.filter(pk=held.pk).update(
            review=EpisodicEntry.Review.HELD, consolidation=consolidation
        )
        return old, held

    def test_approving_an_imported_held_entry_closes_the_imported_copy_not_the_source(self):
        source_old, _ = self.held_with_old()
        import_bytes(self.target, export_bytes(Scope(workspace=self.workspace)))
        held = EpisodicEntry.objects.get(workspace=self.target, review=EpisodicEntry.Review.HELD)
        copy = EpisodicEntry.objects.get(workspace=self.target, content__contains="Porto")
        assert held.consolidation["old"] == str(copy.pk)
        entry_review_approve(entry=held, actor="reviewer")
        source_old.refresh_from_db()
        copy.refresh_from_db()
        assert source_old.status == EpisodicEntry.Status.ACTIVE
        assert source_old.superseded_by_id is None
        assert copy.status == EpisodicEntry.Status.SUPERSEDED
        assert copy.superseded_by_id == held.pk

    def test_a_consolidation_naming_a_row_outside_the_file_names_nothing(self):
        """A crafted file naming another workspace's entry cannot reach it on approval."""
        stranger = memory_user_create(workspace=self.other_workspace, canonical_id="eve")
        foreign = entry_factory(agent=self.outsider_agent, memory_user=stranger, content="Eve likes tea.")
        self.held_with_old()
        rows = records(export_bytes(Scope(workspace=self.workspace)))
        rows = [
            {**r, "consolidation": {**r["consolidation"], "old": str(foreign.pk)}}
            if r.get("type") == "episodic_entry" and r["consolidation"]
            else r
            for r in rows
        ]
        import_bytes(self.target, lines(rows))
        held = EpisodicEntry.objects.get(workspace=self.target, review=EpisodicEntry.Review.HELD)
        assert held.consolidation["old"] != str(foreign.pk)
        entry_review_approve(entry=held, actor="reviewer")
        foreign.refresh_from_db()
        assert foreign.status == EpisodicEntry.Status.ACTIVE and foreign.superseded_by_id is None

    def test_a_consolidation_that_is_not_an_object_is_refused(self):
        self.held_with_old()
        rows = records(export_bytes(Scope(workspace=self.workspace)))
        for bad in (["x"], "old", {"old": 5}, {"old": "x" * 65}):
            exc = self.refused(lines(replaced(rows, "episodic_entry", consolidation=bad)), "invalid_import")
            assert "consolidation" in exc.fields


class ReusedRowVectorTests(ImportIntegrityTestCase):
    """A row reused from the target keeps its own vector: the file's vector of the other row
    is neither stored beside it (a unique violation that failed the whole import) nor over it."""

    def test_a_store_item_already_held_keeps_its_own_vector(self):
        with self.captureOnCommitCallbacks(execute=True):
            store_item_put(
                workspace=self.workspace,
                agent=self.agent,
                namespace=["notes"],
                key="home",
                value={"text": "Ada lives in Porto."},
            )
            target_agent = agent_get_or_create(workspace=self.target, slug=self.agent.slug)
            held, _ = store_item_put(
                workspace=self.target,
                agent=target_agent,
                namespace=["notes"],
                key="home",
                value={"text": "Bo lives in Rome."},
            )
        own = list(StoreItemEmbedding.objects.get(item=held).embedding)
        report = import_bytes(self.target, export_bytes(Scope(workspace=self.workspace, vectors=True)))
        assert report["reused"]["store_item"] == 1
        assert StoreItem.objects.filter(workspace=self.target).count() == 1
        (vector,) = StoreItemEmbedding.objects.filter(item__workspace=self.target)
        assert vector.item_id == held.pk and list(vector.embedding) == own

    def test_a_procedure_already_held_keeps_its_own_vector(self):
        with self.captureOnCommitCallbacks(execute=True):
            procedure_create(
                workspace=self.workspace,
                agent=self.agent,
                name="Refund",
                procedure_type="prompt_template",
                content="Say sorry, then refund.",
            )
            target_agent = agent_get_or_create(workspace=self.target, slug=self.agent.slug)
            held = procedure_create(
                workspace=self.target,
                agent=target_agent,
                name="Refund",
                procedure_type="prompt_template",
                content="Escalate to a human.",
            )
        own = list(ProcedureEmbedding.objects.get(procedure=held).embedding)
        report = import_bytes(self.target, export_bytes(Scope(workspace=self.workspace, vectors=True)))
        assert report["reused"]["procedure"] == 1
        assert Procedure.objects.filter(workspace=self.target).count() == 1
        (vector,) = ProcedureEmbedding.objects.filter(procedure__workspace=self.target)
        assert vector.procedure_id == held.pk and list(vector.embedding) == own


class HostileValueTests(ImportIntegrityTestCase):
    def test_a_vector_whose_length_is_not_its_dimensions_is_refused(self):
        """Stored, it broke every semantic search of the target (a 500: different vector
        dimensions)."""
        with self.captureOnCommitCallbacks(execute=True):
            fact_remember(workspace=self.workspace, key="drink", value="espresso please", scope="global")
        rows = records(export_bytes(Scope(workspace=self.workspace, vectors=True)))
        line = next(i for i, r in enumerate(rows, start=1) if r.get("type") == "fact_vector")
        exc = self.refused(lines(replaced(rows, "fact_vector", embedding=[0.5, 0.5, 0.5])), "invalid_import")
        assert exc.line == line and "embedding" in exc.fields
        assert not FactEmbedding.objects.filter(fact__workspace=self.target).exists()

    def test_source_message_ids_of_the_wrong_shape_are_refused_with_their_line(self):
        """Before, these stopped the run with a TypeError: no line, no code (a job's
        `import_stopped`, a traceback on the command line)."""
        ada = memory_user_create(workspace=self.workspace, canonical_id="ada")
        entry_factory(agent=self.agent, memory_user=ada, content="Ada moved to Lisbon in May.")
        rows = records(export_bytes(Scope(workspace=self.workspace)))
        line = next(i for i, r in enumerate(rows, start=1) if r.get("type") == "episodic_entry")
        for bad in (5, "abc", {"a": 1}, [1, 2], [["x"]], [None]):
            data = lines(replaced(rows, "episodic_entry", source_message_ids=bad))
            exc = self.refused(data, "invalid_import")
            assert exc.line == line and "source_message_ids" in exc.fields, bad

    def test_a_store_item_ttl_the_store_would_refuse_is_refused(self):
        """Stored, a TTL past the store's limit made every read of the item that refreshes it
        (the default) answer 400: now + TTL is out of range."""
        store_item_put(
            workspace=self.workspace, agent=self.agent, namespace=["notes"], key="home", value={"a": 1}, ttl=5
        )
        rows = records(export_bytes(Scope(workspace=self.workspace)))
        line = next(i for i, r in enumerate(rows, start=1) if r.get("type") == "store_item")
        for bad in (1e300, -5, 0):
            exc = self.refused(lines(replaced(rows, "store_item", ttl_minutes=bad)), "invalid_import")
            assert exc.line == line and "ttl_minutes" in exc.fields, bad
        assert not StoreItem.objects.filter(workspace=self.target).exists()
        report = import_bytes(self.target, lines(rows))
        assert report["created"]["store_item"] == 1
        assert StoreItem.objects.get(workspace=self.target).ttl_minutes == 5

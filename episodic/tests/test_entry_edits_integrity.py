"""Edits: a PATCH saved over a stale row, a PATCH that copies another entry,
and the entries of two people merged into one."""

from django.urls import reverse
from django.utils import timezone

from core.errors import NotFoundError
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services import EVIDENCE_REQUIRED, entry_update
from episodic.services.entries import CONTENT_DUPLICATES
from episodic.tests.factories import entry_factory, memory_user_factory, use_test_embeddings
from identities.services import memory_user_merge

SEARCH = reverse("api:episodic_entries:search")


def detail(entry):
    return reverse("api:episodic_entries:detail", args=[entry.pk])


class EntryEditTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)
        self.lisbon = entry_factory(agent=self.agent, memory_user=self.person, content="Ada lives in Lisbon.")

    def test_an_edit_of_a_stale_row_does_not_reopen_an_entry_closed_meanwhile(self):
        """An operator's edit loaded the entry before consolidation closed it: saving the
        metadata must not write the old status, validity and confirmations back."""
        stale = EpisodicEntry.objects.select_related("workspace").get(pk=self.lisbon.pk)
        porto = entry_factory(agent=self.agent, memory_user=self.person, content="Ada moved to Porto.")
        now = timezone.now()
        EpisodicEntry.objects.filter(pk=self.lisbon.pk).update(
            status=EpisodicEntry.Status.SUPERSEDED, valid_to=now, superseded_by=porto, times_confirmed=3
        )

        entry_update(entry=stale, actor="owner", metadata={"topic": "home"})

        row = EpisodicEntry.objects.get(pk=self.lisbon.pk)
        assert row.metadata == {"topic": "home"}
        assert row.status == EpisodicEntry.Status.SUPERSEDED
        assert row.superseded_by_id == porto.pk and row.valid_to == now
        assert row.times_confirmed == 3

    def test_an_edit_of_an_entry_deleted_meanwhile_does_not_bring_it_back(self):
        """Deleted between the edit's read and its write: not found, and not inserted again."""
        stale = EpisodicEntry.objects.select_related("workspace").get(pk=self.lisbon.pk)
        EpisodicEntry.objects.filter(pk=self.lisbon.pk).delete()

        with self.assertRaises(NotFoundError):
            entry_update(entry=stale, actor="owner", metadata={"topic": "home"})
        assert not EpisodicEntry.objects.filter(pk=self.lisbon.pk).exists()

    def test_patching_content_into_a_copy_of_another_active_entry_is_refused(self):
        """Create answers an exact repeat with the stored entry; an edit must not make one."""
        cat = entry_factory(agent=self.agent, memory_user=self.person, content="Ada adopted a cat.")

        response = self.api().patch(detail(cat), {"content": "ada lives in  LISBON."}, format="json")

        assert response.status_code == 409, response.json()
        error = response.json()["error"]
        assert error["code"] == "duplicate_exact"
        assert error["fields"]["content"] == [CONTENT_DUPLICATES.format(id=self.lisbon.pk)]
        cat.refresh_from_db()
        assert cat.content == "Ada adopted a cat."

    def test_reopening_a_closed_entry_that_an_active_one_repeats_is_refused(self):
        closed = entry_factory(
            agent=self.agent,
            memory_user=self.person,
            content="Ada lives in Lisbon.",
            status=EpisodicEntry.Status.SUPERSEDED,
        )

        response = self.api().patch(detail(closed), {"status": "active"}, format="json")

        assert response.status_code == 409
        closed.refresh_from_db()
        assert closed.status == EpisodicEntry.Status.SUPERSEDED

    def test_a_copy_under_another_agent_or_person_or_closed_is_no_twin(self):
        other = memory_user_factory(self.workspace, canonical_id="telegram:2")
        cat = entry_factory(agent=self.agent, memory_user=self.person, content="Ada adopted a cat.")
        entry_factory(agent=self.other_agent, memory_user=self.person, content="Ada adopted two cats.")
        entry_factory(agent=self.agent, memory_user=other, content="Ada adopted three cats.")
        entry_factory(
            agent=self.agent,
            memory_user=self.person,
            content="Ada adopted four cats.",
            status=EpisodicEntry.Status.SUPERSEDED,
        )
        for content in ("Ada adopted two cats.", "Ada adopted three cats.", "Ada adopted four cats."):
            response = self.api().patch(detail(cat), {"content": content}, format="json")
            assert response.status_code == 200, response.json()
        # The entry's own content again, in another case: no twin of itself.
        response = self.api().patch(detail(cat), {"content": "ADA ADOPTED FOUR CATS."}, format="json")
        assert response.status_code == 200, response.json()

    def test_merged_people_keep_one_current_copy_of_a_shared_entry(self):
        """Both people told the agent the same thing: after the merge, recall lists it once."""
        twin = memory_user_factory(self.workspace, canonical_id="email:ada@example.com")
        copy = entry_factory(agent=self.agent, memory_user=twin, content="Ada lives in Lisbon.")
        other_agents = entry_factory(agent=self.other_agent, memory_user=twin, content="Ada lives in Lisbon.")

        memory_user_merge(source=twin, target=self.person, actor="owner")

        active = EpisodicEntry.objects.filter(
            agent=self.agent, memory_user=self.person, status=EpisodicEntry.Status.ACTIVE
        )
        assert list(active.values_list("content", flat=True)) == ["Ada lives in Lisbon."]
        kept = active.get()
        copy.refresh_from_db()
        assert copy.memory_user_id == self.person.pk
        closed = self.lisbon if kept.pk == copy.pk else copy
        closed.refresh_from_db()
        assert closed.status == EpisodicEntry.Status.SUPERSEDED and closed.superseded_by_id == kept.pk
        assert kept.times_confirmed == 1
        # Another agent's copy is that agent's own memory.
        other_agents.refresh_from_db()
        assert other_agents.status == EpisodicEntry.Status.ACTIVE
        assert other_agents.memory_user_id == self.person.pk

        response = self.api().post(
            SEARCH,
            {"agent": "assistant", "memory_user": str(self.person.pk), "query": "Lisbon"},
            format="json",
        )
        assert [hit["entry"]["content"] for hit in response.json()["results"]] == ["Ada lives in Lisbon."]


class EntrySourceEditTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)

    def test_a_note_without_evidence_cannot_be_relabelled_as_the_persons_words(self):
        """Create refuses a user source without a quote; an edit must not reach the same row."""
        direct = entry_factory(
            agent=self.agent,
            memory_user=self.person,
            content="Ada prefers email.",
            source=EpisodicEntry.Source.AGENT_DIRECT,
            evidence="",
        )

        response = self.api().patch(detail(direct), {"source": "user_assertion"}, format="json")

        assert response.status_code == 400
        assert response.json()["error"]["fields"]["source"] == [EVIDENCE_REQUIRED]
        direct.refresh_from_db()
        assert direct.source == EpisodicEntry.Source.AGENT_DIRECT
        # With a quote it may be relabelled, and any entry may become `agent_direct`.
        quoted = entry_factory(agent=self.agent, memory_user=self.person, content="Ada moved to Porto.")
        for source in ("verified_assistant_finding", "agent_direct"):
            response = self.api().patch(detail(quoted), {"source": source}, format="json")
            assert response.status_code == 200, response.json()

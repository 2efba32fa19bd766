"""Provenance: purge by source deletes what came from the source and keeps what it
only confirmed; evidence answers for every stored entry and shows only the key's own rows."""

from core.services import api_key_create
from core.testing import MemoryTestCase
from episodes.tests.factories import EpisodeFactory
from episodic.models import EpisodicEntry
from episodic.services.review import entry_review_merge
from episodic.tests.factories import entry_factory
from facts.models import Fact
from facts.services import fact_remember
from identities.tests.factories import MemoryUserFactory
from procedures.models import Procedure, ProcedureRun
from threads.tests.factories import append, make_thread


class ProvenanceSourceTests(MemoryTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, canonical_id="t:ada")
        self.thread = make_thread(
            workspace=self.workspace, agent=self.agent, memory_user=self.ada, title="Card"
        )
        self.first, self.restated = append(
            self.thread,
            ("user", "I moved to Lisbon last month."),
            ("user", "As I said, I live in Lisbon now."),
        )
        self.url = f"/api/v1/threads/{self.thread.pk}/derived/"

    def entry(self, content, message, **kwargs):
        return entry_factory(
            agent=self.agent,
            memory_user=self.ada,
            content=content,
            embed=False,
            source_thread=self.thread,
            source_message_ids=[str(message.pk)],
            **kwargs,
        )

    def test_purging_a_message_keeps_an_entry_it_only_confirmed(self):
        original = self.entry("Ada moved to Lisbon.", self.first)
        restatement = self.entry("Ada lives in Lisbon.", self.restated, review=EpisodicEntry.Review.HELD)
        entry_review_merge(entry=restatement, target=original, actor="operator:lee")
        original.refresh_from_db()
        # The merge counted a confirmation and lent the target the restatement's message.
        assert original.times_confirmed == 1
        assert str(self.restated.pk) in original.source_message_ids

        preview = self.api().get(self.url, {"message": str(self.restated.pk)}).json()
        assert preview["entries"] == {"count": 1, "ids": [str(restatement.pk)]}
        response = self.api().post(self.url, {"message": str(self.restated.pk)}, format="json")

        assert response.status_code == 200 and response.json()["entries"] == 1
        assert list(EpisodicEntry.objects.values_list("pk", flat=True)) == [original.pk]
        # Purging the message the entry came from does delete it.
        response = self.api().post(self.url, {"message": str(self.first.pk)}, format="json")
        assert response.json()["entries"] == 1 and not EpisodicEntry.objects.exists()

    def test_an_entry_named_by_several_messages_goes_with_any_of_them(self):
        entry = entry_factory(
            agent=self.agent,
            memory_user=self.ada,
            content="Ada lives in Lisbon.",
            embed=False,
            source_thread=self.thread,
            source_message_ids=[str(self.first.pk), str(self.restated.pk)],
        )
        response = self.api().post(self.url, {"message": str(self.restated.pk)}, format="json")
        assert response.json()["entries"] == 1
        assert not EpisodicEntry.objects.filter(pk=entry.pk).exists()

    def test_purging_a_preference_updates_the_persons_preferences(self):
        fact_remember(
            workspace=self.workspace,
            key="language",
            value="pt",
            scope=Fact.Scope.USER,
            fact_type=Fact.FactType.USER_PREFERENCE,
            memory_user=self.ada,
            source=Fact.Source.EXTRACTION,
            source_message=self.first,
        )
        person = f"/api/v1/memory-users/{self.ada.pk}/"
        assert self.api().get(person).json()["preferences"] == {"language": "pt"}

        response = self.api().post(self.url, {"message": str(self.first.pk)}, format="json")

        assert response.json()["facts"] == 1 and not Fact.objects.exists()
        assert self.api().get(person).json()["preferences"] == {}

    def test_the_evidence_of_an_entry_extracted_from_a_client_transcript(self):
        # A transcript sent with a turn names its messages with the client's own ids.
        entry = entry_factory(
            agent=self.agent,
            memory_user=self.ada,
            content="Ada moved to Lisbon.",
            embed=False,
            source_thread=self.thread,
            source_message_ids=["turn-7", str(self.first.pk)],
        )
        response = self.api().get(f"/api/v1/evidence/entry/{entry.pk}/")
        assert response.status_code == 200, response.json()
        assert [m["id"] for m in response.json()["messages"]] == [str(self.first.pk)]
        purged = self.api().post(self.url, {"message": str(self.first.pk)}, format="json")
        assert purged.status_code == 200 and purged.json()["entries"] == 1

    def test_a_shared_procedures_runs_show_an_agent_key_only_its_agents_episodes(self):
        procedure = Procedure.objects.create(
            workspace=self.workspace,
            agent=None,
            name="Refund a card payment",
            procedure_type="tool_sequence",
            content=["refund"],
        )
        own = EpisodeFactory(agent=self.agent, memory_user=self.ada, outcome="success")
        theirs = EpisodeFactory(agent=self.other_agent, memory_user=self.ada, outcome="failure")
        for episode, success in ((own, True), (theirs, False)):
            ProcedureRun.objects.create(
                workspace=self.workspace, procedure=procedure, episode=episode, success=success
            )
        url = f"/api/v1/evidence/procedure/{procedure.pk}/"
        everything = self.api().get(url).json()
        assert {r["episode"] for r in everything["runs"]} == {str(own.pk), str(theirs.pk)}

        _, assistant_key = api_key_create(workspace=self.workspace, agent=self.agent)
        body = self.api(assistant_key).get(url).json()
        assert [r["episode"] for r in body["runs"]] == [str(own.pk)]

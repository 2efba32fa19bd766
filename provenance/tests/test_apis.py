"""Issue 14, "Evidence drill-down": why the agent believes something, and purge by source."""

import uuid

from core.models import AuditEvent
from core.services import api_key_create
from core.testing import MemoryTestCase
from episodes.tests.factories import EpisodeFactory
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory
from facts.models import Fact
from facts.services import fact_remember
from identities.tests.factories import MemoryUserFactory
from procedures.models import Procedure
from threads.models import Message
from threads.tests.factories import append, make_thread


class ProvenanceTestCase(MemoryTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, canonical_id="t:ada")
        self.thread = make_thread(
            workspace=self.workspace, agent=self.agent, memory_user=self.ada, title="Card"
        )
        self.asked, self.found, self.thanks = append(
            self.thread,
            ("user", "My card keeps getting declined."),
            ("assistant", "Found it: billing still has the old card on file."),
            ("user", "Thanks, I moved to Lisbon by the way."),
        )

    def entry(self, content, message, **kwargs):
        return entry_factory(
            agent=self.agent,
            memory_user=self.ada,
            content=content,
            embed=False,
            source_thread=self.thread,
            source_message_ids=[str(message.pk)],
            metadata={"origin": "llm"},
            **kwargs,
        )


class EvidenceTests(ProvenanceTestCase):
    def test_an_entry_shows_its_quote_source_messages_versions_and_audit(self):
        old = self.entry("Billing read an unknown card.", self.asked)
        entry = self.entry("Billing read the old card; the new one was only on the profile.", self.found)
        EpisodicEntry.objects.filter(pk=old.pk).update(superseded_by=entry, status="superseded")
        AuditEvent.objects.create(
            workspace=self.workspace,
            actor="system",
            action="create",
            entity_type="episodic_entry",
            entity_id=str(entry.pk),
            changes={"decision": "supersede"},
        )
        body = self.api().get(f"/api/v1/evidence/entry/{entry.pk}/").json()
        assert body["thread"] == {"id": str(self.thread.pk), "title": "Card"}
        assert [m["id"] for m in body["messages"]] == [str(self.found.pk)]
        assert body["messages"][0]["content"].startswith("Found it")
        assert body["origin"] == "llm" and body["created"]["changes"] == {"decision": "supersede"}
        assert [v["id"] for v in body["replaces"]] == [str(old.pk)] and body["replaced_by"] is None
        assert [e["action"] for e in body["audit"]["events"]] == ["create"]
        older = self.api().get(f"/api/v1/evidence/entry/{old.pk}/").json()
        assert older["replaced_by"]["id"] == str(entry.pk)

    def test_a_fact_shows_its_message_episode_and_versions(self):
        episode = EpisodeFactory(agent=self.agent, memory_user=self.ada, thread=self.thread)
        fact_remember(
            workspace=self.workspace,
            key="city",
            value="Porto",
            scope=Fact.Scope.USER,
            memory_user=self.ada,
            actor="api_key:x",
        )
        fact = fact_remember(
            workspace=self.workspace,
            key="city",
            value="Lisbon",
            scope=Fact.Scope.USER,
            memory_user=self.ada,
            source=Fact.Source.EXTRACTION,
            source_message=self.thanks,
            source_episode=episode,
            evidence="I moved to Lisbon",
        ).fact
        body = self.api().get(f"/api/v1/evidence/fact/{fact.pk}/").json()
        assert body["content"] == "city: Lisbon"
        assert body["evidence"] == "I moved to Lisbon"
        assert [m["id"] for m in body["messages"]] == [str(self.thanks.pk)]
        assert body["episode"]["id"] == str(episode.pk)
        assert len(body["replaces"]) == 1
        # The user-scope fact is shared, but the thread it came from is agent `assistant`'s:
        # another agent's key sees the fact and not the thread.
        _, researcher_key = api_key_create(workspace=self.workspace, agent=self.other_agent)
        other = self.api(researcher_key).get(f"/api/v1/evidence/fact/{fact.pk}/").json()
        assert other["thread"] is None and other["messages"] == [] and other["episode"] is None

    def test_an_episode_and_a_learned_procedure(self):
        episode = EpisodeFactory(
            agent=self.agent, memory_user=self.ada, thread=self.thread, outcome="success"
        )
        procedure = Procedure.objects.create(
            workspace=self.workspace,
            agent=self.agent,
            name="Fix a declined card",
            procedure_type="tool_sequence",
            content=["check_billing"],
            origin="self_learned",
            source_episode_ids=[episode.pk],
            is_active=False,
        )
        body = self.api().get(f"/api/v1/evidence/episode/{episode.pk}/").json()
        assert [m["id"] for m in body["messages"]] == [
            str(m.pk) for m in (self.asked, self.found, self.thanks)
        ]
        assert body["derived"]["procedures"] == [{"id": str(procedure.pk), "text": "Fix a declined card"}]
        learned = self.api().get(f"/api/v1/evidence/procedure/{procedure.pk}/").json()
        assert [e["id"] for e in learned["episodes"]] == [str(episode.pk)] and learned[
            "origin"
        ] == "self_learned"

    def test_out_of_scope_and_hostile_ids(self):
        entry = self.entry("Billing read the old card.", self.found)
        url = f"/api/v1/evidence/entry/{entry.pk}/"
        _, researcher_key = api_key_create(workspace=self.workspace, agent=self.other_agent)
        random = self.api().get(f"/api/v1/evidence/entry/{uuid.uuid4()}/")
        assert random.status_code == 404
        for key in (researcher_key, self.outsider_key):
            response = self.api(key).get(url)
            assert (response.status_code, response.json()) == (404, random.json())
        bad = self.api().get(f"/api/v1/evidence/nothing/{entry.pk}/")
        assert bad.status_code == 400 and bad.json()["error"]["fields"] == {
            "tier": [bad.json()["error"]["message"]]
        }
        assert self.api(self.read_only_key).get(url).status_code == 200


class PurgeBySourceTests(ProvenanceTestCase):
    def setUp(self):
        super().setUp()
        self.from_found = self.entry("Billing read the old card.", self.found)
        self.from_thanks = self.entry("Ada moved to Lisbon.", self.thanks)
        self.fact = fact_remember(
            workspace=self.workspace,
            key="city",
            value="Lisbon",
            scope=Fact.Scope.AGENT,
            agent=self.agent,
            source_message=self.thanks,
        ).fact
        self.url = f"/api/v1/threads/{self.thread.pk}/derived/"

    def test_preview_then_purge_one_message(self):
        preview = self.api().get(self.url, {"message": str(self.thanks.pk)}).json()
        assert preview["entries"] == {"count": 1, "ids": [str(self.from_thanks.pk)]}
        assert preview["facts"] == {"count": 1, "ids": [str(self.fact.pk)]}
        response = self.api().post(self.url, {"message": str(self.thanks.pk)}, format="json")
        assert response.status_code == 200, response.json()
        assert response.json() == {"entries": 1, "facts": 1, "procedures": 0}
        assert list(EpisodicEntry.objects.values_list("pk", flat=True)) == [self.from_found.pk]
        assert not Fact.objects.filter(pk=self.fact.pk).exists()
        assert Message.objects.filter(thread=self.thread).count() == 3
        purge = AuditEvent.objects.get(entity_type="source_purge")
        assert purge.changes == {
            "thread": str(self.thread.pk),
            "message": str(self.thanks.pk),
            **response.json(),
        }
        assert AuditEvent.objects.filter(entity_type="episodic_entry", action="delete").count() == 1

    def test_purge_the_whole_thread_with_its_proposed_procedures(self):
        episode = EpisodeFactory(agent=self.agent, memory_user=self.ada, thread=self.thread)
        proposed = Procedure.objects.create(
            workspace=self.workspace,
            agent=self.agent,
            name="Proposed",
            procedure_type="tool_sequence",
            content=["a"],
            origin="self_learned",
            source_episode_ids=[episode.pk],
            is_active=False,
        )
        approved = Procedure.objects.create(
            workspace=self.workspace,
            agent=self.agent,
            name="Approved",
            procedure_type="tool_sequence",
            content=["a"],
            origin="self_learned",
            source_episode_ids=[episode.pk],
            is_active=True,
        )
        assert self.api().get(self.url).json()["procedures"]["count"] == 1
        response = self.api().post(self.url, {}, format="json")
        assert response.json() == {"entries": 2, "facts": 1, "procedures": 1}
        assert list(Procedure.objects.values_list("pk", flat=True)) == [approved.pk]
        assert proposed.pk not in set(Procedure.objects.values_list("pk", flat=True))

    def test_scope_and_hostile_input(self):
        _, researcher_key = api_key_create(workspace=self.workspace, agent=self.other_agent)
        for key in (researcher_key, self.outsider_key):
            assert self.api(key).get(self.url).status_code == 404
            assert self.api(key).post(self.url, {}, format="json").status_code == 404
        assert self.api(self.read_only_key).post(self.url, {}, format="json").status_code == 403
        other_thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.ada)
        (elsewhere,) = append(other_thread, ("user", "Elsewhere."))
        for body in ({"message": str(elsewhere.pk)}, {"message": str(uuid.uuid4())}):
            assert self.api().post(self.url, body, format="json").status_code == 404
        for body in ({"message": "nope"}, {"message": ["x"]}, {"extra": 1}):
            response = self.api().post(self.url, body, format="json")
            assert response.status_code == 400, (body, response.json())
        assert self.api().get(self.url, {"message": "nope"}).status_code == 400
        assert EpisodicEntry.objects.count() == 2 and Fact.objects.filter(pk=self.fact.pk).exists()

"""Hostile input on the provenance routes answers a clear 4xx with an error code, and
out-of-scope ids answer exactly as ids that do not exist."""

import uuid

from core.testing import MemoryTestCase
from episodes.tests.factories import EpisodeFactory
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory
from facts.models import Fact
from facts.services import fact_remember
from identities.tests.factories import MemoryUserFactory
from threads.tests.factories import append, make_thread


class ProvenanceHostileInputTests(MemoryTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, canonical_id="t:ada")
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.ada)
        (self.said,) = append(self.thread, ("user", "I moved to Lisbon."))
        self.entry = entry_factory(
            agent=self.agent,
            memory_user=self.ada,
            embed=False,
            source_thread=self.thread,
            source_message_ids=[str(self.said.pk)],
        )
        self.fact = fact_remember(
            workspace=self.workspace,
            key="city",
            value="Lisbon",
            scope=Fact.Scope.AGENT,
            agent=self.agent,
            source_message=self.said,
        ).fact
        self.url = f"/api/v1/threads/{self.thread.pk}/derived/"

    def assert_error(self, response, status):
        assert response.status_code == status, (response.status_code, response.content[:300])
        assert response.json()["error"]["code"], response.json()

    def test_evidence_ids(self):
        episode = EpisodeFactory(agent=self.agent, memory_user=self.ada, thread=self.thread)
        # An id of another tier is an id that does not exist in this one.
        for tier, pk in (("fact", self.entry.pk), ("episode", self.fact.pk), ("procedure", episode.pk)):
            missing = self.api().get(f"/api/v1/evidence/{tier}/{uuid.uuid4()}/")
            self.assert_error(missing, 404)
            response = self.api().get(f"/api/v1/evidence/{tier}/{pk}/")
            assert (response.status_code, response.json()) == (404, missing.json())
        for tier in ("ENTRY", "entries", "x" * 300):
            self.assert_error(self.api().get(f"/api/v1/evidence/{tier}/{self.entry.pk}/"), 400)
        assert self.api().get("/api/v1/evidence/entry/not-a-uuid/").status_code == 404
        for tier, pk in (("entry", self.entry.pk), ("fact", self.fact.pk), ("episode", episode.pk)):
            url = f"/api/v1/evidence/{tier}/{pk}/"
            assert self.api().get(url).status_code == 200
            outsider = self.api(self.outsider_key).get(url)
            assert (outsider.status_code, outsider.json()["error"]["code"]) == (404, "not_found")

    def test_purge_bodies_and_params(self):
        for body in ([], "text", {"message": None}, {"message": 5}, {"message": {"id": 1}}):
            self.assert_error(self.api().post(self.url, body, format="json"), 400)
        self.assert_error(self.api().post(self.url, "{x", content_type="application/json"), 400)
        for params in ({"message": ""}, {"message": "x" * 5000}, {"thread": str(self.thread.pk)}):
            response = self.api().get(self.url, params)
            assert response.status_code == 400, (params, response.content[:300])
        self.assert_error(self.api().get(f"/api/v1/threads/{uuid.uuid4()}/derived/"), 404)
        self.assert_error(
            self.api(self.agent_key).post(self.url, {"message": str(uuid.uuid4())}, format="json"), 404
        )
        assert EpisodicEntry.objects.count() == 1 and Fact.objects.count() == 1

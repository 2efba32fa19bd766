"""A held item is merged only into a stored item of its own owner (docs/review.md, Decisions): a
merge into another person's or another agent's item is refused as `invalid` and changes
nothing, for facts as for entries."""

from django.urls import reverse

from core.models import AuditEvent
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.tests.factories import memory_user_factory, use_test_embeddings
from facts.models import Fact
from facts.services import fact_remember

MERGE = reverse("api:review:merge")


class ReviewMergeScopeTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.ada = memory_user_factory(self.workspace)
        self.bo = memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo")
        self.bo_city = self.remember("city", "Oslo", memory_user=self.bo)
        self.other_agent_tone = self.remember("tone", "formal", scope="agent", agent=self.other_agent)
        self.agent.memory_settings = {"review": "all"}
        self.agent.save(update_fields=["memory_settings"])
        self.ada_city = self.remember("city", "Lisbon", memory_user=self.ada)
        self.own_tone = self.remember("tone", "casual", scope="agent")
        assert Fact.objects.get(pk=self.ada_city.pk).review == "held"
        assert Fact.objects.get(pk=self.own_tone.pk).review == "held"

    def remember(self, key, value, *, scope="user", agent=None, memory_user=None):
        return fact_remember(
            workspace=self.workspace,
            key=key,
            value=value,
            scope=scope,
            agent=agent or self.agent,
            memory_user=memory_user,
            source=Fact.Source.API,
        ).fact

    def merge(self, held, into, key=None):
        response = self.api(key).post(
            MERGE, {"items": [{"tier": "fact", "id": str(held.pk), "into": str(into.pk)}]}, format="json"
        )
        assert response.status_code == 200, response.json()
        (result,) = response.json()["results"]
        return result

    def assert_untouched(self, held, target):
        held.refresh_from_db()
        stored = Fact.objects.get(pk=target.pk)
        assert (held.review, held.superseded_by_id) == ("held", None)
        assert (stored.times_confirmed, stored.evidence) == (target.times_confirmed, target.evidence)
        assert not AuditEvent.objects.filter(entity_id=str(target.pk), changes__merged_from__isnull=False)

    def test_a_fact_of_one_person_is_not_merged_into_another_persons(self):
        result = self.merge(self.ada_city, self.bo_city)
        assert result["outcome"] == "invalid", result
        self.assert_untouched(self.ada_city, self.bo_city)

    def test_an_agent_bound_key_cannot_merge_into_another_persons_fact_either(self):
        result = self.merge(self.ada_city, self.bo_city, key=self.agent_key)
        assert result["outcome"] == "invalid", result
        self.assert_untouched(self.ada_city, self.bo_city)

    def test_an_agent_bound_key_merging_into_a_shared_fact_reports_it_merged(self):
        """The stored fact of the person is shared (no agent): the merge is applied, and the
        answer says so instead of `not_found` for an item the key cannot list."""
        ada_stored = Fact.objects.create(
            workspace=self.workspace, key="home_city", value="Lisbon", scope="user", memory_user=self.ada
        )
        result = self.merge(self.ada_city, ada_stored, key=self.agent_key)
        assert result["outcome"] == "merged", result
        assert result["item"]["id"] == str(ada_stored.pk)
        assert Fact.objects.get(pk=self.ada_city.pk).review == "merged"

    def test_an_agent_bound_key_approving_a_restatement_is_answered_with_the_stored_fact(self):
        Fact.objects.filter(pk=self.own_tone.pk).update(value="formal")
        Fact.objects.filter(pk=self.other_agent_tone.pk).update(agent=self.agent)
        url = reverse("api:review:item", kwargs={"tier": "fact", "item_id": self.own_tone.pk})
        response = self.api(self.agent_key).patch(url, {}, format="json")
        assert response.status_code == 200, response.json()
        assert response.json()["id"] == str(self.other_agent_tone.pk)
        assert Fact.objects.get(pk=self.own_tone.pk).review == "merged"

    def test_an_agent_fact_is_not_merged_into_another_agents(self):
        result = self.merge(self.own_tone, self.other_agent_tone)
        assert result["outcome"] == "invalid", result
        self.assert_untouched(self.own_tone, self.other_agent_tone)

    def test_a_person_fact_is_not_merged_into_an_agent_fact(self):
        own = Fact.objects.get(pk=self.own_tone.pk)
        Fact.objects.filter(pk=own.pk).update(review="approved", valid_to=None)
        result = self.merge(self.ada_city, own)
        assert result["outcome"] == "invalid", result

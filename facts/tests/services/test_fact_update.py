from core.errors import ApplicationError
from core.models import AuditEvent
from core.testing import MemoryTestCase
from facts.models import Fact
from facts.services import fact_remember, fact_update
from identities.tests.factories import MemoryUserFactory


class FactUpdateTests(MemoryTestCase):
    def test_a_new_value_supersedes_and_metadata_changes_in_place(self):
        fact = fact_remember(workspace=self.workspace, key="city", value="Paris", scope="global").fact
        same = fact_update(fact=fact, actor="operator:owner", confidence=0.4, evidence="said so")
        assert same.pk == fact.pk
        assert (same.confidence, same.evidence) == (0.4, "said so")
        event = AuditEvent.objects.filter(entity_id=str(fact.pk), action="update").get()
        assert event.changes["confidence"] == {"from": 0.9, "to": 0.4}
        new = fact_update(fact=same, actor="operator:owner", value="Lyon")
        assert new.pk != fact.pk
        assert new.source == "operator"
        with self.assertRaises(ApplicationError):
            fact_update(fact=Fact.objects.get(pk=fact.pk), actor="system", value="Nice")

    def test_changing_the_type_of_a_user_fact_updates_the_cached_preferences(self):
        person = MemoryUserFactory(workspace=self.workspace)
        fact = fact_remember(
            workspace=self.workspace, key="lang", value="fr", scope="user", memory_user=person
        ).fact
        fact_update(fact=fact, actor="system", fact_type="user_preference")
        person.refresh_from_db()
        assert person.preferences == {"lang": "fr"}


class FactFilterTests(MemoryTestCase):
    def test_key_fuzzy_and_valid_at_filters(self):
        first = fact_remember(workspace=self.workspace, key="home-city", value="Paris", scope="global").fact
        fact_remember(workspace=self.workspace, key="home-city", value="Lyon", scope="global")
        fact_remember(workspace=self.workspace, key="pet", value="cat", scope="global")
        keys = [
            f["key"] for f in self.api().get("/api/v1/facts/", {"key_fuzzy": "city home"}).json()["results"]
        ]
        assert keys == ["home-city"]
        then = self.api().get(
            "/api/v1/facts/", {"valid_at": first.valid_from.isoformat(), "key": "home-city"}
        )
        assert [f["value"] for f in then.json()["results"]] == ["Paris"]

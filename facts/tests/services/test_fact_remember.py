import pytest
from django.test import override_settings

from core.errors import ApplicationError, NotFoundError
from core.models import AuditEvent
from core.testing import MemoryTestCase
from facts import services
from facts.models import Fact
from facts.services import fact_remember
from identities.models import MemoryUser
from identities.tests.factories import MemoryUserFactory, ThreadFactory


class FactRememberTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)
        cls.thread = ThreadFactory(agent=cls.agent, memory_user=cls.person)

    def remember(self, **kwargs):
        kwargs.setdefault("workspace", self.workspace)
        kwargs.setdefault("scope", Fact.Scope.GLOBAL)
        return fact_remember(**kwargs)

    def test_a_new_key_is_created_with_the_default_confidence_of_its_source(self):
        result = self.remember(key="company_name", value="Acme", actor="api_key:abc")
        assert result.outcome == "created"
        assert result.fact.confidence == 0.9
        assert result.fact.key_normalized == "company name"
        assert result.fact.valid_to is None
        event = AuditEvent.objects.get(entity_id=str(result.fact.pk))
        assert (event.action, event.actor) == ("create", "api_key:abc")
        extracted = self.remember(key="x", value=1, source="extraction")
        assert extracted.fact.confidence == 0.6

    def test_the_same_value_again_confirms_and_raises_confidence(self):
        self.remember(key="tz", value="UTC", confidence=0.5)
        result = self.remember(key="tz", value="UTC")
        assert result.outcome == "confirmed"
        assert result.fact.times_confirmed == 1
        assert result.fact.confidence == pytest.approx(0.6)
        again = self.remember(key="tz", value="UTC")
        assert again.fact.confidence == pytest.approx(0.68)
        assert Fact.objects.filter(key="tz").count() == 1

    def test_json_equal_values_confirm_but_true_is_not_one(self):
        self.remember(key="prefs", value={"a": 1, "b": [1, 2]})
        assert self.remember(key="prefs", value={"b": [1, 2], "a": 1}).outcome == "confirmed"
        self.remember(key="flag", value=1)
        assert self.remember(key="flag", value=True).outcome == "superseded"

    def test_a_different_value_supersedes_and_counts_a_contradiction(self):
        first = self.remember(key="tz", value="UTC").fact
        result = self.remember(key="tz", value="Europe/Paris")
        assert result.outcome == "superseded"
        first.refresh_from_db()
        assert first.valid_to is not None
        assert first.times_contradicted == 1
        assert first.superseded_by_id == result.fact.pk
        assert result.previous.pk == first.pk
        assert list(Fact.objects.filter(key="tz").current().values_list("value", flat=True)) == [
            "Europe/Paris"
        ]

    def test_without_overwrite_a_different_value_is_skipped(self):
        first = self.remember(key="tz", value="UTC").fact
        result = self.remember(key="tz", value="CET", overwrite=False)
        assert result.outcome == "skipped"
        assert result.fact.pk == first.pk
        assert Fact.objects.filter(key="tz").count() == 1

    def test_scopes_store_their_reference(self):
        session = self.remember(key="k", value=1, scope="session", thread=self.thread).fact
        assert (session.thread_id, session.agent_id, session.memory_user_id) == (
            self.thread.pk,
            self.agent.pk,
            self.person.pk,
        )
        user = self.remember(key="k", value=1, scope="user", memory_user=self.person, agent=self.agent).fact
        assert (user.memory_user_id, user.agent_id, user.thread_id) == (self.person.pk, None, None)
        agent = self.remember(key="k", value=1, scope="agent", agent=self.agent, memory_user=self.person).fact
        assert (agent.agent_id, agent.memory_user_id) == (self.agent.pk, None)
        assert Fact.objects.filter(key="k").current().count() == 3

    def test_a_user_preference_updates_the_cached_preferences(self):
        self.remember(
            key="language", value="fr", scope="user", memory_user=self.person, fact_type="user_preference"
        )
        self.person.refresh_from_db()
        assert self.person.preferences == {"language": "fr"}
        self.remember(
            key="language", value="de", scope="user", memory_user=self.person, fact_type="user_preference"
        )
        self.person.refresh_from_db()
        assert self.person.preferences == {"language": "de"}

    def test_a_merged_user_resolves_to_its_target(self):
        target = MemoryUserFactory(workspace=self.workspace)
        merged = MemoryUserFactory(workspace=self.workspace, merged_into=target)
        fact = self.remember(key="k", value=1, scope="user", memory_user=merged).fact
        assert fact.memory_user_id == target.pk


class FactRememberBadInputTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.outsider_person = MemoryUser.objects.create(workspace=cls.other_workspace, canonical_id="x:1")

    def assert_refused(self, field, message, **kwargs):
        kwargs.setdefault("workspace", self.workspace)
        kwargs.setdefault("key", "k")
        kwargs.setdefault("value", "v")
        kwargs.setdefault("scope", "global")
        with self.assertRaisesMessage(ApplicationError, message) as caught:
            fact_remember(**kwargs)
        assert field in caught.exception.fields
        assert not Fact.objects.exists()

    def test_bad_input_is_refused_and_nothing_is_written(self):
        self.assert_refused("thread", services.FACT_SESSION_NEEDS_THREAD, scope="session")
        self.assert_refused("memory_user", services.FACT_USER_NEEDS_MEMORY_USER, scope="user")
        self.assert_refused("agent", services.FACT_AGENT_NEEDS_AGENT, scope="agent")
        self.assert_refused("scope", services.FACT_SCOPE_UNKNOWN, scope="team")
        self.assert_refused("fact_type", services.FACT_TYPE_UNKNOWN, fact_type="rumour")
        self.assert_refused("confidence", services.FACT_CONFIDENCE_RANGE, confidence=1.5)
        self.assert_refused("confidence", services.FACT_CONFIDENCE_RANGE, confidence=-0.1)
        self.assert_refused("key", services.FACT_KEY_REQUIRED, key="  ")
        self.assert_refused("value", services.FACT_VALUE_REQUIRED, value=None)

    @override_settings(FACTS_VALUE_MAX_BYTES=100)
    def test_a_value_over_the_size_limit_is_refused(self):
        self.assert_refused("value", "larger than the limit of 100 bytes", value="x" * 200)

    def test_a_reference_of_another_workspace_is_not_found(self):
        with pytest.raises(NotFoundError):
            fact_remember(
                workspace=self.workspace, key="k", value=1, scope="user", memory_user=self.outsider_person
            )
        assert not Fact.objects.exists()

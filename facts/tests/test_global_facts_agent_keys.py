"""Global facts are the workspace's: an agent-bound key reads them, confirms them and creates
a key that has none, but a different value it remembers is held for review and a direct
change (PATCH, delete, batch delete) is a 403 `workspace_key_required`, on every path."""

import pytest

from core.access import principal_for_api_key, principal_for_membership
from core.errors import ApplicationError
from core.models import Membership
from core.testing import MemoryTestCase
from facts.models import Fact
from facts.selectors import fact_lookup
from facts.services import (
    OUTCOME_CONFIRMED,
    OUTCOME_CREATED,
    OUTCOME_HELD,
    OUTCOME_SUPERSEDED,
    fact_batch_delete,
    fact_delete,
    fact_remember,
    fact_review_approve,
    fact_update,
)
from identities.tests.factories import MemoryUserFactory

LIST = "/api/v1/facts/"
REMEMBER = "/api/v1/facts/remember/"
BATCH = "/api/v1/facts/batch-delete/"


class GlobalFactsAgentKeyTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)

    def setUp(self):
        # Written by the operators through a workspace-wide key: what every agent reads.
        self.office = fact_remember(
            workspace=self.workspace,
            key="office_city",
            value="Lisbon",
            scope="global",
            actor=self.owner_api_key_actor,
        ).fact

    @property
    def owner_api_key_actor(self):
        return f"api_key:{self.owner_api_key.prefix}"

    @property
    def agent_actor(self):
        return f"api_key:{self.agent_api_key.prefix}"

    def current(self, key="office_city"):
        return fact_lookup(workspace=self.workspace, key=key)

    def assert_workspace_key_required(self, response):
        assert response.status_code == 403, response.json()
        assert response.json()["error"]["code"] == "workspace_key_required"

    # Direct changes: 403, nothing changed.

    def test_an_agent_bound_key_cannot_delete_a_global_fact(self):
        """DELETE of a global fact with an agent-bound key is a 403; the fact stays."""
        response = self.api(self.agent_key).delete(f"{LIST}{self.office.pk}/")
        self.assert_workspace_key_required(response)
        assert self.current().pk == self.office.pk

    def test_an_agent_bound_key_cannot_patch_a_global_fact(self):
        """PATCH of a global fact's value or metadata with an agent-bound key is a 403, before
        any validation of the body."""
        client = self.api(self.agent_key)
        for body in ({"value": "Porto"}, {"confidence": 0.1}, {"confidence": 7}):
            response = client.patch(f"{LIST}{self.office.pk}/", body, format="json")
            self.assert_workspace_key_required(response)
        fact = self.current()
        assert (fact.pk, fact.value, fact.confidence) == (self.office.pk, "Lisbon", self.office.confidence)

    def test_an_agent_bound_key_cannot_batch_delete_a_global_fact(self):
        """A batch naming a global fact is refused whole: the agent's own fact stays too."""
        own = fact_remember(
            workspace=self.workspace, key="mood", value="calm", scope="agent", agent=self.agent
        ).fact
        response = self.api(self.agent_key).post(
            BATCH, {"ids": [str(own.pk), str(self.office.pk)]}, format="json"
        )
        self.assert_workspace_key_required(response)
        assert Fact.objects.filter(pk__in=[own.pk, self.office.pk]).count() == 2

    def test_an_unknown_id_in_a_batch_is_still_a_404(self):
        """An id the key cannot see answers 404 as before, whatever else the batch names."""
        response = self.api(self.agent_key).post(
            BATCH, {"ids": [str(self.office.pk), "00000000-0000-4000-8000-000000000000"]}, format="json"
        )
        assert response.status_code == 404
        assert Fact.objects.filter(pk=self.office.pk).exists()

    def test_the_services_refuse_an_agent_bound_principal(self):
        """The rule is the services': every caller with a key passes its principal (the API,
        the agent tools, the review queue); None is an operator or the system."""
        principal = principal_for_api_key(self.agent_api_key)
        with pytest.raises(ApplicationError) as caught:
            fact_delete(fact=self.office, actor=self.agent_actor, principal=principal)
        assert caught.value.code == "workspace_key_required"
        with pytest.raises(ApplicationError) as caught:
            fact_update(fact=self.office, actor=self.agent_actor, principal=principal, value="Porto")
        assert caught.value.code == "workspace_key_required"
        with pytest.raises(ApplicationError) as caught:
            fact_batch_delete(principal=principal, ids=[self.office.pk])
        assert caught.value.code == "workspace_key_required"
        assert self.current().value == "Lisbon"

    # Remembering: create and confirm apply, a different value is held.

    def test_a_different_value_from_an_agent_bound_key_is_held(self):
        """The new value is stored held for review (201, outcome held); the current value is
        what every agent still reads."""
        response = self.api(self.agent_key).post(
            REMEMBER, {"key": "office_city", "value": "Porto", "scope": "global"}, format="json"
        )
        assert response.status_code == 201, response.json()
        assert response.json()["outcome"] == OUTCOME_HELD
        held = Fact.objects.get(pk=response.json()["fact"]["id"])
        assert held.review == Fact.Review.HELD and held.review_agent_id == self.agent.pk
        assert held.value == "Porto" and held.valid_to is not None
        fact = self.current()
        assert (fact.pk, fact.value, fact.valid_to) == (self.office.pk, "Lisbon", None)

    def test_the_same_value_confirms_and_a_new_key_is_created(self):
        """Confirming a global fact and creating a global key with no open version stay open
        to an agent-bound key."""
        client = self.api(self.agent_key)
        same = client.post(
            REMEMBER, {"key": "office_city", "value": "Lisbon", "scope": "global"}, format="json"
        )
        assert same.status_code == 200 and same.json()["outcome"] == OUTCOME_CONFIRMED
        new = client.post(REMEMBER, {"key": "wifi_name", "value": "acme", "scope": "global"}, format="json")
        assert new.status_code == 201 and new.json()["outcome"] == OUTCOME_CREATED
        assert self.current("wifi_name").value == "acme"

    def test_a_similar_new_key_does_not_close_a_global_fact(self):
        """Cross-key consolidation would supersede `office_city` with a new `city`: for an
        agent-bound key the new key is held and `office_city` stays current."""
        result = fact_remember(
            workspace=self.workspace,
            key="city",
            value="Porto",
            scope="global",
            agent=self.agent,
            actor=self.agent_actor,
            principal=principal_for_api_key(self.agent_api_key),
        )
        assert result.outcome == OUTCOME_HELD
        assert result.fact.review == Fact.Review.HELD
        assert self.current().pk == self.office.pk and self.current().valid_to is None
        assert self.current("city") is None

    def test_the_agent_tools_hold_remember_and_refuse_forget(self):
        """The `remember` and `forget` tools (REST tool calls and MCP) get the same rule."""
        from runtime import tools

        principal = principal_for_api_key(self.agent_api_key)
        remembered = tools.remember(principal=principal, key="office_city", value="Porto", scope="global")
        assert remembered["outcome"] == OUTCOME_HELD
        with pytest.raises(ApplicationError) as caught:
            tools.forget(principal=principal, key="office_city", scope="global")
        assert caught.value.code == "workspace_key_required"
        assert self.current().value == "Lisbon"

    def test_extraction_for_an_agent_does_not_supersede_a_global_fact(self):
        """A value an extraction of an agent's conversation proposes for a global key that has
        another value is held, not applied, even from a system caller."""
        result = fact_remember(
            workspace=self.workspace,
            key="office_city",
            value="Porto",
            scope="global",
            agent=self.agent,
            source=Fact.Source.EXTRACTION,
            actor="system",
        )
        assert result.outcome == OUTCOME_HELD
        assert self.current().value == "Lisbon"

    def test_an_agent_bound_key_cannot_approve_its_held_global_change(self):
        """Approving a held value that would supersede a global fact is a workspace-level act;
        a workspace-wide key approves it and it becomes current."""
        held = fact_remember(
            workspace=self.workspace,
            key="office_city",
            value="Porto",
            scope="global",
            agent=self.agent,
            actor=self.agent_actor,
            principal=principal_for_api_key(self.agent_api_key),
        ).fact
        with pytest.raises(ApplicationError) as caught:
            fact_review_approve(
                fact=held, actor=self.agent_actor, principal=principal_for_api_key(self.agent_api_key)
            )
        assert caught.value.code == "workspace_key_required"
        assert self.current().value == "Lisbon"
        fact_review_approve(
            fact=held, actor=self.owner_api_key_actor, principal=principal_for_api_key(self.owner_api_key)
        )
        assert self.current().pk == held.pk and self.current().value == "Porto"

    # Everyone else is unchanged.

    def test_workspace_keys_operators_and_the_system_change_global_facts(self):
        """A workspace-wide key, an operator and a system caller supersede, edit and delete."""
        response = self.api().post(
            REMEMBER, {"key": "office_city", "value": "Porto", "scope": "global"}, format="json"
        )
        assert response.json()["outcome"] == OUTCOME_SUPERSEDED
        operator = principal_for_membership(Membership.objects.get(user=self.teammate))
        edited = fact_update(fact=self.current(), actor=operator.actor, principal=operator, value="Faro")
        assert self.current().pk == edited.pk
        result = fact_remember(workspace=self.workspace, key="office_city", value="Braga", scope="global")
        assert result.outcome == OUTCOME_SUPERSEDED
        response = self.api().delete(f"{LIST}{result.fact.pk}/")
        assert response.status_code == 200
        assert self.current() is None

    def test_an_agent_bound_key_still_changes_user_and_agent_facts(self):
        """User, agent and session facts keep their rules: a bot forgets a person's fact."""
        client = self.api(self.agent_key)
        body = {"key": "tz", "value": "UTC", "scope": "user", "memory_user": str(self.person.pk)}
        client.post(REMEMBER, body, format="json")
        changed = client.post(REMEMBER, {**body, "value": "CET"}, format="json")
        assert changed.json()["outcome"] == OUTCOME_SUPERSEDED
        fact_id = changed.json()["fact"]["id"]
        assert client.patch(f"{LIST}{fact_id}/", {"confidence": 0.5}, format="json").status_code == 200
        assert client.delete(f"{LIST}{fact_id}/").status_code == 200
        mine = fact_remember(workspace=self.workspace, key="m", value=1, scope="agent", agent=self.agent).fact
        assert client.post(BATCH, {"ids": [str(mine.pk)]}, format="json").status_code == 200

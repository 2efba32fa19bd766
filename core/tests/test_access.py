"""core.access: one scope rule, and body ids resolved through it (issue 11)."""

import uuid

from core.access import (
    WORKSPACE_KEY_REQUIRED,
    agent_resolve,
    principal_for_api_key,
    principal_for_membership,
    references_resolve,
    require_workspace_key,
)
from core.errors import ApplicationError, NotFoundError
from core.models import Agent, Membership
from core.services import agent_get_or_create, workspace_create
from core.testing import MemoryTestCase
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from identities.models import MemoryUser
from identities.tests.factories import MemoryUserFactory
from procedures.models import Procedure
from procedures.tests.factories import ProcedureFactory


class ReferencesResolveTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.bound = principal_for_api_key(cls.agent_api_key)
        cls.workspace_wide = principal_for_api_key(cls.owner_api_key)
        cls.own = EpisodeFactory(agent=cls.agent)
        cls.foreign = EpisodeFactory(agent=cls.other_agent)
        cls.outsider = EpisodeFactory(agent=cls.outsider_agent)

    def resolve(self, principal, ids, **kwargs):
        return references_resolve(
            Episode.objects.all(), principal, ids, not_found=NotFoundError("Gone."), **kwargs
        )

    def test_rows_come_back_in_the_order_named_and_once(self):
        """Order follows the ids; a repeated id, in any spelling of the UUID, is one row."""
        rows = self.resolve(self.workspace_wide, [self.foreign.pk, str(self.own.pk).upper(), self.foreign.pk])
        assert rows == [self.foreign, self.own]

    def test_out_of_scope_raises_what_an_unknown_id_raises(self):
        """Another agent's row, another workspace's row, a random id and garbage: one error."""
        for ids in (
            [self.foreign.pk],
            [self.outsider.pk],
            [uuid.uuid4()],
            ["not-a-uuid"],
            [self.own.pk, None],
        ):
            with self.assertRaisesMessage(NotFoundError, "Gone."):
                self.resolve(self.bound, ids)

    def test_workspace_rows_need_no_agent(self):
        """agent_field=None: people are the workspace's, visible to an agent-bound key."""
        person = MemoryUserFactory(workspace=self.workspace)
        found = references_resolve(
            MemoryUser.objects.all(), self.bound, [person.pk], agent_field=None, not_found=NotFoundError()
        )
        assert found == [person]

    def test_shared_rows_are_the_workspaces_and_the_agents_own(self):
        """shared=True: rows without an agent and the key's agent's rows, not another agent's."""
        shared = ProcedureFactory(workspace=self.workspace, agent=None)
        own = ProcedureFactory(workspace=self.workspace, agent=self.agent)
        foreign = ProcedureFactory(workspace=self.workspace, agent=self.other_agent)
        resolve = lambda ids: references_resolve(  # noqa: E731
            Procedure.objects.all(), self.bound, ids, shared=True, not_found=NotFoundError()
        )
        assert resolve([shared.pk, own.pk]) == [shared, own]
        with self.assertRaises(NotFoundError):
            resolve([foreign.pk])


class RequireWorkspaceKeyTests(MemoryTestCase):
    def test_only_agent_bound_principals_are_refused(self):
        """Agent-bound keys get 403 workspace_key_required; workspace keys and operators pass."""
        with self.assertRaisesMessage(ApplicationError, WORKSPACE_KEY_REQUIRED) as caught:
            require_workspace_key(principal_for_api_key(self.agent_api_key))
        assert (caught.exception.status_code, caught.exception.code) == (403, "workspace_key_required")
        require_workspace_key(principal_for_api_key(self.owner_api_key))
        require_workspace_key(principal_for_membership(Membership.objects.get(user=self.owner)))


class AgentResolveTests(MemoryTestCase):
    """The agent a workspace-wide key names by slug, read through a statement built once."""

    def test_the_named_agent_is_the_orms_instance_field_for_field(self):
        principal = principal_for_api_key(self.owner_api_key)
        agent = agent_resolve(principal, self.other_agent.slug, create=False)
        expected = Agent.objects.get(pk=self.other_agent.pk)
        assert type(agent) is Agent and not agent._state.adding and agent._state.db == "default"
        assert [getattr(agent, f.attname) for f in Agent._meta.concrete_fields] == [
            getattr(expected, f.attname) for f in Agent._meta.concrete_fields
        ]

    def test_a_slug_of_another_workspace_is_not_found_and_not_created_there(self):
        other = workspace_create(name="Other")
        stranger = agent_get_or_create(workspace=other, slug="stranger")
        principal = principal_for_api_key(self.owner_api_key)
        with self.assertRaises(NotFoundError):
            agent_resolve(principal, "stranger", create=False)
        created = agent_resolve(principal, "stranger")
        assert created.workspace_id == self.workspace.pk and created.pk != stranger.pk
        assert agent_resolve(principal, "stranger").pk == created.pk

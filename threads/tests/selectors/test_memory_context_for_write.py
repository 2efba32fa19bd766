"""memory_context_for_write: an unknown slug named by a writable workspace key is an unsaved
agent; a known one is read with one lookup, as memory_context_resolve reads it; nothing is
stored."""

import uuid

import pytest
from django.core.exceptions import ValidationError

from core.access import principal_for_api_key
from core.errors import NotFoundError
from core.models import Agent
from core.testing import MemoryTestCase
from threads.selectors import THREAD_OTHER_AGENT, memory_context_for_write, memory_context_resolve
from threads.services import thread_create


class MemoryContextForWriteTests(MemoryTestCase):
    def principal(self, api_key=None):
        return principal_for_api_key(api_key or self.owner_api_key)

    def test_a_known_slug_is_looked_up_once(self):
        """The write path costs what the read path costs: one statement for the agent."""
        principal = self.principal()
        with self.assertNumQueries(1):
            context = memory_context_for_write(principal=principal, agent="assistant")
        assert context.agent == self.agent and not context.agent._state.adding
        with self.assertNumQueries(1):
            assert memory_context_resolve(principal=principal, agent="assistant").agent == self.agent

    def test_an_unknown_slug_is_an_unsaved_agent_after_one_lookup(self):
        principal = self.principal()
        with self.assertNumQueries(1):
            context = memory_context_for_write(principal=principal, agent="newbot")
        assert context.agent._state.adding and context.agent.pk is not None
        assert (context.agent.slug, context.agent.workspace_id) == ("newbot", self.workspace.pk)
        assert not Agent.objects.filter(workspace=self.workspace, slug="newbot").exists()

    def test_an_agent_bound_key_sends_no_agent_lookup(self):
        principal = self.principal(self.agent_api_key)
        with self.assertNumQueries(0):
            context = memory_context_for_write(principal=principal)
        assert context.agent == self.agent

    def test_the_read_path_and_a_read_only_key_answer_an_unknown_slug_with_a_404(self):
        with pytest.raises(NotFoundError):
            memory_context_resolve(principal=self.principal(), agent="newbot")
        with pytest.raises(NotFoundError):
            memory_context_for_write(principal=self.principal(self.read_only_api_key), agent="newbot")
        assert not Agent.objects.filter(workspace=self.workspace, slug="newbot").exists()

    def test_a_new_agent_has_no_thread(self):
        thread = thread_create(workspace=self.workspace, agent=self.agent)
        with pytest.raises(NotFoundError) as raised:
            memory_context_for_write(principal=self.principal(), agent="newbot", thread=str(thread.pk))
        assert raised.value.fields == {"thread": [THREAD_OTHER_AGENT]}

    def test_an_invalid_slug_is_refused_before_anything_is_stored(self):
        with pytest.raises(ValidationError):
            memory_context_for_write(principal=self.principal(), agent="x" * 101)
        assert (
            not Agent.objects.filter(workspace=self.workspace)
            .exclude(slug__in=["assistant", "researcher"])
            .exists()
        )

    def test_an_unknown_person_is_a_404_after_the_agent(self):
        with pytest.raises(NotFoundError):
            memory_context_for_write(
                principal=self.principal(), agent="newbot", memory_user=str(uuid.uuid4())
            )

"""`thread_get`: the thread every thread call reads, in the principal's scope only."""

import uuid

from django.core.exceptions import ValidationError

from core.access import Principal
from core.errors import NotFoundError
from core.testing import MemoryTestCase
from episodic.tests.factories import memory_user_factory
from threads.selectors.threads import thread_for_turn, thread_get
from threads.tests.factories import make_thread


class ThreadGetTests(MemoryTestCase):
    def principal(self, *, workspace=None, agent=None):
        return Principal(workspace=workspace or self.workspace, role="editor", agent=agent)

    def test_the_thread_comes_with_its_agent_person_and_workspace(self):
        person = memory_user_factory(self.workspace)
        thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=person)
        with self.assertNumQueries(1):
            loaded = thread_get(principal=self.principal(agent=self.agent), thread_id=thread.pk)
            assert (loaded.agent.slug, loaded.memory_user.display_name, loaded.workspace.name) == (
                "assistant",
                "Ada",
                "Acme",
            )

    def test_the_narrow_row_holds_what_the_checkpoint_endpoints_read(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        principal = self.principal(agent=self.agent)
        with self.assertNumQueries(1):
            loaded = thread_get(principal=principal, thread_id=thread.pk, related=False)
            assert (loaded.workspace_id, loaded.agent_id) == (self.workspace.pk, self.agent.pk)
            assert loaded.last_activity_at == thread.last_activity_at
        assert "title" in loaded.get_deferred_fields()

    def test_only_the_principals_workspace_and_agent_see_it(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        assert thread_get(principal=self.principal(), thread_id=thread.pk) == thread
        assert thread_get(principal=self.principal(agent=self.agent), thread_id=str(thread.pk)) == thread
        hidden = {
            "another agent's key": self.principal(agent=self.other_agent),
            "another workspace": self.principal(workspace=self.other_workspace),
            "another workspace's agent": self.principal(
                workspace=self.other_workspace, agent=self.outsider_agent
            ),
        }
        for label, principal in hidden.items():
            for related in (True, False):
                with self.subTest(label, related=related), self.assertRaises(NotFoundError):
                    thread_get(principal=principal, thread_id=thread.pk, related=related)
        with self.assertRaises(NotFoundError):
            thread_get(principal=self.principal(), thread_id=uuid.uuid4())

    def test_a_malformed_id_fails_as_the_orms_lookup_does(self):
        for related in (True, False):
            with self.subTest(related=related), self.assertRaises(ValidationError):
                thread_get(principal=self.principal(), thread_id="not-a-uuid", related=related)


class ThreadForTurnTests(MemoryTestCase):
    def test_the_thread_of_the_agent_or_of_the_agent_named(self):
        person = memory_user_factory(self.workspace)
        thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=person)
        with self.assertNumQueries(1):
            found = thread_for_turn(workspace=self.workspace, thread_id=thread.pk, agent=self.agent)
            assert (found, found.agent, found.memory_user) == (thread, self.agent, person)
        by_slug = thread_for_turn(workspace=self.workspace, thread_id=thread.pk, agent_slug="assistant")
        assert by_slug == thread

    def test_another_agent_or_workspace_finds_nothing(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        misses = {
            "another agent": {"workspace": self.workspace, "agent": self.other_agent},
            "another agent's slug": {"workspace": self.workspace, "agent_slug": "researcher"},
            "an unknown slug": {"workspace": self.workspace, "agent_slug": "nobody"},
            # The other workspace has an agent of the same slug.
            "another workspace": {"workspace": self.other_workspace, "agent_slug": "assistant"},
            "another workspace's agent": {"workspace": self.other_workspace, "agent": self.outsider_agent},
        }
        for label, scope in misses.items():
            with self.subTest(label):
                assert thread_for_turn(thread_id=thread.pk, **scope) is None

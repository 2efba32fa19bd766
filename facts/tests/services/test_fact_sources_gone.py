"""A fact whose cited message, episode or session thread is deleted between the caller's
read and the write (retention, another operator, an erasure) is a 404 naming the field,
never an IntegrityError at commit (a 500), and nothing is stored. Without a test transaction
around it: the foreign keys are checked at commit."""

from unittest import mock

import pytest
from django.db import connection
from django.test import TransactionTestCase
from django.test.utils import CaptureQueriesContext

from core.errors import NotFoundError
from core.models import Agent
from core.services import agent_get_or_create, agent_register, workspace_create
from episodes.models import Episode
from episodes.services.records import episode_delete
from episodes.tests.factories import EpisodeFactory
from episodic.tests.factories import memory_user_factory
from facts.models import Fact
from facts.services import fact_remember
from facts.services import remember as remember_module
from facts.services import review as review_module
from facts.services.review import fact_review_approve
from identities.services import memory_user_erase
from retention.tests.test_engine_append_race import Elsewhere, finished_cleanly
from threads.models import Message, Thread
from threads.services.retention import thread_delete, threads_delete
from threads.tests.factories import append, make_thread


class FactSourceDeletedMeanwhileTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)
        (self.message,) = append(self.thread, ("user", "I drink tea."))

    def remember(self, **kwargs):
        return fact_remember(workspace=self.workspace, agent=self.agent, key="drink", value="tea", **kwargs)

    def assert_refused(self, field, **kwargs):
        with pytest.raises(NotFoundError) as refused:
            self.remember(**kwargs)
        assert field in refused.value.fields, refused.value.fields
        assert not Fact.objects.exists()

    def test_a_cited_message_deleted_meanwhile(self):
        Message.objects.filter(pk=self.message.pk).delete()
        self.assert_refused("source_message", scope="agent", source_message=self.message)

    def test_a_cited_episode_deleted_meanwhile(self):
        episode = EpisodeFactory(agent=self.agent)
        Episode.objects.filter(pk=episode.pk).delete()
        self.assert_refused("source_episode", scope="agent", source_episode=episode)

    def test_a_session_facts_thread_deleted_meanwhile(self):
        Thread.objects.filter(pk=self.thread.pk).delete()
        self.assert_refused("thread", scope="session", thread=self.thread)

    def test_a_confirmation_whose_source_is_gone_is_not_refused(self):
        """A confirmation stores nothing pointing at the source: it goes through."""
        stored = self.remember(scope="agent").fact
        Message.objects.filter(pk=self.message.pk).delete()
        confirmed = self.remember(scope="agent", source_message=self.message)
        assert (confirmed.outcome, confirmed.fact.pk) == ("confirmed", stored.pk)

    def test_a_value_held_again_whose_source_is_gone_answers_the_held_fact(self):
        """Held or rejected before, it stores nothing new: not refused either."""
        Agent.objects.filter(pk=self.agent.pk).update(memory_settings={"review": "all"})
        self.agent.refresh_from_db()
        first = self.remember(scope="agent", source_message=self.message)
        assert first.outcome == "held"
        Message.objects.filter(pk=self.message.pk).delete()
        again = self.remember(scope="agent", source_message=self.message)
        assert (again.outcome, again.fact.pk) == ("held", first.fact.pk)

    def test_a_fact_citing_nothing_sends_no_source_lock(self):
        with CaptureQueriesContext(connection) as queries:
            self.remember(scope="agent")
        assert not [q["sql"] for q in queries.captured_queries if "KEY SHARE" in q["sql"]]

    def test_sources_that_are_there_are_stored(self):
        fact = self.remember(scope="session", thread=self.thread, source_message=self.message).fact
        assert (fact.thread_id, fact.source_message_id) == (self.thread.pk, self.message.pk)


class FactWriteBesideSourceDeleteTests(TransactionTestCase):
    """A fact write citing a message (or an episode) whose key's current version cites the same
    thread (or episode), while that thread (or episode) is deleted: the delete clears the facts
    citing it before it deletes it. The write holds its sources before it locks any version
    (_sources_held), and the deletes lock the thread or the episode first, so one waits for the
    other and both succeed; before, each waited for the other's lock (a deadlock)."""

    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.person = memory_user_factory(self.workspace)

    def remember_during(self, delete, value, **fields):
        """fact_remember of `value` (a user fact of the person unless `fields` say otherwise),
        with `delete` started on another connection once the write holds its sources and is
        about to lock the key's versions; both outcomes."""
        fields = {"scope": "user", "memory_user": self.person, **fields}
        real, started = remember_module._fact_remember_locked, []

        def locked(**kwargs):
            started.append(Elsewhere(delete))
            started[-1].start()
            return real(**kwargs)

        with mock.patch.object(remember_module, "_fact_remember_locked", side_effect=locked):
            written = fact_remember(
                workspace=self.workspace, agent=self.agent, key="city", value=value, **fields
            )
        (deleted,) = finished_cleanly(*started)
        return written, deleted

    def test_a_thread_deleted_meanwhile(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        paris, lisbon = append(thread, ("user", "I live in Paris."), ("user", "I moved to Lisbon."))
        self.remember_during(lambda: None, "Paris", source_message=paris)
        written, _ = self.remember_during(
            lambda: thread_delete(thread=thread, actor="t"), "Lisbon", source_message=lisbon
        )
        assert written.outcome == "superseded"
        assert not Thread.objects.exists()
        assert Fact.objects.get(pk=written.fact.pk).source_message_id is None

    def test_an_episode_deleted_meanwhile(self):
        episode = Episode.objects.create(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        self.remember_during(lambda: None, "Paris", source_episode=episode)
        written, _ = self.remember_during(
            lambda: episode_delete(episode=episode, actor="t"), "Lisbon", source_episode=episode
        )
        assert written.outcome == "superseded"
        assert not Episode.objects.exists()
        assert Fact.objects.get(pk=written.fact.pk).source_episode_id is None

    def test_an_erasure_of_the_cited_episodes_person_meanwhile(self):
        """An agent fact citing a person's episode: the erasure locks its threads and episodes
        before it clears the facts citing them (core.holdings' locked_first)."""
        episode = Episode.objects.create(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        self.remember_during(lambda: None, "Paris", scope="agent", memory_user=None, source_episode=episode)
        written, _ = self.remember_during(
            lambda: memory_user_erase(memory_user=self.person, actor="t"),
            "Lisbon",
            scope="agent",
            memory_user=None,
            source_episode=episode,
        )
        assert written.outcome == "superseded"
        assert not Episode.objects.exists()
        assert Fact.objects.get(pk=written.fact.pk).source_episode_id is None

    def test_a_batch_thread_delete_meanwhile(self):
        """A session fact citing a message of another thread holds both threads in key order;
        the batch delete locks them in key order too (it took the newest first)."""
        low, high = sorted(
            (make_thread(workspace=self.workspace, agent=self.agent) for _ in range(2)), key=lambda t: t.pk
        )
        (quote,) = append(high, ("user", "I live in Lisbon."))
        Thread.objects.filter(pk=low.pk).update(last_activity_at="2020-01-01T00:00:00Z")
        real, started = remember_module._sources_held, []

        def held(**kwargs):
            # The lower thread is held, the higher not yet, when the batch delete starts.
            with connection.cursor() as cursor:
                cursor.execute("SELECT id FROM threads_thread WHERE id = %s FOR KEY SHARE", [low.pk])
            started.append(Elsewhere(lambda: threads_delete(ids=[low.pk, high.pk], actor="t")))
            started[-1].start()
            return real(**kwargs)

        with mock.patch.object(remember_module, "_sources_held", side_effect=held):
            written = fact_remember(
                workspace=self.workspace,
                agent=self.agent,
                key="city",
                value="Lisbon",
                scope="session",
                thread=low,
                source_message=quote,
            )
        finished_cleanly(*started)
        assert written.outcome == "created"
        assert not Thread.objects.exists() and not Fact.objects.exists()


class ReviewBesideThreadDeleteTests(TransactionTestCase):
    """Approving a held fact locks it, then the key's current version; a thread delete clears
    the source of every fact citing the thread, the older current version first. The decision
    holds the held fact's sources first (review's _held_sources_lock), so one waits for the
    other; before, each waited for the other's lock."""

    def test_an_approval_while_the_cited_thread_is_deleted(self):
        workspace = workspace_create(name="Acme")
        agent = agent_register(workspace=workspace, slug="support", memory_settings={"review": "all"})
        thread = make_thread(workspace=workspace, agent=agent)
        paris, lisbon = append(thread, ("user", "I live in Paris."), ("user", "I moved to Lisbon."))
        fact_remember(
            workspace=workspace,
            agent=agent,
            key="city",
            value="Paris",
            scope="agent",
            source="operator",
            source_message=paris,
        )
        held = fact_remember(
            workspace=workspace, agent=agent, key="city", value="Lisbon", scope="agent", source_message=lisbon
        )
        assert held.outcome == "held"
        real, started = review_module._held_lock, []

        def lock(fact):
            locked = real(fact)
            started.append(Elsewhere(lambda: thread_delete(thread=thread, actor="t")))
            started[-1].start()
            return locked

        with mock.patch.object(review_module, "_held_lock", side_effect=lock):
            approved = fact_review_approve(fact=held.fact, actor="operator:o")
        finished_cleanly(*started)
        assert Fact.objects.get(pk=approved.pk).valid_to is None
        assert not Thread.objects.exists()

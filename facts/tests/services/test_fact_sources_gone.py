"""A fact whose cited message, episode or session thread is deleted between the caller's
read and the write (retention, another operator, an erasure) is a 404 naming the field,
never an IntegrityError at commit (a 500), and nothing is stored. Without a test transaction
around it: the foreign keys are checked at commit."""

import pytest
from django.test import TransactionTestCase

from core.errors import NotFoundError
from core.services import agent_get_or_create, workspace_create
from episodes.models import Episode
from episodes.tests.factories import EpisodeFactory
from facts.models import Fact
from facts.services import fact_remember
from threads.models import Message, Thread
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

    def test_sources_that_are_there_are_stored(self):
        fact = self.remember(scope="session", thread=self.thread, source_message=self.message).fact
        assert (fact.thread_id, fact.source_message_id) == (self.thread.pk, self.message.pk)

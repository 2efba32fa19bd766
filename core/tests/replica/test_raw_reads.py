"""Reads written as SQL follow the replica choice as the ORM's do: a search's ranking, the
browser's search by meaning and a thread's branches are read on the standby, not the primary."""

import re

from django.db import DEFAULT_DB_ALIAS, connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core.lib.replica import REPLICA_DB_ALIAS
from core.models import Membership
from core.services import agent_get_or_create, operator_create
from core.testing_openai import OpenAITestServer
from core.tests.replica.standby import StandbyTestCase
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory, memory_user_factory, use_test_embeddings
from threads.services import thread_append_messages, thread_create

# The memory's tables (not who is asking: keys, members, users and sessions are read on the
# primary on purpose, core.lib.replica.PRIMARY_ONLY_MODELS).
MEMORY_TABLE = re.compile(r"\b(episodes|threads|facts|procedures|identities|review|store)_\w+")


@override_settings(ROOT_URLCONF="memory_project.urls")
class RawReadsTests(StandbyTestCase):
    def setUp(self):
        super().setUp()
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.person = memory_user_factory(self.workspace)
        self.entry = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada trains for a marathon."
        )
        self.thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        thread_append_messages(
            thread=self.thread,
            messages=[{"role": "user", "content": "How long is a marathon?"}],
        )
        self.operator = operator_create(
            workspace=self.workspace, username="operator", password="x", role=Membership.Role.VIEWER
        ).user
        self.replayed_wait()

    def reads(self, send):
        """(statements on the primary, statements on the standby) while `send()` runs."""
        with (
            CaptureQueriesContext(connections[DEFAULT_DB_ALIAS]) as primary,
            CaptureQueriesContext(connections[REPLICA_DB_ALIAS]) as standby,
        ):
            response = send()
        assert response.status_code == 200, response.content[:500]
        return [q["sql"] for q in primary.captured_queries], [q["sql"] for q in standby.captured_queries]

    def assert_memory_read_on_the_standby_only(self, primary, standby, table):
        assert any(table in sql for sql in standby), f"{table} was not read on the standby"
        on_primary = [sql for sql in primary if MEMORY_TABLE.search(sql)]
        assert on_primary == [], on_primary

    def test_an_episodic_search_ranks_on_the_standby(self):
        """BM25, the vector candidates and their description: none of it on the primary."""
        primary, standby = self.reads(
            lambda: self.api(self.key).post(
                "/api/v1/episodic-entries/search/",
                {"agent": "assistant", "memory_user": str(self.person.pk), "query": "marathon"},
                format="json",
            )
        )
        self.assert_memory_read_on_the_standby_only(primary, standby, "episodes_entryembedding")
        assert any("ts_rank" in sql or "bm25" in sql.lower() or "@@" in sql for sql in standby)

    def test_the_search_page_reads_by_meaning_on_the_standby(self):
        self.client.force_login(self.operator)
        url = reverse("memories:search", kwargs={"workspace_id": self.workspace.pk})
        primary, standby = self.reads(lambda: self.client.get(url, {"q": "running a long race"}))
        self.assert_memory_read_on_the_standby_only(primary, standby, "episodes_entryembedding")

    def test_a_thread_page_reads_its_branches_on_the_standby(self):
        self.client.force_login(self.operator)
        url = reverse("memories:thread", kwargs={"workspace_id": self.workspace.pk, "pk": self.thread.pk})
        primary, standby = self.reads(lambda: self.client.get(url))
        self.assert_memory_read_on_the_standby_only(primary, standby, "threads_message")

    def test_the_review_queue_counts_on_the_standby(self):
        """GET /review/ counts the held items of each tier in one statement written in SQL."""
        EpisodicEntry.objects.filter(pk=self.entry.pk).update(review=EpisodicEntry.Review.HELD)
        self.replayed_wait()
        primary, standby = self.reads(lambda: self.api(self.key).get("/api/v1/review/"))
        assert any("count(*)" in sql and "episodes_episodicentry" in sql for sql in standby)
        self.assert_memory_read_on_the_standby_only(primary, standby, "episodes_episodicentry")

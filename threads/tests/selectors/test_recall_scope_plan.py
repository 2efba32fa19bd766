from unittest import mock

from django.db import connection

from core.testing import MemoryTestCase, plan_nodes, statements_sent
from identities.tests.factories import MemoryUserFactory
from threads.models import Message
from threads.selectors import message_search_related
from threads.services import thread_append_messages
from threads.tests.factories import make_thread

WORDS = ["kite", "zebra", "garden", "lantern", "violin", "harbour", "pepper", "meadow"]


class RecallScopePlanTests(MemoryTestCase):
    """Semantic recall reads the searched person's messages, never the table's: what a search
    costs must not grow with everyone else's history (docs/speed.md, "Semantic recall's
    messages")."""

    def history(self, person, *, threads: int, per_thread: int) -> int:
        for _ in range(threads):
            thread = make_thread(workspace=self.workspace, agent=self.agent, memory_user=person)
            thread_append_messages(
                thread=thread,
                messages=[
                    {
                        "role": "user" if i % 2 == 0 else "assistant",
                        "content": f"{WORDS[i % 8]} {WORDS[(3 * i) % 8]} note {i}",
                    }
                    for i in range(per_thread)
                ],
            )
        return threads * per_thread

    def test_the_persons_messages_are_read_by_their_threads(self):
        """Nine other people with 500 messages each, the person with as many. Joined to their
        threads, the messages were estimated from the table's average thread, and PostgreSQL
        scanned all 5,000 of them to find the person's 500."""
        for index in range(9):
            other = MemoryUserFactory(workspace=self.workspace, canonical_id=f"telegram:other-{index}")
            self.history(other, threads=5, per_thread=100)
        person = MemoryUserFactory(workspace=self.workspace, canonical_id="telegram:person")
        own = self.history(person, threads=5, per_thread=100)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE threads_message")
            cursor.execute("ANALYZE threads_thread")

        with statements_sent("WITH scope AS") as sent:
            result = message_search_related(
                workspace=self.workspace,
                agent=self.agent,
                memory_user=person,
                query="kite garden",
                top_k=10,
                mode="lexical",
            )
        [(sql, params)] = sent
        nodes = plan_nodes(sql, params)

        removed = ("Rows Removed by Filter", "Rows Removed by Index Recheck")
        read = [
            (node["Node Type"], node["Actual Rows"] + sum(node.get(key, 0) for key in removed))
            for node in nodes
            if node.get("Relation Name") == "threads_message"
        ]
        assert read, nodes
        assert all(rows <= own for _type, rows in read), read
        # Still the person's own matches, best first.
        assert len(result.hits) == 10
        assert all(hit.message.thread.memory_user_id == person.pk for hit in result.hits)

    def test_a_window_that_moves_on_reuses_the_historys_statistics(self):
        """Each turn leaves a different window out of recall, which changes a long history's
        size and lengths by a few messages: its BM25 statistics read by one turn serve the
        next ones for SEARCH_SCOPE_SIZE_CACHE_SECONDS, and the window is still left out."""
        person = MemoryUserFactory(workspace=self.workspace, canonical_id="telegram:person")
        self.history(person, threads=1, per_thread=40)
        window = list(Message.objects.filter(thread__memory_user=person).order_by("-seq")[:10])

        def recall(excluded):
            with statements_sent("WITH scope AS") as sent:
                result = message_search_related(
                    workspace=self.workspace,
                    agent=self.agent,
                    memory_user=person,
                    query="kite garden",
                    exclude_message_ids=[message.pk for message in excluded],
                    top_k=40,
                    mode="lexical",
                )
            [(sql, _params)] = sent
            return {hit.message.pk for hit in result.hits}, "count(*) FROM scope" in sql

        with mock.patch("core.ranking.BM25_STATS_CACHE_MIN_ROWS", 20):
            first, first_counted = recall(window[2:])
            then, then_counted = recall(window)
        assert (first_counted, then_counted) == (True, False)
        assert not then & {message.pk for message in window}
        assert {message.pk for message in window[:2]} & first

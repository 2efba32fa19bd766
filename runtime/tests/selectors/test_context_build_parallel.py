"""The context read with the background pool equals the one read in the calling thread."""

import threading
import time

from django.db import connection
from django.test import TransactionTestCase, override_settings

from core.lib import side_reads
from core.lib.side_reads import THREAD_PREFIX, side_pool_slots, side_reads_close
from core.services import agent_get_or_create, workspace_create
from core.testing_openai import OpenAITestServer
from episodic.tests.factories import entry_factory, use_test_embeddings
from runtime.selectors import build as selectors
from runtime.selectors import context_build
from runtime.tests.factories import conversation, person, session_fact, user_fact
from threads.selectors import MemoryContext
from threads.services import thread_plan_set


class ParallelContextBuildTests(TransactionTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        self.workspace = workspace_create(name="Acme")
        use_test_embeddings(self.server, self.workspace)
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.person = person(self.workspace, display_name="Ada")
        self.thread = conversation(self.workspace, self.agent, self.person, turns=40)
        for index in range(30):
            user_fact(self.workspace, self.person, f"hobby_{index}", f"hobby number {index}")
        session_fact(self.workspace, self.thread, "current_ticket", "T-1234")
        thread_plan_set(thread=self.thread, plan={"steps": ["refund the order"]})
        for content in ("Ada wants a refund for the kettle.", "Ada flies to Lisbon in May."):
            entry_factory(agent=self.agent, memory_user=self.person, content=content, embed=False)
        self.context = MemoryContext(
            workspace=self.workspace, agent=self.agent, memory_user=self.person, thread=self.thread
        )

    def build(self):
        return context_build(context=self.context, message="about that refund", token_budget=1500)

    def test_background_parts_give_the_same_context(self):
        """Memory and history read on the pool: same blocks, same window, same budget."""
        with override_settings(SIDE_READ_THREADS=0):
            sequential = self.build()
        seen = self.record_pool_parts()
        with override_settings(SIDE_READ_THREADS=2):
            parallel = self.build()
        assert sorted(name for name, _ in seen) == ["_history", "context_memory"]
        assert all(thread.startswith(THREAD_PREFIX) for _, thread in seen)
        assert "refund for the kettle" in parallel.sections["memory"].text
        self.assert_same(parallel, sequential)

    def test_parts_run_inline_when_the_pool_is_busy(self):
        """With every pool thread taken by other requests, nothing queues: the request's own
        thread reads the parts, with the same result."""
        with override_settings(SIDE_READ_THREADS=0):
            sequential = self.build()
        seen = self.record_pool_parts()
        with override_settings(SIDE_READ_THREADS=2):
            slots = side_pool_slots()
            taken = 0
            while slots.acquire(blocking=False):
                taken += 1
            try:
                busy = self.build()
            finally:
                for _ in range(taken):
                    slots.release()
        assert taken >= 1 and seen == []
        self.assert_same(busy, sequential)

    def test_closing_the_pool_closes_its_connections(self):
        """Pool threads keep a connection between requests; closing the pool ends those
        sessions, so the test database can be dropped at the end of a run."""
        before = self.sessions()
        with override_settings(SIDE_READ_THREADS=2):
            self.build()
        pool_sessions = self.sessions() - before
        assert pool_sessions
        side_reads_close()
        assert not any(thread.name.startswith(THREAD_PREFIX) for thread in threading.enumerate())
        assert self.sessions_gone(pool_sessions)
        # The next request starts a new pool.
        with override_settings(SIDE_READ_THREADS=2):
            self.build()
        pool_sessions = self.sessions() - before
        side_reads_close()
        assert self.sessions_gone(pool_sessions)

    def sessions(self) -> set[int]:
        """Backend pids of the other sessions on the test database (a live server of another
        test module may hold some)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return {pid for (pid,) in cursor.fetchall()}

    def sessions_gone(self, pids: set[int]) -> bool:
        """Whether the sessions `pids` end within 5 s: a closed one leaves pg_stat_activity
        a moment after its client hung up."""
        deadline = time.monotonic() + 5
        while self.sessions() & pids:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def record_pool_parts(self):
        seen = []
        original = side_reads._in_pool_thread

        def recording(fn, kwargs, slots):
            seen.append((fn.__name__, threading.current_thread().name))
            return original(fn, kwargs, slots)

        side_reads._in_pool_thread = recording
        self.addCleanup(setattr, side_reads, "_in_pool_thread", original)
        return seen

    def assert_same(self, context, sequential):
        for name in selectors.SECTIONS[:-1]:
            assert context.sections[name].text == sequential.sections[name].text, name
        assert context.history["message_ids"] == sequential.history["message_ids"]
        assert context.tokens == sequential.tokens <= 1500

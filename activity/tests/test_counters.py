import datetime as dt
import os
import time
from unittest import mock

from django.core.signals import request_finished
from django.db import close_old_connections, connection, transaction
from django.http import HttpResponse
from django.test import RequestFactory, TransactionTestCase, override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from activity.models import DailyCounter
from activity.services import counters_store
from core.counters import (
    ENTRIES_REJECTED,
    RECALLS_RECALL,
    RECALLS_SEARCH,
    _HeldCounts,
    counter_sink_register,
    counters_add,
    counters_flush,
)
from core.middleware import AfterResponseMiddleware
from core.services import agent_get_or_create, api_key_create, workspace_create
from core.testing import MemoryTestCase
from episodic.tests.factories import memory_user_factory


def counted(workspace, name, agent="any") -> int:
    rows = DailyCounter.objects.filter(workspace=workspace, metric=name)
    if agent != "any":
        rows = rows.filter(agent=agent)
    return sum(rows.values_list("value", flat=True))


class CountersTest(MemoryTestCase):
    def test_counts_add_up_in_one_row_per_day_agent_and_metric(self):
        """Each call adds to the day's row; a call without an agent has a row of its own."""
        with self.captureOnCommitCallbacks(execute=True):
            counters_add(workspace_id=self.workspace.pk, agent_id=self.agent.pk, counts={RECALLS_RECALL: 1})
            counters_add(workspace_id=self.workspace.pk, agent_id=self.agent.pk, counts={RECALLS_RECALL: 2})
            counters_add(workspace_id=self.workspace.pk, counts={RECALLS_RECALL: 1})
            counters_add(workspace_id=self.workspace.pk, counts={RECALLS_RECALL: 1})
        rows = DailyCounter.objects.filter(workspace=self.workspace, metric=RECALLS_RECALL)
        assert sorted((r.agent_id is None, r.value) for r in rows) == [(False, 3), (True, 2)]
        assert rows.first().day == timezone.now().astimezone(dt.UTC).date()

    def test_nothing_is_stored_before_the_commit_or_after_a_rollback(self):
        """Counts ride on the caller's commit: a rolled-back write counts nothing."""
        with self.captureOnCommitCallbacks(execute=False) as callbacks:
            counters_add(workspace_id=self.workspace.pk, agent_id=self.agent.pk, counts={RECALLS_RECALL: 1})
        assert len(callbacks) == 1
        assert counted(self.workspace, RECALLS_RECALL) == 0

    def test_the_recall_api_counts_a_recall_served(self):
        """POST /recall/ adds one to today's recalls of the agent."""
        with self.captureOnCommitCallbacks(execute=True):
            response = self.api(self.agent_key).post("/api/v1/recall/", {}, format="json")
        assert response.status_code == 200, response.content
        assert counted(self.workspace, RECALLS_RECALL, self.agent) == 1
        assert counted(self.other_workspace, RECALLS_RECALL) == 0

    def test_episodic_search_counts_a_recall_served(self):
        """POST /entries/search/ adds one to the agent's episodic searches."""
        person = memory_user_factory(self.workspace)
        with self.captureOnCommitCallbacks(execute=True):
            response = self.api(self.agent_key).post(
                "/api/v1/episodic-entries/search/",
                {"memory_user": str(person.pk), "query": "Lisbon", "mode": "lexical"},
                format="json",
            )
        assert response.status_code == 200, response.content
        assert counted(self.workspace, RECALLS_SEARCH, self.agent) == 1

    def test_extraction_counts_rejected_candidates_by_reason(self):
        """A candidate without evidence is rejected, and counted under its reason."""
        person = memory_user_factory(self.workspace)
        with self.captureOnCommitCallbacks(execute=True):
            response = self.api(self.agent_key).post(
                "/api/v1/episodic-entries/extract/",
                {
                    "memory_user": str(person.pk),
                    "transcript": [{"role": "user", "content": "I moved to Lisbon in May."}],
                    "candidates": [
                        {"content": "Ada moved to Porto.", "source": "user_assertion", "evidence": ""},
                        {"content": "Ada likes tea.", "source": "user_assertion", "evidence": "not said"},
                    ],
                    "use_llm": False,
                    "sync": True,
                },
                format="json",
            )
        assert response.status_code == 200, response.content
        reasons = sorted(item["reason"] for item in response.json()["rejected"])
        assert len(reasons) == 2
        for reason in set(reasons):
            assert counted(self.workspace, ENTRIES_REJECTED + reason, self.agent) == reasons.count(reason)


class CounterCommitTest(TransactionTestCase):
    """The upsert's own commit does not wait for the WAL flush; a caller's transaction does."""

    def setUp(self):
        self.workspace = workspace_create(name="Counted")

    def synchronous_commit(self) -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            return cursor.fetchone()[0]

    def test_the_setting_lasts_for_the_upsert_alone(self):
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO on")
        counters_store(workspace_id=self.workspace.pk, counts={RECALLS_SEARCH: 2})
        counters_store(workspace_id=self.workspace.pk, counts={RECALLS_SEARCH: 1})
        assert counted(self.workspace, RECALLS_SEARCH) == 3
        assert self.synchronous_commit() == "on"

    def test_inside_a_callers_transaction_the_callers_commit_is_left_alone(self):
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO on")
        with transaction.atomic():
            counters_store(workspace_id=self.workspace.pk, counts={RECALLS_SEARCH: 1})
            assert self.synchronous_commit() == "on"
        assert counted(self.workspace, RECALLS_SEARCH) == 1


class CountAfterResponseTest(MemoryTestCase):
    def test_a_search_is_counted_once_its_response_is_closed(self):
        """The count is bookkeeping: the server writes it after the answer is sent
        (core.lib.after_response), and a closed response has written it."""

        def view(request):
            with self.captureOnCommitCallbacks(execute=True):
                counters_add(
                    workspace_id=self.workspace.pk, agent_id=self.agent.pk, counts={RECALLS_SEARCH: 1}
                )
            assert counted(self.workspace, RECALLS_SEARCH) == 0
            return HttpResponse("answer")

        response = AfterResponseMiddleware(view)(RequestFactory().post("/api/v1/episodic-entries/search/"))
        assert counted(self.workspace, RECALLS_SEARCH) == 0
        # As Django's test client closes a response: the test's connection stays open.
        request_finished.disconnect(close_old_connections)
        try:
            response.close()
        finally:
            request_finished.connect(close_old_connections)
        assert counted(self.workspace, RECALLS_SEARCH, self.agent) == 1


class CountAfterResponseServedTest(TransactionTestCase):
    """Through the installed middleware: the search's response carries its count to close."""

    def test_the_search_api_queues_its_count_for_after_the_response(self):
        workspace = workspace_create(name="Counted")
        agent = agent_get_or_create(workspace=workspace, slug="assistant")
        _, key = api_key_create(workspace=workspace, agent=agent)
        person = memory_user_factory(workspace)
        client = APIClient(SERVER_NAME="localhost")
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        response = client.post(
            "/api/v1/episodic-entries/search/",
            {"memory_user": str(person.pk), "query": "Lisbon", "mode": "lexical"},
            format="json",
        )
        assert response.status_code == 200, response.content
        # The count was queued (the middleware wrapped the response's close), and the test
        # client, like a server, closed the response after reading it.
        assert "close" in vars(response)
        assert counted(workspace, RECALLS_SEARCH, agent) == 1


class HeldCountsTest(TransactionTestCase):
    """With COUNTERS_FLUSH_SECONDS, a web process's requests are counted together: one thread
    stores what they served in one upsert per interval, and what is held at exit is stored."""

    def setUp(self):
        self.workspace = workspace_create(name="Counted")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        _, key = api_key_create(workspace=self.workspace, agent=self.agent)
        self.person = memory_user_factory(self.workspace)
        self.client = APIClient(SERVER_NAME="localhost")
        self.client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        # Counts held (and a storing thread's interval) of one test do not reach another.
        held = mock.patch("core.counters._held", _HeldCounts())
        held.start()
        self.addCleanup(held.stop)
        self.addCleanup(counters_flush)

    def search(self):
        response = self.client.post(
            "/api/v1/episodic-entries/search/",
            {"memory_user": str(self.person.pk), "query": "Lisbon", "mode": "lexical"},
            format="json",
        )
        assert response.status_code == 200, response.content

    def wait_counted(self, expected: int) -> None:
        deadline = time.monotonic() + 10
        while counted(self.workspace, RECALLS_SEARCH, self.agent) != expected:
            assert time.monotonic() < deadline, counted(self.workspace, RECALLS_SEARCH, self.agent)
            time.sleep(0.02)

    def test_requests_are_counted_together_by_the_storing_thread(self):
        upserts = []

        def sink(**kwargs):
            upserts.append(kwargs)
            counters_store(**kwargs)

        counter_sink_register(sink)
        self.addCleanup(counter_sink_register, counters_store)
        with override_settings(COUNTERS_FLUSH_SECONDS=0.5):
            for _ in range(3):
                self.search()
            # The responses were closed (the test client closes them): nothing was written.
            assert counted(self.workspace, RECALLS_SEARCH) == 0
            self.wait_counted(3)
        assert len(upserts) == 1
        assert upserts[0]["counts"] == {RECALLS_SEARCH: 3}
        assert upserts[0]["day"] == timezone.now().astimezone(dt.UTC).date()
        rows = DailyCounter.objects.filter(workspace=self.workspace, metric=RECALLS_SEARCH)
        assert [(row.agent_id, row.value) for row in rows] == [(self.agent.pk, 3)]

    def test_what_is_held_is_stored_by_a_flush(self):
        """A process that exits normally stores what it holds (counters_flush runs at exit)."""
        with override_settings(COUNTERS_FLUSH_SECONDS=60):
            self.search()
            self.search()
            assert counted(self.workspace, RECALLS_SEARCH) == 0
            counters_flush()
        assert counted(self.workspace, RECALLS_SEARCH, self.agent) == 2

    def test_a_failing_store_is_logged_and_later_counts_are_stored(self):
        def failing(**kwargs):
            raise RuntimeError("the sink failed")

        counter_sink_register(failing)
        self.addCleanup(counter_sink_register, counters_store)
        with override_settings(COUNTERS_FLUSH_SECONDS=60), self.assertLogs("core.counters", "ERROR"):
            self.search()
            counters_flush()
        counter_sink_register(counters_store)
        with override_settings(COUNTERS_FLUSH_SECONDS=60):
            self.search()
            counters_flush()
        assert counted(self.workspace, RECALLS_SEARCH, self.agent) == 1

    def test_a_task_or_command_counts_at_once(self):
        """Outside a request there is no response to wait for and no process to outlive."""
        with override_settings(COUNTERS_FLUSH_SECONDS=60):
            counters_add(workspace_id=self.workspace.pk, agent_id=self.agent.pk, counts={RECALLS_SEARCH: 1})
        assert counted(self.workspace, RECALLS_SEARCH, self.agent) == 1

    def test_a_forked_process_does_not_store_its_parents_counts(self):
        held = _HeldCounts()
        stored = []
        held.add(lambda **kwargs: stored.append(kwargs), 1, None, dt.date(2026, 1, 1), {RECALLS_SEARCH: 1})
        with mock.patch("core.counters.os.getpid", return_value=os.getpid() + 1):
            held.flush()
        assert stored == []
        held.flush()
        assert [item["counts"] for item in stored] == [{RECALLS_SEARCH: 1}]

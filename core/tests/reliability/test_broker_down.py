"""The broker (Valkey) down while requests queue tasks: a committed write is answered as the
success it is, and a request whose task is its whole answer gets a 503 it can retry."""

from django.test import TransactionTestCase

from core.errors import QUEUE_UNAVAILABLE, RETRY_AFTER_SECONDS
from core.lib.fair_queue import llm_jobs_dispatch
from core.models import LLMJob
from core.testing import celery_broker, workspace_api_client
from facts.models import Fact
from threads.tests.factories import append, make_thread

# Nothing listens there: every send fails as it does while Valkey restarts.
BROKER_DOWN = "redis+socket:///nonexistent/broker.sock"


class BrokerDownTests(TransactionTestCase):
    def setUp(self):
        self.workspace, self.agent, self.client = workspace_api_client()

    def test_a_write_whose_task_a_sweep_does_is_answered_and_kept(self):
        """Before: the fact was committed, then its embedding task's send raised in the commit
        hook and the client got a 500 for a write that had happened."""
        body = {"key": "office", "value": "Lisbon", "scope": "global"}
        with celery_broker(BROKER_DOWN), self.assertLogs("core.lib.celery_task", "WARNING") as logs:
            response = self.client.post("/api/v1/facts/", body, format="json")
        assert response.status_code == 201, response.content
        assert Fact.objects.filter(workspace=self.workspace, key="office").count() == 1
        [line] = logs.output
        assert "facts.tasks.fact_embed_task" in line
        assert "sweep" in line

    def test_a_request_whose_task_is_its_whole_answer_is_503(self):
        """A retention run now writes nothing: when it cannot be queued the caller is told to
        retry, as for a database that is down."""
        with celery_broker(BROKER_DOWN), self.assertLogs("core.errors", "ERROR"):
            response = self.client.post("/api/v1/retention/runs/")
        assert response.status_code == 503
        assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)
        assert response.json()["error"] == {
            "code": "service_unavailable",
            "message": QUEUE_UNAVAILABLE,
            "fields": {},
        }

    def test_an_llm_job_the_broker_refuses_goes_back_to_its_queue(self):
        """Before: a 500 after the compaction's job was committed, and the job counted as sent
        (so as lost, for LLM_JOB_LOST_SECONDS) though no message existed. Now it waits in the
        queue, and the next dispatch sends it."""
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(thread, ("user", "I moved to Lisbon."), ("assistant", "Noted."))
        with celery_broker(BROKER_DOWN), self.assertLogs("core.lib.fair_queue", "WARNING"):
            response = self.client.post(f"/api/v1/threads/{thread.pk}/compact/")
        assert response.status_code == 202, response.content
        job = LLMJob.objects.get(workspace=self.workspace)
        assert (job.state, job.sent_at) == (LLMJob.State.QUEUED, None)
        # The broker is back (the test settings run tasks inline).
        assert llm_jobs_dispatch() == 1
        job.refresh_from_db()
        assert job.state == LLMJob.State.DONE  # its task ran

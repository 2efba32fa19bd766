"""Deferred and deduplicated jobs of the fair queue (core.lib.fair_queue; issue 14, Budgets)."""

import threading
import time
from datetime import timedelta
from unittest import mock

from django.db import IntegrityError, connection, transaction
from django.db.models import QuerySet
from django.test import TransactionTestCase, override_settings
from django.utils import timezone

from core.lib.fair_queue import (
    llm_job_begin,
    llm_job_defer,
    llm_job_enqueue,
    llm_job_finish,
    llm_jobs_dispatch,
    llm_jobs_recover,
)
from core.models import LLMJob, Workspace
from core.testing import MemoryTestCase

TASK = "threads.tasks.thread_compact_task"


@override_settings(LLM_JOBS_PER_WORKSPACE=5)
class DeferTests(MemoryTestCase):
    def setUp(self):
        patcher = mock.patch("core.lib.fair_queue._send")
        self.send = patcher.start()
        self.addCleanup(patcher.stop)

    def enqueue(self, key="", **kwargs):
        with self.captureOnCommitCallbacks(execute=True):
            return llm_job_enqueue(
                workspace_id=self.workspace.pk, task=TASK, kwargs={"thread_id": "t"}, dedupe_key=key, **kwargs
            )

    def test_a_deferred_job_is_not_sent_before_its_time(self):
        job = self.enqueue()
        assert LLMJob.objects.get(pk=job.pk).state == "sent"
        later = timezone.now() + timedelta(hours=2)
        with self.captureOnCommitCallbacks(execute=True):
            llm_job_defer(job.pk, not_before=later, workspace_id=self.workspace.pk, task=TASK, kwargs={})
        job.refresh_from_db()
        assert (job.state, job.not_before, job.sent_at) == ("queued", later, None)
        assert not llm_job_begin(job.pk)
        with self.captureOnCommitCallbacks(execute=True):
            assert llm_jobs_dispatch() == 0
        with (
            mock.patch("django.utils.timezone.now", return_value=later + timedelta(seconds=1)),
            self.captureOnCommitCallbacks(execute=True),
        ):
            assert llm_jobs_dispatch() == 1
        assert LLMJob.objects.get(pk=job.pk).state == "sent"

    def test_a_deferral_folds_into_a_queued_request_of_the_same_work(self):
        running = self.enqueue("k")
        with mock.patch("core.lib.fair_queue.llm_jobs_dispatch"):
            queued = self.enqueue("k")
        assert queued.pk != running.pk and LLMJob.objects.get(pk=queued.pk).state == "queued"
        later = timezone.now() + timedelta(hours=3)
        with mock.patch("core.lib.fair_queue.llm_jobs_dispatch"):
            kept = llm_job_defer(
                running.pk, not_before=later, workspace_id=self.workspace.pk, task=TASK, kwargs={}
            )
        assert kept.pk == queued.pk
        assert LLMJob.objects.get(pk=running.pk).state == "done"
        assert LLMJob.objects.get(pk=queued.pk).not_before == later

    def test_a_lost_job_whose_work_is_queued_again_is_closed_not_requeued(self):
        lost = self.enqueue("k")
        LLMJob.objects.filter(pk=lost.pk).update(sent_at=timezone.now() - timedelta(hours=1))
        with mock.patch("core.lib.fair_queue.llm_jobs_dispatch"):
            self.enqueue("k")
        with mock.patch("core.lib.fair_queue.llm_jobs_dispatch", return_value=0):
            swept = llm_jobs_recover()
        assert swept["requeued"] == 0
        assert LLMJob.objects.get(pk=lost.pk).state == "done"
        assert LLMJob.objects.filter(dedupe_key="k", state="queued").count() == 1

    @override_settings(LLM_JOBS_PER_WORKSPACE=1)
    def test_an_enqueue_of_a_workspace_at_its_cap_leaves_dispatch_to_its_running_jobs_finish(self):
        running = self.enqueue()
        assert LLMJob.objects.get(pk=running.pk).state == "sent"
        with mock.patch("core.lib.fair_queue.llm_jobs_dispatch") as dispatch:
            waiting = self.enqueue()
        dispatch.assert_not_called()
        with self.captureOnCommitCallbacks(execute=True):
            llm_job_finish(running.pk)
        assert LLMJob.objects.get(pk=waiting.pk).state == "sent"

    def test_a_twin_sent_before_it_is_read_back_leaves_this_request_its_own_job(self):
        """Another request's job of the same key won the insert, and was sent (no longer
        queued) before this request read it back: this request queues its own job instead of
        failing. The scale-out test saw it as a 500 on POST /compact/ from one of two webs."""
        original = LLMJob.objects.create
        attempts = []

        def create(**fields):
            attempts.append(fields["dedupe_key"])
            if len(attempts) == 1:
                raise IntegrityError(
                    'duplicate key value violates unique constraint "core_llm_job_one_queued_per_key"'
                )
            return original(**fields)

        with mock.patch.object(LLMJob.objects, "create", side_effect=create):
            job = self.enqueue("k")
        assert attempts == ["k", "k"]
        assert list(LLMJob.objects.filter(dedupe_key="k").values_list("pk", flat=True)) == [job.pk]

    def test_a_deferral_whose_twin_was_sent_meanwhile_queues_again(self):
        """The same work was queued while this job ran, and sent before the deferral read it
        back: the job goes back to the queue itself instead of failing its task."""
        job = self.enqueue("k")
        original = QuerySet.update
        requeues = []

        def update(queryset, **fields):
            if fields.get("state") == LLMJob.State.QUEUED:
                requeues.append(fields)
                if len(requeues) == 1:
                    raise IntegrityError("duplicate key")
            return original(queryset, **fields)

        later = timezone.now() + timedelta(hours=1)
        with mock.patch.object(QuerySet, "update", update), self.captureOnCommitCallbacks(execute=True):
            deferred = llm_job_defer(
                job.pk, not_before=later, workspace_id=self.workspace.pk, task=TASK, kwargs={}
            )
        assert len(requeues) == 2
        assert (deferred.pk, deferred.state, deferred.not_before) == (job.pk, "queued", later)

    def test_a_key_that_keeps_failing_raises_after_a_few_attempts(self):
        with (
            mock.patch.object(
                LLMJob.objects, "create", side_effect=IntegrityError("duplicate key")
            ) as create,
            self.assertRaises(IntegrityError),
        ):
            self.enqueue("k")
        assert create.call_count == 3


class ConcurrentEnqueueTests(TransactionTestCase):
    def test_two_requests_of_the_same_work_at_once_share_one_job(self):
        """The second request cannot see the first's uncommitted job, so it inserts too: the
        partial unique constraint makes it wait for the first commit and then answer the
        first's job, inside its own transaction, which goes on."""
        workspace = Workspace.objects.create(name="Parallel")
        created, second = threading.Event(), {}

        def first():
            try:
                with transaction.atomic():
                    llm_job_enqueue(workspace_id=workspace.pk, task=TASK, kwargs={}, dedupe_key="k")
                    created.set()
                    time.sleep(0.5)
            finally:
                connection.close()

        def other():
            try:
                created.wait(5)
                with transaction.atomic():
                    second["job"] = llm_job_enqueue(
                        workspace_id=workspace.pk, task=TASK, kwargs={}, dedupe_key="k"
                    )
                    second["after"] = LLMJob.objects.filter(workspace=workspace).count()
            finally:
                connection.close()

        threads = [threading.Thread(target=first), threading.Thread(target=other)]
        # Nothing is sent: the jobs stay queued.
        with mock.patch("core.lib.fair_queue.llm_jobs_dispatch"):
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        (job,) = LLMJob.objects.filter(workspace=workspace)
        assert second["job"].pk == job.pk and second["after"] == 1

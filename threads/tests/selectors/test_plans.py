"""The plan and the recent attempts every context of a thread reads."""

from datetime import timedelta

from django.utils import timezone

from core.testing import MemoryTestCase
from threads.selectors import iteration_log_recent, thread_plan_current
from threads.services import iteration_log_append, thread_plan_set
from threads.tests.factories import make_thread


class ThreadPlanCurrentTests(MemoryTestCase):
    def test_the_newest_version_or_none(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        other = make_thread(workspace=self.workspace, agent=self.agent)
        assert thread_plan_current(thread=thread) is None
        thread_plan_set(thread=thread, plan={"steps": [{"id": "a", "status": "todo"}]})
        thread_plan_set(thread=thread, plan={"steps": [{"id": "a", "status": "done"}], "note": None})
        thread_plan_set(thread=other, plan={"steps": []})
        with self.assertNumQueries(1):
            assert thread_plan_current(thread=thread) == {
                "steps": [{"id": "a", "status": "done"}],
                "note": None,
            }


class IterationLogRecentTests(MemoryTestCase):
    def test_the_newest_attempts_first_as_the_briefing_reads_them(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        start = timezone.now() - timedelta(minutes=10)
        for minute, (task, outcome) in enumerate(
            [("build", "failure"), ("build", "success"), ("test", "failure")]
        ):
            iteration_log_append(
                thread=thread,
                task_key=task,
                outcome=outcome,
                error="boom" if outcome == "failure" else "",
                detail={"minute": minute},
                at=start + timedelta(minutes=minute),
            )
        iteration_log_append(
            thread=make_thread(workspace=self.workspace, agent=self.agent), task_key="x", outcome="success"
        )
        with self.assertNumQueries(1):
            recent = iteration_log_recent(thread=thread, limit=2)
        assert [(r["task_key"], r["attempt"], r["outcome"], r["error"], r["detail"]) for r in recent] == [
            ("test", 1, "failure", "boom", {"minute": 2}),
            ("build", 2, "success", "", {"minute": 1}),
        ]
        assert set(recent[0]) == {"id", "task_key", "attempt", "outcome", "error", "detail", "at"}
        assert recent[0]["at"] == start + timedelta(minutes=2)

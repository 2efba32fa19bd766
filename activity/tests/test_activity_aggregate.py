import datetime as dt

from django.core.management import call_command
from django.utils import timezone

from activity.models import DailyMetric
from activity.services import (
    CREATED,
    EMBEDDING_BACKLOG,
    ENTRIES_EXTRACTED,
    FACTS_CONFIRMED,
    FACTS_CONTRADICTED,
    LLM_JOBS_WAITING,
    TOTAL,
    activity_aggregate,
)
from core.models import LLMJob
from core.testing import MemoryTestCase
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory, memory_user_factory
from facts.services import fact_remember
from threads.models import Message
from threads.tests.factories import append, make_thread

UTC = dt.UTC


def metric(workspace, name, day, agent=None) -> int:
    rows = DailyMetric.objects.filter(workspace=workspace, metric=name, day=day)
    if agent is not None:
        rows = rows.filter(agent=agent)
    return sum(rows.values_list("value", flat=True))


class ActivityAggregateTest(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.today = timezone.now().astimezone(UTC).date()
        cls.yesterday = cls.today - dt.timedelta(days=1)
        cls.thread = make_thread(workspace=cls.workspace, agent=cls.agent)
        cls.messages = append(cls.thread, ("user", "one"), ("assistant", "two"), ("user", "three"))
        # Two of them were appended yesterday.
        yesterday_noon = dt.datetime.combine(cls.yesterday, dt.time(12), tzinfo=UTC)
        Message.objects.filter(pk__in=[m.pk for m in cls.messages[:2]]).update(created_at=yesterday_noon)
        other_thread = make_thread(workspace=cls.workspace, agent=cls.other_agent)
        append(other_thread, ("user", "hello"))
        outsider_thread = make_thread(workspace=cls.other_workspace, agent=cls.outsider_agent)
        append(outsider_thread, *[("user", f"noise {i}") for i in range(5)])

        fact_remember(workspace=cls.workspace, key="office", value="Lisbon", scope="global")
        fact_remember(workspace=cls.workspace, key="office", value="Lisbon", scope="global")  # confirmed
        fact_remember(workspace=cls.workspace, key="office", value="Porto", scope="global")  # contradicted
        fact_remember(workspace=cls.workspace, key="motto", value="be kind", scope="agent", agent=cls.agent)

        person = memory_user_factory(cls.workspace)
        entry_factory(agent=cls.agent, memory_user=person, content="Ada moved to Lisbon in May.")
        entry_factory(
            agent=cls.agent,
            memory_user=person,
            content="Ada asked for invoices monthly.",
            source=EpisodicEntry.Source.AGENT_DIRECT,
            embed=False,
        )

    def test_counts_rows_per_day_tier_and_agent(self):
        """Creations land on their day, totals count what exists at each day's end, per agent."""
        activity_aggregate()
        ws, today, yesterday = self.workspace, self.today, self.yesterday
        assert metric(ws, CREATED + "messages", yesterday, self.agent) == 2
        assert metric(ws, CREATED + "messages", today, self.agent) == 1
        assert metric(ws, CREATED + "messages", today, self.other_agent) == 1
        assert metric(ws, TOTAL + "messages", yesterday) == 2
        assert metric(ws, TOTAL + "messages", today) == 4
        assert metric(ws, TOTAL + "messages", today, self.agent) == 3
        assert metric(ws, TOTAL + "threads", today) == 2
        # Current facts: office (the Porto version) and the agent's motto.
        assert metric(ws, TOTAL + "facts", today) == 2
        assert DailyMetric.objects.get(workspace=ws, metric=TOTAL + "facts", day=today, agent=None).value == 1
        assert metric(ws, TOTAL + "entries", today) == 2
        assert metric(ws, ENTRIES_EXTRACTED, today) == 1  # the agent's own entry is not extracted
        assert metric(ws, FACTS_CONFIRMED, today) == 1
        assert metric(ws, FACTS_CONTRADICTED, today) == 1
        assert metric(ws, TOTAL + "users", today) == 1

    def test_backlogs_count_rows_without_a_vector_and_llm_jobs_not_done(self):
        """Rows whose vector task never ran are the backlog; embedded rows and done jobs are not."""
        LLMJob.objects.create(workspace=self.workspace, task="reflection.tasks.reflection_run_task")
        LLMJob.objects.create(workspace=self.workspace, task="x", state=LLMJob.State.DONE)
        activity_aggregate()
        assert metric(self.workspace, LLM_JOBS_WAITING, self.today) == 1
        assert metric(self.workspace, EMBEDDING_BACKLOG + "facts", self.today) == 2
        assert metric(self.workspace, EMBEDDING_BACKLOG + "entries", self.today) == 1
        assert not DailyMetric.objects.filter(
            day=self.yesterday, metric__startswith=EMBEDDING_BACKLOG
        ).exists()

    def test_workspaces_are_counted_apart(self):
        """Another workspace's rows never count here, and its own rows carry its numbers."""
        activity_aggregate()
        assert metric(self.other_workspace, TOTAL + "messages", self.today) == 5
        assert metric(self.workspace, TOTAL + "messages", self.today) == 4
        assert not DailyMetric.objects.filter(workspace=self.workspace, agent=self.outsider_agent).exists()

    def test_running_again_rewrites_the_same_rows(self):
        """Idempotent: a second run leaves the same rows and values."""
        activity_aggregate()
        columns = ("workspace_id", "agent_id", "day", "metric", "value")
        first = sorted(DailyMetric.objects.values_list(*columns), key=str)
        activity_aggregate()
        second = sorted(DailyMetric.objects.values_list(*columns), key=str)
        assert first == second

    def test_an_incremental_run_recomputes_only_yesterday_and_today(self):
        """New rows raise today's buckets; an older day's row is left as it was."""
        old = self.today - dt.timedelta(days=5)
        DailyMetric.objects.create(workspace=self.workspace, day=old, metric=TOTAL + "messages", value=123)
        activity_aggregate()
        append(self.thread, ("assistant", "four"))
        activity_aggregate()
        assert metric(self.workspace, CREATED + "messages", self.today, self.agent) == 2
        assert metric(self.workspace, TOTAL + "messages", self.today) == 5
        assert metric(self.workspace, TOTAL + "messages", self.yesterday) == 2
        assert metric(self.workspace, TOTAL + "messages", old) == 123

    def test_deleted_rows_leave_the_recomputed_days(self):
        """A deleted thread's messages no longer count in yesterday's or today's buckets."""
        activity_aggregate()
        self.thread.delete()
        activity_aggregate()
        assert metric(self.workspace, TOTAL + "messages", self.today) == 1
        assert metric(self.workspace, TOTAL + "messages", self.yesterday) == 0
        assert metric(self.workspace, CREATED + "messages", self.yesterday) == 0

    def test_one_workspace_can_be_recomputed_alone(self):
        """workspace_ids limits both what is counted and what is replaced."""
        activity_aggregate()
        activity_aggregate(workspace_ids=[self.other_workspace.pk])
        assert metric(self.workspace, TOTAL + "messages", self.today) == 4
        assert metric(self.other_workspace, TOTAL + "messages", self.today) == 5

    def test_backfill_command_fills_past_days(self):
        """The backfill walks totals back from today for every day asked."""
        week_ago = dt.datetime.combine(self.today - dt.timedelta(days=6), dt.time(8), tzinfo=UTC)
        Message.objects.filter(pk=self.messages[0].pk).update(created_at=week_ago)
        call_command("activity_backfill", "--days", "10", stdout=open("/dev/null", "w"))  # noqa: SIM115
        ws = self.workspace
        assert metric(ws, TOTAL + "messages", self.today - dt.timedelta(days=9)) == 0
        assert metric(ws, TOTAL + "messages", self.today - dt.timedelta(days=6)) == 1
        assert metric(ws, CREATED + "messages", self.today - dt.timedelta(days=6)) == 1
        assert metric(ws, TOTAL + "messages", self.yesterday) == 2
        assert metric(ws, TOTAL + "messages", self.today) == 4

"""The overview's daily aggregates at a day's edge, under a server time zone other than UTC, and
for facts decided in the review queue: each confirmation and contradiction counted once."""

import datetime as dt

from django.test import override_settings
from django.utils import timezone

from activity.models import DailyMetric
from activity.services import CREATED, FACTS_CONFIRMED, FACTS_CONTRADICTED, TOTAL, activity_aggregate
from core.testing import MemoryTestCase
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory, memory_user_factory
from facts.models import Fact
from facts.services import fact_remember, fact_review_approve, fact_review_merge

UTC = dt.UTC


def metric(workspace, name, day) -> int:
    return sum(
        DailyMetric.objects.filter(workspace=workspace, metric=name, day=day).values_list("value", flat=True)
    )


class ActivityEdgeTests(MemoryTestCase):
    def setUp(self):
        self.today = timezone.now().astimezone(UTC).date()
        self.yesterday = self.today - dt.timedelta(days=1)
        self.person = memory_user_factory(self.workspace)

    @override_settings(TIME_ZONE="Pacific/Kiritimati")
    def test_rows_land_on_their_utc_day_whatever_the_server_time_zone(self):
        midnight = dt.datetime.combine(self.today, dt.time.min, tzinfo=UTC)
        late = entry_factory(agent=self.agent, memory_user=self.person, content="Ada sings.", embed=False)
        early = entry_factory(agent=self.agent, memory_user=self.person, content="Ada runs.", embed=False)
        EpisodicEntry.objects.filter(pk=late.pk).update(created_at=midnight - dt.timedelta(microseconds=1))
        EpisodicEntry.objects.filter(pk=early.pk).update(created_at=midnight)
        activity_aggregate()
        ws = self.workspace
        days = (self.yesterday, self.today)
        assert [metric(ws, CREATED + "entries", day) for day in days] == [1, 1]
        assert [metric(ws, TOTAL + "entries", day) for day in days] == [1, 2]

    def remember(self, value):
        return fact_remember(
            workspace=self.workspace,
            key="city",
            value=value,
            scope="user",
            agent=self.agent,
            memory_user=self.person,
            source=Fact.Source.API,
        )

    def test_review_decisions_on_facts_count_once(self):
        current = self.remember("Lisbon").fact
        self.agent.memory_settings = {"review": "all"}
        self.agent.save(update_fields=["memory_settings"])
        same = self.remember("Lisbon")
        assert same.outcome == "confirmed"  # a restatement is not held
        moved = self.remember("Porto").fact
        assert moved.review == "held"
        fact_review_approve(fact=moved, actor="operator:ana")  # Porto replaces Lisbon
        again = self.remember("Lisbon").fact
        fact_review_merge(fact=again, target=Fact.objects.get(pk=moved.pk), actor="operator:ana")
        activity_aggregate()
        assert Fact.objects.get(pk=current.pk).valid_to is not None
        assert metric(self.workspace, FACTS_CONFIRMED, self.today) == 2
        assert metric(self.workspace, FACTS_CONTRADICTED, self.today) == 1

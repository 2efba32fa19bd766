"""Daily pre-aggregates of a workspace's memory, read by the overview page.

Counting 1M rows per page view is too slow, so the overview reads only these tables: one
row per workspace, agent (NULL: not of one agent), UTC day and metric. `DailyMetric` is
recomputed from the tiers' rows by a periodic task (activity.services.activity_aggregate);
`DailyCounter` is added to as events happen (core.counters), for what leaves no row.
"""

from django.db import models
from django.utils import timezone

from core.models import Agent, Workspace


class DailyMetric(models.Model):
    """A metric of one day, recomputed: rows created that day, totals at the day's end, backlogs."""

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    metric = models.CharField(max_length=64)
    value = models.BigIntegerField(default=0)
    computed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # NULLS NOT DISTINCT: the workspace-wide row (agent NULL) is one row too.
            models.UniqueConstraint(
                fields=["workspace", "day", "metric", "agent"],
                nulls_distinct=False,
                name="activity_metric_key",
            ),
        ]

    def __str__(self):
        return f"{self.metric} {self.day}: {self.value}"


class DailyCounter(models.Model):
    """Events of one day counted as they happen (recalls served, candidates rejected)."""

    id = models.BigAutoField(primary_key=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    metric = models.CharField(max_length=64)
    value = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            # The upsert of counters_store names these columns as its conflict target.
            models.UniqueConstraint(
                fields=["workspace", "day", "metric", "agent"],
                nulls_distinct=False,
                name="activity_counter_key",
            ),
        ]

    def __str__(self):
        return f"{self.metric} {self.day}: {self.value}"

"""The periodic recomputation of the overview's daily aggregates."""

from celery import shared_task

from activity.services import activity_aggregate


@shared_task
def activity_aggregate_task() -> dict:
    """Yesterday's and today's metrics of every workspace (idempotent: whole days rewritten)."""
    return activity_aggregate()

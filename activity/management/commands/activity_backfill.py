"""Fill the overview's daily aggregates for past days (after an upgrade or a stopped beat)."""

import datetime as dt

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from activity.services import UTC, activity_aggregate


class Command(BaseCommand):
    help = "Recompute the overview's daily metrics of the last --days days (default 90) of every workspace."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=90, help="days back from today, today included")
        parser.add_argument("--workspace", action="append", default=None, help="a workspace id (repeatable)")

    def handle(self, *args, days, workspace, **options):
        if days < 1 or days > 3660:
            raise CommandError("--days takes 1 to 3660.")
        today = timezone.now().astimezone(UTC).date()
        first = today - dt.timedelta(days=days - 1)
        result = activity_aggregate(first=first, last=today, workspace_ids=workspace)
        self.stdout.write(f"Recomputed {result['days']} days: {result['rows']} rows.")

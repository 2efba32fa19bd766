"""Fair selection for periodic repair sweeps (runtime.tasks.embeddings_sweep_task)."""

from django.db.models import F, Window
from django.db.models.functions import RowNumber


def sweep_take(queryset, *, limit: int) -> list[tuple[str, object]]:
    """Up to `limit` (id, workspace id) pairs of `queryset`, each workspace's oldest row
    first, then each one's second oldest, and so on.

    Taking the oldest rows overall would let one workspace whose rows keep failing (a
    broken embedding endpoint) fill every run and starve the others for good.
    """
    rows = (
        queryset.annotate(
            sweep_turn=Window(RowNumber(), partition_by=[F("workspace_id")], order_by=F("created_at").asc())
        )
        .order_by("sweep_turn", "created_at")
        .values_list("pk", "workspace_id")[:limit]
    )
    return [(str(pk), workspace_id) for pk, workspace_id in rows]

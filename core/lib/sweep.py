"""Fair selection for periodic repair sweeps (runtime.tasks.embeddings_sweep_task), and the
retries of rows a vector batch skipped."""

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


# A row a vector batch skips because another transaction holds it (SKIP LOCKED) is queued
# again this many times, after 5, 10, 20, 40 and 80 s (about 2.5 min in all): the holders are
# short transactions (a deletion, an edit, retention's batch), and the periodic sweep does not
# see every such row (a message of an agent without semantic recall or a thread without a
# person, a row that keeps a vector of the previous model during a re-embed).
EMBED_SKIPPED_ATTEMPTS = 5
EMBED_SKIPPED_FIRST_COUNTDOWN = 5


def embed_skipped_countdown(attempt: int) -> int:
    """Seconds before the retry that follows `attempt` (0 for the batch first queued)."""
    return EMBED_SKIPPED_FIRST_COUNTDOWN * 2**attempt


def embed_skipped_requeue(task, *, ids, attempt: int) -> None:
    """Queue `task(ids, attempt=attempt + 1)` for the rows a vector batch skipped because
    another transaction held them, once the batch commits, until EMBED_SKIPPED_ATTEMPTS; a row
    deleted meanwhile then costs one empty batch, and an edited one has its own task."""
    if not ids or attempt >= EMBED_SKIPPED_ATTEMPTS:
        return
    task.apply_async_on_commit(
        ([str(pk) for pk in ids],), {"attempt": attempt + 1}, countdown=embed_skipped_countdown(attempt)
    )

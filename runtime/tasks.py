"""The periodic repair of missing vectors, across every tier (runtime sits above them all)."""

import logging
from collections import defaultdict
from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from core.embeddings import EmbeddingError
from episodes.services import episode_embed_batch, episode_embed_sweep
from episodic.services import entry_embed_batch, entry_embed_sweep
from facts.services import fact_embed_batch, fact_embed_sweep
from procedures.services import procedure_embed_batch, procedure_embed_sweep
from store.services import store_items_embed, store_items_embed_sweep
from threads.services import message_embed_batch, message_embed_sweep

logger = logging.getLogger(__name__)

# (tier, (id, workspace id) of rows missing a vector, embed ids). Every embed is idempotent
# and skips rows deleted or edited meanwhile, so a row swept while its task runs is embedded once.
SWEEPS = (
    ("facts", fact_embed_sweep, lambda ids: fact_embed_batch(fact_ids=ids)),
    ("procedures", procedure_embed_sweep, lambda ids: procedure_embed_batch(procedure_ids=ids)),
    ("entries", entry_embed_sweep, lambda ids: entry_embed_batch(entry_ids=ids)),
    ("messages", message_embed_sweep, lambda ids: message_embed_batch(message_ids=ids)),
    ("store_items", store_items_embed_sweep, lambda ids: store_items_embed(item_ids=ids)),
    ("episodes", episode_embed_sweep, lambda ids: episode_embed_batch(episode_ids=ids)),
)
# 256 rows per tier and run: about 8 s of local MiniLM on 2 cores for messages (two vectors
# each), less for the others, so a run stays far under the soft time limit (240 s).
SWEEP_LIMIT = 256
# Rows younger than this are left to the task their write queued.
SWEEP_GRACE_SECONDS = 120


@shared_task
def embeddings_sweep_task(limit: int = SWEEP_LIMIT, grace_seconds: int = SWEEP_GRACE_SECONDS) -> dict:
    """Embed rows of every tier that have no vector (lost tasks, failed endpoints, backfills).

    The rows are embedded here, not queued: a backlog larger than one run is worked off
    run by run instead of piling tasks onto the queue. Each workspace is embedded on its
    own: one whose endpoint fails is logged and left to the next run, the others go on, and
    the selection takes every workspace's oldest rows in turn, so it cannot starve them.
    """
    before = timezone.now() - timedelta(seconds=grace_seconds)
    written: dict[str, int] = {}
    for tier, missing, embed in SWEEPS:
        by_workspace = defaultdict(list)
        for pk, workspace_id in missing(limit=limit, before=before):
            by_workspace[workspace_id].append(pk)
        for workspace_id, ids in by_workspace.items():
            try:
                count = embed(ids)
            except EmbeddingError as exc:
                logger.warning(
                    "Embedding sweep of %d %s of workspace %s failed: %s", len(ids), tier, workspace_id, exc
                )
                continue
            written[tier] = written.get(tier, 0) + count
    return written

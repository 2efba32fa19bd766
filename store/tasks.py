"""The store's Celery tasks: embedding items, and deleting those whose TTL ran out."""

from celery import shared_task

from core.tasks import EMBED_RETRY
from store.services import store_items_embed, store_items_sweep_expired

# Idempotent (existing (item, model) vectors and items edited meanwhile are skipped, the
# unique constraint absorbs races), so late acknowledgement and retries are safe.


@shared_task(**EMBED_RETRY)
def store_item_embed_task(item_ids: list[str]):
    return store_items_embed(item_ids=item_ids)


@shared_task
def store_items_sweep_expired_task():
    return store_items_sweep_expired()

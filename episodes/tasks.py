"""The episodes app's Celery tasks: embedding episode records."""

from celery import shared_task

from core.tasks import EMBED_RETRY
from episodes.services import episode_embed_batch


# Idempotent (existing (episode, model) vectors and episodes deleted or edited meanwhile are
# skipped, the unique constraint absorbs races), so late acknowledgement and retries are safe.
@shared_task(**EMBED_RETRY)
def episode_embed_task(episode_ids: list[str]):
    return episode_embed_batch(episode_ids=episode_ids)

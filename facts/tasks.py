from celery import shared_task

from core.tasks import EMBED_RETRY
from facts.services import fact_embed_batch


# Idempotent (vectors already stored and facts deleted meanwhile are skipped), so late
# acknowledgement (settings) and retries are safe.
@shared_task(**EMBED_RETRY)
def fact_embed_task(fact_ids: list[str]):
    return fact_embed_batch(fact_ids=fact_ids)

from celery import shared_task

from core.embeddings import EmbeddingError
from facts.services import fact_embed_batch


# Idempotent (vectors already stored and facts deleted meanwhile are skipped), so late
# acknowledgement (settings) and retries are safe.
@shared_task(autoretry_for=(EmbeddingError,), retry_backoff=10, retry_backoff_max=600, max_retries=6)
def fact_embed_task(fact_ids: list[str]):
    return fact_embed_batch(fact_ids=fact_ids)

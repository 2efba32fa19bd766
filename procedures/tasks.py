from celery import shared_task

from core.embeddings import EmbeddingError
from procedures.services import procedure_embed_batch


# Idempotent (an unchanged text is not re-embedded), so acks_late and retries are safe.
@shared_task(
    acks_late=True, autoretry_for=(EmbeddingError,), retry_backoff=10, retry_backoff_max=600, max_retries=6
)
def procedure_embed_task(procedure_ids: list[str]):
    return procedure_embed_batch(procedure_ids=procedure_ids)

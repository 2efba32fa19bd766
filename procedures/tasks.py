from celery import shared_task

from core.embeddings import EmbeddingError
from procedures.services import procedure_embed_batch


# Idempotent (an unchanged text is not re-embedded; a vector is stored only while its text
# is current), so late acknowledgement (settings) and retries are safe.
@shared_task(autoretry_for=(EmbeddingError,), retry_backoff=10, retry_backoff_max=600, max_retries=6)
def procedure_embed_task(procedure_ids: list[str]):
    return procedure_embed_batch(procedure_ids=procedure_ids)

from celery import shared_task

from core.tasks import EMBED_RETRY
from procedures.services import procedure_embed_batch


# Idempotent (an unchanged text is not re-embedded; a vector is stored only while its text
# is current), so late acknowledgement (settings) and retries are safe.
@shared_task(**EMBED_RETRY)
def procedure_embed_task(procedure_ids: list[str]):
    return procedure_embed_batch(procedure_ids=procedure_ids)

from celery import shared_task

from core.tasks import DATABASE_UNAVAILABLE, EMBED_RETRY
from procedures.services import procedure_embed_batch


# Idempotent (an unchanged text is not re-embedded; a vector is stored only while its text
# is current), so late acknowledgement (settings) and retries are safe.
@shared_task(**EMBED_RETRY)
def procedure_embed_task(procedure_ids: list[str]):
    return procedure_embed_batch(procedure_ids=procedure_ids)


# Idempotent (an episode counts once per procedure, a signature is proposed once): a pass
# that runs twice or is retried after a lost worker changes nothing the second time. A
# database that fails (an outage, or a deadlock or serialization failure that outlived the
# service's own LEARN_ATTEMPTS) is retried with backoff like the compaction and embedding
# tasks. The pass is one transaction, so a failed one leaves the cursor where it was and the
# workspace due: the nudge cleared at the start lets the next commit queue a pass, and the
# sweep finds it too, when the retries run out.
@shared_task(
    autoretry_for=DATABASE_UNAVAILABLE,
    retry_backoff=10,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=6,
)
def procedures_learn_task(workspace_id: str):
    from core.models import Workspace
    from procedures.services.learning import procedures_learn, procedures_learn_nudge_clear

    procedures_learn_nudge_clear(workspace_id)
    workspace = Workspace.objects.filter(pk=workspace_id).first()
    if workspace is None:
        return None
    result = procedures_learn(workspace=workspace)
    return {"proposed": len(result.proposed), "runs_counted": result.runs_counted}


@shared_task
def procedures_learn_sweep_task():
    from django.conf import settings

    from procedures.services.learning import procedures_learn_sweep

    return procedures_learn_sweep(limit=settings.PROCEDURE_LEARN_SWEEP_WORKSPACES)

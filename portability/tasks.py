from celery import shared_task
from django.conf import settings

from core.tasks import EMBED_RETRY
from portability.services import import_embed_missing, import_job_run, import_jobs_sweep


# Idempotent: the job is claimed by a compare-and-set, so a redelivery finds it taken. Swept:
# import_jobs_sweep sends a queued job that no worker took again.
@shared_task(
    time_limit=settings.PORTABILITY_IMPORT_TIME_LIMIT,
    soft_time_limit=settings.PORTABILITY_IMPORT_TIME_LIMIT - 30,
    swept=True,
)
def import_job_run_task(job_id: str):
    import_job_run(job_id=job_id)


# Idempotent: every tier's embed service skips rows that already have a vector of the model.
@shared_task(**EMBED_RETRY)
def import_embed_task(workspace_id: str, run: str):
    return import_embed_missing(workspace_id=workspace_id, run=run)


# Idempotent: each job is moved by a compare-and-set under its advisory lock.
@shared_task
def import_jobs_sweep_task():
    return import_jobs_sweep()

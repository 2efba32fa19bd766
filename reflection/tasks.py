"""Reflection's Celery tasks: thin wrappers over reflection.services."""

from celery import shared_task

from core.lib.fair_queue import llm_job_finish


# Idempotent (a lease by compare-and-set, progress advanced with each person's writes, a
# person redone finds nothing left to merge), so late acknowledgement and redelivery are
# safe. Queued through core.lib.fair_queue, which passes `llm_job_id`: the job is finished
# whatever happens, so the workspace's next job gets its turn.
@shared_task
def reflection_run_task(run_id: str, llm_job_id: int | None = None):
    from reflection.services import reflection_run_step

    try:
        return reflection_run_step(run_id=run_id)
    finally:
        llm_job_finish(llm_job_id)


@shared_task
def reflection_sweep_task():
    from reflection.services import reflection_sweep

    return reflection_sweep()

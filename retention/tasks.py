from celery import shared_task

from core.models import Workspace
from core.tasks import DATABASE_UNAVAILABLE
from retention.services import retention_run, retention_workspaces_due


# One task per workspace, so one tenant's large purge does not hold back another's.
@shared_task
def retention_run_due_task():
    due = retention_workspaces_due()
    for workspace_id in due:
        retention_run_task.delay(str(workspace_id))
    return len(due)


# Idempotent: a run selects afresh and skips the rows another run has locked or deleted.
@shared_task(autoretry_for=DATABASE_UNAVAILABLE, retry_backoff=30, max_retries=5)
def retention_run_task(workspace_id: str, trigger: str = "schedule"):
    workspace = Workspace.objects.filter(pk=workspace_id).first()
    if workspace is None:
        return None
    run = retention_run(workspace=workspace, trigger=trigger)
    return run.deleted if run is not None else "already_running"

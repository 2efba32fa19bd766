from core.access import Principal
from core.errors import NotFoundError
from portability.models import ImportJob


def import_job_get(*, principal: Principal, job_id) -> ImportJob:
    """A job of the principal's workspace; an agent-bound key sees none (imports are workspace acts)."""
    if principal.agent is not None:
        raise NotFoundError()
    job = ImportJob.objects.filter(workspace=principal.workspace, pk=job_id).first()
    if job is None:
        raise NotFoundError()
    return job


def import_job_list(*, workspace, limit: int = 20):
    return list(ImportJob.objects.filter(workspace=workspace)[:limit])

"""Import jobs: an upload waiting for a worker, its progress while it runs, its report after."""

import contextlib
import os
import uuid

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from portability.models import ImportJob
from portability.services.importing import ImportFailed, import_run, lines_read

# Progress is written to the shared cache: the run's own transaction hides its job row's
# updates until it commits, and the page polling the bar must see them while it runs.
PROGRESS_KEY = "portability:import:{job_id}"
PROGRESS_SECONDS = 24 * 3600


def import_job_create(
    *, workspace, actor: str, file_name: str, file_path: str, bytes_total: int, dry_run: bool = False
) -> ImportJob:
    return ImportJob.objects.create(
        workspace=workspace,
        actor=actor,
        file_name=file_name[:255],
        file_path=file_path,
        bytes_total=bytes_total,
        dry_run=dry_run,
    )


def import_job_record(
    *, workspace, actor: str, dry_run: bool, report: dict | None, error: dict | None, size: int
):
    """The job row of an import that ran in the request (the API): already finished."""
    now = timezone.now()
    return ImportJob.objects.create(
        workspace=workspace,
        actor=actor,
        dry_run=dry_run,
        status=ImportJob.Status.FAILED if error else ImportJob.Status.DONE,
        bytes_total=size,
        bytes_done=size,
        lines_done=(report or {}).get("records", 0),
        report=report or {},
        error=error or {},
        started_at=now,
        finished_at=now,
    )


def import_job_progress(job: ImportJob) -> dict:
    """{done, total, lines, percent} of a job: the cache while it runs, the row after."""
    done, lines = job.bytes_done, job.lines_done
    if job.status == ImportJob.Status.RUNNING:
        live = cache.get(PROGRESS_KEY.format(job_id=job.pk))
        if live:
            done, lines = live
    total = job.bytes_total
    percent = 100 if job.status == ImportJob.Status.DONE else (int(done * 100 / total) if total else 0)
    return {"done": done, "total": total, "lines": lines, "percent": min(percent, 100)}


def import_job_run(*, job_id) -> ImportJob | None:
    """Run a queued job once: the claim is a compare-and-set, so a redelivered task does nothing."""
    claimed = ImportJob.objects.filter(pk=job_id, status=ImportJob.Status.QUEUED).update(
        status=ImportJob.Status.RUNNING, started_at=timezone.now()
    )
    job = ImportJob.objects.filter(pk=job_id).select_related("workspace").first()
    if not claimed or job is None:
        return job
    key = PROGRESS_KEY.format(job_id=job.pk)

    def progress(done: int, lines: int) -> None:
        cache.set(key, (done, lines), PROGRESS_SECONDS)

    report, error = {}, {}
    try:
        with open(job.file_path, "rb") as stream:
            report = import_run(
                workspace=job.workspace,
                lines=lines_read(stream),
                actor=job.actor,
                dry_run=job.dry_run,
                run=uuid.UUID(str(job.pk)),
                progress=progress,
            )
    except ImportFailed as exc:
        error = {"code": exc.code, "message": exc.message, "line": exc.line}
    except OSError as exc:
        error = {"code": "file_unreadable", "message": str(exc)[:300], "line": 0}
    finally:
        _file_remove(job.file_path)
        cache.delete(key)
    job.status = ImportJob.Status.FAILED if error else ImportJob.Status.DONE
    job.report = report
    job.error = error
    job.lines_done = report.get("records", 0)
    job.bytes_done = job.bytes_total if not error else 0
    job.file_path = ""
    job.finished_at = timezone.now()
    job.save(
        update_fields=["status", "report", "error", "lines_done", "bytes_done", "file_path", "finished_at"]
    )
    return job


def import_upload_path() -> str:
    directory = settings.PORTABILITY_IMPORT_DIR
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, f"{uuid.uuid4().hex}.jsonl")


def _file_remove(path: str) -> None:
    if path:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)

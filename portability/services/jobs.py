"""Import jobs: an upload waiting for a worker, its progress and heartbeat while it runs, its
report after, and the sweep that notices a worker that died under one."""

import contextlib
import logging
import os
import threading
import uuid
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone
from redis.exceptions import RedisError

from portability.models import ImportJob
from portability.services.importing import ImportFailed, import_run, lines_read

logger = logging.getLogger(__name__)

# Progress is written to the shared cache: the run's own transaction hides its job row's
# updates until it commits, and the page polling the bar must see them while it runs.
PROGRESS_KEY = "portability:import:{job_id}"
PROGRESS_SECONDS = 24 * 3600
RESENT_KEY = "portability:import:resent:{job_id}"
# The first key of the two-key advisory locks of import jobs ("impt"); the second is the job.
JOB_LOCK_CLASS = int.from_bytes(b"impt", "big")
# Stale jobs handled per sweep: there are seldom more than one or two.
SWEEP_BATCH = 100
WORKER_LOST = "The worker running this import stopped (last heartbeat: {last}); upload the file again."
STOPPED = "The import stopped ({reason})."


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


def import_job_queue(*, workspace, actor: str, file_name: str, upload, dry_run: bool) -> ImportJob:
    """A job of an upload already on disk (services/uploads.py), sent to a worker on commit."""
    from portability.tasks import import_job_run_task

    job = import_job_create(
        workspace=workspace,
        actor=actor,
        file_name=file_name,
        file_path=upload.path,
        bytes_total=upload.size,
        dry_run=dry_run,
    )
    import_job_run_task.delay_on_commit(str(job.pk))
    return job


def _progress_cached(call, *args):
    """`call(*args)` on the cache, or None when the cache cannot be reached (Valkey
    restarting): live progress is a nicety, never a reason to fail an import or a request."""
    try:
        return call(*args)
    except (RedisError, OSError) as exc:
        logger.warning("Import progress not in the cache (%s): %s", call.__name__, exc)
        return None


def import_job_progress(job: ImportJob) -> dict:
    """{done, total, lines, percent} of a job: the cache while it runs (the row when the cache
    cannot be reached), the row after."""
    done, lines = job.bytes_done, job.lines_done
    if job.status == ImportJob.Status.RUNNING:
        live = _progress_cached(cache.get, PROGRESS_KEY.format(job_id=job.pk))
        if live:
            done, lines = live
    total = job.bytes_total
    percent = 100 if job.status == ImportJob.Status.DONE else (int(done * 100 / total) if total else 0)
    return {"done": done, "total": total, "lines": lines, "percent": min(percent, 100)}


def import_job_run(*, job_id) -> ImportJob | None:
    """Run a queued job once: the claim is a compare-and-set, so a redelivered task does nothing.

    While it runs, a thread of its own writes the job's heartbeat (its own connection, so the
    import's transaction does not hide it), and the import's transaction holds an advisory
    lock on the job: the sweep acts on a stale job only once that lock is free, that is once
    PostgreSQL has rolled back whatever the dead worker had written."""
    now = timezone.now()
    claimed = ImportJob.objects.filter(pk=job_id, status=ImportJob.Status.QUEUED).update(
        status=ImportJob.Status.RUNNING, started_at=now, heartbeat_at=now, attempts=F("attempts") + 1
    )
    job = ImportJob.objects.filter(pk=job_id).select_related("workspace").first()
    if not claimed or job is None:
        return job
    key = PROGRESS_KEY.format(job_id=job.pk)

    def progress(done: int, lines: int) -> None:
        _progress_cached(cache.set, key, (done, lines), PROGRESS_SECONDS)

    report, error = {}, {}
    try:
        with _Heartbeat(job.pk), open(job.file_path, "rb") as stream, transaction.atomic():
            _job_lock(job.pk, wait=True)
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
    except Exception as exc:
        # A time limit, a lost database: the transaction was rolled back, so nothing is stored.
        logger.exception("Import job %s stopped", job.pk)
        error = {"code": "import_stopped", "message": STOPPED.format(reason=type(exc).__name__), "line": 0}
    finally:
        import_file_remove(job.file_path)
        _progress_cached(cache.delete, key)
    ended = ImportJob.objects.filter(
        pk=job.pk, status=ImportJob.Status.RUNNING, attempts=job.attempts
    ).update(
        status=ImportJob.Status.FAILED if error else ImportJob.Status.DONE,
        report=report,
        error=error,
        lines_done=report.get("records", 0),
        bytes_done=job.bytes_total if not error else 0,
        file_path="",
        finished_at=timezone.now(),
    )
    if not ended:
        logger.warning("Import job %s was taken over by the sweep before it ended", job.pk)
    job.refresh_from_db()
    return job


def import_jobs_sweep() -> dict:
    """Queued jobs no worker took (their message lost with the broker's data): sent again.
    Jobs whose worker died: running, with no heartbeat for PORTABILITY_IMPORT_STALE_SECONDS,
    and no transaction of theirs still open. Each is queued again once (its file is still
    there: the worker never reached its cleanup) or else failed with `worker_lost`; nothing
    of it was stored, as the import is one transaction. Upload files no live job names,
    older than PORTABILITY_IMPORT_ORPHAN_SECONDS, are removed."""
    from portability.tasks import import_job_run_task

    now = timezone.now()
    stale = now - timedelta(seconds=settings.PORTABILITY_IMPORT_STALE_SECONDS)
    counts = {"requeued": 0, "failed": 0, "alive": 0, "files_removed": 0}
    jobs = ImportJob.objects.filter(status=ImportJob.Status.RUNNING).filter(
        Q(heartbeat_at__lt=stale) | Q(heartbeat_at__isnull=True, started_at__lt=stale)
    )
    for job in jobs.only("pk", "heartbeat_at", "attempts", "file_path")[:SWEEP_BATCH]:
        with transaction.atomic():
            if not _job_lock(job.pk, wait=False):
                # Its transaction is still open: a worker that stopped beating but not working.
                counts["alive"] += 1
                continue
            same = ImportJob.objects.filter(
                pk=job.pk,
                status=ImportJob.Status.RUNNING,
                attempts=job.attempts,
                heartbeat_at=job.heartbeat_at,
            )
            if job.attempts < settings.PORTABILITY_IMPORT_MAX_ATTEMPTS and os.path.exists(
                job.file_path or ""
            ):
                if same.update(status=ImportJob.Status.QUEUED, started_at=None, heartbeat_at=None):
                    import_job_run_task.delay_on_commit(str(job.pk))
                    counts["requeued"] += 1
                continue
            last = (
                timezone.localtime(job.heartbeat_at).isoformat(timespec="seconds")
                if job.heartbeat_at
                else "never"
            )
            error = {"code": "worker_lost", "message": WORKER_LOST.format(last=last), "line": 0}
            if same.update(
                status=ImportJob.Status.FAILED, error=error, bytes_done=0, file_path="", finished_at=now
            ):
                path = job.file_path
                transaction.on_commit(lambda path=path: import_file_remove(path))
                counts["failed"] += 1
    counts["resent"] = _queued_resend(stale)
    counts["files_removed"] = _orphans_remove(now)
    if counts["requeued"] or counts["failed"] or counts["resent"]:
        logger.warning("Import jobs sweep: %s", counts)
    return counts


def _queued_resend(stale) -> int:
    """Send again the task of each job queued before `stale` and never started: a broker that
    lost its data (restarted without persistence) lost the message, and the job would wait
    forever. A job merely waiting behind others is harmless to send twice: the run's claim is
    a compare-and-set, so the second message does nothing. Each job is sent again at most
    once per PORTABILITY_IMPORT_STALE_SECONDS."""
    from portability.tasks import import_job_run_task

    resent = 0
    waiting = ImportJob.objects.filter(status=ImportJob.Status.QUEUED, created_at__lt=stale, started_at=None)
    for job_id in waiting.values_list("pk", flat=True)[:SWEEP_BATCH]:
        if cache.add(RESENT_KEY.format(job_id=job_id), 1, settings.PORTABILITY_IMPORT_STALE_SECONDS):
            import_job_run_task.delay(str(job_id))
            resent += 1
    return resent


def _orphans_remove(now) -> int:
    """Upload files of requests that never became a job (refused, rolled back, web process
    killed mid-upload) or of jobs whose row is gone."""
    directory = Path(settings.PORTABILITY_IMPORT_DIR)
    if not directory.is_dir():
        return 0
    before = now.timestamp() - settings.PORTABILITY_IMPORT_ORPHAN_SECONDS
    old = []
    for entry in os.scandir(directory):
        with contextlib.suppress(OSError):
            if entry.is_file() and entry.stat().st_mtime < before:
                old.append(entry.path)
    if not old:
        return 0
    named = set(ImportJob.objects.filter(file_path__in=old).values_list("file_path", flat=True))
    removed = 0
    for path in old:
        if path not in named:
            import_file_remove(path)
            removed += 1
    return removed


def _job_lock(job_id, *, wait: bool) -> bool:
    """The advisory lock of one job, for the current transaction."""
    function = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s::int, hashtext(%s))", [JOB_LOCK_CLASS, str(job_id)])
        row = cursor.fetchone()
    return wait or bool(row[0])


class _Heartbeat:
    """Writes `heartbeat_at` every PORTABILITY_IMPORT_HEARTBEAT_SECONDS from a thread (and so
    a connection) of its own, for as long as the import runs."""

    def __init__(self, job_id):
        self.job_id = job_id
        self.every = settings.PORTABILITY_IMPORT_HEARTBEAT_SECONDS
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"import-heartbeat-{job_id}", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)

    def _beat(self):
        try:
            while not self._stop.wait(self.every):
                try:
                    ImportJob.objects.filter(pk=self.job_id, status=ImportJob.Status.RUNNING).update(
                        heartbeat_at=timezone.now()
                    )
                except DatabaseError as exc:
                    logger.warning("Import job %s: heartbeat not written (%s)", self.job_id, exc)
        finally:
            connection.close()


def import_upload_path() -> str:
    directory = settings.PORTABILITY_IMPORT_DIR
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, f"{uuid.uuid4().hex}.jsonl")


def import_file_remove(path: str) -> None:
    if path:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)

"""Two imports into one workspace that bring the same procedure lineages in opposite batch
orders: each holds the lineage key of its first batch and waits for the other's, and
PostgreSQL aborts one of them (a deadlock). The aborted import runs again from its first line
once the other committed, so both succeed and nothing is stored twice; an import whose lines
cannot be read again ends with the 409 `changed` instead of the database's error."""

import io
import json
import shutil
import tempfile
import threading
from unittest import mock

from django.test import TransactionTestCase

from core.services import agent_get_or_create, workspace_create
from core.testing import thread_started, until_a_backend_waits
from portability.models import ImportIdMap, ImportJob
from portability.registry import Scope
from portability.services import (
    ImportFailed,
    import_job_create,
    import_job_run,
    import_run,
    import_upload_path,
    lines_read,
)
from portability.tests.helpers import export_bytes, records
from procedures.models import Procedure
from procedures.services import procedure_create
from procedures.services.procedures import _lineage_key

# Two names of distinct lineage keys (LINEAGE_LOCK_BUCKETS: two names may share one).
FIRST, SECOND = "Refund", "Greet"


class _OneWay(io.BytesIO):
    """A stream read once, as a pipe is: it cannot seek back to its first line."""

    def seekable(self) -> bool:
        return False


def ordered(data: bytes, names: list[str]) -> bytes:
    """The export with its procedure lines in the order of `names`, in the places they held."""
    rows = records(data)
    places = [i for i, row in enumerate(rows) if row.get("type") == "procedure"]
    by_name = {rows[i]["name"]: rows[i] for i in places}
    for place, name in zip(places, names, strict=True):
        rows[place] = by_name[name]
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def line_of(data: bytes, name: str) -> int:
    """The line number (lines_read's, the header is line 1) of the procedure `name`."""
    for number, row in enumerate(records(data), start=1):
        if row.get("type") == "procedure" and row["name"] == name:
            return number
    raise AssertionError(name)


class OppositeLineageOrderImportTests(TransactionTestCase):
    def setUp(self):
        self.target = workspace_create(name="Target")
        self.target_agent = agent_get_or_create(workspace=self.target, slug="assistant")
        assert _lineage_key(self.target.pk, str(self.target_agent.pk), FIRST) != _lineage_key(
            self.target.pk, str(self.target_agent.pk), SECOND
        )
        exports = []
        for label in ("A", "B"):
            source = workspace_create(name=f"Source {label}")
            agent = agent_get_or_create(workspace=source, slug="assistant")
            for name in (FIRST, SECOND):
                procedure_create(
                    workspace=source,
                    agent=agent,
                    name=name,
                    procedure_type="prompt_template",
                    content=f"{name} from {label}.",
                )
            exports.append(export_bytes(Scope(workspace=source)))
        self.data_a = ordered(exports[0], [FIRST, SECOND])
        self.data_b = ordered(exports[1], [SECOND, FIRST])

    def race(self, stream_a, stream_b=None, *, second=None) -> tuple[dict, list[BaseException]]:
        """Import A holds FIRST's key and pauses before its SECOND batch; import B then takes
        SECOND's key and waits for FIRST's; A goes on and waits for SECOND's: a deadlock."""
        reports: dict = {}
        errors: list[BaseException] = []
        held, go_on = threading.Event(), threading.Event()
        pause_at = line_of(self.data_a, SECOND)

        def progress_a(done, number):
            # Called before the batch of line `number` is read: A holds FIRST's batch only.
            if number == pause_at and not held.is_set():
                held.set()
                go_on.wait(30)

        def run(label, stream, progress=None):
            def target():
                reports[label] = import_run(
                    workspace=self.target, lines=lines_read(stream), actor="test", progress=progress
                )

            return target

        # One record a batch: the two procedures of a file are two batches, as in a file of
        # more than IMPORT_BATCH procedures.
        with mock.patch("portability.services.importing.IMPORT_BATCH", 1):
            a = thread_started(run("A", stream_a, progress_a), errors)
            assert held.wait(30)
            b = thread_started(second or run("B", stream_b), errors)
            until_a_backend_waits(timeout=10)
            go_on.set()
            a.join(60)
            b.join(60)
        assert not a.is_alive() and not b.is_alive()
        return reports, errors

    def stored(self) -> list:
        return list(
            Procedure.objects.filter(workspace=self.target)
            .order_by("name", "version")
            .values_list("name", "version", "is_active")
        )

    def test_both_imports_succeed_and_each_lineage_is_stored_once(self):
        """The import PostgreSQL aborted runs again after the other committed: it reuses the
        two procedures the other stored, and neither is stored twice."""
        reports, errors = self.race(io.BytesIO(self.data_a), io.BytesIO(self.data_b))

        assert errors == []
        assert sorted(reports) == ["A", "B"]
        created = sorted(r["created"].get("procedure", 0) for r in reports.values())
        reused = sorted(r["reused"].get("procedure", 0) for r in reports.values())
        assert (created, reused) == ([0, 2], [0, 2])
        assert self.stored() == [(SECOND, 1, True), (FIRST, 1, True)]
        # Each run's map names each of its procedures once: the aborted attempt left no row.
        for source in ImportIdMap.objects.values_list("source", flat=True).distinct():
            assert ImportIdMap.objects.filter(source=source, type="procedure").count() == 2

    def test_an_import_that_cannot_read_its_lines_again_ends_with_a_409(self):
        """Without a second reading of the file, the aborted import answers `changed` (409) and
        stores nothing; the other import is stored whole."""
        reports, errors = self.race(_OneWay(self.data_a), _OneWay(self.data_b))

        assert len(reports) == 1
        (error,) = errors
        assert isinstance(error, ImportFailed)
        assert (error.code, error.status_code) == ("changed", 409)
        (report,) = reports.values()
        assert report["created"]["procedure"] == 2
        assert self.stored() == [(SECOND, 1, True), (FIRST, 1, True)]
        assert ImportIdMap.objects.values("source").distinct().count() == 1

    def test_an_import_job_runs_its_import_again_inside_the_job_transaction(self):
        """Import B runs as a job (its import a savepoint of the job's transaction, which holds
        the job's lock): the aborted run is rolled back to that savepoint, which gives up its
        keys, and runs again there; the job ends done with B's report."""
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory, True)
        override = self.settings(PORTABILITY_IMPORT_DIR=directory)
        override.enable()
        self.addCleanup(override.disable)
        path = import_upload_path()
        with open(path, "wb") as out:
            out.write(self.data_b)
        job = import_job_create(
            workspace=self.target,
            actor="test",
            file_name="b.jsonl",
            file_path=path,
            bytes_total=len(self.data_b),
        )

        reports, errors = self.race(io.BytesIO(self.data_a), second=lambda: import_job_run(job_id=job.pk))

        assert errors == []
        job.refresh_from_db()
        assert (job.status, job.error) == (ImportJob.Status.DONE, {})
        runs = sorted(
            [reports["A"]["created"].get("procedure", 0), job.report["created"].get("procedure", 0)]
        )
        assert runs == [0, 2]
        assert self.stored() == [(SECOND, 1, True), (FIRST, 1, True)]

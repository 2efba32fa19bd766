"""The Export/Import page: download the workspace's memory (or an agent's, or a person's) as
JSON lines, and import a file as a job with a progress bar. Admins only: both reach every
agent's and person's rows."""

import os

from django import forms
from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_POST

from browser.access import ADMIN, workspace_view
from browser.lib.rendering import refused, render_page, toast
from browser.selectors.portability import export_agents, export_person_find, import_jobs_recent
from core.errors import NotFoundError
from portability.models import ImportJob
from portability.registry import BY_NAME, Scope
from portability.responses import export_response
from portability.selectors import import_job_get
from portability.services import export_stream, import_job_create, import_job_progress, import_upload_path
from portability.tasks import import_job_run_task

PARTIALS = {"main": "portability-panel", "import-job": "portability-job"}
PERSON_UNKNOWN = "No person with this id or canonical id in the workspace."
# Polling stops once the job ended; the interval keeps a long import to one request a second.
POLL_SECONDS = 1


class ExportForm(forms.Form):
    agent = forms.ChoiceField(required=False, label="Agent")
    person = forms.CharField(required=False, max_length=255, label="Person (id or canonical id)")
    history = forms.BooleanField(required=False, label="History (closed versions, audit trail)")
    vectors = forms.BooleanField(required=False, label="Vectors")

    def __init__(self, *args, agents=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [("", "Every agent"), *agents]


class ImportForm(forms.Form):
    file = forms.FileField(label="Export file (.jsonl)")
    dry_run = forms.BooleanField(required=False, label="Dry run: report only, store nothing")


def _in_file_order(counts: dict) -> list[tuple[str, int]]:
    # The report is stored as jsonb, which keeps no key order: shown in the file's order.
    return [(name.replace("_", " "), counts[name]) for name in BY_NAME if counts.get(name)]


def _job_view(job: ImportJob) -> dict:
    report = job.report or {}
    return {
        "job": job,
        "progress": import_job_progress(job),
        "running": job.status in ("queued", "running"),
        "created": _in_file_order(report.get("created") or {}),
        "already_imported": _in_file_order(report.get("already_imported") or {}),
    }


def _page(request, *, export_form=None, import_form=None, job=None):
    workspace = request.operator.workspace
    agents = export_agents(workspace=workspace)
    jobs = import_jobs_recent(workspace=workspace)
    current = job or next((j for j in jobs if j.status in ("queued", "running")), None)
    context = {
        "tab": "portability",
        "export_form": export_form or ExportForm(agents=agents),
        "import_form": import_form or ImportForm(),
        "jobs": [_job_view(j) for j in jobs],
        "current": _job_view(current) if current else None,
        "poll_seconds": POLL_SECONDS,
    }
    return render_page(request, "memories/portability.html", context, partials=PARTIALS)


@workspace_view(ADMIN)
def portability_page(request):
    return _page(request)


@workspace_view(ADMIN)
def portability_export(request):
    workspace = request.operator.workspace
    form = ExportForm(request.GET, agents=export_agents(workspace=workspace))
    if not form.is_valid():
        return refused(request, _page(request, export_form=form), status=400)
    data = form.cleaned_data
    agent = workspace.agents.filter(slug=data["agent"]).first() if data["agent"] else None
    person = None
    if data["person"]:
        person = export_person_find(workspace=workspace, reference=data["person"])
        if person is None:
            form.add_error("person", PERSON_UNKNOWN)
            return refused(request, _page(request, export_form=form), status=400)
    scope = Scope(
        workspace=workspace, agent=agent, memory_user=person, history=data["history"], vectors=data["vectors"]
    )
    return export_response(export_stream(scope=scope), kind=scope.kind)


@require_POST
@workspace_view(ADMIN)
def portability_import(request):
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        return refused(request, _page(request, import_form=form), status=400)
    upload = form.cleaned_data["file"]
    path = import_upload_path()
    # Django has spooled a large upload to a temporary file already; copied in chunks, so a
    # 1 GB file never sits in memory.
    with open(path, "wb") as out:
        for chunk in upload.chunks():
            out.write(chunk)
    operator = request.operator
    job = import_job_create(
        workspace=operator.workspace,
        actor=operator.principal.actor,
        file_name=os.path.basename(upload.name or "import.jsonl"),
        file_path=path,
        bytes_total=os.path.getsize(path),
        dry_run=form.cleaned_data["dry_run"],
    )
    import_job_run_task.delay_on_commit(str(job.pk))
    return toast(request, _page(request, job=job), "Import queued." if not job.dry_run else "Dry run queued.")


@workspace_view(ADMIN)
def portability_job(request, job_id):
    try:
        job = import_job_get(principal=request.operator.principal, job_id=job_id)
    except NotFoundError:
        raise Http404 from None
    if request.htmx and not request.htmx.history_restore_request:
        context = {"current": _job_view(job), "poll_seconds": POLL_SECONDS}
        return render(request, "memories/portability.html#portability-job", context)
    return _page(request, job=job)

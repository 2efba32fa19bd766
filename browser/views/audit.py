"""The audit trail page: every change of the workspace's memory (who, what, when, before and
after), filtered by actor, tier, person, action and time, and the same rows as a CSV download.

Editors and admins read it (the roles that make the changes it lists); viewers get a 403, as
for every edit control. Membership and webhook events are left out for editors, whose role
does not open the Members and Webhooks pages either.
"""

import csv
import json
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace

from django.http import HttpResponse, StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.text import slugify

from browser.access import EDIT, workspace_view
from browser.lib.listing import Sort, paginate_sorted
from browser.lib.pickers import picker_hints, pickers_resolve
from browser.lib.rendering import render_page
from browser.lib.tabs import filter_fields, filter_params
from browser.selectors.audit import (
    TIER_OF_TYPE,
    AuditEventFilter,
    audit_changes,
    audit_entities,
    audit_event_list,
)
from browser.tabs import tab_urls
from core.errors import ApplicationError
from core.lib.replica import read_replica

SORTS = [Sort("at", "When", "at")]
# Query parameters of the page that are not filters (the export ignores them).
PAGE_PARAMS = ("sort", "page", "per_page")
# Rows fetched per round trip while the CSV streams: 2,000 events ~ 1 MB of changes JSON.
EXPORT_CHUNK = 2000
# A spreadsheet runs a cell starting with one of these as a formula (CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
CSV_HEADER = ["at", "actor", "action", "tier", "entity_type", "entity_id", "before", "after", "changes"]


@dataclass(frozen=True)
class AuditRow:
    event: object
    changes: list
    entity: object  # an AuditEntity, or None when the row is gone or has no page
    actor_kind: str
    actor_name: str
    tier: str


def _actor_parts(actor: str) -> tuple[str, str]:
    kind, sep, name = actor.partition(":")
    return (kind, name) if sep else ("", actor)


def _filters_spec(principal):
    # The shape browser.lib.tabs reads to describe a FilterSet's fields for _filters.html.
    return SimpleNamespace(
        filterset=partial(AuditEventFilter, principal=principal),
        filter_exclude=(),
        noun="change",
        noun_plural="changes",
    )


def _resolve_filters(request):
    """The query string as the FilterSet's params (a person's name replaced by their id), the
    picker results, and the errors of the ones that cannot be applied."""
    principal = request.operator.principal
    raw = filter_params(request.GET)
    for name in PAGE_PARAMS:
        raw.pop(name, None)
    params, picked = pickers_resolve(principal, AuditEventFilter, raw)
    person = picked.get("memory_user")
    errors = {"Person": [person.error]} if person is not None and person.error else {}
    return raw, params, picked, errors


def _events(request):
    raw, params, picked, errors = _resolve_filters(request)
    events = None
    if not errors:
        try:
            events = audit_event_list(principal=request.operator.principal, filters=params)
        except ApplicationError as exc:
            errors = exc.fields or {"": [exc.message]}
    return raw, picked, errors, events


def _export_url(request, raw) -> str:
    url = reverse("memories:audit-export", kwargs={"workspace_id": request.operator.workspace.pk})
    return f"{url}?{raw.urlencode()}" if raw else url


def _results_context(request) -> dict:
    principal = request.operator.principal
    raw, picked, errors, events = _events(request)
    context = {
        "tab": "audit",
        "spec": _filters_spec(principal),
        "list_url": reverse("memories:audit", kwargs={"workspace_id": request.operator.workspace.pk}),
        "export_url": _export_url(request, raw),
        "urls": tab_urls(request.operator.workspace.pk),
        "picker_hints": picker_hints(AuditEventFilter, raw, picked),
        "filtered": bool(raw),
        "listing": None,
        "rows": [],
    }
    if errors:
        context["filter_errors"] = errors
        return context
    listing = paginate_sorted(request, events, sorts=SORTS, default="-at")
    entities = audit_entities(principal=principal, events=listing.rows)
    context["urls"]["webhooks"] = reverse(
        "memories:webhooks", kwargs={"workspace_id": request.operator.workspace.pk}
    )
    context["listing"] = listing
    context["rows"] = [
        AuditRow(
            event,
            audit_changes(event),
            entities.get((event.entity_type, event.entity_id)),
            *_actor_parts(event.actor),
            TIER_OF_TYPE.get(event.entity_type, ""),
        )
        for event in listing.rows
    ]
    return context


@read_replica
@workspace_view(EDIT)
def audit(request):
    context = _results_context(request)
    context["filters"] = filter_fields(context["spec"], request, context["picker_hints"])
    context["filters_active"] = sum(
        1 for entry in context["filters"] if any(request.GET.getlist(entry["name"]))
    )
    return render_page(
        request,
        "memories/audit.html",
        context,
        partials={"main": "audit-panel", "results": "audit-results"},
    )


class _Echo:
    """A file-like object whose write returns the line, so csv.writer feeds a generator."""

    def write(self, value):
        return value


def csv_cell(value) -> str:
    """`value` as a CSV cell that a spreadsheet shows as text, never runs as a formula."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return f"'{text}" if text.startswith(FORMULA_STARTS) else text


def _csv_lines(events):
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_HEADER)
    for event in events.iterator(chunk_size=EXPORT_CHUNK):
        changes = audit_changes(event)
        before = {change.field: change.before for change in changes if change.paired}
        after = {change.field: change.after for change in changes}
        cells = [
            event.at.isoformat(),
            event.actor,
            event.action,
            TIER_OF_TYPE.get(event.entity_type, ""),
            event.entity_type,
            event.entity_id,
            before or "",
            after or "",
            event.changes or "",
        ]
        yield writer.writerow([csv_cell(cell) for cell in cells])


@workspace_view(EDIT)
def audit_export(request):
    """The filtered trail as CSV, streamed newest first: one line per event, with the changes'
    before and after sides as JSON objects and the changes as recorded."""
    _, _, errors, events = _events(request)
    if errors:
        lines = [f"{name}: {' '.join(str(e) for e in messages)}" for name, messages in errors.items()]
        return HttpResponse(
            "These filters cannot be applied:\n" + "\n".join(lines),
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    workspace = request.operator.workspace
    name = f"audit-{slugify(workspace.name) or 'workspace'}-{timezone.now():%Y%m%d-%H%M}.csv"
    response = StreamingHttpResponse(_csv_lines(events), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    return response

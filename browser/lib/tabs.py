"""The shape every memory tab shares: list, row detail, inline edit, batch delete.

A tab is declared once as a `TabSpec` naming its tier's selectors, services, FilterSet and
edit form; the functions below are the bodies of its views. They parse input, call one
selector or service, and render the page or the partial htmx asked for. Partials follow one
naming scheme in the tab's template: `<slug>-panel`, `<slug>-results`, `<item>-row`,
`<item>-row-edit`, `<item>-detail` and `<item>-edit`.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from django import forms
from django.core.exceptions import ImproperlyConfigured
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse

from browser.forms import BatchDeleteForm, form_add_service_errors
from browser.lib.listing import Sort, paginate_sorted
from browser.lib.pickers import PICKERS, picker_hints, picker_url, pickers_resolve
from browser.lib.rendering import action_refused, refused, render_page, toast
from browser.selectors.batch import batch_rows_present
from browser.tabs import tab_urls
from core.errors import ApplicationError, NotFoundError

BATCH_NOTHING_LEFT = "None of the selected {noun_plural} are here any more; nothing was deleted."
# Reads and deletes tried before a selection that keeps shrinking under other operators'
# deletes is refused: each retry follows a delete that another one beat by milliseconds.
BATCH_DELETE_ATTEMPTS = 3


class BatchNothingLeft(NotFoundError):
    """A batch delete whose every id names nothing the operator may see (any more)."""


@dataclass(frozen=True)
class TabSpec:
    slug: str  # URL segment and plural partial prefix: "facts"
    item: str  # singular partial prefix and the row's context name: "fact"
    noun: str  # "fact"
    noun_plural: str  # "facts"
    template: str
    filterset: type
    list: Callable  # (principal, filters) -> QuerySet
    get: Callable  # (principal, pk) -> object, raising NotFoundError
    sorts: list[Sort]
    default_sort: str
    batch_delete: Callable | None = None  # (principal, ids) -> dict of counts
    # The rows a batch delete names, and their scope as the tier's batch delete reads it
    # (core.access.scope_to_principal's arguments): what tab_delete checks is still there.
    model: type | None = None
    delete_agent_field: str | None = "agent"
    delete_shared: bool = False
    edit_form: type | None = None  # a form with `initial_for(obj)` and `update(principal, obj)`
    detail_context: Callable | None = None  # (principal, obj) -> dict
    # Filters the page renders itself: sorting is a column header, not a form field.
    filter_exclude: tuple = ("ordering",)
    # The row's name in templates when `item` would shadow another variable ("user").
    context_name: str = ""
    extra_context: dict = field(default_factory=dict)
    # (request, ApplicationError) -> [(label, url)]: the pages where a refused batch delete is
    # resolved (a merged record's survivor), shown with the refusal's message.
    refusal_links: Callable | None = None
    # Whose batch delete this is: editors' (the default), or admins' where deleting is an
    # erasure (people), as on the person page.
    delete_admin_only: bool = False
    # (rows) -> None: sets what a row partial reads beyond the selector's row, for a page of
    # rows at once (the users tab's merge survivors); called wherever that partial renders.
    prepare_rows: Callable | None = None

    def __post_init__(self):
        if self.batch_delete is not None and self.model is None:
            raise ImproperlyConfigured(f"Tab {self.slug}: a batch delete needs the model it reads first.")

    @property
    def name(self) -> str:
        return self.context_name or self.item

    def url(self, request, suffix: str = "") -> str:
        return reverse(
            f"memories:{self.slug}{suffix}", kwargs={"workspace_id": request.operator.workspace.pk}
        )


def _get_or_404(spec: TabSpec, principal, pk):
    try:
        return spec.get(principal, pk)
    except NotFoundError:
        raise Http404(f"No such {spec.noun}.")


def filter_fields(spec: TabSpec, request, hints: dict):
    """The FilterSet's form (the API's own filters), described for the filter bar template.

    `hints` holds the line under each picker field (see browser.lib.pickers).
    """
    filterset = spec.filterset(filter_params(request.GET))
    form = filterset.form
    fields = []
    for bound in form:
        if bound.name in spec.filter_exclude:
            continue
        formfield = bound.field
        data = form.data
        label = bound.label
        if not label or "[invalid name]" in str(label):
            label = bound.name.replace("_", " ").capitalize()
        entry = {"name": bound.name, "label": label, "id": f"filter-{bound.name}"}
        if isinstance(formfield, forms.NullBooleanField):
            entry.update(kind="select", choices=[("", "Any"), ("true", "Yes"), ("false", "No")])
            entry["selected"] = [str(data.get(bound.name, "")).lower()]
        elif isinstance(formfield, forms.ChoiceField):
            choices = [(str(v), "Any" if v in ("", None) else label) for v, label in formfield.choices]
            if isinstance(formfield, forms.MultipleChoiceField):
                choices.insert(0, ("", "Any"))
                selected = data.getlist(bound.name) if hasattr(data, "getlist") else []
            else:
                selected = [str(data.get(bound.name) or "")]
            entry.update(kind="select", choices=choices, selected=selected)
        else:
            numeric = isinstance(formfield, forms.DecimalField | forms.FloatField | forms.IntegerField)
            kind = "search" if bound.name == "q" else "input"
            entry.update(
                kind=kind, input_type="number" if numeric else "text", value=data.get(bound.name, "")
            )
            if bound.name in PICKERS:
                picker = PICKERS[bound.name]
                entry.update(
                    kind="picker",
                    picker=picker,
                    pick_url=picker_url(picker, request.operator.workspace.pk),
                    placeholder=picker.placeholder,
                    hint=hints.get(bound.name, ""),
                )
            elif isinstance(formfield, forms.DateTimeField):
                entry["placeholder"] = "2025-01-31T09:00Z"
            elif isinstance(formfield, forms.UUIDField):
                entry["placeholder"] = "id"
        fields.append(entry)
    fields.sort(key=lambda entry: entry["kind"] != "search")
    return fields


def base_context(spec: TabSpec, request) -> dict:
    principal = request.operator.principal
    return {
        "spec": spec,
        "tab": spec.slug,
        "urls": tab_urls(request.operator.workspace.pk),
        "can_write": principal.can_write,
        "list_url": spec.url(request),
        "delete_url": (
            spec.url(request, "-delete")
            if spec.batch_delete and (principal.can_admin or not spec.delete_admin_only)
            else None
        ),
        **spec.extra_context,
    }


def filter_params(query):
    """The query string without empty values: an empty form field means "any", not ""."""
    params = query.copy()
    for key in list(params):
        values = [value for value in params.getlist(key) if value.strip()]
        if values:
            params.setlist(key, values)
        else:
            del params[key]
    return params


def _results_context(spec: TabSpec, request) -> dict:
    principal = request.operator.principal
    context = base_context(spec, request)
    params, context["picked"] = pickers_resolve(principal, spec.filterset, filter_params(request.GET))
    context["picker_hints"] = picker_hints(spec.filterset, filter_params(request.GET), context["picked"])
    unresolved = {
        name.replace("_", " ").capitalize(): [result.error]
        for name, result in context["picked"].items()
        if result.error
    }
    if unresolved:
        context["filter_errors"] = unresolved
        context["listing"] = None
        return context
    try:
        queryset = spec.list(principal, params)
    except ApplicationError as exc:
        context["filter_errors"] = exc.fields or {"": [exc.message]}
        context["listing"] = None
        return context
    context["listing"] = paginate_sorted(request, queryset, sorts=spec.sorts, default=spec.default_sort)
    if spec.prepare_rows:
        spec.prepare_rows(context["listing"].rows)
    context["filtered"] = any(
        value for key, value in request.GET.items() if key not in ("sort", "page", "per_page")
    )
    return context


def tab_list(request, spec: TabSpec, **extra):
    """The tab, filtered by the query string; `extra` adds to its context (a refusal)."""
    context = _results_context(spec, request)
    context["filters"] = filter_fields(spec, request, context["picker_hints"])
    # Filters other than the search box that the URL sets, so their panel opens itself.
    names = {entry["name"] for entry in context["filters"] if entry["kind"] != "search"}
    context["filters_active"] = sum(1 for name in names if any(request.GET.getlist(name)))
    return render_page(
        request,
        spec.template,
        {**context, "page": "list", **extra},
        partials={"main": f"{spec.slug}-panel", "results": f"{spec.slug}-results"},
    )


def tab_detail(request, spec: TabSpec, pk):
    """The row's page; with HX-Target `row-<id>` (cancel of an inline edit) just its row."""
    principal = request.operator.principal
    obj = _get_or_404(spec, principal, pk)
    if spec.prepare_rows:
        spec.prepare_rows([obj])
    context = {**base_context(spec, request), spec.name: obj, "page": "detail"}
    if spec.detail_context and request.htmx.target != f"row-{obj.pk}":
        context.update(spec.detail_context(principal, obj))
    return render_page(
        request,
        spec.template,
        context,
        partials={"main": f"{spec.item}-detail", f"row-{obj.pk}": f"{spec.item}-row"},
    )


def tab_edit(request, spec: TabSpec, pk):
    """Inline edit: GET the edit row, POST it back. Errors re-render the edit row (or the edit
    page), refused: 200 for htmx, the refusal's status for a plain form post."""
    principal = request.operator.principal
    obj = _get_or_404(spec, principal, pk)
    Form = spec.edit_form
    # Ids unique per row, so two rows in edit mode never share a label target.
    auto_id = f"edit-{obj.pk.hex[:12]}-%s"
    status = None
    if request.method == "POST":
        form = Form(request.POST, auto_id=auto_id)
        status = 400
        if form.is_valid():
            try:
                updated = form.update(principal, obj)
            except ApplicationError as exc:
                form_add_service_errors(form, exc)
                status = exc.status_code
            else:
                updated = _get_or_404(spec, principal, updated.pk)
                if spec.prepare_rows:
                    spec.prepare_rows([updated])
                message = f"Saved {spec.noun}."
                if not request.htmx:
                    toast(request, None, message)
                    return redirect(_detail_url(spec, request, updated))
                context = {**base_context(spec, request), spec.name: updated, "page": "detail"}
                response = render(request, f"{spec.template}#{spec.item}-row", context)
                return toast(request, response, message)
    else:
        form = Form(initial=Form.initial_for(obj), auto_id=auto_id)
    context = {**base_context(spec, request), spec.name: obj, "form": form, "page": "edit"}
    response = render_page(
        request,
        spec.template,
        context,
        partials={f"row-{obj.pk}": f"{spec.item}-row-edit", "main": f"{spec.item}-edit"},
    )
    return refused(request, response, status=status) if status else response


def _detail_url(spec: TabSpec, request, obj) -> str:
    return reverse(
        f"memories:{spec.item}", kwargs={"workspace_id": request.operator.workspace.pk, "pk": obj.pk}
    )


def _deleted_message(spec: TabSpec, requested: int, counts: dict, gone: int) -> str:
    # Services report either their own plural key or "deleted"; the rest are cascades.
    count = counts.get("deleted", counts.get(spec.slug, requested))
    message = f"Deleted {count} {spec.noun if count == 1 else spec.noun_plural}."
    extra = [
        f"{value} {name.replace('_', ' ')}"
        for name, value in counts.items()
        if isinstance(value, int) and value and name not in (spec.slug, "deleted")
    ]
    if extra:
        message += " Also: " + ", ".join(extra) + "."
    if gone:
        message += f" {gone} {'was' if gone == 1 else 'were'} already gone."
    return message


def batch_delete_present(spec: TabSpec, principal, ids: list) -> tuple[dict, int]:
    """Delete the rows of `ids` that are still there; returns the service's counts and how
    many ids named nothing.

    The one rule of every tab: a row another operator deleted since the page was drawn is not
    an error, it is counted as already gone and the rest are deleted. An id of another
    workspace, or one that never existed, reads exactly like it (one scoped read,
    browser.selectors.batch), so the answer tells nothing about it, and only rows of the
    operator's scope reach the tier's batch delete. A selection with nothing left is a 404.
    The tiers' batch deletes are all or nothing: one that loses a row to a concurrent delete
    between the read and its own lock refuses with nothing deleted, and is tried again.
    """
    attempt = 1
    while True:
        present = batch_rows_present(
            model=spec.model,
            principal=principal,
            ids=ids,
            agent_field=spec.delete_agent_field,
            shared=spec.delete_shared,
        )
        if not present:
            raise BatchNothingLeft(BATCH_NOTHING_LEFT.format(noun_plural=spec.noun_plural))
        try:
            counts = spec.batch_delete(principal, [pk for pk in ids if pk in present])
        except NotFoundError:
            if attempt == BATCH_DELETE_ATTEMPTS:
                raise
            attempt += 1
            continue
        return counts, len(ids) - len(present) + len(counts.get("not_found") or ())


def tab_delete(request, spec: TabSpec):
    """Batch delete (POST). Without JavaScript a confirmation page comes first; with htmx the
    client confirms with the count, and the response is the re-rendered results. What is
    deleted is batch_delete_present's rule; a refusal is shown in place of the results."""
    principal = request.operator.principal
    form = BatchDeleteForm(request.POST)
    list_url = spec.url(request)
    query = request.GET.urlencode()
    back = f"{list_url}?{query}" if query else list_url
    if not form.is_valid():
        message = " ".join(form.non_field_errors())
        refusal = {"message": message, "code": "invalid", "links": []}
        answer = partial(_delete_answer, spec, request, refusal=refusal)
        return action_refused(request, answer, status=400, message=message)
    ids = form.cleaned_data["ids"]
    if not request.htmx and not form.cleaned_data["confirmed"]:
        context = {**base_context(spec, request), "ids": ids, "back": back, "query": query}
        return render(request, "memories/confirm_delete.html", context)
    try:
        counts, gone = batch_delete_present(spec, principal, ids)
    except ApplicationError as exc:
        links = spec.refusal_links(request, exc) if spec.refusal_links else []
        # The tier's own refusal is said to have left the selection whole; BatchNothingLeft
        # says so itself.
        lead = "" if isinstance(exc, BatchNothingLeft) else _nothing_done(spec)
        refusal = {"message": exc.message, "code": exc.code, "links": links, "lead": lead}
        answer = partial(_delete_answer, spec, request, refusal=refusal)
        return action_refused(request, answer, status=exc.status_code, message=exc.message)
    message = _deleted_message(spec, len(ids), counts, gone)
    if not request.htmx:
        toast(request, None, message)
        return redirect(back)
    return toast(request, _render_results(spec, request), message)


def _nothing_done(spec: TabSpec) -> str:
    return "Nothing was erased." if spec.delete_admin_only else "Nothing was deleted."


def _delete_answer(spec: TabSpec, request, refusal=None):
    """What a batch delete answers: htmx swaps the results, a plain post gets the whole tab."""
    if request.htmx:
        return _render_results(spec, request, refusal=refusal)
    return tab_list(request, spec, delete_refusal=refusal)


def _render_results(spec: TabSpec, request, refusal=None):
    context = {**_results_context(spec, request), "page": "list", "delete_refusal": refusal}
    return render(request, f"{spec.template}#{spec.slug}-results", context)

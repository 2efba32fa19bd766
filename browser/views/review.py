"""The Review tab: items held for review (docs/review.md) across entries, facts and learned
procedures; approve, edit then approve, reject with a reason, merge into the stored twin, one
row or a selection at a time, from the keyboard too (static/memories/memories.js)."""

import json
from functools import partial
from urllib.parse import urlencode

from django import forms
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import reswap, retarget

from browser.access import EDIT, workspace_view
from browser.forms import form_add_service_errors
from browser.lib.rendering import action_refused, refused, render_page, toast
from browser.selectors.review import review_items_named, review_page, review_tab_count
from browser.tabs import tab_urls
from core.errors import ApplicationError, NotFoundError
from facts.models import Fact
from review.selectors import STATE_HELD, TIER_ENTRY, TIER_FACT, TIERS, review_item_get
from review.services import ITEM_NOT_HELD, review_approve, review_merge, review_reject

TEMPLATE = "memories/review.html"
ACTIONS = {"approve": "Approved", "reject": "Rejected", "merge": "Merged"}
# A selection is one screen of rows at most (browser.selectors.review.REVIEW_PAGE_SIZE).
DECIDE_MAX = 200
NOTHING_SELECTED = "Select at least one item."
NO_MERGE_TARGET = "no similar stored item to merge into"
ALREADY_DECIDED = "This item was already decided."


def _urls(request) -> dict:
    workspace_id = request.operator.workspace.pk
    return {
        "list": reverse("memories:review", kwargs={"workspace_id": workspace_id}),
        "decide": reverse("memories:review-decide", kwargs={"workspace_id": workspace_id}),
    }


def _context(request, params) -> dict:
    page = review_page(principal=request.operator.principal, params=params)
    urls = _urls(request)
    query = urlencode(
        {k: v for k, v in page["filters"].items() if v and not (k == "state" and v == STATE_HELD)}
    )
    return {
        **page,
        "tab": "review",
        "urls": tab_urls(request.operator.workspace.pk),
        "review_urls": urls,
        "query": query,
        "decide_url": urls["decide"] + (f"?{query}" if query else ""),
        "can_write": request.operator.principal.can_write,
        "tiers": TIERS,
        # The tab counts every agent's items: with an agent filter the page's total is not it.
        "tab_count": review_tab_count(request.operator.workspace.pk)
        if page["filters"]["agent"]
        else page["counts"]["total"],
    }


def _results(request, params):
    return render_page(
        request,
        TEMPLATE,
        _context(request, params),
        partials={"main": "review-panel", "review-results": "review-results"},
    )


@workspace_view()
def review_tab(request):
    return _results(request, request.GET)


def _decide_one(principal, action: str, item, into=None):
    if action == "approve":
        return review_approve(principal=principal, tier=item.tier, item_id=item.id)
    if action == "reject":
        return review_reject(principal=principal, tier=item.tier, item_id=item.id, reason=into or "")
    if into is None:
        raise ApplicationError(NO_MERGE_TARGET)
    return review_merge(principal=principal, tier=item.tier, item_id=item.id, into=into)


@require_POST
@workspace_view(EDIT)
def review_decide(request):
    """Approve, reject (with the reason typed) or merge (each into its suggested twin, or into
    `into`) the items named `<tier>:<id>`; answers the re-rendered queue and a toast."""
    action = request.POST.get("action")
    # A row's own buttons send `items`; the selection's checkboxes are `ids` (memories.js counts them).
    keys = (request.POST.getlist("items") + request.POST.getlist("ids"))[:DECIDE_MAX]
    if action not in ACTIONS:
        raise Http404("No such action.")
    principal = request.operator.principal
    reason = (request.POST.get("reason") or "").strip()
    into = request.POST.get("into") or None
    if not keys:
        return action_refused(
            request, partial(_results, request, request.GET), status=400, message=NOTHING_SELECTED
        )
    done, failed, refusals = 0, [], []
    items, missing = review_items_named(principal=principal, keys=keys)
    failed.extend(f"{key}: not waiting for review" for key in missing)
    for item in items:
        target = reason if action == "reject" else (into or (item.similar or {}).get("id"))
        try:
            _decide_one(principal, action, item, target)
        except (ApplicationError, NotFoundError) as exc:
            failed.append(f"{item.text[:40]}: {exc.message}")
            if exc.message != ITEM_NOT_HELD:
                # Decided by another operator between the read and the decision's lock: as
                # for an item the read already found decided, nothing is refused.
                refusals.append(exc)
            continue
        done += 1
    if failed:
        message = f"{ACTIONS[action]} {done}; not done: " + "; ".join(failed[:3])
        if refusals and not done:
            # Nothing decided and the service refused: the refusal's status. Items decided
            # already (another operator, a second click) refuse nothing: the queue, re-read,
            # no longer lists them.
            status = refusals[0].status_code
            return action_refused(
                request, partial(_results, request, request.GET), status=status, message=message
            )
        level = "error"
    else:
        message, level = f"{ACTIONS[action]} {done} item{'s' if done != 1 else ''}.", "success"
    if not request.htmx:
        toast(request, None, message, level=level)
        query = request.GET.urlencode()
        return redirect(_urls(request)["list"] + (f"?{query}" if query else ""))
    return toast(request, _results(request, request.GET), message, level=level)


class ReviewEditForm(forms.Form):
    """The fields an edit before approval may change, per tier (review.services.EDITABLE)."""

    content = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}), max_length=100_000)
    value = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        max_length=100_000,
        help_text="Text, or JSON (a number, a list, an object).",
    )
    fact_type = forms.ChoiceField(required=False, choices=Fact.FactType.choices)
    name = forms.CharField(required=False, max_length=200)
    description = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), max_length=100_000
    )

    FIELDS = {
        TIER_ENTRY: ("content",),
        TIER_FACT: ("value", "fact_type"),
        "procedure": ("name", "description"),
    }

    def __init__(self, *args, tier: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.tier = tier
        for name in list(self.fields):
            if name not in self.FIELDS[tier]:
                del self.fields[name]
        # The item's own text may be changed, never emptied.
        self.fields[self.FIELDS[tier][0]].required = True

    @classmethod
    def initial_for(cls, item) -> dict:
        if item.tier == TIER_ENTRY:
            return {"content": item.row.content}
        if item.tier == TIER_FACT:
            value = item.row.value
            return {
                "value": value if isinstance(value, str) else json.dumps(value),
                "fact_type": item.row.fact_type,
            }
        return {"name": item.row.name, "description": item.row.description}

    def edits(self) -> dict:
        data = dict(self.cleaned_data)
        if self.tier == TIER_FACT:
            raw = data.get("value", "")
            try:
                value = json.loads(raw)
            except ValueError:
                value = raw
            # A quoted number stays text only when written as JSON text ("42").
            data["value"] = value if raw.strip() else None
        return {k: v for k, v in data.items() if v not in (None, "")}


def _edit_response(request, item, form):
    context = {**_context(request, request.GET), "item": item, "form": form, "page": "edit"}
    response = render_page(request, TEMPLATE, context, partials={"*": "review-row-edit"})
    if request.htmx:
        retarget(response, f"#row-{item.tier}-{item.id}")
        reswap(response, "outerHTML")
    return response


@require_http_methods(["GET", "POST"])
@workspace_view(EDIT)
def review_edit(request, tier, pk):
    """Edit a held item and approve it in one step; a row that fails validation comes back with
    its errors, a saved one leaves the queue."""
    principal = request.operator.principal
    try:
        item = review_item_get(principal=principal, tier=tier, item_id=pk, state=STATE_HELD)
    except NotFoundError:
        try:
            review_item_get(principal=principal, tier=tier, item_id=pk)
        except NotFoundError:
            raise Http404("No such item.")
        # A stale link (another reviewer decided it meanwhile): back to the queue, saying so.
        if not request.htmx:
            toast(request, None, ALREADY_DECIDED, level="error")
            return redirect(_urls(request)["list"])
        return toast(request, _results(request, request.GET), ALREADY_DECIDED, level="error")
    if request.method != "POST":
        return _edit_response(
            request, item, ReviewEditForm(initial=ReviewEditForm.initial_for(item), tier=tier)
        )
    form = ReviewEditForm(request.POST, tier=tier)
    if not form.is_valid():
        return refused(request, _edit_response(request, item, form), status=400)
    try:
        review_approve(principal=principal, tier=tier, item_id=pk, edits=form.edits())
    except ApplicationError as exc:
        form_add_service_errors(form, exc)
        return refused(request, _edit_response(request, item, form), status=exc.status_code)
    message = "Edited and approved."
    if not request.htmx:
        toast(request, None, message)
        return redirect(_urls(request)["list"])
    return toast(request, _results(request, request.GET), message)

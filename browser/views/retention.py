"""The Retention page: each tier's rule with what the next run deletes, legal holds, and runs.
Admins only: retention deletes rows of every agent and person."""

from django.http import Http404
from django.views.decorators.http import require_POST

from browser.access import ADMIN, workspace_view
from browser.forms import LegalHoldForm, LegalHoldReleaseForm, RetentionRuleForm, form_add_service_errors
from browser.lib.rendering import refused, render_page, toast
from browser.selectors.retention import held_people, person_find, retention_rules_shown, workspace_agents
from core.errors import ApplicationError, NotFoundError
from identities.selectors import memory_user_legal_holds, memory_user_resolve_merged
from identities.services import memory_user_hold_place, memory_user_hold_release
from retention.models import Tier
from retention.selectors import retention_preview, retention_rule_get, retention_run_list
from retention.services import retention_rule_delete, retention_rule_set, retention_run_request

PARTIALS = {"main": "retention-panel"}
PERSON_UNKNOWN = "No person with this id or canonical id in the workspace."
HOLD_UNKNOWN = "No legal hold covering this person was placed on that record."


def _rule_or_404(principal, rule_id):
    """The workspace's rule; one of another workspace, or removed already, is a 404."""
    try:
        return retention_rule_get(principal=principal, rule_id=rule_id)
    except NotFoundError:
        raise Http404("No such retention rule.") from None


def _page(request, *, rule_form=None, hold_form=None, hold_refusal=None, run_refusal=None):
    workspace = request.operator.workspace
    agents = workspace_agents(workspace=workspace)
    preview = retention_preview(workspace=workspace)
    labels = dict(Tier.choices)
    deletes = [(labels[tier], count) for tier, count in preview["deletes"].items() if count]
    context = {
        "tab": "retention",
        "rules": retention_rules_shown(workspace=workspace),
        "preview": preview,
        "preview_rows": [(labels[tier], count) for tier, count in preview["deletes"].items()],
        "deletes": deletes,
        "held": held_people(workspace=workspace),
        "runs": [
            (run, [(labels.get(tier, tier).lower(), count) for tier, count in run.deleted.items()])
            for run in retention_run_list(workspace=workspace, limit=10)
        ],
        "rule_form": rule_form or RetentionRuleForm(agents=agents),
        "hold_form": hold_form or LegalHoldForm(),
        "hold_refusal": hold_refusal,
        "run_refusal": run_refusal,
    }
    return render_page(request, "memories/retention.html", context, partials=PARTIALS)


@workspace_view(ADMIN)
def retention(request):
    return _page(request)


@require_POST
@workspace_view(ADMIN)
def retention_rule_save(request):
    operator = request.operator
    agents = workspace_agents(workspace=operator.workspace)
    form = RetentionRuleForm(request.POST, agents=agents)
    if not form.is_valid():
        return refused(request, _page(request, rule_form=form), status=400)
    data = form.cleaned_data
    try:
        retention_rule_set(
            principal=operator.principal,
            tier=data["tier"],
            agent_slug=data["agent"] or None,
            max_age_days=data["max_age_days"],
            keep_latest=data["keep_latest"],
        )
    except ApplicationError as exc:
        form_add_service_errors(form, exc)
        return refused(request, _page(request, rule_form=form), status=400)
    return toast(request, _page(request), "Retention rule saved.")


@require_POST
@workspace_view(ADMIN)
def retention_rule_remove(request, rule_id):
    rule = _rule_or_404(request.operator.principal, rule_id)
    retention_rule_delete(principal=request.operator.principal, rule=rule)
    return toast(request, _page(request), "Retention rule removed.")


@require_POST
@workspace_view(ADMIN)
def retention_run_now(request):
    try:
        retention_run_request(principal=request.operator.principal)
    except ApplicationError as exc:
        response = _page(request, run_refusal={"code": exc.code, "message": exc.message})
        return refused(request, response, status=exc.status_code, message=exc.message)
    return toast(request, _page(request), "Retention run queued.")


@require_POST
@workspace_view(ADMIN)
def legal_hold_place(request):
    operator = request.operator
    form = LegalHoldForm(request.POST)
    if not form.is_valid():
        return refused(request, _page(request, hold_form=form), status=400)
    person = person_find(workspace=operator.workspace, reference=form.cleaned_data["person"])
    if person is None:
        # The reference is not echoed back: the page says only that no such person is here.
        form = LegalHoldForm(initial={"reason": form.cleaned_data["reason"]})
        form.errors["person"] = form.error_class([PERSON_UNKNOWN])
        return refused(request, _page(request, hold_form=form), status=400)
    try:
        memory_user_hold_place(
            memory_user=person, reason=form.cleaned_data["reason"], actor=operator.principal.actor
        )
    except ApplicationError as exc:
        form_add_service_errors(form, exc)
        return refused(request, _page(request, hold_form=form), status=400)
    return toast(request, _page(request), f"Legal hold placed on {person}.")


@require_POST
@workspace_view(ADMIN)
def legal_hold_release(request, memory_user_id):
    """Release the hold placed on `placed_on` (blank: on the person) among those covering the
    person; a merged record's hold is released on its survivor, as the person page does."""
    operator = request.operator
    person = person_find(workspace=operator.workspace, reference=str(memory_user_id))
    if person is None:
        raise Http404(PERSON_UNKNOWN)
    form = LegalHoldReleaseForm(request.POST)
    if not form.is_valid():
        return _release_refused(request, "invalid", " ".join(form.errors.get("placed_on", [])), 400)
    placed_on = form.cleaned_data["placed_on"] or person.pk
    holder = next((h for h in memory_user_legal_holds(memory_user=person) if h.pk == placed_on), None)
    if holder is None:
        if form.cleaned_data["placed_on"] is None:
            # Released already (a second click): nothing to do, as the service answers.
            return toast(request, _page(request), f"No legal hold is placed on {person}.")
        return _release_refused(request, "not_found", HOLD_UNKNOWN, 404)
    survivor = memory_user_resolve_merged(memory_user=person)
    try:
        memory_user_hold_release(memory_user=survivor, placed_on=holder, actor=operator.principal.actor)
    except ApplicationError as exc:
        return _release_refused(request, exc.code, exc.message, exc.status_code)
    merged = "" if holder.pk == survivor.pk else ", placed on a record merged into them"
    return toast(
        request, _page(request), f"Legal hold on {survivor} released ({holder.legal_hold_reason}{merged})."
    )


def _release_refused(request, code: str, message: str, status: int):
    """The page with the holds as they are now and the refusal above them: another operator
    may have released or merged meanwhile, and only the swap replaces a list showing a hold
    now gone."""
    response = _page(request, hold_refusal={"code": code, "message": message})
    return refused(request, response, status=status, message=message)

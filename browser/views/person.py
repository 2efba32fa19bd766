"""The person page: everything stored about one memory user across the tiers, one section
per kind of row, and the erasure of the person with a preview of what it deletes.

Each section pages and searches on its own: its query string keys carry the section's name
(`facts_q`, `facts_page`), so one URL holds the state of every section and the page reads
without JavaScript. An htmx request whose HX-Target is `person-<section>` gets that section's
partial only, and only that section is queried.
"""

from dataclasses import dataclass, field
from functools import partial
from urllib.parse import urlencode, urlsplit

from django.contrib import messages
from django.http import Http404, QueryDict
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, push_url

from browser.access import ADMIN, workspace_view
from browser.forms import LegalHoldReleaseForm, MemoryUserMergeForm
from browser.lib.rendering import action_refused, render_page, toast
from browser.selectors import person as selectors
from browser.tabs import tab_urls
from core.errors import ApplicationError, NotFoundError
from identities.selectors import memory_user_resolve_merged
from identities.services import memory_user_erase, memory_user_hold_release

TEMPLATE = "memories/person.html"
# Ten rows a section keeps the whole page (eight sections) near one screenful per section
# and its first render inside the 150 ms budget at 100,000 rows per tier (bench/browser_person.py).
PER_SECTION = 10
# Counts are exact up to here; above it a section says "more than 100" (see _paginate). Each
# counted row of the procedures and audit sections is an index probe or two (a procedure's
# first run of the person's, an audit event's row): counting a heavy person's to 1,000 was
# ~25 ms of their page at 100,000 rows per tier, and ten pages of ten rows are a lot to read.
COUNT_CAP = 100
# Longer queries are cut: every search here is a substring or full-text match.
QUERY_CHARS = 200
HOLD_NOT_LISTED = "No legal hold covering this person was placed on that record."


@dataclass(frozen=True)
class SectionSpec:
    key: str
    title: str
    noun: str
    noun_plural: str
    search_label: str
    empty: str


SECTIONS = [
    SectionSpec(
        "identities",
        "Channel identities",
        "identity",
        "identities",
        "Channel or external id",
        "No channel identities.",
    ),
    SectionSpec(
        "facts",
        "Profile facts",
        "fact",
        "facts",
        "Words of the key or value",
        "No facts about this person.",
    ),
    SectionSpec(
        "entries",
        "Episodic entries",
        "entry",
        "entries",
        "Full-text search",
        "No episodic entries about this person.",
    ),
    SectionSpec(
        "episodes",
        "Episodes",
        "episode",
        "episodes",
        "Trigger, error or feedback",
        "No episodes with this person.",
    ),
    SectionSpec("threads", "Threads", "thread", "threads", "Title", "No threads with this person."),
    SectionSpec(
        "procedures",
        "Procedures used",
        "procedure",
        "procedures",
        "Name or description",
        "No procedure ran in this person's episodes.",
    ),
    SectionSpec(
        "merges",
        "Merged users",
        "merged user",
        "merged users",
        "Canonical id or name",
        "No other user was merged into this one.",
    ),
    SectionSpec(
        "audit",
        "Audit trail",
        "event",
        "events",
        "Action, row type or actor",
        "No audit events about this person.",
    ),
]
SECTION_KEYS = {spec.key: spec for spec in SECTIONS}


@dataclass
class Section:
    """One section as the template renders it: the spec, its page of rows and its links."""

    spec: SectionSpec
    rows: list
    total: int
    more: bool
    number: int
    num_pages: int
    q: str
    # The other sections' query string, kept as hidden fields by this section's search form.
    hidden: list = field(default_factory=list)
    prev_url: str = ""
    next_url: str = ""
    options: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def start(self) -> int:
        return (self.number - 1) * PER_SECTION + 1 if self.rows else 0

    @property
    def end(self) -> int:
        return self.start + len(self.rows) - 1 if self.rows else 0


def _page_number(value) -> int:
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def _paginate(section: selectors.PersonSection, number: int) -> tuple[list, int, bool, int]:
    """(rows, total, more, page number) of one section, primary keys first.

    The first page reads PER_SECTION + 1 keys and counts only when there are more, so a
    person with few rows costs no count query. Counts stop at COUNT_CAP (`more` is then
    true and the page says "more than 100"): a planner estimate, as the tabs show, means
    nothing for one person's rows, and counting 90,000 of them costs more than the page.
    """
    first = section.order[0]
    tiebreak = "-pk" if first.startswith("-") else "pk"
    keys = section.rows.order_by(*section.order, tiebreak).values_list("pk", flat=True)
    more = False
    ids = list(keys[: PER_SECTION + 1]) if number == 1 else None
    if ids is not None and len(ids) <= PER_SECTION:
        total = len(ids)
    else:
        counted = keys.order_by()[: COUNT_CAP + 1].count()
        total, more = min(counted, COUNT_CAP), counted > COUNT_CAP
        if not more:
            number = min(number, max(1, -(-total // PER_SECTION)))
        if ids is None or number != 1:
            bottom = (number - 1) * PER_SECTION
            ids = list(keys[bottom : bottom + PER_SECTION])
            if not ids and number > 1:
                # Past the end of the rows (a stale link): the first page instead.
                number, ids = 1, list(keys[:PER_SECTION])
        ids = ids[:PER_SECTION]
    loaded = {row.pk: row for row in section.rows.filter(pk__in=ids).order_by()} if ids else {}
    rows = [loaded[pk] for pk in ids if pk in loaded]
    if rows and section.extend is not None:
        section.extend(rows)
    return rows, total, more, number


def _state(request, key: str | None) -> dict[str, list[str]]:
    """The page's query string as a dict of lists. For one section's htmx request, the other
    sections' keys come from the page the browser shows (HX-Current-URL), not from the
    request: its links and hidden fields were rendered before those sections last changed."""
    params = dict(request.GET.lists())
    current = request.htmx.current_url if request.htmx else None
    if key is None or not current:
        return params
    prefix = f"{key}_"
    shown = QueryDict(urlsplit(current).query)
    return {
        **{k: v for k, v in shown.lists() if not k.startswith(prefix)},
        **{k: v for k, v in params.items() if k.startswith(prefix)},
    }


def _url(base_url: str, params: dict) -> str:
    query = urlencode([(k, v) for k, values in params.items() for v in values])
    return f"{base_url}?{query}" if query else base_url


def _section(params: dict, spec: SectionSpec, base_url: str, build) -> Section:
    """Page `build(q)`'s rows with the section's query-string keys and make its links."""
    prefix = f"{spec.key}_"
    q = ((params.get(f"{prefix}q") or [""])[-1])[:QUERY_CHARS]
    page = (params.get(f"{prefix}page") or [None])[-1]
    rows, total, more, number = _paginate(build(q), _page_number(page))
    num_pages = max(1, -(-total // PER_SECTION))
    others = {k: v for k, v in params.items() if not k.startswith(prefix)}

    def url_for(page: int) -> str:
        state = {**params, f"{prefix}page": [str(page)]}
        if page == 1:
            state.pop(f"{prefix}page")
        return _url(base_url, state)

    has_next = len(rows) == PER_SECTION and (more or number < num_pages)
    return Section(
        spec=spec,
        rows=rows,
        total=total,
        more=more,
        number=number,
        num_pages=num_pages,
        q=q,
        hidden=[(k, v) for k, values in others.items() for v in values],
        prev_url=url_for(number - 1) if number > 1 else "",
        next_url=url_for(number + 1) if has_next else "",
    )


def _builders(request, memory_user, history: bool) -> dict:
    """Each section's `q -> PersonSection`; only the sections a request shows are queried."""
    scoped = {"principal": request.operator.principal, "memory_user": memory_user}

    merged = []

    def merged_ids() -> list:
        # Read once, by the first section that needs it.
        if not merged:
            merged.extend(selectors.person_merged_ids(memory_user=memory_user))
        return merged

    def audit(q):
        return selectors.person_audit(**scoped, merged_ids=merged_ids(), q=q)

    return {
        "identities": lambda q: selectors.person_identities(memory_user=memory_user, q=q),
        "facts": lambda q: selectors.person_facts(**scoped, q=q, history=history),
        "entries": lambda q: selectors.person_entries(**scoped, q=q),
        "episodes": lambda q: selectors.person_episodes(**scoped, q=q),
        "threads": lambda q: selectors.person_threads(**scoped, q=q),
        "procedures": lambda q: selectors.person_procedures(**scoped, merged_ids=merged_ids(), q=q),
        "merges": lambda q: selectors.person_merges(memory_user=memory_user, q=q),
        "audit": audit,
    }


def _person_or_404(request, pk):
    try:
        return selectors.person_get(principal=request.operator.principal, memory_user_id=pk)
    except NotFoundError:
        raise Http404("No such user.")


def _base_context(request, memory_user) -> dict:
    workspace_id = request.operator.workspace.pk
    principal = request.operator.principal
    urls = tab_urls(workspace_id)
    pk = memory_user.pk
    person_url = reverse("memories:user", kwargs={"workspace_id": workspace_id, "pk": pk})
    return {
        "tab": "users",
        "urls": urls,
        "memory_user": memory_user,
        "person_url": person_url,
        "erase_url": reverse("memories:user-erase", kwargs={"workspace_id": workspace_id, "pk": pk}),
        "hold_release_url": reverse(
            "memories:user-hold-release", kwargs={"workspace_id": workspace_id, "pk": pk}
        ),
        # The person a merged record's data lives with now, at the end of its chain of merges.
        "survivor": memory_user_resolve_merged(memory_user=memory_user),
        "list_url": urls.get("users", ""),
        "spec": {"noun_plural": "users"},
        "can_write": principal.can_write,
        "can_admin": principal.can_admin,
    }


def person_page(request, pk, *, merge_form=None, hold_refusal=None):
    """The person page, or for htmx one section (HX-Target `person-<section>`) or the page's
    content (HX-Target `main`). Called by browser.views.users.user_detail, which keeps the
    users tab's inline-edit row on the same URL, by user_merge with its refused form, and by
    person_hold_release with its refusal (`hold_refusal`, shown above the holds)."""
    memory_user = _person_or_404(request, pk)
    context = _base_context(request, memory_user)
    target = (request.htmx.target or "") if request.htmx else ""
    wanted = target.removeprefix("person-")
    one = wanted if target.startswith("person-") and wanted in SECTION_KEYS else None
    params = _state(request, one)
    history = (params.get("facts_history") or [""])[-1] == "1"
    builders = _builders(request, memory_user, history)
    url = context["person_url"]
    keys = [one] if one else list(SECTION_KEYS)
    sections = {key: _section(params, SECTION_KEYS[key], url, builders[key]) for key in keys}
    if "facts" in sections:
        sections["facts"].options["history"] = history
    context.update(
        sections=sections, merge_form=merge_form or MemoryUserMergeForm(), hold_refusal=hold_refusal
    )
    if not one:
        context["holds"] = selectors.person_legal_holds(memory_user=memory_user)
    partials = {
        "main": "person-page",
        "person-holds": "person-holds",
        **{f"person-{key}": f"person-{key}" for key in SECTION_KEYS},
    }
    response = render_page(request, TEMPLATE, context, partials=partials)
    if one and request.htmx.current_url:
        # The address bar keeps every section's state, this one's as just requested.
        push_url(response, _url(url, params))
    return response


@require_http_methods(["GET", "POST"])
@workspace_view(ADMIN)
def person_erase(request, pk):
    """GET: what erasing the person deletes, per tier, with the confirm button. POST: erase
    (identities.services.memory_user_erase), then open the users tab."""
    principal = request.operator.principal
    memory_user = _person_or_404(request, pk)
    context = _base_context(request, memory_user)
    refusal = None
    if request.method == "POST":
        try:
            counts = memory_user_erase(memory_user=memory_user, actor=principal.actor)
        except ApplicationError as exc:
            # A refusal (a legal hold, for one) leaves the preview up with the reason.
            refusal = exc
            context["erase_error"] = exc.message
            # The refusal's survivors as links: a merged record is erased through its
            # survivor, and every hold that blocks an erasure is released on one.
            context["erase_people"] = selectors.erase_refusal_people(principal=principal, refusal=exc)
        else:
            total = sum(value for value in counts.values() if isinstance(value, int))
            messages.success(
                request, f"Erased {memory_user} and everything stored about them ({total} rows)."
            )
            if request.htmx:
                return HttpResponseClientRedirect(context["list_url"])
            return redirect(context["list_url"])
    preview = selectors.person_erase_preview(memory_user=memory_user)
    context.update(
        # A merged record is not erased itself (the preview sends to its survivor instead).
        holds=[] if memory_user.merged_into_id else selectors.person_legal_holds(memory_user=memory_user),
        preview=[(label.replace("_", " "), count) for label, count in preview.items()],
        preview_total=sum(preview.values()),
        page="erase",
    )
    answer = partial(
        render_page, request, TEMPLATE, context, partials={"person-erase": "person-erase-preview"}
    )
    if refusal:
        return action_refused(request, answer, status=refusal.status_code, message=refusal.message)
    return answer()


@require_POST
@workspace_view(ADMIN)
def person_hold_release(request, pk):
    """Release one of the legal holds listed on the person page: the person's own or one
    placed on a record merged into them, always on the survivor (memory_user_hold_release
    `placed_on`), as the API does. Answers with the page's holds partial."""
    principal = request.operator.principal
    memory_user = _person_or_404(request, pk)
    context = _base_context(request, memory_user)
    survivor = context["survivor"]
    form = LegalHoldReleaseForm(request.POST)
    refusal = None
    if not form.is_valid():
        refusal = {"code": "invalid", "message": " ".join(form.errors.get("placed_on", [])), "status": 400}
    else:
        placed_on = form.cleaned_data["placed_on"] or memory_user.pk
        # Only a hold this page lists can go: an id of another person or workspace, or of a
        # hold released meanwhile, answers the same.
        holder = next(
            (hold for hold in selectors.person_legal_holds(memory_user=memory_user) if hold.pk == placed_on),
            None,
        )
        if holder is None and form.cleaned_data["placed_on"] is None:
            # Released already (a second click): nothing to do, as the service answers.
            message = "No legal hold is placed on this person."
        elif holder is None:
            refusal = {"code": "not_found", "message": HOLD_NOT_LISTED, "status": 404}
        else:
            try:
                memory_user_hold_release(memory_user=survivor, placed_on=holder, actor=principal.actor)
            except ApplicationError as exc:
                # A merge or erasure committed meanwhile.
                refusal = {"code": exc.code, "message": exc.message, "status": exc.status_code}
            else:
                message = f"Legal hold on {holder} released ({holder.legal_hold_reason})."
    if refusal:

        def answer():
            # The refusal in place of the holds as they are now (another operator may have
            # released or merged meanwhile): only a re-read replaces a list that may show a
            # hold now gone. A plain post gets the whole person page around them.
            if not request.htmx:
                return person_page(request, pk, hold_refusal=refusal)
            context.update(holds=selectors.person_legal_holds(memory_user=memory_user), hold_refusal=refusal)
            return render_page(request, TEMPLATE, context, partials={"*": "person-holds"})

        return action_refused(request, answer, status=refusal["status"], message=refusal["message"])
    if not request.htmx:
        toast(request, None, message)
        return redirect(context["person_url"])
    context.update(holds=selectors.person_legal_holds(memory_user=memory_user))
    response = render_page(request, TEMPLATE, context, partials={"*": "person-holds"})
    return toast(request, response, message)

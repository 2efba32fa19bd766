"""The Episodic entries tab: source-backed notes about a person, with status curation and
a form to store one directly."""

import contextlib

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import push_url

from browser.access import EDIT, workspace_view
from browser.forms import EntryEditForm, form_add_service_errors
from browser.lib.listing import Sort
from browser.lib.rendering import refused, render_page, toast
from browser.lib.tabs import TabSpec, tab_delete, tab_detail, tab_edit, tab_list
from browser.tabs import tab_urls
from core.errors import ApplicationError
from core.lib.replica import read_replica
from core.selectors import agent_list
from episodic.filters import EpisodicEntryFilter
from episodic.models import EpisodicEntry
from episodic.selectors import entry_get, entry_lineage, entry_list
from episodic.services import entry_batch_delete, entry_create
from identities.selectors import memory_user_scope

ENTRIES = TabSpec(
    slug="entries",
    item="entry",
    noun="episodic entry",
    noun_plural="episodic entries",
    template="memories/entries.html",
    filterset=EpisodicEntryFilter,
    list=lambda principal, filters: entry_list(principal=principal, filters=filters),
    get=lambda principal, pk: entry_get(principal=principal, entry_id=pk),
    sorts=[
        Sort("created", "Created", "created_at"),
        Sort("status", "Status", "status"),
    ],
    default_sort="-created",
    batch_delete=lambda principal, ids: entry_batch_delete(principal=principal, ids=ids),
    model=EpisodicEntry,
    edit_form=EntryEditForm,
    # Supersedes / superseded by, and the consolidation decisions with their reasons.
    detail_context=lambda principal, entry: entry_lineage(entry=entry),
)


@read_replica
@workspace_view()
def entries_tab(request):
    return tab_list(request, ENTRIES)


@read_replica
@workspace_view()
def entry_detail(request, pk):
    return tab_detail(request, ENTRIES, pk)


@workspace_view(EDIT)
def entry_edit(request, pk):
    return tab_edit(request, ENTRIES, pk)


@require_POST
@workspace_view(EDIT)
def entries_delete(request):
    return tab_delete(request, ENTRIES)


# People listed in the form's select, by name; another person is still accepted by id
# (`?memory_user=<id>` preselects them, as the list's person filter links do).
PERSON_CHOICES_MAX = 500


class EntryCreateForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=None, to_field_name="slug", empty_label=None)
    memory_user = forms.ModelChoiceField(queryset=None, label="Person", empty_label="Choose a person")
    content = forms.CharField(
        max_length=settings.EPISODIC_MAX_ENTRY_LENGTH,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One short sentence about the person, e.g. \u201cAda moves to Porto in May.\u201d",
    )
    evidence = forms.CharField(
        required=False,
        max_length=100_000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Optional: an exact quote that proves it.",
    )
    source = forms.ChoiceField(
        choices=EpisodicEntry.Source.choices,
        initial=EpisodicEntry.Source.AGENT_DIRECT,
        help_text="Sources other than \u201cStored directly\u201d need evidence.",
    )

    def __init__(self, *args, principal, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].queryset = agent_list(principal=principal)
        # Any person of the workspace validates (resolved through the scoped selector); the
        # select lists the first PERSON_CHOICES_MAX by name plus the one already chosen.
        people = memory_user_scope(principal).filter(merged_into__isnull=True)
        field = self.fields["memory_user"]
        field.queryset = people
        listed = list(people.order_by("display_name", "canonical_id")[:PERSON_CHOICES_MAX])
        chosen = self["memory_user"].value()
        if chosen and not any(str(p.pk) == str(chosen) for p in listed):
            # A malformed id is the field's error when validated, not the select's.
            with contextlib.suppress(ValidationError):
                listed += list(people.filter(pk=chosen))
        field.widget.choices = [("", field.empty_label)] + [(str(p.pk), str(p)) for p in listed]

    def create(self, principal):
        data = self.cleaned_data
        return entry_create(
            agent=data["agent"],
            memory_user=data["memory_user"],
            content=data["content"],
            evidence=data["evidence"],
            source=data["source"],
            actor=principal.actor,
        )


def _create_page(request, form):
    context = {
        "spec": ENTRIES,
        "tab": ENTRIES.slug,
        "urls": tab_urls(request.operator.workspace.pk),
        "can_write": True,
        "list_url": ENTRIES.url(request),
        "create_url": reverse(
            "memories:entry-create", kwargs={"workspace_id": request.operator.workspace.pk}
        ),
        "form": form,
        "page": "create",
    }
    return render_page(request, ENTRIES.template, context, partials={"main": "entry-create"})


@require_http_methods(["GET", "POST"])
@workspace_view(EDIT)
def entry_new(request):
    """Store one entry directly (the API's POST /api/v1/episodic-entries/, same service).

    A duplicate is not stored: the operator lands on the stored entry it duplicates.
    """
    principal = request.operator.principal
    if request.method != "POST":
        initial = {"source": EpisodicEntry.Source.AGENT_DIRECT}
        for name in ("agent", "memory_user"):
            if request.GET.get(name):
                initial[name] = request.GET[name]
        return _create_page(request, EntryCreateForm(initial=initial, principal=principal))
    form = EntryCreateForm(request.POST, principal=principal)
    if not form.is_valid():
        return refused(request, _create_page(request, form), status=400)
    try:
        result = form.create(principal)
    except ApplicationError as exc:
        form_add_service_errors(form, exc)
        return refused(request, _create_page(request, form), status=exc.status_code)
    entry = result.entry
    if result.created:
        message = "Stored the episodic entry."
    elif result.reason == "duplicate_similar":
        message = f"Not stored: a nearly identical entry exists (similarity {result.similarity:.2f})."
    else:
        message = "Not stored: this entry already exists."
    level = "success" if result.created else "error"
    detail_url = reverse(
        "memories:entry", kwargs={"workspace_id": request.operator.workspace.pk, "pk": entry.pk}
    )
    if not request.htmx:
        toast(request, None, message, level=level)
        return redirect(detail_url)
    response = tab_detail(request, ENTRIES, entry.pk)
    push_url(response, detail_url)
    return toast(request, response, message, level=level)

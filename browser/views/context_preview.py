"""The context preview: choose an agent, a person (optionally a thread and a node), type the
next user message and a token budget, and see what POST /api/v1/context/ would return, with
why each item was chosen and what the budget cut. A GET form: the result is rendered on the
server (shareable URL, no JavaScript needed); htmx swaps only the results. Read-only.
"""

import json

from django import forms
from django.urls import reverse

from browser.access import workspace_view
from browser.lib.pickers import THREAD_PICKER, USER_PICKER, picker_url
from browser.lib.rendering import render_page
from browser.selectors import memory_user_resolve, thread_resolve
from browser.selectors.context_preview import context_preview_page
from browser.tabs import tab_urls
from core.errors import ApplicationError
from core.selectors import agent_list

# The form is a GET, so the message travels in the URL, and gunicorn refuses a request line
# over 4,094 bytes (limit_request_line): 2,000 characters of English fit with the other fields.
# The API itself takes 100,000 (runtime.apis MAX_MESSAGE_CHARS).
MESSAGE_MAX_CHARS = 2_000
# As POST /api/v1/context/ accepts them (runtime.apis MAX_TOKEN_BUDGET).
TOKEN_BUDGET_MIN = 100
TOKEN_BUDGET_MAX = 2_000_000
PERSON_OR_THREAD = "Pick a person, or a thread."


class ContextPreviewForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=None, to_field_name="slug", empty_label=None, label="Agent")
    memory_user = forms.CharField(label="Person", required=False, max_length=200)
    thread = forms.CharField(
        label="Thread",
        required=False,
        max_length=200,
        help_text="Optional: without one, the person's continuing thread (as the API finds it).",
    )
    node = forms.CharField(
        label="Node", required=False, max_length=100, help_text="Optional: a graph node whose window to read."
    )
    message = forms.CharField(
        label="Next user message",
        required=False,
        help_text=f"Up to {MESSAGE_MAX_CHARS:,} characters: the preview is a shareable URL.",
        max_length=MESSAGE_MAX_CHARS,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    token_budget = forms.IntegerField(
        min_value=TOKEN_BUDGET_MIN, max_value=TOKEN_BUDGET_MAX, initial=4000, label="Token budget"
    )

    def __init__(self, *args, principal, **kwargs):
        super().__init__(*args, **kwargs)
        self.principal = principal
        self.fields["agent"].queryset = agent_list(principal=principal)
        self.picked = {}

    def _pick(self, name, resolve):
        text = self.cleaned_data.get(name) or ""
        if not text.strip():
            return None
        result = resolve(principal=self.principal, text=text)
        if result.suggestion is None:
            # An id of another workspace names nothing here, exactly like an unknown one.
            self.add_error(name, result.error or f"Nothing with this id here: “{text.strip()[:80]}”.")
            return None
        self.picked[name] = result.suggestion
        return result.suggestion.id

    def clean(self):
        data = super().clean()
        data["memory_user_id"] = self._pick("memory_user", memory_user_resolve)
        data["thread_id"] = self._pick("thread", thread_resolve)
        if not self.errors and not (data["memory_user_id"] or data["thread_id"]):
            self.add_error("memory_user", PERSON_OR_THREAD)
        return data


def _hints(form) -> dict:
    hints = {}
    for name in ("memory_user", "thread"):
        suggestion = form.picked.get(name) if form.is_bound else None
        hints[name] = f"{suggestion.label} · {suggestion.detail}" if suggestion else "A name or an id."
    return hints


@workspace_view()
def context_preview(request):
    principal = request.operator.principal
    workspace_id = request.operator.workspace.pk
    bound = "agent" in request.GET
    form = ContextPreviewForm(request.GET if bound else None, principal=principal)
    preview = None
    if bound and form.is_valid():
        data = form.cleaned_data
        try:
            preview = context_preview_page(
                principal=principal,
                agent=data["agent"].slug,
                memory_user=data["memory_user_id"],
                thread=data["thread_id"],
                node=data["node"].strip(),
                message=data["message"],
                token_budget=data["token_budget"],
            )
        except ApplicationError as exc:
            for name, errors in exc.fields.items():
                for error in errors:
                    form.add_error(name if name in form.fields else None, error)
            if not exc.fields:
                form.add_error(None, exc.message)
    url = reverse("memories:context-preview", kwargs={"workspace_id": workspace_id})
    # Shown above the results too: an htmx request swaps only those, not the form.
    form_errors = [
        ("" if name == "__all__" else form.fields[name].label or name, error)
        for name, errors in (form.errors.items() if form.is_bound else ())
        for error in errors
    ]
    context = {
        "tab": "context",
        "urls": tab_urls(workspace_id),
        "form": form,
        "form_errors": form_errors,
        "preview": preview,
        "preview_json": json.dumps(preview["data"], indent=2, ensure_ascii=False) if preview else "",
        "preview_url": url,
        "hints": _hints(form),
        "user_pick_url": picker_url(USER_PICKER, workspace_id),
        "thread_pick_url": picker_url(THREAD_PICKER, workspace_id),
        "user_picker": USER_PICKER,
        "thread_picker": THREAD_PICKER,
    }
    return render_page(
        request,
        "memories/context_preview.html",
        context,
        partials={"preview-results": "context-preview-results", "main": "context-preview"},
    )

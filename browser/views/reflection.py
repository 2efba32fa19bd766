"""The Reflection page: reflection runs with their progress (polled while one is active),
each person's cached profile, and the workspace's LLM budget and usage."""

from django import forms
from django.views.decorators.http import require_POST

from browser.access import EDIT, READ, workspace_view
from browser.lib.rendering import refused, render_page, toast
from browser.selectors.reflection import reflection_page_data
from core.models import Agent
from reflection.models import ReflectionRun
from reflection.services import reflection_start

PARTIALS = {"main": "reflection-panel", "reflection-runs": "reflection-runs"}


class ReflectionStartForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=Agent.objects.none(), to_field_name="slug", empty_label=None)

    def __init__(self, *args, workspace, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].queryset = Agent.objects.filter(workspace=workspace).order_by("slug")


def _page(request, *, form=None):
    operator = request.operator
    context = {
        "tab": "reflection",
        **reflection_page_data(principal=operator.principal),
        "form": form or ReflectionStartForm(workspace=operator.workspace),
    }
    return render_page(request, "memories/reflection.html", context, partials=PARTIALS)


@workspace_view(READ)
def reflection_page(request):
    return _page(request)


@require_POST
@workspace_view(EDIT)
def reflection_start_view(request):
    operator = request.operator
    form = ReflectionStartForm(request.POST, workspace=operator.workspace)
    if not form.is_valid():
        return refused(request, _page(request, form=form), status=400)
    run, created = reflection_start(
        agent=form.cleaned_data["agent"],
        trigger=ReflectionRun.Trigger.OPERATOR,
        actor=operator.principal.actor,
    )
    message = "Reflection queued." if created else f"A run for {run.agent.slug} is already {run.state}."
    return toast(request, _page(request), message, level="success" if created else "info")

"""Suggestions for the filters that name a memory user or a thread (htmx, as the operator types)."""

from django.shortcuts import render

from browser.access import workspace_view
from browser.lib.pickers import THREAD_PICKER, USER_PICKER
from core.lib.replica import read_replica


def _pick(request, picker):
    query = request.GET.get("q", "")
    suggestions = picker.suggest(request.operator.principal, query)
    context = {"picker": picker, "suggestions": suggestions, "query": query.strip()}
    return render(request, "memories/_picker_options.html", context)


@read_replica
@workspace_view()
def user_pick(request):
    return _pick(request, USER_PICKER)


@read_replica
@workspace_view()
def thread_pick(request):
    return _pick(request, THREAD_PICKER)

"""The entry point: which workspace to open after login."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render

from browser.access import SESSION_WORKSPACE, workspace_view
from browser.selectors import operator_workspaces
from browser.tabs import first_tab_url
from core.lib.replica import read_replica


@login_required
def memories_home(request):
    """Open the workspace used last (or the first one); with none, say who can help."""
    workspaces = operator_workspaces(user=request.user)
    if not workspaces:
        return render(request, "memories/no_workspace.html", status=200)
    last = request.session.get(SESSION_WORKSPACE)
    workspace = next((ws for ws, _ in workspaces if str(ws.pk) == last), workspaces[0][0])
    return redirect(first_tab_url(workspace.pk))


@read_replica
@workspace_view()
def workspace_home(request):
    return redirect(first_tab_url(request.operator.workspace.pk))

"""The one access check of the browser: which workspace, with which role.

Every page lives under /memories/<workspace id>/. An operator who is not a member of that
workspace gets a 404 (never a 403, so workspace ids leak nothing); a member whose role is too
low for a write gets a 403 and no controls for it on the page.
"""

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.utils.cache import patch_vary_headers
from django_htmx.http import HttpResponseClientRedirect

from browser.selectors import operator_context

READ = "read"
EDIT = "edit"
ADMIN = "admin"

SESSION_WORKSPACE = "memories_workspace"


def workspace_view(level: str = READ):
    """Resolve `workspace_id` into `request.operator` (an OperatorContext) or refuse.

    Anonymous htmx requests get a client redirect to the login page instead of a login form
    swapped into a fragment. Responses vary on the htmx headers, so a browser never serves a
    cached fragment for a full page load (the back button after an htmx navigation).
    """

    def decorator(view):
        @wraps(view)
        def wrapped(request, workspace_id, *args, **kwargs):
            if not request.user.is_authenticated:
                if request.htmx:
                    return HttpResponseClientRedirect(f"/accounts/login/?next={request.path}")
                return redirect_to_login(request.get_full_path())
            operator = operator_context(user=request.user, workspace_id=workspace_id)
            if level == EDIT and not operator.principal.can_write:
                raise PermissionDenied("Editing needs the editor or admin role.")
            if level == ADMIN and not operator.principal.can_admin:
                raise PermissionDenied("This page is for workspace admins.")
            request.operator = operator
            # Written only on change: an unchanged session costs no UPDATE per page.
            if request.session.get(SESSION_WORKSPACE) != str(workspace_id):
                request.session[SESSION_WORKSPACE] = str(workspace_id)
            response = view(request, *args, **kwargs)
            patch_vary_headers(response, ("HX-Request", "HX-Target"))
            return response

        return wrapped

    return decorator

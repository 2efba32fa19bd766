from rest_framework.permissions import SAFE_METHODS, BasePermission

from core.errors import READ_ONLY_KEY


class HasApiKey(BasePermission):
    """Any valid key may read; only writable keys may use unsafe methods."""

    message = READ_ONLY_KEY

    def has_permission(self, request, view):
        principal = request.user
        if principal is None or not getattr(principal, "is_authenticated", False):
            return False
        if request.method in SAFE_METHODS or getattr(view, "read_only_safe", False):
            return True
        return principal.can_write

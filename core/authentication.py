from rest_framework import authentication, exceptions

from core.access import principal_for_api_key
from core.selectors import api_key_authenticate

INVALID_KEY = "Invalid, revoked or expired API key."


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <key>`; request.user becomes a Principal, request.auth the key."""

    keyword = "bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        parts = header.split()
        # A header of white space only (latin-1 decodes a non-breaking space to one) names no scheme.
        if not parts or parts[0].lower() != self.keyword:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header.")
        api_key = api_key_authenticate(secret=parts[1])
        if api_key is None:
            raise exceptions.AuthenticationFailed(INVALID_KEY)
        return principal_for_api_key(api_key), api_key

    def authenticate_header(self, request):
        return 'Bearer realm="api"'

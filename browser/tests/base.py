from django.urls import reverse

from core.testing import MemoryTestCase


class BrowserTestCase(MemoryTestCase):
    """MemoryTestCase with URL helpers for pages of `self.workspace`."""

    def url(self, name, **kwargs):
        return reverse(name, kwargs={"workspace_id": self.workspace.pk, **kwargs})

    def open_as(self, user, url):
        """Log in and open `url` once, so the session's first write is not counted later."""
        self.login(user)
        response = self.client.get(url)
        assert response.status_code == 200, response.status_code
        return response

    def htmx(self, method, url, data=None, *, target="main"):
        return getattr(self.client, method)(url, data or {}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET=target)

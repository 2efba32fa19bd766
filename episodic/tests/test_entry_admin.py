from django.contrib.auth import get_user_model
from django.urls import reverse

from core.models import AuditEvent
from core.testing import MemoryTestCase
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory, memory_user_factory


class EntryAdminTests(MemoryTestCase):
    def setUp(self):
        self.superuser = get_user_model().objects.create_superuser("root", "root@example.com", "pw-12345-xyz")
        self.client.force_login(self.superuser)
        self.person = memory_user_factory(self.workspace)
        self.entries = [
            entry_factory(agent=self.agent, memory_user=self.person, content=f"Entry {i}") for i in range(3)
        ]

    def test_changelist_query_count_is_bounded(self):
        """Related objects come from one join, whatever the number of rows."""
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        url = reverse("admin:episodic_episodicentry_changelist")
        with CaptureQueriesContext(connection) as three_rows:
            assert self.client.get(url).status_code == 200
        for i in range(5):
            entry_factory(agent=self.agent, memory_user=self.person, content=f"More {i}")
        with self.assertNumQueries(len(three_rows)):
            assert self.client.get(url).status_code == 200

    def test_change_page_shows_history_and_never_the_vector(self):
        response = self.client.get(reverse("admin:episodic_episodicentry_change", args=[self.entries[0].pk]))
        assert response.status_code == 200
        assert b"audit history" in response.content.lower()
        assert b"search_vector" not in response.content

    def test_delete_action_goes_through_the_service(self):
        """Batch deletion from the admin is audited like the API's."""
        url = reverse("admin:episodic_episodicentry_changelist")
        response = self.client.post(
            url, {"action": "delete_entries", "_selected_action": [str(e.pk) for e in self.entries[:2]]}
        )
        assert response.status_code == 302
        assert EpisodicEntry.objects.count() == 1
        assert AuditEvent.objects.filter(entity_type="episodic_entry", action="delete").count() == 2

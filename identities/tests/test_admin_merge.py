"""The admin's "merge into the user seen first" action with users already merged."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from core.models import AuditEvent
from core.testing import MemoryTestCase
from identities.models import MemoryUser
from identities.services import memory_user_merge
from identities.tests.factories import MemoryUserFactory

CHANGELIST = "/admin/identities/memoryuser/"


class AdminMergeOfMergedUsersTests(MemoryTestCase):
    def setUp(self):
        root = get_user_model().objects.create_superuser("root", "r@example.com", "pw-pw-pw-pw")
        self.client.force_login(root)
        now = timezone.now()
        self.oldest = MemoryUserFactory(workspace=self.workspace, first_seen_at=now - timedelta(days=3))
        self.middle = MemoryUserFactory(workspace=self.workspace, first_seen_at=now - timedelta(days=2))
        self.newest = MemoryUserFactory(workspace=self.workspace, first_seen_at=now - timedelta(days=1))

    def merge_selected(self, *people):
        return self.client.post(
            CHANGELIST,
            {"action": "merge_into_first", "_selected_action": [str(p.pk) for p in people]},
            follow=True,
        )

    def test_a_merged_user_seen_first_stands_for_the_user_it_was_merged_into(self):
        """Before: the merged user became the target and the action raised (a 500 page)."""
        memory_user_merge(source=self.oldest, target=self.newest, actor="system")

        response = self.merge_selected(self.oldest, self.middle)

        assert response.status_code == 200
        self.middle.refresh_from_db()
        assert self.middle.merged_into_id == self.newest.pk
        assert MemoryUser.objects.active().filter(workspace=self.workspace).count() == 1

    def test_a_merged_source_is_followed_and_no_merge_is_left_half_done(self):
        """Before: `middle` was merged, then the merged `newest` was refused as a source: a 500
        page, with the first merge kept."""
        survivor = MemoryUserFactory(workspace=self.workspace)
        memory_user_merge(source=self.newest, target=survivor, actor="system")

        response = self.merge_selected(self.oldest, self.middle, self.newest)

        assert response.status_code == 200
        for person in (self.middle, self.newest, survivor):
            person.refresh_from_db()
            assert person.merged_into_id == self.oldest.pk, person

    def test_selecting_a_user_and_the_one_it_was_merged_into_is_already_done(self):
        memory_user_merge(source=self.oldest, target=self.newest, actor="system")

        response = self.merge_selected(self.oldest, self.newest)

        assert response.status_code == 200
        assert AuditEvent.objects.filter(action="merge").count() == 1
        self.newest.refresh_from_db()
        assert self.newest.merged_into_id is None

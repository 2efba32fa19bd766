"""The admin's "merge into the user seen first" action with three or more people selected.

The action once ran every merge of the selection in one transaction (its own, inside the
changelist's): the people each merge locked stayed locked until the last merge ended, so two
actions over overlapping people could wait on each other, and one refused merge rolled back the
merges before it under a message saying nothing was merged.
"""

from datetime import timedelta
from unittest import mock

from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.db import DatabaseError, transaction
from django.test import TransactionTestCase
from django.utils import timezone

from core.services import workspace_create
from core.testing import thread_started
from identities import admin as identities_admin
from identities.models import MemoryUser
from identities.services import MERGE_SOURCE_MERGED_MEANWHILE, memory_user_merge
from identities.tests.factories import MemoryUserFactory

CHANGELIST = "/admin/identities/memoryuser/"


def locked_elsewhere(*people) -> bool:
    """Whether another connection finds a row of `people` locked (FOR UPDATE NOWAIT)."""
    outcome = []

    def lock():
        try:
            with transaction.atomic():
                list(MemoryUser.objects.select_for_update(nowait=True).filter(pk__in=[p.pk for p in people]))
            outcome.append(False)
        except DatabaseError:
            outcome.append(True)

    errors: list[BaseException] = []
    thread_started(lock, errors).join(30)
    assert errors == []
    return outcome[0]


class AdminMergeOfManyTests(TransactionTestCase):
    def setUp(self):
        root = get_user_model().objects.create_superuser("root", "r@example.com", "pw-pw-pw-pw")
        self.client.force_login(root)
        self.workspace = workspace_create(name="Acme")
        now = timezone.now()
        self.oldest, self.middle, self.newest = (
            MemoryUserFactory(workspace=self.workspace, first_seen_at=now - timedelta(days=days))
            for days in (3, 2, 1)
        )

    def merge_selected(self, *people, before_each=None):
        """Run the action; `before_each(source)` runs before each merge the action calls."""
        merge = identities_admin.memory_user_merge

        def spied(*, source, target, actor):
            if before_each:
                before_each(source)
            return merge(source=source, target=target, actor=actor)

        with mock.patch.object(identities_admin, "memory_user_merge", spied):
            response = self.client.post(
                CHANGELIST,
                {"action": "merge_into_first", "_selected_action": [str(p.pk) for p in people]},
                follow=True,
            )
        assert response.status_code == 200
        return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]

    def test_each_merge_commits_before_the_next_one_locks(self):
        """Before: while the second merge ran, the people of the first were still locked by the
        action's one transaction."""
        seen = []

        def check(source):
            if source.pk == self.newest.pk:
                seen.append(locked_elsewhere(self.oldest, self.middle))

        self.merge_selected(self.oldest, self.middle, self.newest, before_each=check)

        assert seen == [False]
        for person in (self.middle, self.newest):
            person.refresh_from_db()
            assert person.merged_into_id == self.oldest.pk

    def test_a_refused_merge_keeps_the_merges_before_it_and_the_message_names_both(self):
        """Before: the refusal rolled the first merge back too, and the message said "Nothing was
        merged"."""
        elsewhere = MemoryUserFactory(workspace=self.workspace, display_name="Elsewhere")

        def merged_meanwhile(source):
            # Another operator merges the last one elsewhere while the action runs.
            if source.pk == self.newest.pk:
                memory_user_merge(source=self.newest, target=elsewhere, actor="operator:other")

        messages = self.merge_selected(self.oldest, self.middle, self.newest, before_each=merged_meanwhile)

        self.middle.refresh_from_db()
        self.newest.refresh_from_db()
        assert self.middle.merged_into_id == self.oldest.pk
        assert self.newest.merged_into_id == elsewhere.pk
        assert ("success", f"Merged into {self.oldest}: {self.middle}.") in messages
        assert (
            "error",
            f"Not merged into {self.oldest}: {self.newest}: {MERGE_SOURCE_MERGED_MEANWHILE}",
        ) in messages

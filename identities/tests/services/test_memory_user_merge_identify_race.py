"""A merge while an agent identifies the source person."""

import threading
from unittest import mock

from django.test import TransactionTestCase

from core.services import workspace_create
from core.testing import thread_started, until_a_backend_waits
from identities import selectors
from identities.models import ChannelIdentity, MemoryUser
from identities.services import memory_user_identify, memory_user_merge

WAIT_SECONDS = 30


class MergeWhileIdentifyingTests(TransactionTestCase):
    def test_identify_and_merge_of_the_same_person_both_succeed(self):
        """identify locks the channel identity with its person (select_related under FOR
        UPDATE locks both rows), so a merge that locks the people first waits for it instead
        of crossing it (the merge then moves the identity identify just used)."""
        workspace = workspace_create(name="Acme")
        source = MemoryUser.objects.create(workspace=workspace, canonical_id="email:ann@example.com")
        target = MemoryUser.objects.create(workspace=workspace, canonical_id="telegram:42")
        ChannelIdentity.objects.create(
            workspace=workspace, memory_user=source, channel="email", external_id="ann@example.com"
        )
        identity_locked, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []
        resolve = selectors.memory_user_resolve_merged

        def resolve_after_the_merge_started(*, memory_user):
            # Called by identify with the identity row locked: hold it there until the merge waits.
            identity_locked.set()
            release.wait(WAIT_SECONDS)
            return resolve(memory_user=memory_user)

        with mock.patch.object(selectors, "memory_user_resolve_merged", resolve_after_the_merge_started):
            identifying = thread_started(
                lambda: memory_user_identify(
                    workspace=workspace, channel="email", external_id="ann@example.com"
                ),
                errors,
            )
            assert identity_locked.wait(WAIT_SECONDS)
            merging = thread_started(
                lambda: memory_user_merge(source=source, target=target, actor="operator:owner"), errors
            )
            until_a_backend_waits(WAIT_SECONDS)
            release.set()
            identifying.join(WAIT_SECONDS)
            merging.join(WAIT_SECONDS)

        assert errors == []
        source.refresh_from_db()
        assert source.merged_into_id == target.pk
        assert ChannelIdentity.objects.get(external_id="ann@example.com").memory_user_id == target.pk
        after = memory_user_identify(workspace=workspace, channel="email", external_id="ann@example.com")
        assert after.memory_user.pk == target.pk

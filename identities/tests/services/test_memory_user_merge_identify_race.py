"""A merge while an agent identifies the source person."""

import threading
from unittest import mock

from django.test import TransactionTestCase

from core.services import workspace_create
from core.testing import thread_started, until_a_backend_waits
from identities import services
from identities.models import ChannelIdentity, MemoryUser
from identities.services import memory_user_identify, memory_user_merge

WAIT_SECONDS = 30


class MergeWhileIdentifyingTests(TransactionTestCase):
    def test_identify_and_merge_of_the_same_person_both_succeed(self):
        """identify locks the person (memory_users_lock) before the channel identity, as the
        merge does, so a merge that comes second waits for it instead of crossing it (the merge
        then moves the identity identify just used). The other order is
        identities/tests/test_lock_order.py."""
        workspace = workspace_create(name="Acme")
        source = MemoryUser.objects.create(workspace=workspace, canonical_id="email:ann@example.com")
        target = MemoryUser.objects.create(workspace=workspace, canonical_id="telegram:42")
        ChannelIdentity.objects.create(
            workspace=workspace, memory_user=source, channel="email", external_id="ann@example.com"
        )
        identity_locked, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []
        lock = services.memory_users_lock

        def lock_then_wait_for_the_merge(**kwargs):
            # identify holds its person from here: hold it until the merge waits.
            locked = lock(**kwargs)
            identity_locked.set()
            release.wait(WAIT_SECONDS)
            return locked

        with mock.patch.object(services, "memory_users_lock", lock_then_wait_for_the_merge):
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

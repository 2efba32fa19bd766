"""Erasing a person while another is merged into them."""

import threading
from unittest import mock

from django.test import TransactionTestCase

from core.errors import NotFoundError
from core.models import Agent
from core.services import agent_get_or_create, workspace_create
from core.testing import thread_started, until_a_backend_waits
from identities import services
from identities.models import ChannelIdentity, MemoryUser
from identities.services import MEMORY_USERS_NOT_FOUND, memory_user_erase, memory_user_merge
from threads.models import Thread

WAIT_SECONDS = 30


class EraseDuringMergeTests(TransactionTestCase):
    def setUp(self):
        self.workspace = workspace_create(name="Acme")
        agent: Agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        self.source = MemoryUser.objects.create(workspace=self.workspace, canonical_id="email:ann")
        self.target = MemoryUser.objects.create(workspace=self.workspace, canonical_id="telegram:42")
        ChannelIdentity.objects.create(
            workspace=self.workspace, memory_user=self.source, channel="email", external_id="ann"
        )
        for person in (self.source, self.target):
            Thread.objects.create(workspace=self.workspace, agent=agent, memory_user=person)

    def test_erasing_the_target_of_a_merge_in_progress_erases_the_merged_person_too(self):
        """Before: the erasure read who was merged into the target before the merge committed,
        and deleted the target under the moved threads: an IntegrityError (a 500) at commit."""
        moved, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []
        holdings_merge = services.holdings_merge

        def merge_then_wait(**kwargs):
            counts = holdings_merge(**kwargs)
            moved.set()
            release.wait(WAIT_SECONDS)
            return counts

        with mock.patch.object(services, "holdings_merge", merge_then_wait):
            merging = thread_started(
                lambda: memory_user_merge(source=self.source, target=self.target, actor="operator:owner"),
                errors,
            )
            assert moved.wait(WAIT_SECONDS)
            erasing = thread_started(
                lambda: memory_user_erase(memory_user=self.target, actor="operator:owner"), errors
            )
            until_a_backend_waits(WAIT_SECONDS)
            release.set()
            merging.join(WAIT_SECONDS)
            erasing.join(WAIT_SECONDS)

        assert errors == []
        assert not MemoryUser.objects.exists()
        assert not Thread.objects.exists()
        assert not ChannelIdentity.objects.exists()

    def test_merging_into_a_person_erased_meanwhile_is_a_404(self):
        """Before: the merge's locked rows lacked the erased person: a KeyError (a 500)."""
        memory_user_erase(memory_user=self.target, actor="operator:owner")

        with self.assertRaisesMessage(NotFoundError, MEMORY_USERS_NOT_FOUND):
            memory_user_merge(source=self.source, target=self.target, actor="operator:owner")

        self.source.refresh_from_db()
        assert self.source.merged_into_id is None

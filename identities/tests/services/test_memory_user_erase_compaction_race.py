"""Erasing a person while a compaction of one of their threads marks what its summary holds."""

import threading

from django.db import connection, transaction
from django.test import TransactionTestCase

from core.services import agent_get_or_create, workspace_create
from core.testing import thread_started, until_a_backend_waits
from identities.models import MemoryUser
from identities.services import memory_user_erase
from threads.models import Message, Thread
from threads.tests.factories import append, make_thread


class EraseDuringCompactionTests(TransactionTestCase):
    def test_an_erasure_waits_for_a_compaction_that_holds_the_thread(self):
        """A compaction locks the thread, then locks the messages it marks (FOR KEY SHARE).
        Before: the erasure deleted the messages first and the thread after, so each waited for
        the other and PostgreSQL aborted one of them as a deadlock."""
        workspace = workspace_create(name="Acme")
        agent = agent_get_or_create(workspace=workspace, slug="assistant")
        ada = MemoryUser.objects.create(workspace=workspace, canonical_id="t:ada")
        thread = make_thread(workspace=workspace, agent=agent, memory_user=ada)
        append(thread, *[("user" if i % 2 == 0 else "assistant", f"Turn {i}.") for i in range(6)])
        locked, release = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def compaction():
            # What thread_compact does around _summary_held_mark: the thread row, then the
            # messages it marks.
            with transaction.atomic():
                Thread.objects.select_for_update().filter(pk=thread.pk).values_list("pk").first()
                locked.set()
                release.wait(30)
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT id FROM threads_message WHERE thread_id = %s FOR KEY SHARE", [thread.pk]
                    )

        compacting = thread_started(compaction, errors)
        assert locked.wait(30)
        erasing = thread_started(lambda: memory_user_erase(memory_user=ada, actor="test"), errors)
        until_a_backend_waits()
        release.set()
        compacting.join(30)
        erasing.join(30)

        assert errors == []
        assert not MemoryUser.objects.filter(pk=ada.pk).exists()
        assert not Message.objects.filter(thread_id=thread.pk).exists()

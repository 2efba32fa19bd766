from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from checkpoints.models import Checkpoint
from checkpoints.tests.factories import make_checkpoint
from core.models import AuditEvent
from core.testing import MemoryTestCase
from threads.models import Message, Thread
from threads.tests.factories import append, make_thread


class ThreadsAdminTests(MemoryTestCase):
    def setUp(self):
        self.superuser = get_user_model().objects.create_superuser("root", "r@example.com", "pw-pw-pw-pw")
        self.client.force_login(self.superuser)
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, title="Admin thread")
        self.messages = append(self.thread, ("user", "hi"), ("assistant", "hello"))
        make_checkpoint(self.thread, "c1")

    def test_changelists_and_change_pages_render(self):
        for path in [
            "/admin/threads/thread/",
            "/admin/threads/message/",
            "/admin/threads/threadplan/",
            "/admin/threads/runsnapshot/",
            "/admin/threads/iterationlog/",
            "/admin/checkpoints/checkpoint/",
            f"/admin/threads/thread/{self.thread.pk}/change/",
            f"/admin/threads/message/{self.messages[0].pk}/change/",
            f"/admin/checkpoints/checkpoint/{Checkpoint.objects.get().pk}/change/",
        ]:
            assert self.client.get(path).status_code == 200, path

    def test_search_accepts_text_and_ids(self):
        for path in ["/admin/threads/thread/", "/admin/threads/message/", "/admin/checkpoints/checkpoint/"]:
            assert self.client.get(path, {"q": "hello"}).status_code == 200, path
            assert self.client.get(path, {"q": str(self.thread.pk)}).status_code == 200, path

    def test_changelist_queries_do_not_grow_with_rows(self):
        self.client.get("/admin/threads/thread/")
        with CaptureQueriesContext(connection) as few:
            self.client.get("/admin/threads/thread/")
        for _ in range(10):
            append(make_thread(workspace=self.workspace, agent=self.agent), ("user", "x"))
        with CaptureQueriesContext(connection) as many:
            self.client.get("/admin/threads/thread/")
        assert len(many) == len(few)

    def test_delete_action_goes_through_the_service(self):
        response = self.client.post(
            "/admin/threads/thread/",
            {"action": "delete_with_everything", "_selected_action": [self.thread.pk]},
        )
        assert response.status_code == 302
        assert not Thread.objects.filter(pk=self.thread.pk).exists()
        assert not Message.objects.exists()
        assert not Checkpoint.objects.exists()
        assert AuditEvent.objects.filter(entity_type="thread", actor="admin:root").exists()

    def test_checkpoint_delete_action_goes_through_the_service(self):
        checkpoint = Checkpoint.objects.get()
        self.client.post(
            "/admin/checkpoints/checkpoint/",
            {"action": "delete_with_writes", "_selected_action": [checkpoint.pk]},
        )
        assert not Checkpoint.objects.exists()
        assert AuditEvent.objects.filter(entity_type="checkpoints", actor="admin:root").exists()

    def test_messages_are_read_only_history(self):
        response = self.client.post(
            f"/admin/threads/message/{self.messages[0].pk}/change/", {"content": "rewritten"}
        )
        assert response.status_code == 403
        assert Message.objects.get(pk=self.messages[0].pk).content == "hi"

from core.models import AuditEvent
from core.testing import MemoryTestCase
from identities.models import MemoryUser
from threads.models import Message, Thread
from threads.tests.factories import append, make_thread


class ThreadCreateApiTests(MemoryTestCase):
    def test_create_registers_the_thread_for_the_named_agent(self):
        response = self.api().post(
            "/api/v1/threads/", {"agent": "assistant", "title": "Trip", "channel": "web"}, format="json"
        )
        assert response.status_code == 201
        body = response.json()
        assert body["agent"] == "assistant"
        assert body["title"] == "Trip"
        assert Thread.objects.get(pk=body["id"]).workspace == self.workspace

    def test_resolve_returns_the_same_thread_for_the_same_conversation(self):
        user = MemoryUser.objects.create(workspace=self.workspace, canonical_id="telegram:1")
        payload = {
            "agent": "assistant",
            "memory_user": str(user.pk),
            "channel_chat_id": "chat-9",
            "resolve": True,
        }
        first = self.api().post("/api/v1/threads/", payload, format="json")
        second = self.api().post("/api/v1/threads/", {**payload, "channel": "telegram"}, format="json")
        assert first.status_code == 201
        assert second.status_code == 200
        assert first.json()["id"] == second.json()["id"]
        other_chat = self.api().post(
            "/api/v1/threads/", {**payload, "channel_chat_id": "chat-10"}, format="json"
        )
        assert other_chat.json()["id"] != first.json()["id"]

    def test_resolve_without_chat_id_continues_across_channels(self):
        """The same person and agent continue one thread across runs and channels."""
        user = MemoryUser.objects.create(workspace=self.workspace, canonical_id="email:a@b.c")
        base = {"agent": "assistant", "memory_user": str(user.pk), "resolve": True}
        first = self.api().post("/api/v1/threads/", {**base, "channel": "email"}, format="json").json()
        second = self.api().post("/api/v1/threads/", {**base, "channel": "slack"}, format="json").json()
        assert first["id"] == second["id"]

    def test_resolve_follows_a_merged_memory_user(self):
        target = MemoryUser.objects.create(workspace=self.workspace, canonical_id="web:target")
        merged = MemoryUser.objects.create(
            workspace=self.workspace, canonical_id="web:old", merged_into=target
        )
        body = {"agent": "assistant", "memory_user": str(merged.pk), "resolve": True}
        thread = self.api().post("/api/v1/threads/", body, format="json").json()
        assert thread["memory_user"] == str(target.pk)

    def test_resolve_by_client_key(self):
        body = {"agent": "assistant", "client_key": "langgraph-thread-1", "resolve": True}
        first = self.api().post("/api/v1/threads/", body, format="json").json()
        second = self.api().post("/api/v1/threads/", body, format="json").json()
        assert first["id"] == second["id"]

    def test_agent_bound_key_creates_for_its_agent_and_cannot_name_another(self):
        client = self.api(self.agent_key)
        assert client.post("/api/v1/threads/", {}, format="json").json()["agent"] == "assistant"
        assert client.post("/api/v1/threads/", {"agent": "researcher"}, format="json").status_code == 404

    def test_memory_user_of_another_workspace_is_404(self):
        stranger = MemoryUser.objects.create(workspace=self.other_workspace, canonical_id="web:x")
        response = self.api().post(
            "/api/v1/threads/", {"agent": "assistant", "memory_user": str(stranger.pk)}, format="json"
        )
        assert response.status_code == 404
        assert "memory_user" in response.json()["error"]["fields"]

    def test_unknown_fields_are_rejected(self):
        response = self.api().post("/api/v1/threads/", {"agent": "assistant", "titel": "x"}, format="json")
        assert response.status_code == 400
        assert response.json()["error"]["fields"] == {"titel": ["Unknown field."]}

    def test_read_only_key_cannot_create(self):
        assert (
            self.api(self.read_only_key).post("/api/v1/threads/", {"agent": "assistant"}).status_code == 403
        )


class ThreadListApiTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.user = MemoryUser.objects.create(workspace=cls.workspace, canonical_id="web:1")
        cls.t1 = make_thread(
            workspace=cls.workspace, agent=cls.agent, title="Paris trip", memory_user=cls.user
        )
        cls.t2 = make_thread(
            workspace=cls.workspace, agent=cls.other_agent, title="Research", channel="slack"
        )
        cls.t3 = make_thread(workspace=cls.other_workspace, agent=cls.outsider_agent, title="Paris secret")

    def test_lists_the_workspace_threads_in_bounded_queries(self):
        for i in range(5):
            make_thread(workspace=self.workspace, agent=self.agent, title=f"extra {i}", memory_user=self.user)
        client = self.api()
        client.get("/api/v1/threads/")  # warm the key's last_used_at touch
        with self.assertNumQueries(2):  # key, page (agent and user joined; short: no count)
            response = client.get("/api/v1/threads/")
        ids = {t["id"] for t in response.json()["results"]}
        assert str(self.t1.pk) in ids and str(self.t2.pk) in ids
        assert str(self.t3.pk) not in ids

    def test_filters(self):
        client = self.api()
        by_agent = client.get("/api/v1/threads/", {"agent": "researcher"}).json()["results"]
        assert [t["id"] for t in by_agent] == [str(self.t2.pk)]
        by_title = client.get("/api/v1/threads/", {"q": "paris"}).json()["results"]
        assert [t["id"] for t in by_title] == [str(self.t1.pk)]
        by_user = client.get("/api/v1/threads/", {"memory_user": str(self.user.pk)}).json()["results"]
        assert [t["id"] for t in by_user] == [str(self.t1.pk)]
        by_channel = client.get("/api/v1/threads/", {"channel": "slack"}).json()["results"]
        assert [t["id"] for t in by_channel] == [str(self.t2.pk)]

    def test_invalid_filter_is_400(self):
        response = self.api().get("/api/v1/threads/", {"active_after": "yesterday"})
        assert response.status_code == 400
        assert "active_after" in response.json()["error"]["fields"]

    def test_agent_bound_key_sees_only_its_agents_threads(self):
        results = self.api(self.agent_key).get("/api/v1/threads/").json()["results"]
        assert [t["id"] for t in results] == [str(self.t1.pk)]

    def test_memory_user_filter_follows_a_merge(self):
        merged = MemoryUser.objects.create(workspace=self.workspace, canonical_id="web:2")
        old = make_thread(workspace=self.workspace, agent=self.agent, memory_user=merged)
        MemoryUser.objects.filter(pk=merged.pk).update(merged_into=self.user)
        results = self.api().get("/api/v1/threads/", {"memory_user": str(merged.pk)}).json()["results"]
        assert {t["id"] for t in results} == {str(self.t1.pk), str(old.pk)}


class ThreadDetailApiTests(MemoryTestCase):
    def setUp(self):
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, title="Before")

    def test_get_patch_delete(self):
        client = self.api()
        url = f"/api/v1/threads/{self.thread.pk}/"
        assert client.get(url).json()["title"] == "Before"
        patched = client.patch(url, {"title": "After", "metadata": {"k": 1}}, format="json")
        assert patched.status_code == 200
        assert patched.json()["title"] == "After"
        append(self.thread, ("user", "hello"))
        assert client.delete(url).status_code == 204
        assert not Thread.objects.filter(pk=self.thread.pk).exists()
        assert not Message.objects.filter(thread_id=self.thread.pk).exists()
        assert AuditEvent.objects.filter(entity_type="thread", action="delete").exists()

    def test_outsider_cannot_read_edit_or_delete(self):
        client = self.api(self.outsider_key)
        url = f"/api/v1/threads/{self.thread.pk}/"
        assert client.get(url).status_code == 404
        assert client.patch(url, {"title": "x"}, format="json").status_code == 404
        assert client.delete(url).status_code == 404
        assert Thread.objects.filter(pk=self.thread.pk).exists()

    def test_agent_bound_key_of_another_agent_gets_404(self):
        other = make_thread(workspace=self.workspace, agent=self.other_agent)
        assert self.api(self.agent_key).get(f"/api/v1/threads/{other.pk}/").status_code == 404

    def test_read_only_key_cannot_delete(self):
        assert self.api(self.read_only_key).delete(f"/api/v1/threads/{self.thread.pk}/").status_code == 403


class ThreadBatchDeleteApiTests(MemoryTestCase):
    def test_deletes_all_or_nothing(self):
        mine = [make_thread(workspace=self.workspace, agent=self.agent) for _ in range(3)]
        append(mine[0], ("user", "a"), ("assistant", "b"))
        theirs = make_thread(workspace=self.other_workspace, agent=self.outsider_agent)
        client = self.api()

        refused = client.post(
            "/api/v1/threads/batch-delete/", {"ids": [str(mine[0].pk), str(theirs.pk)]}, format="json"
        )
        assert refused.status_code == 404
        assert Thread.objects.filter(pk=mine[0].pk).exists()

        response = client.post(
            "/api/v1/threads/batch-delete/", {"ids": [str(t.pk) for t in mine]}, format="json"
        )
        assert response.status_code == 200
        assert response.json() == {"deleted": 3, "threads": 3, "messages": 2, "checkpoints": 0}
        assert Thread.objects.filter(workspace=self.workspace).count() == 0
        assert Thread.objects.filter(pk=theirs.pk).exists()

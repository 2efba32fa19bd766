import json

from django.test import override_settings

from core.testing import MemoryTestCase
from threads.models import Message, Thread
from threads.tests.factories import append, make_thread


class MessageAppendApiTests(MemoryTestCase):
    def setUp(self):
        self.thread = make_thread(workspace=self.workspace, agent=self.agent)
        self.url = f"/api/v1/threads/{self.thread.pk}/messages/"

    def test_appends_one_message_and_a_batch(self):
        client = self.api()
        one = client.post(self.url, {"role": "user", "content": "Hi, I am Alice."}, format="json")
        assert one.status_code == 201
        first = one.json()["messages"][0]
        assert first["parent_id"] is None
        assert first["token_count"] > 0

        batch = client.post(
            self.url,
            {
                "messages": [
                    {"role": "assistant", "content": "Hello Alice!"},
                    {"role": "user", "content": "Bye"},
                ]
            },
            format="json",
        )
        assert batch.status_code == 201
        stored = batch.json()["messages"]
        # The parent defaults to the newest message, and the batch chains.
        assert stored[0]["parent_id"] == first["id"]
        assert stored[1]["parent_id"] == stored[0]["id"]
        self.thread.refresh_from_db()
        assert self.thread.message_count == 3

    def test_retried_append_with_idempotency_keys_never_duplicates(self):
        client = self.api()
        body = {"messages": [{"role": "user", "content": "once", "idempotency_key": "k1"}]}
        first = client.post(self.url, body, format="json")
        again = client.post(self.url, body, format="json")
        assert first.status_code == 201
        assert again.status_code == 200
        assert again.json()["messages"][0]["id"] == first.json()["messages"][0]["id"]
        assert again.json()["messages"][0]["duplicate"] is True
        assert Message.objects.filter(thread=self.thread).count() == 1

    def test_regeneration_names_the_earlier_user_message(self):
        client = self.api()
        user, answer = append(self.thread, ("user", "Q"), ("assistant", "A1"))
        regen = client.post(
            self.url, {"role": "assistant", "content": "A2", "parent": str(user.pk)}, format="json"
        )
        assert regen.json()["messages"][0]["parent_id"] == str(user.pk)
        history = client.get(f"/api/v1/threads/{self.thread.pk}/history/").json()
        assert [m["content"] for m in history["messages"]] == ["Q", "A2"]

    def test_bad_input_is_400_with_field_errors_and_stores_nothing(self):
        other = make_thread(workspace=self.workspace, agent=self.agent)
        (foreign,) = append(other, ("user", "elsewhere"))
        cases = [
            ({"role": "user", "content": "x", "parent": "00000000-0000-0000-0000-000000000001"}, "parent"),
            ({"role": "user", "content": "x", "parent": str(foreign.pk)}, "parent"),
            ({"role": "tool", "content": "x", "tool_call_id": "nope"}, "tool_call_id"),
            ({"role": "tool", "content": "x"}, "tool_call_id"),
            ({"role": "wizard", "content": "x"}, "role"),
            ({"role": "user", "content": "bad \ud800 surrogate"}, "content"),
            ({"role": "user", "content": "nul \x00 byte"}, "content"),
            ({"role": "user", "content": "x", "colour": "red"}, "colour"),
            # Base64 images are accepted (docs/threads.md, "Files"), with their media type.
            (
                {"role": "user", "content": "x", "files": [{"type": "image", "data": "AAAA"}]},
                "files[0].mime_type",
            ),
            ({"role": "user", "content": "x", "created_at": "not a date"}, "created_at"),
        ]
        client = self.api()
        for bad, field in cases:
            # json.dumps escapes a lone surrogate as \\ud800, which is valid JSON but not UTF-8 text.
            body = json.dumps({"messages": [{"role": "user", "content": "fine"}, bad]})
            response = client.generic("POST", self.url, body, content_type="application/json")
            assert response.status_code == 400, (bad, response.content)
            assert f"messages[1].{field}" in response.json()["error"]["fields"], (bad, response.json())
        assert Message.objects.filter(thread=self.thread).count() == 0

    @override_settings(THREADS_MAX_CONTENT_CHARS=100)
    def test_oversize_content_is_400(self):
        response = self.api().post(self.url, {"role": "user", "content": "x" * 101}, format="json")
        assert response.status_code == 400
        assert "messages[0].content" in response.json()["error"]["fields"]

    def test_non_utf8_body_is_400(self):
        response = self.api().generic(
            "POST", self.url, b'{"role": "user", "content": "\xff\xfe"}', content_type="application/json"
        )
        assert response.status_code == 400
        assert Message.objects.filter(thread=self.thread).count() == 0

    def test_tool_result_pairs_with_its_call_across_requests(self):
        client = self.api()
        call = {"role": "assistant", "tool_calls": [{"id": "c1", "name": "search", "arguments": "{}"}]}
        assert client.post(self.url, call, format="json").status_code == 201
        result = client.post(
            self.url, {"role": "tool", "tool_call_id": "c1", "content": "found"}, format="json"
        )
        assert result.status_code == 201

    def test_imports_keep_created_at_and_client_ids(self):
        body = {
            "messages": [
                {
                    "id": "7b0d6f43-9f4e-4c36-9d7b-3f0f7a1b2c3d",
                    "role": "user",
                    "content": "old",
                    "created_at": "2023-05-01T10:00:00Z",
                },
                {"role": "assistant", "content": "reply", "parent": "7b0d6f43-9f4e-4c36-9d7b-3f0f7a1b2c3d"},
            ]
        }
        stored = self.api().post(self.url, body, format="json").json()["messages"]
        assert stored[0]["id"] == "7b0d6f43-9f4e-4c36-9d7b-3f0f7a1b2c3d"
        assert stored[0]["created_at"].startswith("2023-05-01T10:00:00")
        assert stored[1]["parent_id"] == stored[0]["id"]

    def test_outsider_cannot_read_or_append(self):
        append(self.thread, ("user", "private"))
        client = self.api(self.outsider_key)
        assert client.get(self.url).status_code == 404
        assert client.post(self.url, {"role": "user", "content": "x"}, format="json").status_code == 404
        assert client.get(f"/api/v1/threads/{self.thread.pk}/history/").status_code == 404
        assert Message.objects.filter(thread=self.thread).count() == 1

    def test_read_only_key_can_read_but_not_append(self):
        client = self.api(self.read_only_key)
        assert client.get(self.url).status_code == 200
        assert client.post(self.url, {"role": "user", "content": "x"}, format="json").status_code == 403


class MessageListApiTests(MemoryTestCase):
    def test_lists_in_order_with_node_filter_in_bounded_queries(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(thread, ("user", "a"), ("assistant", "b"))
        append(thread, ("user", "n"), node_id="n1")
        client = self.api()
        url = f"/api/v1/threads/{thread.pk}/messages/"
        client.get(url)
        with self.assertNumQueries(3):  # key, thread, page (short: no count)
            response = client.get(url)
        assert [m["content"] for m in response.json()["results"]] == ["a", "b", "n"]
        assert [m["content"] for m in client.get(url, {"node": "n1"}).json()["results"]] == ["n"]

    def test_clear_node_deletes_only_that_nodes_messages(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(thread, ("user", "main"))
        append(thread, ("user", "n"), ("assistant", "m"), node_id="n1")
        client = self.api()
        url = f"/api/v1/threads/{thread.pk}/messages/"
        assert client.delete(url).status_code == 400
        response = client.delete(url + "?node=n1")
        assert response.json() == {"deleted": 2}
        assert list(Message.objects.filter(thread=thread).values_list("content", flat=True)) == ["main"]
        assert Thread.objects.get(pk=thread.pk).message_count == 1
        assert self.api(self.outsider_key).delete(url + "?node=n1").status_code == 404

    def test_archived_tool_result_is_returned_whole(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        *_, result = append(
            thread,
            {"role": "assistant", "tool_calls": [{"id": "c", "name": "dump", "arguments": "{}"}]},
            {"role": "tool", "tool_call_id": "c", "content": "y" * 30_000},
        )
        response = self.api().get(f"/api/v1/threads/{thread.pk}/tool-results/{result.pk}/")
        assert response.status_code == 200
        assert response.json()["content"] == "y" * 30_000
        assert response.json()["archived"] is True
        detail = self.api().get(f"/api/v1/threads/{thread.pk}/messages/{result.pk}/")
        assert len(detail.json()["content"]) == 30_000
        assert (
            self.api(self.outsider_key)
            .get(f"/api/v1/threads/{thread.pk}/tool-results/{result.pk}/")
            .status_code
            == 404
        )


class HistoryApiTests(MemoryTestCase):
    def test_history_reports_ids_tokens_and_cut(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        stored = append(thread, *[("user", f"m{i}") for i in range(25)])
        body = self.api().get(f"/api/v1/threads/{thread.pk}/history/", {"max_messages": 5}).json()
        assert body["message_ids"] == [str(m.pk) for m in stored[-5:]]
        assert body["cut_count"] == 20
        assert body["tokens"] == sum(m.token_count for m in stored[-5:])
        assert body["summary_applied"] is False
        assert body["recalled"] == []

    def test_defaults_are_20_messages_and_2000_tokens(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        append(thread, *[("user", f"m{i}") for i in range(25)])
        body = self.api().get(f"/api/v1/threads/{thread.pk}/history/").json()
        assert body["max_messages"] == 20 and body["max_tokens"] == 2000
        assert len(body["messages"]) == 20

    def test_bad_parameters_are_400(self):
        thread = make_thread(workspace=self.workspace, agent=self.agent)
        client = self.api()
        url = f"/api/v1/threads/{thread.pk}/history/"
        assert client.get(url, {"max_tokens": "0"}).status_code == 400
        assert client.get(url, {"files": "maybe"}).status_code == 400
        response = client.get(url, {"leaf": "00000000-0000-0000-0000-000000000001"})
        assert response.status_code == 400
        assert "leaf" in response.json()["error"]["fields"]

"""POST /api/v1/context/ with files in the history (issue 13 item 7): `content_format` renders
a message's files as content parts, and their tokens count against the budget either way."""

from django.urls import reverse

from core.lib.tokens import IMAGE_TOKENS
from core.testing import MemoryTestCase
from runtime.tests.factories import person
from threads.services import thread_append_messages, thread_create

URL = reverse("api:runtime:context")
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
CAT = "https://example.com/cat.png"


class ContextFilesTests(MemoryTestCase):
    def setUp(self):
        self.person = person(self.workspace, display_name="Ada")
        self.thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        self.stored = thread_append_messages(
            thread=self.thread,
            messages=[
                {
                    "role": "user",
                    "content": "What breed is this?",
                    "files": [
                        {"type": "image", "url": CAT, "detail": "low"},
                        {"type": "image", "data": PNG, "mime_type": "image/png", "detail": "high"},
                        {"type": "document", "name": "vet.txt", "text": "Vaccinated <2024>."},
                    ],
                },
                {"role": "assistant", "content": "A tabby."},
            ],
        )

    def context(self, status=200, key=None, **body):
        body = {"agent": "assistant", "thread": str(self.thread.pk), "message": "And its age?", **body}
        response = self.api(key).post(URL, body, format="json")
        assert response.status_code == status, response.json()
        return response.json()

    def test_parts_render_the_files_in_order_and_count_them(self):
        history = self.context(content_format="parts", token_budget=4000)["history"]
        user, assistant = history["messages"]
        assert user["content"] == [
            {"type": "text", "text": "What breed is this?"},
            {"type": "image_url", "image_url": {"url": CAT, "detail": "low"}},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "high"}},
            {"type": "text", "text": '<document name="vet.txt">\nVaccinated &lt;2024&gt;.\n</document>'},
        ]
        assert assistant["content"] == "A tabby."
        assert history["tokens"] == sum(m.token_count for m in self.stored)
        assert history["tokens"] > IMAGE_TOKENS["low"] + IMAGE_TOKENS["high"]

    def test_plain_is_the_default_and_counts_the_same(self):
        plain = self.context(token_budget=4000)["history"]
        assert plain["messages"][0]["content"] == "What breed is this?"
        assert [f["type"] for f in plain["messages"][0]["files"]] == ["image", "image", "document"]
        assert plain["tokens"] == self.context(content_format="parts", token_budget=4000)["history"]["tokens"]

    def test_anthropic_image_blocks(self):
        content = self.context(content_format="anthropic", token_budget=4000)["history"]["messages"][0][
            "content"
        ]
        assert content[1] == {"type": "image", "source": {"type": "url", "url": CAT}}
        assert content[2]["source"] == {"type": "base64", "media_type": "image/png", "data": PNG}

    def test_a_small_budget_cuts_the_message_whose_files_do_not_fit(self):
        result = self.context(content_format="parts", token_budget=500)
        assert result["history"]["message_ids"] == [str(self.stored[1].pk)]
        assert result["history"]["cut_count"] == 1
        assert result["tokens"] <= 500

    def test_an_unknown_content_format_is_400_naming_it(self):
        body = self.context(status=400, content_format="html")
        assert "content_format" in body["error"]["fields"]

    def test_another_workspace_cannot_read_the_files(self):
        self.context(status=404, key=self.outsider_key, agent="assistant", content_format="parts")

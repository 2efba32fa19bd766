"""Tool calls on the thread page: name, arguments and the paired result, archived ones openable."""

import json
from unittest import mock

from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from browser.tests.base import BrowserTestCase
from threads.tests.factories import append, make_thread

LONG_RESULT = "row " * 100 + "<b>the end</b>"


class ThreadToolCallTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.thread = make_thread(workspace=cls.workspace, agent=cls.agent, title="Weather")
        calls = [
            {
                "id": "call-1",
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "arguments": json.dumps({"city": "Lisbon", "tag": "<x>"}),
                },
            },
            {
                "id": "call-2",
                "type": "function",
                "function": {"name": "search_rows", "arguments": "not json"},
            },
            {"id": "call-3", "type": "function", "function": {"name": "never_answered", "arguments": "{}"}},
        ]
        with override_settings(THREADS_TOOL_RESULT_ARCHIVE_CHARS=100, THREADS_TOOL_RESULT_PREVIEW_CHARS=30):
            cls.question, cls.asking, cls.weather, cls.rows = append(
                cls.thread,
                ("user", "Weather in Lisbon?"),
                {"role": "assistant", "content": "", "tool_calls": calls},
                {"role": "tool", "tool_call_id": "call-1", "content": "Sunny, 24 °C"},
                {"role": "tool", "tool_call_id": "call-2", "content": LONG_RESULT},
            )
        cls.foreign = make_thread(workspace=cls.other_workspace, agent=cls.outsider_agent, title="Globex")
        (cls.foreign_call,) = append(
            cls.foreign,
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "name": "f", "arguments": "{}"}]},
        )
        (cls.foreign_result,) = append(
            cls.foreign, {"role": "tool", "tool_call_id": "c", "content": "secret"}
        )

    def test_the_call_shows_name_arguments_and_its_result(self):
        assert self.rows.archived and not self.weather.archived
        self.login(self.viewer)
        content = self.client.get(self.url("memories:thread", pk=self.thread.pk)).content.decode()
        assert content.count('<details class="tool-call"') == 3
        assert '<code class="tool-name">get_weather</code>' in content
        # Arguments pretty-printed and escaped; text that is not JSON shown as sent.
        assert (
            "{\n  &quot;city&quot;: &quot;Lisbon&quot;,\n  &quot;tag&quot;: &quot;&lt;x&gt;&quot;\n}"
            in content
        )
        assert "not json" in content
        # The result sits inside its call, and the tool message names the call it answers.
        call = content[content.index("get_weather") : content.index("search_rows")]
        assert "Sunny, 24 °C" in call and "answered" in call
        # Results paired with their call are folded into it, not repeated as rows of their own.
        assert 'class="tool-result' not in content
        assert f'<li id="m-{self.weather.pk}"' not in content and f'id="m-{self.weather.pk}"' in content
        assert "no result on this page" in content[content.index("never_answered") :]

    def test_an_archived_result_shows_its_preview_and_opens_whole(self):
        self.login(self.viewer)
        content = self.client.get(self.url("memories:thread", pk=self.thread.pk)).content.decode()
        url = self.url("memories:thread-tool-result", pk=self.thread.pk, message_id=self.rows.pk)
        assert f'href="{url}"' in content and f'hx-get="{url}"' in content
        assert "row row row" in content and "the end" not in content  # only the preview was loaded
        assert f"{len(LONG_RESULT)} characters" in content
        # In place (htmx) the whole text replaces the preview; as a page it stands alone.
        fragment = self.htmx("get", url, target=f"result-{self.rows.pk}").content.decode()
        assert "<html" not in fragment and "&lt;b&gt;the end&lt;/b&gt;" in fragment
        assert f'id="result-{self.rows.pk}"' in fragment
        page = self.client.get(url).content.decode()
        assert "<html" in page and "&lt;b&gt;the end&lt;/b&gt;" in page and "call-2" in page

    def test_only_tool_messages_of_a_readable_thread_open(self):
        self.login(self.viewer)
        tool_result = "memories:thread-tool-result"
        assert (
            self.client.get(self.url(tool_result, pk=self.thread.pk, message_id=self.question.pk)).status_code
            == 404
        )
        assert (
            self.client.get(
                self.url(tool_result, pk=self.thread.pk, message_id=self.foreign_result.pk)
            ).status_code
            == 404
        )
        assert (
            self.client.get(
                self.url(tool_result, pk=self.foreign.pk, message_id=self.foreign_result.pk)
            ).status_code
            == 404
        )
        self.login(self.outsider)
        assert (
            self.client.get(self.url(tool_result, pk=self.thread.pk, message_id=self.rows.pk)).status_code
            == 404
        )

    def test_the_thread_page_stays_bounded(self):
        url = self.url("memories:thread", pk=self.thread.pk)
        self.open_as(self.viewer, url)
        with CaptureQueriesContext(connection) as queries:
            self.client.get(url)
        # Session, operator, memberships (and the shell's reads); thread, leaf, history window,
        # branch, forks, nodes.
        assert len(queries) <= 11
        assert len([q for q in queries if "threads_" in q["sql"]]) == 6
        # An archived result's whole text never leaves the database for the page: only its preview.
        (branch,) = [q["sql"] for q in queries.captured_queries if "walk(id, parent_id, node_id" in q["sql"]]
        assert "CASE WHEN m.archived THEN left(m.content" in branch

    def test_a_failed_call_is_marked(self):
        (asking,) = append(
            self.thread,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "e1", "name": "book", "arguments": "{}"}],
            },
        )
        append(
            self.thread,
            {"role": "tool", "tool_call_id": "e1", "content": "No seats", "metadata": {"is_error": True}},
        )
        (again,) = append(
            self.thread,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "e2", "name": "pay", "arguments": "{}"}],
            },
        )
        append(
            self.thread,
            {"role": "tool", "tool_call_id": "e2", "content": "Declined", "metadata": {"status": "error"}},
        )
        self.login(self.viewer)
        content = self.client.get(self.url("memories:thread", pk=self.thread.pk)).content.decode()
        assert content.count('<details class="tool-call failed"') == 2
        book = content[content.index('<code class="tool-name">book</code>') :]
        assert book.index('<span class="badge bad">error</span>') < book.index("No seats")
        # The earlier calls answered without an error stay unmarked.
        assert content.count('<details class="tool-call"') == 3

    def test_results_whose_call_is_on_an_older_page_stand_alone(self):
        self.login(self.viewer)
        url = self.url("memories:thread", pk=self.thread.pk)
        with mock.patch("browser.selectors.threads.THREAD_TREE_LIMIT", 2):
            content = self.client.get(url).content.decode()
            assert content.count('<details class="tool-result') == 2
            assert content.count("its call is not on this page") == 2
            assert "call-1" in content and "call-2" in content
            # The older page holds the calls, now without their results.
            older = self.client.get(url, {"leaf": self.rows.pk, "before": self.weather.pk}).content.decode()
        assert older.count('<details class="tool-call"') == 3
        assert older.count("no result on this page") == 3

"""The thread page's message tree: one branch at a time with its forks side by side, branch
switching by GET links, the compaction summary's span, the node filter and hostile query strings
(issue 15, item 6)."""

import re
import uuid
from unittest import mock

from django.db import connection
from django.test.utils import CaptureQueriesContext

from browser.tests.base import BrowserTestCase
from threads.models import Message, NodeSummary, Thread
from threads.tests.factories import append, make_thread

# Session, operator, memberships and the shell's own reads, plus the page's (at most 8).
PAGE_QUERY_CEILING = 13


def _ids(content: str) -> list[str]:
    """The message ids the page shows as rows, in order."""
    return re.findall(r'<li id="m-([0-9a-f-]{36})"', content)


class ThreadTreeTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.thread = make_thread(workspace=cls.workspace, agent=cls.agent, title="Trip planning")
        cls.q1, cls.a1 = append(cls.thread, ("user", "Plan a trip to Lisbon"), ("assistant", "First draft"))
        # Two regenerations of the answer; the second is continued, the third is the newest.
        (cls.a2,) = append(
            cls.thread, {"role": "assistant", "content": "Second draft", "parent": str(cls.q1.pk)}
        )
        cls.q2, cls.a4 = append(cls.thread, ("user", "Make it cheaper"), ("assistant", "Cheaper plan"))
        (cls.a3,) = append(
            cls.thread, {"role": "assistant", "content": "Third draft", "parent": str(cls.q1.pk)}
        )
        # A sub-agent's messages: a chain of their own under node "researcher".
        cls.n1, cls.n2 = append(
            cls.thread, ("user", "Find trains"), ("assistant", "Trains found"), node_id="researcher"
        )
        cls.foreign = make_thread(workspace=cls.other_workspace, agent=cls.outsider_agent, title="Globex")
        (cls.foreign_message,) = append(cls.foreign, ("user", "secret"))

    def page(self, query="", **kwargs):
        self.login(self.viewer)
        return self.client.get(self.url("memories:thread", pk=self.thread.pk) + query, **kwargs)

    def test_the_newest_branch_shows_with_its_fork_side_by_side(self):
        content = self.page().content.decode()
        # The newest message's branch, oldest first: the question and the third answer.
        assert _ids(content) == [str(self.q1.pk), str(self.a3.pk)]
        assert "Make it cheaper" not in content and "Trains found" not in content
        fork = content[content.index('class="fork"') : content.index(f'id="m-{self.a3.pk}"')]
        assert "3 branches here, branch 3 is shown below" in fork
        # Each regeneration is a card; the shown one is current, the others are links.
        assert fork.count('class="fork-card"') == 2 and fork.count('class="fork-card current"') == 1
        assert "First draft" in fork and "Second draft" in fork and "Third draft" in fork
        assert "Branch 3 of 3 · shown" in fork
        base = self.url("memories:thread", pk=self.thread.pk)
        link = f"{base}?leaf={self.a2.pk}"
        assert f'href="{link}"' in fork and f'hx-get="{link}"' in fork
        assert 'hx-target="#thread-tree"' in fork
        assert "‹ Branch 2" in fork and "Branch 4" not in fork

    def test_a_branch_link_shows_that_branch_down_to_its_newest_message(self):
        content = self.page(f"?leaf={self.a2.pk}").content.decode()
        assert _ids(content) == [str(self.q1.pk), str(self.a2.pk), str(self.q2.pk), str(self.a4.pk)]
        fork = content[content.index('class="fork"') : content.index(f'id="m-{self.a2.pk}"')]
        assert "branch 2 is shown below" in fork and "Branch 2 of 3 · shown" in fork
        assert "‹ Branch 1" in fork and "Branch 3 ›" in fork
        assert "Newest branch" in content
        # Naming the first branch's own message shows it as the leaf (it has no children).
        assert _ids(self.page(f"?leaf={self.a1.pk}").content.decode()) == [str(self.q1.pk), str(self.a1.pk)]

    def test_htmx_re_renders_only_the_tree(self):
        self.login(self.viewer)
        url = self.url("memories:thread", pk=self.thread.pk) + f"?leaf={self.a2.pk}"
        fragment = self.htmx("get", url, target="thread-tree").content.decode()
        assert fragment.lstrip().startswith("<div") and "<html" not in fragment
        assert 'id="thread-tree"' in fragment and "Cheaper plan" in fragment
        assert "Checkpoints of this thread" not in fragment

    def test_the_history_window_follows_the_shown_branch(self):
        content = self.page(f"?leaf={self.a2.pk}").content.decode()
        assert content.count('class="msg in-window"') == 4
        assert "History window: 4 messages" in content

    def test_the_node_filter_shows_only_that_nodes_messages(self):
        content = self.page().content.decode()
        assert '<option value="researcher">node researcher</option>' in content
        assert 'name="node"' in content and "Show</button>" in content
        content = self.page("?node=researcher").content.decode()
        assert _ids(content) == [str(self.n1.pk), str(self.n2.pk)]
        assert '<option value="researcher" selected>node researcher</option>' in content
        assert "Plan a trip" not in content
        # A node no message has is an empty page, not an error.
        content = self.page("?node=nobody").content.decode()
        assert _ids(content) == [] and "No messages of node nobody" in content

    def test_the_summary_span_is_marked_where_it_ends(self):
        Thread.objects.filter(pk=self.thread.pk).update(
            summary="They planned Lisbon, then asked for a cheaper plan.",
            summary_upto_id=self.q2.pk,
            summary_upto_depth=self.q2.depth,
            summary_tokens=12,
            summary_covers_tokens=40,
            summary_method="llm",
        )
        content = self.page(f"?leaf={self.a2.pk}").content.decode()
        span = content[content.index('<details class="summary-span"') : content.index('id="summary-mark"')]
        assert _ids(span) == [str(self.q1.pk), str(self.a2.pk), str(self.q2.pk)]
        assert "3 messages on this page are covered by the compaction summary" in span
        mark = content[content.index('id="summary-mark"') :]
        assert "Covers this branch from its first message to #" in mark and "(3 messages, 40 tokens)" in mark
        assert "They planned Lisbon" in mark
        assert _ids(mark) == [str(self.a4.pk)]
        # On another branch the summary does not apply and nothing is marked.
        content = self.page().content.decode()
        assert "summary-span" not in content and 'id="summary-mark"' not in content
        assert "summary covers another branch" in content

    def test_a_summary_before_the_page_is_found_through_jump_pointers(self):
        Thread.objects.filter(pk=self.thread.pk).update(
            summary="Earlier", summary_upto_id=self.q1.pk, summary_upto_depth=0
        )
        with mock.patch("browser.selectors.threads.THREAD_TREE_LIMIT", 2):
            content = self.page(f"?leaf={self.a2.pk}").content.decode()
        assert _ids(content) == [str(self.q2.pk), str(self.a4.pk)]
        # The summary's span ends before the page: the mark leads it, nothing on it is covered.
        assert content.index('id="summary-mark"') < content.index(f'id="m-{self.q2.pk}"')
        assert "summary-span" not in content

    def test_a_node_summary_marks_the_nodes_span(self):
        NodeSummary.objects.create(
            workspace=self.workspace,
            thread=self.thread,
            node_id="researcher",
            summary="Looked for trains.",
            summary_upto_id=self.n1.pk,
            summary_upto_depth=self.n1.depth,
        )
        content = self.page("?node=researcher").content.decode()
        span = content[content.index('<details class="summary-span"') : content.index('id="summary-mark"')]
        assert _ids(span) == [str(self.n1.pk)] and "Looked for trains." in content

    def test_older_messages_are_a_page_away(self):
        with mock.patch("browser.selectors.threads.THREAD_TREE_LIMIT", 2):
            content = self.page(f"?leaf={self.a2.pk}").content.decode()
            assert _ids(content) == [str(self.q2.pk), str(self.a4.pk)]
            assert "2 messages on this branch come before these 2." in content
            older = re.search(r'href="([^"]*before=[^"]*)" hx-get', content).group(1).replace("&amp;", "&")
            assert f"leaf={self.a4.pk}" in older and f"before={self.q2.pk}" in older
            self.login(self.viewer)
            content = self.client.get(older).content.decode()
        assert _ids(content) == [str(self.q1.pk), str(self.a2.pk)]
        assert "Older messages" not in content and "Newest branch" in content

    def test_hostile_query_strings_are_ignored_or_404_never_500(self):
        for query in ("?leaf=not-a-uuid", "?before=1%20OR%201=1", "?node=%00", "?node=" + "x" * 500):
            response = self.page(query)
            assert response.status_code == 200, query
            assert "Ignored " in response.content.decode(), query
            assert _ids(response.content.decode()) == [str(self.q1.pk), str(self.a3.pk)], query
        # A well-formed id of no message of this thread answers like a missing row.
        for query in (
            f"?leaf={uuid.uuid4()}",
            f"?leaf={self.foreign_message.pk}",
            f"?before={self.foreign_message.pk}",
            f"?before={uuid.uuid4()}",
        ):
            assert self.page(query).status_code == 404, query
        # A message of this thread off the shown branch is no page boundary: the newest page shows.
        assert _ids(self.page(f"?before={self.a4.pk}").content.decode()) == [str(self.q1.pk), str(self.a3.pk)]
        # A node with odd characters is escaped, never run.
        content = self.page("?node=%3Cb%3Ex").content.decode()
        assert "No messages of node &lt;b&gt;x" in content and "<b>x" not in content

    def test_another_workspace_cannot_open_the_tree(self):
        self.login(self.outsider)
        url = self.url("memories:thread", pk=self.thread.pk).replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        assert self.client.get(url).status_code == 404
        assert self.client.get(url + f"?leaf={self.a2.pk}").status_code == 404
        self.login(self.viewer)
        assert self.client.get(self.url("memories:thread", pk=self.foreign.pk)).status_code == 404

    def thread_reads(self, path) -> list[str]:
        """The page's reads of the threads tier (the shell's own reads are other pages' concern),
        under a ceiling for the whole request."""
        with CaptureQueriesContext(connection) as queries:
            response = self.client.get(path)
        assert response.status_code == 200
        assert len(queries) <= PAGE_QUERY_CEILING, [q["sql"][:80] for q in queries]
        return [q["sql"] for q in queries if "threads_" in q["sql"]]

    def test_queries_stay_bounded_however_large_the_tree(self):
        url = self.url("memories:thread", pk=self.thread.pk)
        Thread.objects.filter(pk=self.thread.pk).update(
            summary="Earlier", summary_upto_id=self.q1.pk, summary_upto_depth=0
        )
        self.open_as(self.viewer, url)
        # Thread, leaf, history window, branch, forks, nodes.
        assert len(self.thread_reads(url + f"?leaf={self.a2.pk}")) == 6
        parent = self.a4
        for n in range(40):
            first, *_ = append(
                self.thread,
                {"role": "user", "content": f"More {n}", "parent": str(parent.pk)},
                ("assistant", f"Answer {n}"),
                node_id="",
            )
            append(self.thread, {"role": "assistant", "content": f"Again {n}", "parent": str(first.pk)})
            parent = Message.objects.filter(thread=self.thread).order_by("-seq").first()
        for n in range(5):
            append(self.thread, ("user", f"note {n}"), node_id=f"node-{n}")
        # A page long enough to hold the summary's end (~130 messages), as above.
        with mock.patch("browser.selectors.threads.THREAD_TREE_LIMIT", 200):
            assert len(self.thread_reads(url + f"?leaf={self.a2.pk}")) == 6
            page = self.client.get(url + f"?leaf={self.a2.pk}").content.decode()
            assert page.count('class="fork"') == 41
        # A summary off the page adds one jump-pointer walk; a node's page reads the node's
        # summary for the window and for the tree.
        with mock.patch("browser.selectors.threads.THREAD_TREE_LIMIT", 5):
            assert len(self.thread_reads(url + f"?leaf={self.a2.pk}")) == 7
        assert len(self.thread_reads(url + "?node=researcher")) == 8
        # A branch that none of the newest messages is on descends step by step: one more read.
        assert len(self.thread_reads(url + f"?leaf={self.a1.pk}")) == 7

"""Evidence pages and purge by source in /memories (issue 14, "Evidence drill-down")."""

from browser.tests.base import BrowserTestCase
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory
from facts.models import Fact
from facts.services import fact_remember
from identities.tests.factories import MemoryUserFactory
from threads.tests.factories import append, make_thread


class ProvenancePageTests(BrowserTestCase):
    def setUp(self):
        self.ada = MemoryUserFactory(workspace=self.workspace, canonical_id="t:ada")
        self.thread = make_thread(
            workspace=self.workspace, agent=self.agent, memory_user=self.ada, title="Card"
        )
        self.asked, self.found = append(
            self.thread,
            ("user", "My card keeps getting declined."),
            ("assistant", "Found it: billing still has the old card on file."),
        )
        self.entry = entry_factory(
            agent=self.agent,
            memory_user=self.ada,
            content="Billing read the old card.",
            embed=False,
            source_thread=self.thread,
            source_message_ids=[str(self.found.pk)],
            metadata={"origin": "offline"},
        )
        self.fact = fact_remember(
            workspace=self.workspace,
            key="card_issue",
            value="old card on file",
            scope=Fact.Scope.AGENT,
            agent=self.agent,
            source_message=self.found,
        ).fact

    def test_the_evidence_page_links_the_source_message_in_its_thread(self):
        page = self.open_as(self.viewer, self.url("memories:evidence", tier="entry", pk=self.entry.pk))
        content = page.content.decode()
        assert "Why the agent believes this" in content and "Found it: billing" in content
        assert f"?focus={self.found.pk}#m-{self.found.pk}" in content
        # A viewer may not purge, so the page offers no purge link.
        assert "everything this message backs" not in content
        detail = self.client.get(self.url("memories:entry", pk=self.entry.pk)).content.decode()
        assert self.url("memories:evidence", tier="entry", pk=self.entry.pk) in detail
        fact_page = self.client.get(self.url("memories:evidence", tier="fact", pk=self.fact.pk))
        assert fact_page.status_code == 200 and b"card_issue" in fact_page.content

    def test_unknown_tiers_and_other_workspaces_are_404s(self):
        self.login(self.owner)
        assert (
            self.client.get(self.url("memories:evidence", tier="nothing", pk=self.entry.pk)).status_code
            == 404
        )
        self.login(self.outsider)
        assert (
            self.client.get(self.url("memories:evidence", tier="entry", pk=self.entry.pk)).status_code == 404
        )

    def test_purge_one_message_after_the_preview(self):
        self.login(self.teammate)
        url = self.url("memories:thread-derived", pk=self.thread.pk)
        preview = self.client.get(url, {"message": str(self.found.pk)})
        assert preview.status_code == 200 and b"Delete 2 derived memories" in preview.content
        response = self.htmx(
            "post",
            self.url("memories:thread-derived-delete", pk=self.thread.pk),
            {"message": str(self.found.pk)},
        )
        assert response.status_code == 200 and b"Nothing to delete." in response.content
        assert "Deleted 1 entries, 1 facts" in response.headers["HX-Trigger"]
        assert not EpisodicEntry.objects.exists() and not Fact.objects.filter(pk=self.fact.pk).exists()

    def test_bad_message_ids_and_roles(self):
        self.login(self.teammate)
        url = self.url("memories:thread-derived", pk=self.thread.pk)
        other = make_thread(workspace=self.workspace, agent=self.agent, memory_user=self.ada)
        (elsewhere,) = append(other, ("user", "Elsewhere."))
        for message in ("nope", str(elsewhere.pk)):
            assert self.client.get(url, {"message": message}).status_code == 404
            response = self.client.post(
                self.url("memories:thread-derived-delete", pk=self.thread.pk), {"message": message}
            )
            assert response.status_code == 404
        self.login(self.viewer)
        assert self.client.get(url).status_code == 403
        assert (
            self.client.post(self.url("memories:thread-derived-delete", pk=self.thread.pk)).status_code == 403
        )
        assert EpisodicEntry.objects.count() == 1


class ThreadFocusTests(BrowserTestCase):
    """The evidence links a source message to its thread opened at that message, highlighted."""

    def setUp(self):
        self.thread = make_thread(workspace=self.workspace, agent=self.agent, title="Long")
        self.messages = append(
            self.thread, *[("user" if i % 2 == 0 else "assistant", f"Turn number {i}.") for i in range(150)]
        )

    def test_the_page_ends_at_the_focused_message_highlighted(self):
        focused = self.messages[20]
        page = self.open_as(
            self.viewer, self.url("memories:thread", pk=self.thread.pk) + f"?focus={focused.pk}"
        )
        content = page.content.decode()
        assert f'<li id="m-{focused.pk}" class="focused" aria-current="true">' in content
        assert f'id="m-{self.messages[19].pk}"' in content
        # Later messages are a page away: the page ends at the focus.
        assert f'id="m-{self.messages[21].pk}"' not in content
        assert f'id="m-{self.messages[-1].pk}"' not in content

    def test_the_newest_message_and_bad_focus_values(self):
        newest = self.messages[-1]
        self.login(self.viewer)
        url = self.url("memories:thread", pk=self.thread.pk)
        content = self.client.get(url, {"focus": str(newest.pk)}).content.decode()
        assert f'<li id="m-{newest.pk}" class="focused"' in content
        assert self.client.get(url, {"focus": "nope"}).status_code == 200
        other = make_thread(workspace=self.workspace, agent=self.agent)
        (elsewhere,) = append(other, ("user", "Elsewhere."))
        assert self.client.get(url, {"focus": str(elsewhere.pk)}).status_code == 404

"""The entry and fact pages show consolidation (issue 13 item 11): what an item supersedes or
is superseded by, and each decision with its reason."""

from browser.tests.base import BrowserTestCase
from browser.tests.factories import memory_user_make
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services import entry_create
from episodic.tests.factories import entry_factory, use_test_embeddings
from facts.services import fact_remember


class ConsolidationPageTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.ada = memory_user_make(cls.workspace)

    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)

    def test_both_entries_link_to_each_other_with_the_reason(self):
        lisbon = entry_factory(agent=self.agent, memory_user=self.ada, content="Ada lives in Lisbon.")
        porto = entry_create(
            agent=self.agent, memory_user=self.ada, content="Ada now lives in Porto.", actor="t"
        )
        assert porto.entry.consolidation["decision"] == "supersede"
        self.login(self.viewer)
        old_page = self.client.get(self.url("memories:entry", pk=lisbon.pk)).content.decode()
        assert "Superseded by" in old_page and self.url("memories:entry", pk=porto.entry.pk) in old_page
        assert "lisbon -&gt; porto" in old_page and "supersede" in old_page
        new_page = self.client.get(self.url("memories:entry", pk=porto.entry.pk)).content.decode()
        assert "Supersedes" in new_page and self.url("memories:entry", pk=lisbon.pk) in new_page
        # The list shows current entries; the history is a filter away.
        listing = self.client.get(self.url("memories:entries")).content.decode()
        assert "Ada now lives in Porto." in listing and "Ada lives in Lisbon." not in listing
        listing = self.client.get(self.url("memories:entries") + "?status=superseded").content.decode()
        assert "Ada lives in Lisbon." in listing
        assert EpisodicEntry.objects.get(pk=lisbon.pk).status == "superseded"

    def test_a_fact_superseded_under_another_key_links_both_ways(self):
        old = fact_remember(
            workspace=self.workspace, key="city", value="Lisbon", scope="user", memory_user=self.ada
        )
        new = fact_remember(
            workspace=self.workspace, key="home_city", value="Porto", scope="user", memory_user=self.ada
        )
        assert new.consolidation["decision"] == "supersede"
        self.login(self.viewer)
        old_page = self.client.get(self.url("memories:fact", pk=old.fact.pk)).content.decode()
        assert "Superseded by" in old_page and self.url("memories:fact", pk=new.fact.pk) in old_page
        assert "A newer value under a similar key" in old_page
        new_page = self.client.get(self.url("memories:fact", pk=new.fact.pk)).content.decode()
        assert "Supersedes" in new_page and self.url("memories:fact", pk=old.fact.pk) in new_page

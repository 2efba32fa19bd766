"""Issue 14, the /memories Review tab: the queue with its counts (also on the tab), approve,
reject with a reason, merge, edit then approve, one row or a selection; roles and workspaces."""

from browser.tests.base import BrowserTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services import entry_create
from episodic.tests.factories import memory_user_factory, use_test_embeddings
from facts.models import Fact
from facts.services import fact_remember


class ReviewTabTests(BrowserTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)
        self.stored = entry_create(
            agent=self.agent, memory_user=self.person, content="Ada keeps bees on her roof.", actor="t"
        ).entry
        self.agent.memory_settings = {"review": "all"}
        self.agent.save(update_fields=["memory_settings"])
        self.held = entry_create(
            agent=self.agent,
            memory_user=self.person,
            content="Ada keeps three bee hives on her roof.",
            actor="t",
        ).entry
        self.second = entry_create(
            agent=self.agent, memory_user=self.person, content="Ada is learning Portuguese.", actor="t"
        ).entry
        self.fact = fact_remember(
            workspace=self.workspace,
            key="favourite_tea",
            value="oolong",
            scope="user",
            agent=self.agent,
            memory_user=self.person,
        ).fact
        self.list_url = self.url("memories:review")
        self.decide_url = self.url("memories:review-decide")

    def test_the_tab_lists_held_items_and_counts_them_in_its_label(self):
        response = self.open_as(self.owner, self.list_url)
        html = response.content.decode()
        assert "Review (3)" in html
        assert "Ada keeps three bee hives on her roof." in html and "favourite_tea: oolong" in html
        assert "Keyboard shortcuts" in html and "<kbd>j</kbd>" in html
        other_tab = self.client.get(self.url("memories:entries")).content.decode()
        assert "Review (3)" in other_tab

    def test_the_tab_reads_a_bounded_number_of_queries(self):
        self.open_as(self.owner, self.list_url)
        with self.assertNumQueries(11):
            self.client.get(self.list_url)

    def test_approve_one_row(self):
        self.login(self.teammate)
        response = self.htmx(
            "post",
            self.decide_url,
            {"items": f"entry:{self.second.pk}", "action": "approve"},
            target="review-results",
        )
        assert response.status_code == 200
        assert "Approved 1 item." in response.headers["HX-Trigger"]
        assert EpisodicEntry.objects.get(pk=self.second.pk).review == "approved"
        assert "Ada is learning Portuguese." not in response.content.decode()

    def test_reject_a_selection_with_a_reason(self):
        self.login(self.owner)
        response = self.htmx(
            "post",
            self.decide_url,
            {
                "ids": [f"entry:{self.second.pk}", f"fact:{self.fact.pk}"],
                "action": "reject",
                "reason": "Guesswork",
            },
            target="review-results",
        )
        assert response.status_code == 200
        assert EpisodicEntry.objects.get(pk=self.second.pk).review_note == "Guesswork"
        assert Fact.objects.get(pk=self.fact.pk).review == "rejected"

    def test_merge_takes_the_suggested_twin_or_reports_none(self):
        self.login(self.owner)
        item = next(
            i for i in self.client.get(self.list_url).context["items"] if str(i.id) == str(self.held.pk)
        )
        response = self.htmx(
            "post",
            self.decide_url,
            {"ids": [f"entry:{self.held.pk}", f"entry:{self.second.pk}"], "action": "merge"},
            target="review-results",
        )
        if item.similar:
            held = EpisodicEntry.objects.get(pk=self.held.pk)
            assert held.review == "merged" and str(held.superseded_by_id) == item.similar["id"]
        assert EpisodicEntry.objects.get(pk=self.second.pk).review == "held"
        assert "no similar stored item" in response.headers["HX-Trigger"]

    def test_edit_then_approve(self):
        self.login(self.owner)
        edit_url = self.url("memories:review-edit", tier="entry", pk=self.second.pk)
        response = self.htmx("get", edit_url, target=f"row-entry-{self.second.pk}")
        assert response.status_code == 200 and "Save and approve" in response.content.decode()
        response = self.htmx("post", edit_url, {"content": "Ada is learning European Portuguese."})
        assert response.status_code == 200
        entry = EpisodicEntry.objects.get(pk=self.second.pk)
        assert entry.content == "Ada is learning European Portuguese." and entry.review == "approved"
        fact_url = self.url("memories:review-edit", tier="fact", pk=self.fact.pk)
        self.htmx("post", fact_url, {"value": '{"kind": "sencha"}', "fact_type": "user_preference"})
        fact = Fact.objects.get(pk=self.fact.pk)
        assert fact.value == {"kind": "sencha"} and fact.valid_to is None

    def test_an_empty_edit_is_an_error_row(self):
        self.login(self.owner)
        edit_url = self.url("memories:review-edit", tier="entry", pk=self.second.pk)
        response = self.htmx("post", edit_url, {"content": "   "})
        assert response.status_code == 200
        assert response.headers["HX-Retarget"] == f"#row-entry-{self.second.pk}"
        assert EpisodicEntry.objects.get(pk=self.second.pk).review == "held"

    def test_a_viewer_reads_but_cannot_decide(self):
        self.open_as(self.viewer, self.list_url)
        response = self.client.post(
            self.decide_url, {"items": f"entry:{self.second.pk}", "action": "approve"}
        )
        assert response.status_code == 403
        assert EpisodicEntry.objects.get(pk=self.second.pk).review == "held"

    def test_an_outsider_sees_nothing_and_decides_nothing(self):
        self.login(self.outsider)
        assert self.client.get(self.list_url).status_code == 404
        own = self.outsider_url = self.url("memories:review").replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        response = self.client.get(own)
        assert "Ada" not in response.content.decode()
        decide = self.decide_url.replace(str(self.workspace.pk), str(self.other_workspace.pk))
        self.client.post(decide, {"items": f"entry:{self.second.pk}", "action": "approve"})
        assert EpisodicEntry.objects.get(pk=self.second.pk).review == "held"

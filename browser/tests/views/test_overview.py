import datetime as dt

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from activity.models import DailyCounter, DailyMetric
from activity.services import activity_aggregate
from browser.tests.base import BrowserTestCase
from core.counters import ENTRIES_REJECTED, RECALLS_CONTEXT, RECALLS_RECALL
from facts.services import fact_remember
from threads.tests.factories import append, make_thread


class OverviewPageTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.today = timezone.now().astimezone(dt.UTC).date()
        thread = make_thread(workspace=cls.workspace, agent=cls.agent)
        append(thread, *[("user", f"message {i}") for i in range(7)])
        fact_remember(
            workspace=cls.workspace, key="office", value="Lisbon", scope="global", actor="api_key:abc"
        )
        outsider_thread = make_thread(workspace=cls.other_workspace, agent=cls.outsider_agent)
        append(outsider_thread, *[("user", f"globex {i}") for i in range(3)])
        fact_remember(workspace=cls.other_workspace, key="globex_secret_key", value="x", scope="global")
        for workspace, agent, value in ((cls.workspace, cls.agent, 4), (cls.other_workspace, None, 99)):
            DailyCounter.objects.create(
                workspace=workspace, agent=agent, day=cls.today, metric=RECALLS_RECALL, value=value
            )
        DailyCounter.objects.create(
            workspace=cls.workspace, agent=cls.agent, day=cls.today, metric=RECALLS_CONTEXT, value=2
        )
        DailyCounter.objects.create(
            workspace=cls.workspace,
            agent=cls.agent,
            day=cls.today,
            metric=ENTRIES_REJECTED + "evidence_missing",
            value=3,
        )
        activity_aggregate()

    def test_the_workspace_opens_on_the_overview(self):
        """The overview is the first tab, so the workspace's address lands on it."""
        self.login(self.viewer)
        response = self.client.get(self.url("memories:workspace"))
        assert response.status_code == 302
        assert response["Location"] == self.url("memories:overview")
        response = self.client.get("/memories/", follow=True)
        assert response.redirect_chain[-1][0] == self.url("memories:overview")

    def test_shows_counts_charts_with_tables_and_latest_changes(self):
        """Counts per tier and agent, SVG charts each with a title and a data table, audit rows."""
        self.login(self.viewer)
        response = self.client.get(self.url("memories:overview"))
        assert response.status_code == 200
        html = response.content.decode()
        assert "<h1>Overview</h1>" in html
        assert 'aria-current="page">Overview</a>' in html
        # Per agent: the assistant holds the thread's 7 messages.
        assert '<th scope="row">assistant</th><td class="num">7</td>' in html
        assert html.count('role="img"') >= 4
        assert '<title id="chart-recalls-title">Recalls served</title>' in html
        # The recalls chart's table holds today's counts: 2 contexts, 4 recalls, 0 searches.
        assert (
            f'<th scope="row">{self.today.isoformat()}</th><td class="num">2</td><td class="num">4</td>'
            in html
        )
        assert "Rejected: evidence missing" in html
        # Latest changes link to the row's page.
        assert "api_key:abc" in html
        assert "/facts/" in html
        # Nothing of the other workspace.
        assert "globex" not in html and "99" not in html.split("Recalls served")[1].split("</figure>")[0]

    def test_costs_the_same_queries_whatever_the_rows(self):
        """The page reads pre-aggregated rows: its queries do not grow with the tiers."""
        url = self.url("memories:overview")
        self.open_as(self.viewer, url)
        with CaptureQueriesContext(connection) as first:
            self.client.get(url)
        # The overview's own: the aggregates (3), agents, audit trail, LLM usage and budget.
        own = [q["sql"] for q in first.captured_queries if "activity_" in q["sql"] or "core_llm" in q["sql"]]
        assert len(own) == 5, own
        thread = make_thread(workspace=self.workspace, agent=self.other_agent)
        append(thread, *[("user", f"more {i}") for i in range(20)])
        activity_aggregate()
        with self.assertNumQueries(len(first.captured_queries)):
            response = self.htmx("get", url + "?days=90")
        assert b"<html" not in response.content and b"<h1>Overview</h1>" in response.content
        assert b'aria-current="true">90 days' in response.content

    def test_an_unknown_range_falls_back_to_the_default(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:overview") + "?days=abc")
        assert response.status_code == 200
        assert b'aria-current="true">30 days' in response.content
        response = self.client.get(self.url("memories:overview") + "?days=100000")
        assert b'aria-current="true">30 days' in response.content

    def test_before_the_first_aggregation_the_page_says_so(self):
        DailyMetric.objects.all().delete()
        self.login(self.viewer)
        response = self.client.get(self.url("memories:overview"))
        assert response.status_code == 200
        assert b"Not counted yet" in response.content

    def test_outsider_gets_a_404(self):
        """An operator of another workspace cannot open this workspace's overview."""
        self.login(self.outsider)
        assert self.client.get(self.url("memories:overview")).status_code == 404
        assert self.htmx("get", self.url("memories:overview")).status_code == 404

    def test_anonymous_is_sent_to_log_in(self):
        response = self.client.get(self.url("memories:overview"))
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]

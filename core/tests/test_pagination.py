"""The API's page envelope: its total is exact, and a first page that holds the whole list
needs no COUNT."""

from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from core.models import Agent
from core.pagination import LimitOffsetPagination
from core.services import agent_get_or_create
from core.testing import MemoryTestCase


class PageTotalTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        for n in range(5):
            agent_get_or_create(workspace=cls.workspace, slug=f"paged-{n}")
        cls.agents = Agent.objects.filter(workspace=cls.workspace, slug__startswith="paged-").order_by("slug")

    def page(self, **query):
        paginator = LimitOffsetPagination()
        request = Request(APIRequestFactory().get("/api/v1/agents/", query))
        with CaptureQueriesContext(connection) as queries:
            rows = paginator.paginate_queryset(self.agents, request)
        counted = any("COUNT(" in query["sql"].upper() for query in queries)
        return [agent.slug for agent in rows], paginator.count, counted, paginator

    def test_a_first_page_that_ends_the_list_gives_the_total_without_counting(self):
        slugs, total, counted, _ = self.page()
        assert (len(slugs), total, counted) == (5, 5, False)

    def test_a_full_page_or_a_later_one_counts(self):
        slugs, total, counted, _ = self.page(limit=3, offset=3)
        assert (slugs, total, counted) == (["paged-3", "paged-4"], 5, True)
        slugs, total, counted, paginator = self.page(limit=2, offset=1)
        assert (slugs, total, counted) == (["paged-1", "paged-2"], 5, True)
        assert paginator.get_next_link().endswith("limit=2&offset=3")
        with CaptureQueriesContext(connection) as queries:
            slugs, total, counted, paginator = self.page(limit=2, offset=9)
        assert (slugs, total, counted) == ([], 5, True)
        assert len(queries) == 1  # the count: no page is read past the end
        assert paginator.get_previous_link().endswith("limit=2&offset=7")
        # A page exactly as long as the rest of the list cannot know it is the last one.
        slugs, total, counted, paginator = self.page(limit=5)
        assert (len(slugs), total, counted) == (5, 5, True)
        assert paginator.get_next_link() is None

    def test_an_offset_past_any_table_is_never_sent(self):
        # PostgreSQL refuses OFFSET 2**63 (out of bigint), which would abort the transaction.
        slugs, total, counted, _ = self.page(offset=2**63)
        assert (slugs, total, counted) == ([], 5, True)

    def test_an_empty_list_is_one_query(self):
        paginator = LimitOffsetPagination()
        request = Request(APIRequestFactory().get("/api/v1/agents/"))
        with CaptureQueriesContext(connection) as queries:
            assert paginator.paginate_queryset(self.agents.filter(slug="none"), request) == []
        assert paginator.count == 0
        assert len(queries) == 1


class PagingParameterTests(MemoryTestCase):
    """A `limit` or `offset` that is not a count is the client's mistake, said as one: a page
    of defaults would look like an answer to what was asked."""

    def test_a_limit_or_offset_that_is_not_a_count_is_a_400_naming_it(self):
        api = self.api()
        for query, field in [
            ("limit=abc", "limit"),
            ("limit=-1", "limit"),
            ("limit=0", "limit"),
            ("limit=2.0", "limit"),
            ("limit=10**9", "limit"),
            ("offset=-5", "offset"),
            ("offset=x", "offset"),
            ("limit=1&limit=x", "limit"),
        ]:
            response = api.get(f"/api/v1/agents/?{query}")
            assert response.status_code == 400, (query, response.status_code)
            error = response.json()["error"]
            assert error["code"] == "invalid", query
            assert list(error["fields"]) == [field], (query, error)

    def test_counts_in_range_and_an_empty_value_are_served(self):
        api = self.api()
        for query, limit, offset in [
            ("", 50, 0),
            ("limit=&offset=", 50, 0),
            ("limit=%201", 1, 0),
            ("limit=100000&offset=3", 500, 3),
            ("offset=99999999999999999999", 50, 99999999999999999999),
            ("offset=" + "9" * 5000, 50, 10**20),
        ]:
            response = api.get(f"/api/v1/agents/?{query}")
            assert response.status_code == 200, (query, response.content)
            assert (response.json()["limit"], response.json()["offset"]) == (limit, offset), query

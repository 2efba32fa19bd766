"""The filter pickers: suggestions as an operator types, and names typed without JavaScript."""

import re
from urllib.parse import quote

from django.test import override_settings

from browser.tests.base import BrowserTestCase
from facts.services import fact_remember
from identities.services import memory_user_create, memory_user_identify, memory_user_merge
from threads.tests.factories import make_thread


def option_values(response) -> list[str]:
    return re.findall(r'data-value="([^"]+)"', response.content.decode())


class PickerTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.ada = memory_user_identify(
            workspace=cls.workspace, channel="telegram", external_id="1001", profile={"name": "Ada Lovelace"}
        ).memory_user
        cls.adam = memory_user_create(
            workspace=cls.workspace, canonical_id="email:adam@example.com", display_name="Adam"
        )
        cls.bo = memory_user_create(
            workspace=cls.workspace, canonical_id="email:bo@example.com", display_name="Bo"
        )
        cls.foreign_ada = memory_user_create(
            workspace=cls.other_workspace, canonical_id="telegram:1001", display_name="Ada Lovelace"
        )
        cls.trip = make_thread(
            workspace=cls.workspace, agent=cls.agent, memory_user=cls.ada, title="Trip to Lisbon"
        )
        cls.trip2 = make_thread(workspace=cls.workspace, agent=cls.agent, title="Trip to Porto")
        cls.foreign_trip = make_thread(
            workspace=cls.other_workspace, agent=cls.outsider_agent, title="Trip to Lisbon"
        )
        fact_remember(workspace=cls.workspace, key="tz", value="WET", scope="user", memory_user=cls.ada)
        fact_remember(workspace=cls.workspace, key="tz", value="CET", scope="user", memory_user=cls.bo)
        fact_remember(
            workspace=cls.workspace,
            key="plan",
            value="train",
            scope="session",
            thread=cls.trip,
            agent=cls.agent,
        )

    def pick(self, name, query, **extra):
        return self.htmx("get", self.url(name), {"q": query, **extra}, target="filter-memory_user-list")

    def test_users_by_name_canonical_id_external_id_and_id(self):
        self.login(self.viewer)
        assert set(option_values(self.pick("memories:user-pick", "ada"))) == {
            str(self.ada.pk),
            str(self.adam.pk),
        }
        assert option_values(self.pick("memories:user-pick", "bo@example")) == [str(self.bo.pk)]
        assert option_values(self.pick("memories:user-pick", "1001")) == [str(self.ada.pk)]
        assert option_values(self.pick("memories:user-pick", str(self.bo.pk))) == [str(self.bo.pk)]
        # An exact match comes first, whatever the recency.
        assert option_values(self.pick("memories:user-pick", "Adam"))[0] == str(self.adam.pk)
        response = self.pick("memories:user-pick", "ada")
        content = response.content.decode()
        assert 'role="option"' in content and 'id="pick-user-1"' in content and "<html" not in content
        assert "Ada Lovelace" in content and "telegram:1001" in content

    def test_empty_query_lists_recent_ones_and_no_match_says_so(self):
        self.login(self.viewer)
        assert len(option_values(self.pick("memories:user-pick", ""))) == 3
        response = self.pick("memories:user-pick", "zzz")
        assert option_values(response) == []
        assert b'aria-disabled="true"' in response.content and b"No memory users match." in response.content

    def test_threads_by_title_and_id(self):
        self.login(self.viewer)
        assert set(option_values(self.pick("memories:thread-pick", "trip"))) == {
            str(self.trip.pk),
            str(self.trip2.pk),
        }
        assert option_values(self.pick("memories:thread-pick", "lisbon")) == [str(self.trip.pk)]
        assert option_values(self.pick("memories:thread-pick", str(self.trip2.pk))) == [str(self.trip2.pk)]

    def test_other_workspaces_rows_are_never_suggested(self):
        self.login(self.viewer)
        for name, query in (
            ("memories:user-pick", "Ada"),
            ("memories:user-pick", str(self.foreign_ada.pk)),
            ("memories:thread-pick", "Lisbon"),
            ("memories:thread-pick", str(self.foreign_trip.pk)),
        ):
            values = option_values(self.pick(name, query))
            assert str(self.foreign_ada.pk) not in values and str(self.foreign_trip.pk) not in values
        # The outsider, in their own workspace, sees only theirs; in ours, a 404.
        self.login(self.outsider)
        own = self.client.get(
            f"/memories/{self.other_workspace.pk}/users/pick/", {"q": "Ada"}, HTTP_HX_REQUEST="true"
        )
        assert option_values(own) == [str(self.foreign_ada.pk)]
        assert self.client.get(self.url("memories:user-pick"), {"q": "Ada"}).status_code == 404
        assert self.client.get(self.url("memories:thread-pick"), {"q": "Trip"}).status_code == 404

    def test_merged_users_are_not_suggested(self):
        self.login(self.teammate)
        memory_user_merge(source=self.adam, target=self.ada, actor="test")
        assert option_values(self.pick("memories:user-pick", "adam")) == []

    def test_hostile_queries_answer_without_error(self):
        self.login(self.viewer)
        hostile = (
            "a%00b",
            "%ED%A0%80",
            "x" * 10_000,
            quote("' OR 1=1 --"),
            "%25",
            "_",
            quote("{{ 7*7 }}"),
            quote("<script>"),
        )
        for query in hostile:
            for name in ("memories:user-pick", "memories:thread-pick"):
                response = self.client.get(f"{self.url(name)}?q={query}", HTTP_HX_REQUEST="true")
                assert response.status_code == 200, (name, query[:20], response.status_code)
                assert b"<script>" not in response.content
            response = self.client.get(f"{self.url('memories:facts')}?memory_user={query}&thread={query}")
            assert response.status_code == 200, (query[:20], response.status_code)
        # `%` and `_` are literal characters, not LIKE wildcards.
        assert option_values(self.pick("memories:user-pick", "%")) == []
        assert option_values(self.pick("memories:thread-pick", "_")) == []

    def test_the_page_renders_pickers_with_combobox_attributes(self):
        self.login(self.viewer)
        content = self.client.get(self.url("memories:facts")).content.decode()
        for field, kind in (("memory_user", "users"), ("thread", "threads")):
            box = re.search(rf'<input id="filter-{field}"[^>]*>', content, re.S).group(0)
            assert 'role="combobox"' in box and 'aria-expanded="false"' in box
            assert f'aria-controls="filter-{field}-list"' in box and 'aria-autocomplete="list"' in box
            assert f'hx-get="{self.url("memories:facts").replace("facts/", kind + "/pick/")}"' in box
            assert f'<ul id="filter-{field}-list" class="picker-list" role="listbox"' in content

    def total(self, url, **params) -> int:
        match = re.search(rb'data-total="(\d+)"', self.client.get(url, params).content)
        return int(match.group(1)) if match else None

    def test_a_name_works_as_a_filter_without_javascript(self):
        self.login(self.viewer)
        facts = self.url("memories:facts")
        ada = self.total(facts, memory_user=str(self.ada.pk))
        assert ada and ada < self.total(facts)
        for text in ("Ada Lovelace", "ada lovelace", "telegram:1001", "1001", f"  {self.ada.pk} "):
            assert self.total(facts, memory_user=text) == ada, text
        assert (
            self.total(facts, memory_user="bo@example.com")
            == self.total(facts, memory_user=str(self.bo.pk))
            == 1
        )
        # The filter shows whom the text named.
        content = self.client.get(facts, {"memory_user": "bo@example.com"}).content.decode()
        assert "Bo · email:bo@example.com" in content
        # An exact match wins over partial ones: "Adam" names one user (who has no facts).
        assert self.total(facts, memory_user="Adam") == 0
        threads = self.url("memories:threads")
        assert self.total(threads, memory_user="Ada Lovelace") == 1
        thread_facts = self.total(facts, thread=str(self.trip.pk), current="all")
        assert thread_facts and self.total(facts, thread="Trip to Lisbon", current="all") == thread_facts
        checkpoints = self.url("memories:checkpoints")
        assert self.total(checkpoints, thread="trip to porto") == 0

    def test_ambiguous_or_unknown_names_say_why(self):
        self.login(self.viewer)
        facts = self.url("memories:facts")
        content = self.client.get(facts, {"memory_user": "ad"}).content.decode()
        assert "Several memory users match “ad”" in content and "data-total" not in content
        content = self.client.get(facts, {"memory_user": "nobody"}).content.decode()
        assert "No memory user matches “nobody”" in content
        content = self.client.get(facts, {"thread": "Trip"}).content.decode()
        assert "Several threads match “Trip”" in content
        # Another workspace's user, by name or id, is nobody here.
        content = self.client.get(facts, {"memory_user": str(self.foreign_ada.pk)}).content.decode()
        assert 'data-total="0"' in content and "Nothing with this id here." in content

    def test_suggestions_are_one_bounded_query(self):
        self.open_as(self.viewer, self.url("memories:facts"))
        # The session, its operator, their memberships, then one query for the suggestions.
        with self.assertNumQueries(4):
            self.pick("memories:user-pick", "ada")
        with self.assertNumQueries(4):
            self.pick("memories:thread-pick", "trip")

    @override_settings(DEBUG=False)
    def test_anonymous_is_sent_to_log_in(self):
        response = self.client.get(self.url("memories:user-pick"), {"q": "Ada"})
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]

from browser.tests.base import BrowserTestCase
from facts.models import Fact
from facts.services import fact_remember
from identities.tests.factories import MemoryUserFactory


class FactsTabTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)
        for n in range(12):
            fact_remember(
                workspace=cls.workspace,
                key=f"pref_{n:02d}",
                value=f"value {n}",
                scope="global",
                confidence=0.5,
            )
        fact_remember(
            workspace=cls.workspace,
            key="user_timezone",
            value="Europe/Paris",
            scope="user",
            memory_user=cls.person,
            fact_type="user_preference",
        )
        fact_remember(
            workspace=cls.workspace, key="agent_motto", value={"a": 1}, scope="agent", agent=cls.agent
        )
        cls.secret = fact_remember(
            workspace=cls.other_workspace, key="other_secret", value="classified", scope="global"
        ).fact
        cls.tz = Fact.objects.get(key="user_timezone")

    def test_full_page_lists_current_facts_with_the_total(self):
        url = self.url("memories:facts")
        self.open_as(self.viewer, url)
        # session, user, memberships, count, page of ids, rows with their joins, the Review tab's count.
        with self.assertNumQueries(7):
            response = self.client.get(url)
        content = response.content.decode()
        assert "<html" in content
        assert 'data-total="14"' in content
        assert "user_timezone" in content
        assert "other_secret" not in content

    def test_query_count_does_not_grow_with_rows(self):
        url = self.url("memories:facts") + "?per_page=100"
        self.open_as(self.viewer, url)
        for n in range(30):
            fact_remember(
                workspace=self.workspace, key=f"more_{n}", value=n, scope="user", memory_user=self.person
            )
        # One more for the Review tab's count (browser.selectors.review).
        with self.assertNumQueries(7):
            self.client.get(url)

    def test_fragments_for_htmx(self):
        self.login(self.viewer)
        panel = self.htmx("get", self.url("memories:facts"), target="main")
        assert b"<html" not in panel.content
        assert b'class="tabs"' in panel.content and b'id="results"' in panel.content
        results = self.htmx("get", self.url("memories:facts") + "?q=timezone", target="results")
        assert b'class="tabs"' not in results.content
        assert b"user_timezone" in results.content
        assert b"pref_01" not in results.content

    def test_filters_are_the_api_filterset(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:facts") + "?scope=agent")
        assert b'data-total="1"' in response.content
        assert b"agent_motto" in response.content
        response = self.client.get(self.url("memories:facts") + f"?memory_user={self.person.pk}")
        assert b'data-total="1"' in response.content

    def test_bad_filter_is_explained_not_a_500(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:facts") + "?min_confidence=lots")
        assert response.status_code == 200
        assert b"These filters cannot be applied" in response.content

    def test_sorting_and_pagination(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:facts") + "?sort=key&per_page=25")
        content = response.content.decode()
        assert content.index("agent_motto") < content.index("pref_00") < content.index("user_timezone")
        assert 'aria-sort="ascending"' in content
        response = self.client.get(self.url("memories:facts") + "?sort=-key&per_page=25&page=99")
        assert response.status_code == 200
        response = self.client.get(self.url("memories:facts") + "?sort=nonsense")
        assert response.status_code == 200

    def test_detail_shows_the_version_history(self):
        fact_remember(
            workspace=self.workspace,
            key="user_timezone",
            value="Asia/Tokyo",
            scope="user",
            memory_user=self.person,
            actor="operator:owner",
        )
        current = Fact.objects.get(key="user_timezone", valid_to__isnull=True)
        self.login(self.viewer)
        response = self.client.get(self.url("memories:fact", pk=current.pk))
        content = response.content.decode()
        assert "Version history" in content
        assert "Asia/Tokyo" in content and "Europe/Paris" in content
        assert "operator:owner" in content
        fragment = self.htmx("get", self.url("memories:fact", pk=current.pk), target="main")
        assert b"<html" not in fragment.content and b"Version history" in fragment.content

    def test_viewer_sees_no_controls_and_is_refused(self):
        self.login(self.viewer)
        response = self.client.get(self.url("memories:facts"))
        assert b"Delete selected" not in response.content
        assert b'name="ids"' not in response.content
        assert b"/edit/" not in response.content
        assert self.client.get(self.url("memories:fact-edit", pk=self.tz.pk)).status_code == 403
        response = self.client.post(
            self.url("memories:fact-edit", pk=self.tz.pk),
            {"value": "x", "fact_type": "correction", "confidence": "1"},
        )
        assert response.status_code == 403
        response = self.client.post(self.url("memories:facts-delete"), {"ids": [self.tz.pk]})
        assert response.status_code == 403
        assert Fact.objects.filter(pk=self.tz.pk, value="Europe/Paris").exists()

    def test_editor_edits_inline_and_gets_the_row_back(self):
        self.login(self.teammate)
        edit = self.htmx("get", self.url("memories:fact-edit", pk=self.tz.pk), target=f"row-{self.tz.pk}")
        assert b'class="editing"' in edit.content and b"<html" not in edit.content
        response = self.htmx(
            "post",
            self.url("memories:fact-edit", pk=self.tz.pk),
            {"value": "Asia/Tokyo", "fact_type": "user_preference", "confidence": "0.95"},
            target=f"row-{self.tz.pk}",
        )
        assert response.status_code == 200
        assert "Saved fact" in response["HX-Trigger"]
        new = Fact.objects.get(key="user_timezone", valid_to__isnull=True)
        assert new.value == "Asia/Tokyo"
        assert new.confidence == 0.95
        assert new.created_by == "operator:teammate"
        assert f'id="row-{new.pk}"'.encode() in response.content
        assert Fact.objects.get(pk=self.tz.pk).valid_to is not None

    def test_json_values_and_validation_errors_rerender_the_edit_row(self):
        self.login(self.teammate)
        url = self.url("memories:fact-edit", pk=self.tz.pk)
        response = self.htmx(
            "post",
            url,
            {"value": "{not json", "value_is_json": "on", "fact_type": "user_preference", "confidence": "2"},
            target=f"row-{self.tz.pk}",
        )
        assert response.status_code == 200
        assert b'class="editing"' in response.content
        assert b"not valid JSON" in response.content
        assert Fact.objects.get(pk=self.tz.pk).valid_to is None
        response = self.htmx(
            "post",
            url,
            {
                "value": '{"tz": "UTC"}',
                "value_is_json": "on",
                "fact_type": "user_preference",
                "confidence": "0.9",
            },
            target=f"row-{self.tz.pk}",
        )
        assert Fact.objects.get(key="user_timezone", valid_to__isnull=True).value == {"tz": "UTC"}

    def test_edit_without_javascript_redirects_to_the_detail(self):
        self.login(self.teammate)
        page = self.client.get(self.url("memories:fact-edit", pk=self.tz.pk))
        assert b"<html" in page.content and b"Edit" in page.content
        response = self.client.post(
            self.url("memories:fact-edit", pk=self.tz.pk),
            {"value": "Europe/Paris", "fact_type": "correction", "confidence": "0.7"},
        )
        assert response.status_code == 302
        assert Fact.objects.get(pk=self.tz.pk).fact_type == "correction"

    def test_cancel_returns_the_plain_row(self):
        self.login(self.teammate)
        response = self.htmx("get", self.url("memories:fact", pk=self.tz.pk), target=f"row-{self.tz.pk}")
        assert response.content.decode().lstrip().startswith(f'<tr id="row-{self.tz.pk}">')

    def test_batch_delete_returns_the_results_with_a_toast(self):
        self.login(self.teammate)
        ids = list(
            Fact.objects.filter(key__in=["pref_00", "pref_01", "pref_02"]).values_list("pk", flat=True)
        )
        response = self.htmx(
            "post", self.url("memories:facts-delete") + "?sort=key", {"ids": ids}, target="results"
        )
        assert response.status_code == 200
        assert "Deleted 3 facts." in response["HX-Trigger"]
        assert b'data-total="11"' in response.content
        assert not Fact.objects.filter(pk__in=ids).exists()

    def test_batch_delete_without_javascript_confirms_first(self):
        self.login(self.teammate)
        ids = [self.tz.pk]
        page = self.client.post(self.url("memories:facts-delete"), {"ids": ids})
        assert page.status_code == 200
        assert b"Delete 1 fact?" in page.content
        assert Fact.objects.filter(pk=self.tz.pk).exists()
        response = self.client.post(self.url("memories:facts-delete"), {"ids": ids, "confirmed": "on"})
        assert response.status_code == 302
        assert not Fact.objects.filter(pk=self.tz.pk).exists()

    def test_batch_delete_with_a_foreign_id_deletes_nothing_of_it(self):
        """A foreign id counts as already gone, like a random one (test_batch_delete_rule)."""
        self.login(self.teammate)
        response = self.htmx(
            "post", self.url("memories:facts-delete"), {"ids": [self.tz.pk, self.secret.pk]}, target="results"
        )
        assert response.status_code == 200
        assert "Deleted 1 fact. 1 was already gone." in response["HX-Trigger"]
        assert Fact.objects.filter(pk=self.secret.pk).exists()
        assert not Fact.objects.filter(pk=self.tz.pk).exists()

    def test_batch_delete_with_bad_ids_is_explained(self):
        self.login(self.teammate)
        response = self.htmx("post", self.url("memories:facts-delete"), {"ids": ["nope"]}, target="results")
        assert "not a valid id" in response["HX-Trigger"]
        response = self.htmx("post", self.url("memories:facts-delete"), {}, target="results")
        assert "Select at least one row" in response["HX-Trigger"]

    def test_outsider_gets_404_everywhere(self):
        self.login(self.outsider)
        assert self.client.get(self.url("memories:facts")).status_code == 404
        assert self.client.get(self.url("memories:fact", pk=self.tz.pk)).status_code == 404
        assert self.client.post(self.url("memories:facts-delete"), {"ids": [self.tz.pk]}).status_code == 404
        other_ws_url = self.url("memories:fact", pk=self.tz.pk).replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        assert self.client.get(other_ws_url).status_code == 404
        edit = self.url("memories:fact-edit", pk=self.tz.pk).replace(
            str(self.workspace.pk), str(self.other_workspace.pk)
        )
        assert (
            self.client.post(edit, {"value": "x", "fact_type": "correction", "confidence": "1"}).status_code
            == 404
        )
        assert Fact.objects.get(pk=self.tz.pk).value == "Europe/Paris"


class FactsFilterFormTests(BrowserTestCase):
    def test_empty_fields_of_a_submitted_filter_form_mean_any(self):
        fact_remember(
            workspace=self.workspace, key="agent_motto", value="be kind", scope="agent", agent=self.agent
        )
        fact_remember(workspace=self.workspace, key="other", value="x", scope="global")
        self.login(self.viewer)
        query = "?q=&key=&scope=agent&fact_type=&source=&agent=&memory_user=&min_confidence=&current=true"
        response = self.htmx("get", self.url("memories:facts") + query, target="results")
        assert b'data-total="1"' in response.content


class LargeTotalsTests(BrowserTestCase):
    def test_totals_above_the_cap_are_estimated_and_say_so(self):
        from unittest import mock

        for n in range(8):
            fact_remember(workspace=self.workspace, key=f"k{n}", value=n, scope="global")
        self.login(self.viewer)
        with mock.patch("browser.lib.listing.EXACT_COUNT_CAP", 5):
            response = self.client.get(self.url("memories:facts") + "?per_page=25")
        content = response.content.decode()
        assert ">about " in content
        assert "k0" in content and "k7" in content
        response = self.client.get(self.url("memories:facts"))
        assert 'data-total="8">8<' in response.content.decode()

"""The users tab's "merged into" badge names and links the end of a record's chain of merges
(older data: Ann merged into Bo, later Bo into Cy), in a fixed number of queries; and the
person page's Preferences row keeps its help text on a line of its own."""

from browser.tests.base import BrowserTestCase
from identities.models import MemoryUser
from identities.tests.factories import MemoryUserFactory


def chain_of(workspace, *names):
    """People merged one into the next as an earlier release left them (only `merged_into`)."""
    people = [MemoryUserFactory(workspace=workspace, display_name=name) for name in names]
    for person, into in zip(people[:-1], people[1:], strict=True):
        MemoryUser.objects.filter(pk=person.pk).update(merged_into=into)
        person.merged_into_id = into.pk
    return people


def badge_of(body: str, person) -> str:
    """The row's "merged into" badge, or "" when the row has none."""
    row = body.split(f'id="row-{person.pk}"', 1)[1].split("</tr>", 1)[0]
    return row.split('<span class="badge muted"', 1)[1].split("</span>", 1)[0] if "merged into" in row else ""


class MergedBadgeTests(BrowserTestCase):
    def setUp(self):
        self.ann, self.bo, self.cy = chain_of(self.workspace, "Ann", "Bo", "Cy")
        self.login(self.viewer)
        self.list_url = self.url("memories:users") + "?merged=all"

    def test_the_badge_names_and_links_the_last_survivor(self):
        """Before: Ann's badge said "merged into Bo", a record that holds nothing any more."""
        body = self.client.get(self.list_url).content.decode()
        cy_url = self.url("memories:user", pk=self.cy.pk)
        for person in (self.ann, self.bo):
            badge = badge_of(body, person)
            assert f'data-merged-into="{self.cy.pk}"' in badge, person
            assert f'href="{cy_url}"' in badge and ">Cy</a>" in badge, person
        assert badge_of(body, self.cy) == ""

    def test_the_badge_costs_the_same_queries_for_one_merged_row_or_many(self):
        self.client.get(self.list_url)
        # As without merged rows, plus one query for the chains and one for the survivors.
        with self.assertNumQueries(9) as one_page:
            self.htmx("get", self.list_url, target="results")
        for n in range(6):
            chain_of(self.workspace, f"Old{n}", f"Mid{n}", f"Kept{n}")
        with self.assertNumQueries(len(one_page.captured_queries)):
            response = self.htmx("get", self.list_url, target="results")
        assert response.content.decode().count("merged into") == 14

    def test_no_merged_row_costs_no_query(self):
        MemoryUser.objects.update(merged_into=None)
        self.client.get(self.list_url)
        # session, user, memberships, count, page of ids, rows, identities.
        with self.assertNumQueries(7):
            self.htmx("get", self.list_url, target="results")

    def test_an_inline_edits_row_keeps_the_badge(self):
        self.login(self.teammate)
        edit = self.url("memories:user-edit", pk=self.ann.pk)
        response = self.htmx(
            "post",
            edit,
            {"display_name": "Ann B.", "canonical_id": self.ann.canonical_id},
            target=f"row-{self.ann.pk}",
        )
        assert response.status_code == 200
        assert f'data-merged-into="{self.cy.pk}"' in badge_of(response.content.decode(), self.ann)
        cancel = self.htmx("get", self.url("memories:user", pk=self.ann.pk), target=f"row-{self.ann.pk}")
        assert f'data-merged-into="{self.cy.pk}"' in badge_of(cancel.content.decode(), self.ann)


class PreferencesHelpTests(BrowserTestCase):
    def test_the_help_text_is_on_its_own_line(self):
        """Before: "noneKept in step with ..." (an inline <small> right after the value)."""
        ada = MemoryUserFactory(workspace=self.workspace, display_name="Ada", preferences={})
        self.login(self.viewer)
        body = self.client.get(self.url("memories:user", pk=ada.pk)).content.decode()
        row = body.split("<dt>Preferences</dt>", 1)[1].split("</dd>", 1)[0]
        assert '<span class="muted">none</span><p class="muted help">Kept in step' in row

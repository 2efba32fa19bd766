"""The audit trail page and its CSV export (issue 15): who changed what, filtered and exported."""

import csv
import io
import re
from datetime import timedelta
from unittest import mock
from urllib.parse import quote

from django.utils import timezone

from browser.selectors.audit import audit_changes
from browser.services import member_role_change
from browser.tests.base import BrowserTestCase
from browser.tests.factories import entry_make, memory_user_make
from browser.views.audit import csv_cell
from core.models import AuditEvent, Membership
from core.services import audit_record
from episodic.services import entry_update
from facts.services import fact_remember, fact_update
from identities.services import memory_user_update


class AuditTrailTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.ada = memory_user_make(cls.workspace, canonical_id="telegram:1", display_name="Ada")
        cls.bob = memory_user_make(cls.workspace, canonical_id="telegram:2", display_name="Bob")
        first = fact_remember(
            workspace=cls.workspace,
            key="home_city",
            value="Lisbon",
            scope="user",
            memory_user=cls.ada,
            actor="api_key:mk_ada",
        ).fact
        cls.ada_fact = fact_remember(
            workspace=cls.workspace,
            key="home_city",
            value="Porto",
            scope="user",
            memory_user=cls.ada,
            actor="operator:owner",
        ).fact
        cls.first_fact = first
        cls.bob_fact = fact_remember(
            workspace=cls.workspace,
            key="bob_pet",
            value="cat",
            scope="user",
            memory_user=cls.bob,
            actor="api_key:mk_bob",
        ).fact
        fact_update(fact=cls.bob_fact, actor="operator:teammate", confidence=0.4)
        cls.entry = entry_make(agent=cls.agent, memory_user=cls.ada, content="Ada keeps bees.")
        entry_update(entry=cls.entry, actor="operator:teammate", content="Ada keeps two hives of bees.")
        memory_user_update(memory_user=cls.ada, actor="operator:owner", display_name="Ada Lovelace")
        membership = Membership.objects.get(workspace=cls.workspace, user=cls.viewer)
        member_role_change(membership=membership, actor="operator:owner", role=Membership.Role.VIEWER)
        audit_record(
            workspace=cls.workspace,
            actor="operator:owner",
            action="update",
            entity_type="membership",
            entity_id=membership.pk,
            changes={"role": ["viewer", "editor"]},
        )
        globex = memory_user_make(cls.other_workspace, canonical_id="telegram:1", display_name="Globex Ada")
        fact_remember(
            workspace=cls.other_workspace,
            key="globex_secret",
            value="x",
            scope="user",
            memory_user=globex,
            actor="api_key:mk_globex",
        )

    def page(self, user=None, query=""):
        self.login(user or self.teammate)
        return self.client.get(self.url("memories:audit") + query)

    def test_each_change_shows_who_what_when_and_before_after(self):
        response = self.page()
        assert response.status_code == 200
        html = response.content.decode()
        assert "mk_ada" in html and "teammate" in html
        # The superseding fact: value Lisbon -> Porto; the metadata edit: 1.0 -> 0.4.
        assert '<span class="visually-hidden">before: </span>Lisbon' in html
        assert '<span class="visually-hidden">, after: </span>Porto' in html
        assert "Ada keeps bees." in html and "Ada keeps two hives of bees." in html
        assert '<span class="visually-hidden">, after: </span>0.4' in html
        # Entities that exist link to their page; another workspace never shows.
        assert f'href="{self.url("memories:fact", pk=self.ada_fact.pk)}"' in html
        assert f'href="{self.url("memories:user", pk=self.ada.pk)}"' in html
        assert "globex" not in html.lower()

    def test_changes_render_the_shapes_services_record(self):
        event = AuditEvent(
            action="update",
            changes={
                "status": ["active", "superseded"],
                "confidence": {"from": 0.9, "to": 0.4},
                "fields": ["title", "model"],
                "key": "city",
            },
        )
        rows = {c.field: (c.before, c.after, c.paired) for c in audit_changes(event)}
        assert rows == {
            "status": ("active", "superseded", True),
            "confidence": (0.9, 0.4, True),
            "fields": (None, ["title", "model"], False),
            "key": (None, "city", False),
        }
        created = AuditEvent(
            action="create", changes={"value": "Porto", "previous_value": "Lisbon", "ids": [1, 2]}
        )
        rows = {c.field: (c.before, c.after, c.paired) for c in audit_changes(created)}
        assert rows == {"value": ("Lisbon", "Porto", True), "ids": (None, [1, 2], False)}

    def test_filters_actor_tier_action_and_time(self):
        html = self.page(query="?actor=mk_bob").content.decode()
        assert 'data-total="1"' in html and "bob_pet" in html
        html = self.page(query="?tier=entries").content.decode()
        assert 'data-total="1"' in html and "Ada keeps two hives" in html  # entry_make does not audit
        html = self.page(query="?tier=people&action=update").content.decode()
        assert 'data-total="1"' in html and "Ada Lovelace" in html
        future = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
        assert 'data-total="0"' in self.page(query=f"?after={future}").content.decode()
        assert 'data-total="0"' not in self.page(query=f"?before={future}").content.decode()
        assert 'data-total="0"' in self.page(query="?before=2000-01-01").content.decode()

    def test_person_filter_shows_their_rows_and_never_another_persons(self):
        for person in (str(self.ada.pk), "Ada Lovelace", "telegram:1"):
            html = self.page(query=f"?memory_user={quote(person)}").content.decode()
            assert "home_city" in html and "Ada keeps two hives" in html, person
            assert "bob_pet" not in html and "mk_bob" not in html, person
            assert 'data-total="5"' in html, person  # 2 facts, 1 entry edit, 1 rename... see count
        html = self.page(query=f"?memory_user={self.bob.pk}").content.decode()
        assert "bob_pet" in html and "home_city" not in html

    def test_a_person_with_many_rows_gets_the_same_events(self):
        """Past PERSON_IDS_CAP rows the filter uses subqueries instead of id lists: same rows."""
        query = f"?memory_user={self.ada.pk}"
        listed = self.page(query=query).content.decode()
        with mock.patch("browser.selectors.audit.PERSON_IDS_CAP", 1):
            subqueries = self.page(query=query).content.decode()
        ids = re.compile(r'id="event-(\d+)"')
        assert ids.findall(listed) == ids.findall(subqueries) and len(ids.findall(listed)) == 5

    def test_bad_filters_are_form_errors_never_server_errors(self):
        for query in (
            "?after=yesterday",
            "?before=2025-13-45",
            "?memory_user=not-a-person",
            f"?memory_user={'0' * 8}-0000-0000-0000-{'0' * 12}",
            "?tier=nope",
            "?action=explode",
            "?entity_id=" + "x" * 100,
            "?actor=a%00b",
            "?page=-3&per_page=abc&sort=nope",
        ):
            response = self.page(query=query)
            assert response.status_code == 200, (query, response.status_code)
            export = self.client.get(self.url("memories:audit-export") + query)
            assert export.status_code in (200, 400), (query, export.status_code)
        response = self.page(query="?after=yesterday")
        assert b"These filters cannot be applied" in response.content
        export = self.client.get(self.url("memories:audit-export") + "?after=yesterday")
        assert export.status_code == 400 and b"after" in export.content

    def test_editors_and_admins_read_it_viewers_and_outsiders_do_not(self):
        assert self.page(self.viewer).status_code == 403
        assert self.page(self.outsider).status_code == 404
        self.login(self.viewer)
        assert self.client.get(self.url("memories:audit-export")).status_code == 403
        assert self.page(self.owner).status_code == 200

    def test_membership_changes_are_for_admins_only(self):
        editor = self.page(self.teammate, "?tier=members").content.decode()
        assert "These filters cannot be applied" in editor
        assert "membership" not in self.page(self.teammate).content.decode()
        admin = self.page(self.owner, "?tier=members").content.decode()
        assert 'data-total="2"' in admin

    def test_csv_export_streams_the_filtered_rows(self):
        self.login(self.teammate)
        response = self.client.get(self.url("memories:audit-export") + "?tier=facts")
        assert response.status_code == 200 and response.streaming
        assert response["Content-Type"].startswith("text/csv")
        assert "attachment" in response["Content-Disposition"]
        rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
        assert {r["entity_type"] for r in rows} == {"fact"}
        assert len(rows) == AuditEvent.objects.filter(workspace=self.workspace, entity_type="fact").count()
        superseding = next(r for r in rows if r["entity_id"] == str(self.ada_fact.pk))
        assert superseding["before"] == '{"value": "Lisbon"}'
        assert '"value": "Porto"' in superseding["after"] and superseding["actor"] == "operator:owner"
        assert not any("globex" in line.lower() for r in rows for line in r.values())

    def test_csv_cells_never_start_a_formula(self):
        audit_record(
            workspace=self.workspace,
            actor='=HYPERLINK("http://evil")',
            action="update",
            entity_type="fact",
            entity_id="+1",
            changes={"note": "@SUM(A1)"},
        )
        self.login(self.teammate)
        response = self.client.get(self.url("memories:audit-export") + "?actor=HYPERLINK")
        rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
        assert len(rows) == 2
        cells = rows[1]
        assert cells[1] == '\'=HYPERLINK("http://evil")' and cells[5] == "'+1"
        assert all(not cell.startswith(("=", "+", "-", "@")) for cell in cells)
        assert [csv_cell(v) for v in ("-2", "\tx", "ok", None, {"a": 1})] == [
            "'-2",
            "'\tx",
            "ok",
            "",
            '{"a": 1}',
        ]

    def test_bounded_queries(self):
        url = self.url("memories:audit")
        self.open_as(self.teammate, url)
        with self.assertNumQueries(9) as first:
            self.client.get(url)
        for n in range(15):
            fact_remember(workspace=self.workspace, key=f"k{n}", value="v", scope="global", actor="system")
        with self.assertNumQueries(len(first.captured_queries)):
            self.client.get(url)

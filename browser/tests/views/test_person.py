from unittest import mock

from django.db import connection
from django.test.utils import CaptureQueriesContext

from browser.selectors.person import person_erase_preview
from browser.tests.base import BrowserTestCase
from browser.tests.factories import entry_make
from browser.views.person import PER_SECTION
from episodes.services import episode_create
from facts.models import Fact
from facts.services import fact_remember
from identities.models import MemoryUser
from identities.services import memory_user_erase, memory_user_identify, memory_user_merge
from procedures.models import ProcedureRun
from procedures.tests.factories import ProcedureFactory
from threads.services import thread_create


def person_rows(workspace, agent, person, tag: str, n: int = 1):
    """n rows of every tier about `person`, each carrying `tag` in its text."""
    for i in range(n):
        fact_remember(
            workspace=workspace,
            key=f"{tag}_fact_{i}",
            value=f"{tag} value {i}",
            scope="user",
            memory_user=person,
        )
        entry_make(agent=agent, memory_user=person, content=f"{tag} entry number {i} here.")
        thread = thread_create(
            workspace=workspace, agent=agent, memory_user=person, title=f"{tag} thread {i}"
        )
        episode = episode_create(
            workspace=workspace, agent=agent, memory_user=person, thread=thread, trigger_type=f"{tag}trig{i}"
        )
        procedure = ProcedureFactory(workspace=workspace, name=f"{tag} procedure {i}")
        ProcedureRun.objects.create(
            workspace=workspace, procedure=procedure, episode=episode, memory_user=person, success=True
        )


def section(content: str, key: str) -> str:
    """The HTML of one section of the person page."""
    start = content.index(f'id="person-{key}"')
    end = content.find('<section class="section person-section"', start)
    return content[start : end if end > 0 else None]


class PersonPageTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.ada = memory_user_identify(
            workspace=cls.workspace, channel="telegram", external_id="1001", profile={"name": "Ada"}
        ).memory_user
        cls.ada_mail = memory_user_identify(
            workspace=cls.workspace, channel="email", external_id="ada@example.com"
        ).memory_user
        memory_user_merge(source=cls.ada_mail, target=cls.ada, actor="operator:owner")
        cls.bob = memory_user_identify(
            workspace=cls.workspace, channel="slack", external_id="U42"
        ).memory_user
        cls.foreign = memory_user_identify(
            workspace=cls.other_workspace, channel="telegram", external_id="1001"
        ).memory_user
        person_rows(cls.workspace, cls.agent, cls.ada, "adas")
        person_rows(cls.workspace, cls.agent, cls.bob, "bobs")
        person_rows(cls.other_workspace, cls.outsider_agent, cls.foreign, "globex")
        fact_remember(
            workspace=cls.workspace, key="adas_city", value="Paris", scope="user", memory_user=cls.ada
        )
        fact_remember(
            workspace=cls.workspace, key="adas_city", value="Lisbon", scope="user", memory_user=cls.ada
        )

    def page(self, user=None, query="", person=None):
        self.login(user or self.viewer)
        url = self.url("memories:user", pk=(person or self.ada).pk)
        return self.client.get(f"{url}?{query}" if query else url)

    def test_every_section_shows_the_person_and_nobody_else(self):
        """Identities, facts, entries, episodes, threads, procedures, merges and audit all
        show Ada's rows; Bob's and another workspace's never appear."""
        content = self.page().content.decode()
        for text in (
            "Channel identities",
            "ada@example.com",
            "adas_fact_0",
            "adas entry number 0",
            "adastrig0",
            "adas thread 0",
            "adas procedure 0",
            self.ada_mail.canonical_id,
            "Audit trail",
        ):
            assert text in content, text
        assert "bobs" not in content and "globex" not in content and "U42" not in content
        # The merge of ada_mail and the creation of Ada's fact are in her audit trail.
        assert 'id="person-audit"' in content and ">merge<" in content and ">create<" in content

    def test_audit_trail_is_the_same_whichever_plan_reads_it(self):
        """Probing the trail with the person's ids and walking it newest first find the same
        events (a person with many rows is read by the walk)."""
        # (Creating a thread leaves no audit event; renaming it does.)
        for entity in ("memory_user", "fact", "episode"):
            probed = section(self.page(query=f"audit_q={entity}").content.decode(), "audit")
            with mock.patch("browser.selectors.person.AUDIT_ID_LIST", 0):
                walked = section(self.page(query=f"audit_q={entity}").content.decode(), "audit")
            assert walked == probed, entity
            assert f">{entity.replace('_', '')}</a>" in walked and "bobs" not in walked, entity

    def test_procedures_used_are_the_same_whichever_plan_finds_them(self):
        plain = section(self.page().content.decode(), "procedures")
        with mock.patch("browser.selectors.person.PROCEDURE_RUN_LIST", 0):
            probed = section(self.page().content.decode(), "procedures")
        assert probed == plain and "adas procedure 0" in plain and "bobs" not in plain
        assert '<td data-label="Runs" class="num">1</td>' in plain

    def test_entry_search_is_the_same_whichever_plan_reads_it(self):
        """Matches read by id (a rare word) and the newest-first walk (a common one) list the
        same entries, the person's only."""
        for q, found in (("number", True), ("adas entry", True), ("nowhere", False)):
            by_id = section(self.page(query=f"entries_q={q}").content.decode(), "entries")
            with mock.patch("browser.selectors.person.TEXT_MATCH_LIST", 0):
                walked = section(self.page(query=f"entries_q={q}").content.decode(), "entries")
            assert walked == by_id and "bobs" not in by_id, q
            assert ("adas entry number 0" in by_id) is found, q

    def test_facts_show_confidence_and_history(self):
        facts = section(self.page().content.decode(), "facts")
        assert "2 versions" in facts and "Lisbon" in facts and "Paris" not in facts
        city = Fact.objects.get(key="adas_city", valid_to__isnull=True)
        assert f">{city.confidence:.2f}</td>" in facts  # the tier's (effective) confidence
        facts = section(self.page(query="facts_history=1").content.decode(), "facts")
        assert "Paris" in facts and "superseded" in facts

    def test_sections_paginate_and_search_on_their_own(self):
        for i in range(PER_SECTION + 2):
            fact_remember(
                workspace=self.workspace,
                key=f"extra_{i:02d}",
                value="more",
                scope="user",
                memory_user=self.ada,
            )
        content = self.page(query="threads_q=adas").content.decode()
        total = Fact.objects.filter(memory_user=self.ada, valid_to__isnull=True).count()
        assert f'data-total="{total}"' in content
        # The facts pager keeps the threads search in its links.
        assert "threads_q=adas&amp;facts_page=2" in content
        second = self.page(query="threads_q=adas&facts_page=2").content.decode()
        assert "11–" in second and "‹ Previous" in second
        searched = self.page(query="facts_q=Lisbon").content.decode()
        assert 'id="person-facts-q" type="search" name="facts_q" value="Lisbon"' in searched
        assert "adas_city" in searched and "extra_00" not in searched
        # An unknown or out-of-range page falls back instead of failing.
        assert self.page(query="facts_page=abc").status_code == 200
        assert self.page(query="facts_page=999").status_code == 200

    def test_htmx_section_request_gets_only_that_section(self):
        url = self.url("memories:user", pk=self.ada.pk) + "?entries_q=entry"
        self.open_as(self.viewer, url)
        with CaptureQueriesContext(connection) as queries:
            response = self.htmx("get", url, target="person-entries")
        content = response.content.decode()
        assert "<html" not in content and "Episodic entries" in content
        assert "adas entry number 0" in content and "Profile facts" not in content
        # Session, user, memberships and the person, then the entries' matches, page of keys
        # and its rows: nothing for the other sections.
        assert len(queries) == 7, [q["sql"] for q in queries]
        main = self.htmx("get", self.url("memories:user", pk=self.ada.pk), target="main").content.decode()
        assert "<html" not in main and 'id="person-audit"' in main

    def test_queries_do_not_grow_with_rows(self):
        url = self.url("memories:user", pk=self.ada.pk)
        person_rows(self.workspace, self.agent, self.ada, "more", n=PER_SECTION + 1)
        self.open_as(self.viewer, url)
        with CaptureQueriesContext(connection) as few:
            self.client.get(url)
        person_rows(self.workspace, self.agent, self.ada, "most", n=PER_SECTION)
        with CaptureQueriesContext(connection) as many:
            self.client.get(url)
        assert len(many) == len(few), [q["sql"] for q in many]
        # Session, user, memberships and the person; per section at most a count, a page of
        # keys and its rows; the audit trail's merged users and id lists; the procedures'
        # capped run count and their runs' figures; the legal holds that cover the person and,
        # when some were placed on merged records, those records' names.
        assert len(many) <= 4 + 8 * 3 + 5 + 2 + 2

    def test_roles_decide_merge_and_erase_controls(self):
        viewer = self.page(self.viewer).content.decode()
        assert "Merge into another user" not in viewer and "Erase this person" not in viewer
        editor = self.page(self.teammate).content.decode()
        assert "Merge into another user" in editor and "Erase this person" not in editor
        admin = self.page(self.owner).content.decode()
        assert "Erase this person" in admin
        erase = self.url("memories:user-erase", pk=self.ada.pk)
        release = self.url("memories:user-hold-release", pk=self.ada.pk)
        for user in (self.viewer, self.teammate):
            self.login(user)
            assert self.client.get(erase).status_code == 403
            assert self.client.post(erase).status_code == 403
            assert self.client.post(release).status_code == 403
        assert MemoryUser.objects.filter(pk=self.ada.pk).exists()

    def test_outsider_and_other_workspace_get_404(self):
        self.login(self.outsider)
        for name in ("memories:user", "memories:user-erase"):
            url = self.url(name, pk=self.ada.pk)
            assert self.client.get(url).status_code == 404
            foreign_ws = url.replace(str(self.workspace.pk), str(self.other_workspace.pk))
            assert self.client.get(foreign_ws).status_code == 404
        self.login(self.owner)
        assert self.client.get(self.url("memories:user", pk=self.foreign.pk)).status_code == 404
        assert self.client.post(self.url("memories:user-erase", pk=self.foreign.pk)).status_code == 404
        assert MemoryUser.objects.filter(pk=self.foreign.pk).exists()

    def test_erase_preview_counts_what_the_erasure_deletes(self):
        self.login(self.owner)
        url = self.url("memories:user-erase", pk=self.ada.pk)
        preview = self.htmx("get", url, target="person-erase").content.decode()
        assert "<html" not in preview and "Erase Ada?" in preview
        expected = person_erase_preview(memory_user=self.ada)
        assert expected["memory_users"] == 2 and expected["identities"] == 2
        assert expected["facts"] == 3 and expected["threads"] == 1 and expected["episodes"] == 1
        assert f'data-count="episodic entries">{expected["episodic_entries"]}<' in preview
        response = self.htmx("post", url, target="person-erase")
        assert response["HX-Redirect"] == self.url("memories:users")
        assert not MemoryUser.objects.filter(pk__in=[self.ada.pk, self.ada_mail.pk]).exists()
        assert MemoryUser.objects.filter(pk=self.bob.pk).exists()
        assert Fact.objects.filter(memory_user=self.bob).exists()

    def test_preview_equals_the_services_counts(self):
        """The preview's counts are the counts memory_user_erase reports for the same person."""
        preview = person_erase_preview(memory_user=self.bob)
        assert preview == memory_user_erase(memory_user=self.bob, actor="operator:owner")

    def test_erase_without_javascript_is_a_page_and_a_redirect(self):
        self.login(self.owner)
        url = self.url("memories:user-erase", pk=self.bob.pk)
        page = self.client.get(url).content.decode()
        total = sum(person_erase_preview(memory_user=self.bob).values())
        assert "<html" in page and 'method="post"' in page and f"Erase {total} rows" in page
        response = self.client.post(url)
        assert response.status_code == 302 and response["Location"] == self.url("memories:users")
        assert not MemoryUser.objects.filter(pk=self.bob.pk).exists()

    def test_inline_edit_cancel_still_gets_the_row(self):
        self.login(self.teammate)
        response = self.htmx("get", self.url("memories:user", pk=self.bob.pk), target=f"row-{self.bob.pk}")
        assert response.content.decode().lstrip().startswith(f'<tr id="row-{self.bob.pk}"')

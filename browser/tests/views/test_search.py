"""The one search across tiers (issue 15): grouped results, live results, isolation."""

from dataclasses import replace
from html import escape
from unittest import mock
from urllib.parse import quote

from browser.selectors.search import (
    ENTRIES_NOT_EMBEDDED,
    LIVE_PER_TIER,
    MESSAGES_NOT_EMBEDDED,
    PAGE_PER_TIER,
    search_everywhere,
    search_query_clean,
)
from browser.tests.base import BrowserTestCase
from browser.tests.factories import entry_make, memory_user_make
from core.embeddings import EmbeddingError, LocalEmbeddingProvider, query_cache
from core.errors import ApplicationError
from core.ranking import MEANING_UNAVAILABLE
from core.services import agent_get_or_create
from core.testing_openai import OpenAITestServer
from episodes.services import episode_create
from episodic.models import EpisodicEntry
from episodic.selectors import entry_search_by_meaning
from episodic.services.embeddings import entry_embed_batch
from episodic.tests.factories import use_test_embeddings
from facts.services import fact_remember
from procedures.services import procedure_create
from threads.models import Message
from threads.selectors import message_search_by_meaning
from threads.services import message_embed_batch, thread_append_messages, thread_create

_CALL = {"id": "call-1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}


class SearchTests(BrowserTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.ada = memory_user_make(cls.workspace, canonical_id="telegram:1", display_name="Ada Lisbon")
        cls.fact = fact_remember(
            workspace=cls.workspace, key="home_city", value="Lisbon", scope="user", memory_user=cls.ada
        ).fact
        cls.entry = entry_make(agent=cls.agent, memory_user=cls.ada, content="Ada moved to Lisbon in May.")
        cls.episode = episode_create(
            workspace=cls.workspace,
            agent=cls.agent,
            memory_user=cls.ada,
            trigger_type="chat",
            error="Lisbon timeout",
        )
        cls.procedure = procedure_create(
            workspace=cls.workspace,
            name="Book a Lisbon hotel",
            procedure_type="prompt_template",
            content="Ask for dates.",
        )
        cls.thread = thread_create(
            workspace=cls.workspace, agent=cls.agent, memory_user=cls.ada, title="Trip"
        )
        thread_append_messages(
            thread=cls.thread,
            messages=[
                {"role": "user", "content": "I am flying to Lisbon on Friday."},
                {"role": "assistant", "content": "Have a good trip."},
                {"role": "assistant", "content": "", "tool_calls": [_CALL]},
                {"role": "tool", "tool_call_id": "call-1", "content": "Lisbon weather: sunny"},
            ],
        )
        # The same words in another workspace: never found.
        globex = memory_user_make(
            cls.other_workspace, canonical_id="telegram:1", display_name="Globex Lisbon"
        )
        fact_remember(
            workspace=cls.other_workspace, key="globex_city", value="Lisbon", scope="user", memory_user=globex
        )
        entry_make(agent=cls.outsider_agent, memory_user=globex, content="Globex secret Lisbon note.")
        other_thread = thread_create(workspace=cls.other_workspace, agent=cls.outsider_agent, title="Globex")
        thread_append_messages(
            thread=other_thread, messages=[{"role": "user", "content": "Globex Lisbon plan"}]
        )

    def test_every_tier_is_a_group_with_its_match(self):
        """Each tier's group lists its match and opens it; another workspace's rows never show."""
        response = self.open_as(self.viewer, self.url("memories:search") + "?q=lisbon")
        html = response.content.decode()
        for slug in ("facts", "entries", "episodes", "procedures", "people", "messages"):
            assert f'id="tier-{slug}"' in html, slug
        assert html.index('id="tier-facts"') < html.index('id="tier-messages"')
        urls = {
            "facts": self.url("memories:fact", pk=self.fact.pk),
            "entries": self.url("memories:entry", pk=self.entry.pk),
            "episodes": self.url("memories:episode", pk=self.episode.pk),
            "procedures": self.url("memories:procedure", pk=self.procedure.pk),
            "users": self.url("memories:user", pk=self.ada.pk),
            "threads": self.url("memories:thread", pk=self.thread.pk),
        }
        for tab, url in urls.items():
            assert f'href="{url}"' in html, tab
        assert "Globex" not in html
        # Only user and assistant messages are searched (tool output is not conversation).
        assert "Lisbon weather" not in html and "flying to Lisbon" in html

    def test_the_meaning_group_says_when_nothing_is_embedded_yet(self):
        """These entries have no vectors yet: the words find them, the meaning cannot."""
        response = self.open_as(self.viewer, self.url("memories:search") + "?q=lisbon")
        html = response.content.decode()
        for slug, empty in (
            ("entries-meaning", ENTRIES_NOT_EMBEDDED),
            ("messages-meaning", MESSAGES_NOT_EMBEDDED),
        ):
            group = html[html.index(f'id="tier-{slug}"') :]
            assert group[: group.index("</section>")].count(escape(empty)) == 1, slug
        assert "close in meaning match." not in html

    def test_groups_come_from_the_tiers_own_filtersets(self):
        """A group holds what its tab's q filter finds, so "more in" continues the same list."""
        groups = {g.tier.slug: g for g in search_everywhere(principal=self._principal(), query="lisbon")}
        assert [h.pk for h in groups["facts"].hits] == [self.fact.pk]
        assert [h.pk for h in groups["entries"].hits] == [self.entry.pk]
        assert [h.pk for h in groups["episodes"].hits] == [self.episode.pk]
        assert [h.pk for h in groups["people"].hits] == [self.ada.pk]
        assert [h.link_pk for h in groups["messages"].hits] == [self.thread.pk]
        assert not any(g.more for g in groups.values())

    def test_procedures_best_match_first(self):
        """Procedures are ranked on their words as facts and entries are, not newest first: a
        procedure about terminals outranks a newer one that names one in passing."""
        about = procedure_create(
            workspace=self.workspace,
            name="Find the terminal",
            procedure_type="prompt_template",
            content="Terminal 1 or terminal 2: ask which terminal the airline flies from.",
        )
        passing = procedure_create(
            workspace=self.workspace,
            name="Book a flight",
            procedure_type="prompt_template",
            content="Ask for dates and the terminal.",
        )
        groups = {g.tier.slug: g for g in search_everywhere(principal=self._principal(), query="terminal")}
        assert [h.pk for h in groups["procedures"].hits] == [about.pk, passing.pk]

    def _principal(self):
        from browser.selectors import operator_context

        return operator_context(user=self.viewer, workspace_id=self.workspace.pk).principal

    def test_people_group_matches_what_the_users_tab_matches(self):
        """The people group is a union of ids (so an index can serve each arm), not the users
        tab's FilterSet itself: both find a person by display name, canonical id or a channel
        identity's external id, hide merged users and never reach another workspace."""
        from core.filters import filterset_apply
        from identities.filters import MemoryUserFilter
        from identities.models import ChannelIdentity, MemoryUser
        from identities.selectors import memory_user_scope

        by_name = memory_user_make(
            self.workspace, canonical_id="email:zed@example.com", display_name="Zed Porto"
        )
        by_canonical = memory_user_make(self.workspace, canonical_id="telegram:porto42", display_name="Bea")
        by_identity = memory_user_make(self.workspace, canonical_id="slack:U9", display_name="Cy")
        ChannelIdentity.objects.create(
            workspace=self.workspace, memory_user=by_identity, channel="web", external_id="PORTO-visitor"
        )
        merged = memory_user_make(self.workspace, canonical_id="telegram:porto-old", display_name="Old")
        MemoryUser.objects.filter(pk=merged.pk).update(merged_into=by_name)
        memory_user_make(self.other_workspace, canonical_id="telegram:porto", display_name="Porto elsewhere")
        principal = self._principal()
        tab = filterset_apply(MemoryUserFilter, {"q": "porto"}, memory_user_scope(principal))
        group = {g.tier.slug: g for g in search_everywhere(principal=principal, query="porto")}["people"]
        expected = {by_name.pk, by_canonical.pk, by_identity.pk}
        assert set(tab.values_list("pk", flat=True)) == expected
        assert {hit.pk for hit in group.hits} == expected

    def test_more_links_open_the_tab_filtered_by_the_query(self):
        for n in range(PAGE_PER_TIER + 1):
            entry_make(agent=self.agent, memory_user=self.ada, content=f"Lisbon note number {n}.")
        response = self.open_as(self.viewer, self.url("memories:search") + "?q=lisbon+note")
        html = response.content.decode()
        assert html.count('class="more-link"') == 1
        more = self.url("memories:entries") + "?q=lisbon+note"
        assert f'href="{more}"' in html
        assert f'data-count="{PAGE_PER_TIER}"' in html
        tab = self.client.get(more)
        assert f'data-total="{PAGE_PER_TIER + 1}"'.encode() in tab.content

    def test_messages_have_a_page_of_their_own(self):
        thread_append_messages(
            thread=self.thread, messages=[{"role": "user", "content": f"Lisbon again {n}"} for n in range(7)]
        )
        response = self.open_as(self.viewer, self.url("memories:search") + "?q=lisbon")
        more = self.url("memories:search") + "?q=lisbon&amp;tier=messages"
        assert f'href="{more}"'.encode() in response.content
        page = self.client.get(self.url("memories:search") + "?q=lisbon&tier=messages&per_page=25")
        assert b'data-total="8"' in page.content and b"Lisbon again 6" in page.content
        assert b'id="tier-facts"' not in page.content

    def test_live_results_are_a_grouped_listbox_fragment(self):
        """The header box's fragment: groups of options, each naming the page it opens."""
        for n in range(LIVE_PER_TIER + 2):
            entry_make(agent=self.agent, memory_user=self.ada, content=f"Lisbon memo {n}.")
        self.login(self.viewer)
        response = self.htmx("get", self.url("memories:search") + "?q=lisbon", target="site-search-list")
        html = response.content.decode()
        assert "<html" not in html and "<main" not in html
        assert html.count('role="group"') == 6
        assert 'aria-label="Episodic entries"' in html
        assert html.count('id="ss-entries-') == LIVE_PER_TIER + 1  # the hits and "More in"
        assert f'data-href="{self.url("memories:entries")}?q=lisbon"' in html
        assert 'id="ss-all"' in html and "Globex" not in html
        empty = self.htmx("get", self.url("memories:search") + "?q=", target="site-search-list")
        assert empty.content.strip() == b""

    def test_bounded_queries_whatever_the_data(self):
        url = self.url("memories:search") + "?q=lisbon"
        self.open_as(self.viewer, url)
        # Session, user, membership; then per tier its ranked ids and that page's rows, and for
        # the entries and the messages close in meaning the embedding's provider and the
        # nearest vectors (none here: nothing is embedded, so no rows are read).
        with self.assertNumQueries(3 + 2 * 6 + 2 * 2) as first:
            self.client.get(url)
        for n in range(20):
            entry_make(agent=self.agent, memory_user=self.ada, content=f"Lisbon more {n}.")
            fact_remember(workspace=self.workspace, key=f"lisbon_{n}", value="Lisbon", scope="global")
        with self.assertNumQueries(len(first.captured_queries)):
            self.client.get(url)

    def test_hostile_queries_answer_never_a_server_error(self):
        self.login(self.viewer)
        base = self.url("memories:search")
        for text in [
            "a\x00b",
            "x" * 10_000,
            "' OR 1=1 --",
            '"',
            "-",
            "!!! & | :*",
            "or",
            "{{ 7*7 }}",
            "\u202e",
        ]:
            for tier in ("", "messages", "facts", "entries-meaning", "messages-meaning", "nope"):
                response = self.client.get(f"{base}?q={quote(text)}&tier={tier}&page=x&per_page=-1&sort=zz")
                assert response.status_code == 200, (text, tier, response.status_code)
        assert search_query_clean("a\x00b  c" + "x" * 500) == ("a b c" + "x" * 500)[:200]

    def test_empty_query_explains_the_syntax(self):
        response = self.open_as(self.viewer, self.url("memories:search"))
        assert b"as in a web search" in response.content

    def test_header_box_is_a_combobox_on_every_page(self):
        response = self.open_as(self.viewer, self.url("memories:facts"))
        html = response.content.decode()
        assert 'role="combobox"' in html and 'aria-controls="site-search-list"' in html
        assert f'action="{self.url("memories:search")}"' in html

    def test_outsider_gets_a_404(self):
        self.login(self.outsider)
        assert self.client.get(self.url("memories:search") + "?q=lisbon").status_code == 404


class MeaningSearchTests(BrowserTestCase):
    """The workspace's entries and messages nearest in meaning to the query: what its words
    do not say."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.ada = memory_user_make(cls.workspace, canonical_id="telegram:1", display_name="Ada")
        cls.bo = memory_user_make(cls.workspace, canonical_id="telegram:2", display_name="Bo")
        cls.other_agent = agent_get_or_create(workspace=cls.workspace, slug="second-agent")
        cls.money_back = entry_make(
            agent=cls.agent, memory_user=cls.ada, content="Ada wants her money back for the broken kettle."
        )
        cls.reimbursed = entry_make(
            agent=cls.other_agent, memory_user=cls.bo, content="Bo was reimbursed for the late delivery."
        )
        cls.hiking = entry_make(agent=cls.agent, memory_user=cls.bo, content="Bo goes hiking in the Alps.")
        cls.held = entry_make(
            agent=cls.agent,
            memory_user=cls.ada,
            content="Ada asked for a refund of her subscription.",
            review=EpisodicEntry.Review.HELD,
        )
        cls.rejected = entry_make(
            agent=cls.agent,
            memory_user=cls.bo,
            content="Bo demanded a refund for the cancelled flight.",
            status=EpisodicEntry.Status.REJECTED,
        )
        globex = memory_user_make(cls.other_workspace, canonical_id="telegram:1", display_name="Globex")
        cls.elsewhere = entry_make(
            agent=cls.outsider_agent, memory_user=globex, content="Globex customer wants a refund."
        )
        entry_embed_batch(
            entry_ids=[
                cls.money_back.pk,
                cls.reimbursed.pk,
                cls.hiking.pk,
                cls.held.pk,
                cls.rejected.pk,
                cls.elsewhere.pk,
            ]
        )
        cls.kettle_thread = thread_create(
            workspace=cls.workspace, agent=cls.agent, memory_user=cls.ada, title="Kettle"
        )
        cls.delivery_thread = thread_create(
            workspace=cls.workspace, agent=cls.other_agent, memory_user=cls.bo, title="Delivery"
        )
        other_thread = thread_create(workspace=cls.other_workspace, agent=cls.outsider_agent, title="Globex")
        messages = [
            *thread_append_messages(
                thread=cls.kettle_thread,
                messages=[{"role": "user", "content": "The kettle broke, I would like my money back."}],
            ),
            *thread_append_messages(
                thread=cls.delivery_thread,
                messages=[{"role": "user", "content": "Can I be reimbursed for the late parcel?"}],
            ),
            *thread_append_messages(
                thread=other_thread, messages=[{"role": "user", "content": "Globex wants a refund."}]
            ),
        ]
        message_embed_batch(message_ids=[m.pk for m in messages])

    def _principal(self):
        from browser.selectors import operator_context

        return operator_context(user=self.viewer, workspace_id=self.workspace.pk).principal

    def test_finds_entries_that_share_no_word_with_the_query(self):
        """No remembered entry of the workspace says "refund": the words find nothing, the
        meaning finds both people's, under either agent, before the unrelated one."""
        groups = {g.tier.slug: g for g in search_everywhere(principal=self._principal(), query="refund")}
        assert groups["entries"].hits == []
        found = [hit.pk for hit in groups["entries-meaning"].hits]
        assert set(found[:2]) == {self.money_back.pk, self.reimbursed.pk}
        assert found[2:] == [self.hiking.pk]
        response = self.open_as(self.viewer, self.url("memories:search") + "?q=refund")
        html = response.content.decode()
        assert 'id="tier-entries-meaning"' in html
        assert f'href="{self.url("memories:entry", pk=self.money_back.pk)}"' in html
        # Each hit says how close it is: the nearest are listed whatever they say.
        similarity = dict(entry_search_by_meaning(principal=self._principal(), query="refund"))
        details = {hit.pk: hit.detail for hit in groups["entries-meaning"].hits}
        assert (
            details[self.money_back.pk]
            == f"Ada · {self.agent.slug} · similarity {similarity[self.money_back.pk]:.2f}"
        )

    def test_held_rejected_and_other_workspaces_entries_never_show(self):
        nearest = entry_search_by_meaning(principal=self._principal(), query="refund")
        ids = [pk for pk, _ in nearest]
        assert self.money_back.pk in ids and self.reimbursed.pk in ids
        assert {self.held.pk, self.rejected.pk, self.elsewhere.pk}.isdisjoint(ids)
        similarities = [value for _, value in nearest]
        assert similarities == sorted(similarities, reverse=True)
        page = self.open_as(self.viewer, self.url("memories:search") + "?q=refund&tier=entries-meaning")
        html = page.content.decode()
        assert "broken kettle" in html and "late delivery" in html
        for hidden in ("subscription", "cancelled flight", "Globex"):
            assert hidden not in html, hidden
        assert html.index("late delivery") < html.index("Alps") and html.index("broken kettle") < html.index(
            "Alps"
        )

    def test_an_agent_bound_principal_finds_its_agents_entries_only(self):
        principal = replace(self._principal(), agent=self.agent)
        ids = [pk for pk, _ in entry_search_by_meaning(principal=principal, query="refund")]
        assert self.money_back.pk in ids and self.reimbursed.pk not in ids

    def test_the_live_results_leave_them_out(self):
        """The header box searches at every keystroke: no embedding there."""
        self.login(self.viewer)
        embedding = mock.patch.object(LocalEmbeddingProvider, "embed_query", side_effect=AssertionError)
        with embedding:
            response = self.htmx("get", self.url("memories:search") + "?q=kettle", target="site-search-list")
        assert response.status_code == 200
        assert b"broken kettle" in response.content
        assert b"-meaning-" not in response.content and b"close in meaning" not in response.content

    def test_a_model_that_does_not_answer_is_said_in_its_group(self):
        failing = mock.patch.object(LocalEmbeddingProvider, "embed_query", side_effect=EmbeddingError("down"))
        with failing, self.assertLogs("core.ranking", "WARNING"):
            response = self.open_as(self.viewer, self.url("memories:search") + "?q=refunds+please")
            page = self.client.get(self.url("memories:search") + "?q=refunds+please&tier=entries-meaning")
        assert MEANING_UNAVAILABLE.encode() in response.content
        assert page.status_code == 200 and MEANING_UNAVAILABLE.encode() in page.content
        with (
            self.assertRaises(ApplicationError) as raised,
            failing,
            self.assertLogs("core.ranking", "WARNING"),
        ):
            entry_search_by_meaning(principal=self._principal(), query="refunds again")
        assert raised.exception.code == "embedding_unavailable" and raised.exception.status_code == 503

    def test_an_empty_query_is_refused_before_anything_is_embedded(self):
        embedding = mock.patch.object(LocalEmbeddingProvider, "embed_query", side_effect=AssertionError)
        with embedding, self.assertRaises(ApplicationError) as raised:
            entry_search_by_meaning(principal=self._principal(), query="  ")
        assert "query" in raised.exception.fields

    def test_finds_messages_that_share_no_word_with_the_query(self):
        """Both threads' messages, not another workspace's; each opens its thread."""
        groups = {g.tier.slug: g for g in search_everywhere(principal=self._principal(), query="refund")}
        assert groups["messages"].hits == []
        hits = groups["messages-meaning"].hits
        assert {hit.link_pk for hit in hits} == {self.kettle_thread.pk, self.delivery_thread.pk}
        ids = [pk for pk, _ in message_search_by_meaning(principal=self._principal(), query="refund")]
        assert len(ids) == 2
        page = self.open_as(self.viewer, self.url("memories:search") + "?q=refund&tier=messages-meaning")
        html = page.content.decode()
        assert "money back" in html and "late parcel" in html and "Globex" not in html
        assert f'href="{self.url("memories:thread", pk=self.kettle_thread.pk)}"' in html
        agent_bound = replace(self._principal(), agent=self.other_agent)
        ids = [pk for pk, _ in message_search_by_meaning(principal=agent_bound, query="refund")]
        assert len(ids) == 1 and Message.objects.get(pk=ids[0]).thread_id == self.delivery_thread.pk


class MeaningSearchEndpointTests(BrowserTestCase):
    """With an embedding endpoint, the page's two groups close in meaning share one query
    vector: the endpoint is asked once per page, not once per group."""

    def setUp(self):
        query_cache().clear()
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        ada = memory_user_make(self.workspace)
        self.entry = entry_make(agent=self.agent, memory_user=ada, content="Ada wants her money back.")
        entry_embed_batch(entry_ids=[self.entry.pk])
        thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=ada)
        messages = thread_append_messages(
            thread=thread, messages=[{"role": "user", "content": "I want my money back."}]
        )
        message_embed_batch(message_ids=[m.pk for m in messages])

    def asked_for(self, text):
        return [body for path, body in self.server.requests if body.get("input") == [text]]

    def test_the_page_asks_the_endpoint_once_for_both_groups(self):
        response = self.open_as(self.viewer, self.url("memories:search") + "?q=money+back+please")
        html = response.content.decode()
        assert 'id="tier-entries-meaning"' in html and 'id="tier-messages-meaning"' in html
        assert "Ada wants her money back." in html and "I want my money back." in html
        assert len(self.asked_for("money back please")) == 1

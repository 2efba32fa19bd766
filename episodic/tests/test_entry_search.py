import json
import threading
import time
import uuid
from dataclasses import replace
from datetime import timedelta
from unittest import mock

import numpy as np
import pytest
from django.db import connection
from django.test import TransactionTestCase, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.embeddings import (
    LOCAL_MODEL_NAME,
    EmbeddingError,
    LocalEmbeddingProvider,
    _query_outages,
    query_cache,
)
from core.errors import ApplicationError
from core.ranking import PLAN_EXACT, PLAN_HNSW, QUERY_TOO_LONG, bm25_sql, vector_sql
from core.testing import (
    MemoryTestCase,
    bitmap_only_plan,
    fused_candidates,
    hnsw_above,
    plan_nodes,
    statements_sent,
)
from core.testing_openai import OpenAITestServer
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.selectors import ENTRY_WEIGHTS, EntrySearchFilters, entry_search_hybrid
from episodic.services import entry_content_hash
from episodic.tests.factories import entry_factory, memory_user_factory, use_test_embeddings
from threads.models import Message
from threads.services import thread_append_messages, thread_create


class EntrySearchTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)
        self.other_person = memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo")

    def search(self, query, **kwargs):
        kwargs.setdefault("agent", self.agent)
        kwargs.setdefault("memory_user", self.person)
        return entry_search_hybrid(query=query, **kwargs)

    def test_ranks_the_matching_entry_first(self):
        """Lexical and vector evidence agree on the entry about the query."""
        entry_factory(agent=self.agent, memory_user=self.person, content="Ada adopted a cat named Miso.")
        wanted = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada is training for a marathon."
        )
        entry_factory(agent=self.agent, memory_user=self.person, content="Ada's sister lives in Porto.")
        result = self.search("How is the marathon training going?")
        assert result.hits[0].entry == wanted
        assert result.plan == PLAN_EXACT

    def test_an_entry_without_vector_is_found_lexically(self):
        """Before the embedding task runs, full-text search already finds the entry."""
        entry = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada prefers window seats.", embed=False
        )
        result = self.search("window seats")
        assert [h.entry for h in result.hits] == [entry]

    def test_a_failing_embedding_endpoint_degrades_to_lexical(self):
        """The query vector cannot be computed: lexical ranking still answers."""
        wanted = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada is training for a marathon."
        )
        self.server.fail_next = 1
        result = self.search("marathon")
        assert [h.entry for h in result.hits] == [wanted]
        assert result.plan is None

    @override_settings(EMBEDDING_QUERY_TIMEOUT_SECONDS=0.2)
    def test_an_endpoint_that_hangs_is_waited_for_at_most_the_query_timeout(self):
        """A search's query vector waits EMBEDDING_QUERY_TIMEOUT_SECONDS, not the endpoint's
        30 s for stored texts: the search then ranks lexically."""
        wanted = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada is training for a marathon."
        )
        asked = len(self.server.requests)
        self.server.delay_seconds = 1.0
        with self.assertLogs("core.ranking", "WARNING") as logs:
            result = self.search("marathon")
        assert [h.entry for h in result.hits] == [wanted]
        assert result.plan is None
        assert len(self.server.requests) == asked + 1
        assert "timed out" in logs.output[0]

    @override_settings(EMBEDDING_QUERY_RETRY_SECONDS=60)
    def test_after_a_failed_query_the_endpoint_is_asked_again_only_after_the_retry_window(self):
        """An outage costs one search its wait: the next ones rank lexically at once, without
        asking; the first after the window asks again and ranks with the vector."""
        self.addCleanup(_query_outages.clear)
        wanted = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada is training for a marathon."
        )
        asked = len(self.server.requests)
        self.server.fail_next = 1
        with self.assertLogs("core.ranking", "WARNING"):
            first = self.search("marathon")
            second = self.search("marathon training")
        assert (first.plan, second.plan) == (None, None)
        assert [h.entry for h in second.hits] == [wanted]
        assert len(self.server.requests) == asked + 1
        later = time.monotonic() + 61
        with mock.patch("core.embeddings.time.monotonic", return_value=later):
            third = self.search("marathon training")
        assert third.plan == PLAN_EXACT and [h.entry for h in third.hits] == [wanted]
        assert len(self.server.requests) == asked + 2
        assert _query_outages == {}

    def test_a_local_query_embedding_failing_on_its_thread_degrades_to_lexical(self):
        """The local model's query vector is computed on another thread while BM25 is sent
        (`query_vector_for`); its failure there answers as the endpoint's does."""
        wanted = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada is training for a marathon."
        )
        failing = mock.patch.object(
            LocalEmbeddingProvider, "embed_query", side_effect=EmbeddingError("no weights")
        )
        with failing, self.assertLogs("core.ranking", "WARNING") as logs:
            result = self.search("marathon", provider=LocalEmbeddingProvider(cache_scope="failing"))
        assert [h.entry for h in result.hits] == [wanted]
        assert result.plan is None
        assert "lexical only" in logs.output[0]

    @override_settings(EMBEDDING_LOCAL_WAIT_SECONDS=0.2)
    def test_a_local_query_embedding_that_never_returns_degrades_to_lexical(self):
        """The search waits EMBEDDING_LOCAL_WAIT_SECONDS for its query vector, then ranks
        lexically; the hung call does not hold the search."""
        wanted = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada is training for a marathon."
        )
        release = threading.Event()
        self.addCleanup(release.set)  # The pool thread is not left blocked.

        def hung(provider, text):
            release.wait(30)
            return [0.0] * 384

        with (
            mock.patch.object(LocalEmbeddingProvider, "embed_query", hung),
            self.assertLogs("core.embeddings", "ERROR"),
            self.assertLogs("core.ranking", "WARNING") as logs,
        ):
            result = self.search("marathon", provider=LocalEmbeddingProvider(cache_scope="hung"))
        assert [h.entry for h in result.hits] == [wanted]
        assert result.plan is None
        assert "lexical only" in logs.output[0]

    def test_scope_is_one_agent_and_one_person(self):
        """Another person's entries and another agent's entries are never returned."""
        entry_factory(
            agent=self.agent, memory_user=self.other_person, content="Bo is training for a marathon."
        )
        entry_factory(
            agent=self.other_agent, memory_user=self.person, content="Ada is training for a marathon."
        )
        assert self.search("marathon training").hits == []

    def test_inactive_entries_are_not_returned(self):
        """Superseded and rejected entries stay out of recall."""
        entry_factory(
            agent=self.agent,
            memory_user=self.person,
            content="Ada is training for a marathon.",
            status=EpisodicEntry.Status.SUPERSEDED,
        )
        assert self.search("marathon").hits == []

    def test_recency_breaks_ties(self):
        """Of two equally relevant entries the newer ranks first (half-life decay)."""
        old = entry_factory(agent=self.agent, memory_user=self.person, content="Ada visited Rome.")
        new = entry_factory(agent=self.agent, memory_user=self.person, content="Ada visited Rome!")
        EpisodicEntry.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=400))
        result = self.search("visited Rome")
        assert [h.entry for h in result.hits] == [new, old]

    def test_the_candidate_pool_is_never_smaller_than_what_is_asked_for(self):
        """Entries rank from 50 candidates a channel; a caller asking for more gets more."""
        from episodic.selectors import ENTRY_WEIGHTS

        assert ENTRY_WEIGHTS.pool == 50
        many = [
            entry_factory(
                agent=self.agent, memory_user=self.person, content=f"Kite number {i} flew.", embed=False
            )
            for i in range(70)
        ]
        result = self.search("kite", top_k=60, mode="lexical")
        assert len(result.hits) == 60
        assert {h.entry.pk for h in result.hits} <= {e.pk for e in many}

    def test_modes_switch_channels(self):
        """Lexical mode needs a shared word; vector mode does not read the text index."""
        entry_factory(agent=self.agent, memory_user=self.person, content="Ada adopted a cat.", embed=False)
        assert self.search("cat", mode="lexical").hits
        assert self.search("cat", mode="vector").hits == []

    def test_bad_queries_are_rejected(self):
        """Empty and oversize queries and unknown modes raise field errors."""
        for query, field in (("   ", "query"), ("x" * 3000, "query")):
            try:
                self.search(query)
            except ApplicationError as exc:
                assert field in exc.fields
            else:
                raise AssertionError("no error")
        with override_settings(EPISODIC_QUERY_MAX_LENGTH=5):
            try:
                self.search("marathon")
            except ApplicationError as exc:
                assert exc.message == QUERY_TOO_LONG.format(limit=5)
        try:
            self.search("marathon", mode="magic")
        except ApplicationError as exc:
            assert "mode" in exc.fields


def kept_ids_sql(sql: str) -> str | None:
    """The subquery of a filtered vector statement that selects the kept entries' ids."""
    opening = "entry_id IN ("
    start = sql.find(opening)
    if start < 0:
        return None
    depth, start = 1, start + len(opening)
    for position in range(start, len(sql)):
        depth += {"(": 1, ")": -1}.get(sql[position], 0)
        if depth == 0:
            return sql[start:position]
    raise AssertionError(f"unbalanced: {sql}")


class EntrySearchFilterTests(MemoryTestCase):
    """`filters` narrow the searched (agent, person) scope before either channel picks its
    candidates; they never widen it."""

    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)
        self.now = timezone.now()

    def stored(self, content, *, days_ago=0, person=None, **kwargs):
        entry = entry_factory(agent=self.agent, memory_user=person or self.person, content=content, **kwargs)
        EpisodicEntry.objects.filter(pk=entry.pk).update(created_at=self.now - timedelta(days=days_ago))
        return entry

    def found(self, query="Ada trip", **filters):
        result = entry_search_hybrid(
            agent=self.agent,
            memory_user=self.person,
            query=query,
            top_k=20,
            filters=EntrySearchFilters(**filters),
        )
        return {hit.entry for hit in result.hits}

    def test_each_filter_keeps_only_its_entries(self):
        old = self.stored("Ada planned a trip to Porto.", days_ago=40, metadata={"topic": "travel", "n": 1})
        recent = self.stored(
            "Ada booked a trip to Lisbon.",
            days_ago=2,
            source=EpisodicEntry.Source.AGENT_DIRECT,
            metadata={"topic": "travel", "tags": ["work", "rail"]},
        )
        today = self.stored("Ada cancelled the trip to Madrid.", metadata={"topic": "plans", "n": 2})
        week_ago = self.now - timedelta(days=7)
        assert self.found() == {old, recent, today}
        assert self.found(created_after=week_ago) == {recent, today}
        assert self.found(created_before=week_ago) == {old}
        assert self.found(
            created_after=self.now - timedelta(days=3), created_before=self.now - timedelta(days=1)
        ) == {recent}
        assert self.found(sources=(EpisodicEntry.Source.AGENT_DIRECT,)) == {recent}
        both = (EpisodicEntry.Source.AGENT_DIRECT, EpisodicEntry.Source.USER_ASSERTION)
        assert self.found(sources=both) == {old, recent, today}
        assert self.found(metadata={"topic": "travel"}) == {old, recent}
        assert self.found(metadata={"tags": ["rail"]}) == {recent}
        assert self.found(metadata={"n": 2}) == {today}
        assert self.found(metadata={"topic": "travel", "n": 2}) == set()
        assert self.found(metadata={}) == {old, recent, today}
        assert self.found(metadata={"topic": "travel"}, created_after=week_ago) == {recent}

    def test_both_channels_are_filtered(self):
        """Lexical and vector candidates alike: an entry the filter leaves out is not found by
        either, and one it keeps is found by each."""
        kept = self.stored("Ada's trip to Porto by train.", metadata={"keep": True})
        self.stored("Ada's trip to Porto by train, again.", metadata={"keep": False})
        for mode in ("lexical", "vector", "hybrid"):
            with self.subTest(mode=mode):
                result = entry_search_hybrid(
                    agent=self.agent,
                    memory_user=self.person,
                    query="trip to Porto by train",
                    mode=mode,
                    filters=EntrySearchFilters(metadata={"keep": True}),
                )
                assert [hit.entry for hit in result.hits] == [kept]

    def test_a_narrow_filter_gets_a_full_pool_of_its_own(self):
        """The filter is applied before each channel's pool of 50 is cut, not after: the five
        tagged entries that match the query least are all found, behind 60 that match it
        better."""
        for i in range(60):
            self.stored(f"Ada took a trip to Porto by train, number {i}.")
        tagged = {
            self.stored(f"Ada mentioned a trip once, item {i}.", metadata={"list": "short"}) for i in range(5)
        }
        result = entry_search_hybrid(
            agent=self.agent,
            memory_user=self.person,
            query="trip to Porto by train",
            top_k=10,
            filters=EntrySearchFilters(metadata={"list": "short"}),
        )
        assert {hit.entry for hit in result.hits} == tagged

    def test_filters_never_widen_the_scope(self):
        """Another person's and another agent's entries, and rejected, held or superseded
        ones, stay out whatever the filter matches."""
        other = memory_user_factory(self.workspace, canonical_id="telegram:7", display_name="Bo")
        tag = {"metadata": {"topic": "travel"}}
        self.stored("Bo's trip to Rome.", person=other, **tag)
        entry_factory(agent=self.other_agent, memory_user=self.person, content="Ada trip to Oslo.", **tag)
        for status in (EpisodicEntry.Status.REJECTED, EpisodicEntry.Status.SUPERSEDED):
            self.stored(f"Ada trip, {status}.", status=status, **tag)
        self.stored("Ada trip, held.", review=EpisodicEntry.Review.HELD, **tag)
        mine = self.stored("Ada trip to Faro.", **tag)
        assert self.found(query="trip", metadata={"topic": "travel"}) == {mine}
        assert self.found(query="trip", created_after=self.now - timedelta(days=1)) == {mine}

    def test_a_metadata_filter_can_be_answered_by_its_index(self):
        """The metadata index (episodic 0013) can answer the label condition as the search and
        the list write it; whether the planner takes it depends on how few of the scope's
        entries carry the label (docs/speed.md measures it at 5,000 a person)."""
        conditions, params = EntrySearchFilters(metadata={"trip": True}).sql()
        listed = EpisodicEntry.objects.filter(metadata__contains={"trip": True}).values("id")
        for sql, sql_params in (
            ("SELECT id FROM episodes_episodicentry WHERE true" + conditions, params),
            listed.query.sql_with_params(),
        ):
            nodes = bitmap_only_plan(sql, sql_params)
            assert "episodes_entry_metadata" in {node.get("Index Name") for node in nodes}, nodes
            assert not any(node.get("Disabled") for node in nodes), nodes

    def test_a_filters_values_are_parameters(self):
        """Quotes, a closing parenthesis and a jsonb cast in a member are data."""
        odd = {"k'); DROP TABLE episodes_episodicentry; --": "v'::jsonb"}
        entry = self.stored("Ada trip to Braga.", metadata=odd)
        assert self.found(metadata=odd) == {entry}
        assert self.found(metadata={"k": "v"}) == set()

    def test_a_metadata_filter_jsonb_cannot_hold_is_refused(self):
        """NaN and Infinity (which a tool call's JSON may carry) are a 400 naming `metadata`,
        not a database error."""
        for metadata in ({"n": float("nan")}, {"a": [float("-inf")]}, {"k": "a\x00b"}):
            with self.subTest(metadata=repr(metadata)), self.assertRaises(ApplicationError) as caught:
                EntrySearchFilters(metadata=metadata)
            assert caught.exception.status_code == 400
            assert "metadata" in caught.exception.fields

    def test_every_source_is_no_source_filter(self):
        """Naming every kind keeps every entry: no condition, so no semi-join to pay for."""
        assert EntrySearchFilters(sources=tuple(EpisodicEntry.Source.values)).sql() == ("", {})
        assert EntrySearchFilters(sources=(EpisodicEntry.Source.AGENT_DIRECT,)).sql()[0]

    def test_a_source_filter_of_unknown_kinds_is_refused(self):
        """Callers that skip the API's serializer (the tools, Python callers) get the same 400
        naming `source`, not a filter that keeps nothing."""
        assert EntrySearchFilters(sources=None).sources == ()
        for sources in (("gossip",), "user_assertion", ["user_assertion"], (None,), (["user_assertion"],)):
            with self.subTest(sources=sources), self.assertRaises(ApplicationError) as caught:
                EntrySearchFilters(sources=sources)
            assert caught.exception.status_code == 400
            assert "source" in caught.exception.fields

    def test_unfiltered_searches_send_the_statements_they_sent(self):
        """No filter, no condition: a search without filters sends none of theirs."""
        self.stored("Ada planned a trip to Porto.")
        with CaptureQueriesContext(connection) as plain:
            self.found()
        assert not any("filter_" in q["sql"] or "metadata @>" in q["sql"] for q in plain)

    def api_search(self, **fields):
        body = {"agent": self.agent.slug, "memory_user": str(self.person.pk), "query": "Ada trip", **fields}
        return self.api().post("/api/v1/episodic-entries/search/", body, format="json")

    def test_filters_through_the_api(self):
        self.stored("Ada planned a trip to Porto.", days_ago=40, metadata={"topic": "travel"})
        recent = self.stored(
            "Ada booked a trip to Lisbon.",
            days_ago=2,
            source=EpisodicEntry.Source.AGENT_DIRECT,
            metadata={"topic": "travel"},
        )
        self.stored("Ada cancelled the trip to Madrid.", source=EpisodicEntry.Source.AGENT_DIRECT)
        response = self.api_search(
            created_after=(self.now - timedelta(days=7)).isoformat(),
            created_before=self.now.isoformat(),
            source=["agent_direct", "agent_direct"],
            metadata={"topic": "travel"},
            render=True,
        )
        assert response.status_code == 200, response.content
        body = response.json()
        assert [hit["entry"]["id"] for hit in body["results"]] == [str(recent.pk)]
        assert "Lisbon" in body["memory"] and "Porto" not in body["memory"]

    def test_null_filters_are_no_filters(self):
        """A client that sends every argument, unset ones as null, searches the whole scope."""
        entries = {self.stored("Ada planned a trip to Porto.", days_ago=40), self.stored("Ada's trip.")}
        unset = {"created_after": None, "created_before": None, "source": None, "metadata": None}
        for body in ({}, unset):
            with self.subTest(body=body):
                response = self.api_search(**body)
                assert response.status_code == 200, response.content
                assert {hit["entry"]["id"] for hit in response.json()["results"]} == {
                    str(e.pk) for e in entries
                }

    def test_refused_filters_name_their_field(self):
        now = self.now.isoformat()
        cases = {
            "created_after": ["yesterday", 1700000000, ["2026-01-01"]],
            "created_before": ["2026-13-01", {}],
            "source": ["agent_direct", [], ["gossip"], [1]],
            "metadata": [[], "topic", 1],
        }
        for name, values in cases.items():
            for value in values:
                with self.subTest(field=name, value=value):
                    response = self.api_search(**{name: value})
                    assert response.status_code == 400, response.content
                    assert response.json()["error"]["fields"][name]
        for after in (now, (self.now + timedelta(seconds=1)).isoformat()):
            with self.subTest(created_after=after):
                response = self.api_search(created_after=after, created_before=now)
                assert response.status_code == 400, response.content
                assert response.json()["error"]["fields"]["created_before"]


class EntrySpeakerTests(MemoryTestCase):
    """An entry taken from a message speaks with its message's speaker: a query naming that
    speaker lifts their entries and is searched by the vectors in their words."""

    QUERY = "What do Melanie's kids like?"

    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace, display_name="Caroline")
        self.thread = thread_create(
            workspace=self.workspace, agent=self.agent, memory_user=self.person, channel_chat_id="s1"
        )
        turns = thread_append_messages(
            thread=self.thread,
            messages=[
                {"role": "user", "name": "Caroline", "content": "Melanie, do Melanie's kids like museums?"},
                {"role": "assistant", "name": "Melanie", "content": "My kids love the dinosaur bones."},
            ],
        )
        self.asked, self.answered = (
            entry_factory(
                agent=self.agent,
                memory_user=self.person,
                content=turn.content,
                source_thread=self.thread,
                source_message_ids=[str(turn.pk)],
            )
            for turn in turns
        )

    def search(self, query=QUERY, **kwargs):
        return entry_search_hybrid(agent=self.agent, memory_user=self.person, query=query, **kwargs)

    def embedded_texts(self):
        return [body["input"] for path, body in self.server.requests if path.endswith("/embeddings")]

    def test_the_source_messages_speaker_is_searched_in_their_words(self):
        """Caroline's question holds Melanie's name twice; Melanie's own entry says "my kids"."""
        before = len(self.embedded_texts())
        result = self.search(mode="vector")
        assert self.embedded_texts()[before:] == [[self.QUERY], ["What do my kids like?"]]
        assert result.hits[0].entry == self.answered
        assert self.search().hits[0].entry == self.answered

    def test_the_speakers_names_are_looked_up_once_a_search(self):
        """The pool described again under the rewritten vector reuses the names it has."""
        with CaptureQueriesContext(connection) as captured:
            self.search()
        lookups = [q["sql"] for q in captured if "FROM threads_message m JOIN threads_thread" in q["sql"]]
        assert len(lookups) == 1

    def test_entries_without_a_source_have_no_speaker(self):
        EpisodicEntry.objects.update(source_message_ids=[])
        before = len(self.embedded_texts())
        result = self.search()
        assert self.embedded_texts()[before:] == [[self.QUERY]]
        assert {h.entry for h in result.hits} == {self.asked, self.answered}

    def test_entries_without_a_source_cost_no_statement_more(self):
        """Names are looked up only for a pool that holds source messages."""
        EpisodicEntry.objects.update(source_message_ids=[])

        def statements(**kwargs):
            self.search(**kwargs)  # the scope's counts are cached
            with CaptureQueriesContext(connection) as captured:
                self.search(**kwargs)
            return len(captured)

        assert statements() == statements(weights=replace(ENTRY_WEIGHTS, speaker=0.0))

    def test_source_ids_that_are_not_this_pairs_messages_lend_no_speaker(self):
        """Ids recorded from a client's transcript may be anything, and a message of another
        person or agent may be named Melanie too: none of them gives an entry a speaker, and
        none makes the search fail."""
        other = memory_user_factory(self.workspace, canonical_id="telegram:9", display_name="Bo")
        foreign = []
        for agent, person in ((self.agent, other), (self.other_agent, self.person)):
            thread = thread_create(
                workspace=self.workspace, agent=agent, memory_user=person, channel_chat_id=f"x{agent.pk}"
            )
            (message,) = thread_append_messages(
                thread=thread, messages=[{"role": "assistant", "name": "Melanie", "content": "Hi."}]
            )
            foreign.append(str(message.pk))
        hostile = [
            *foreign,
            str(uuid.uuid4()),
            "not-a-uuid",
            "'; DROP TABLE threads_message; --",
            str(self.answered.pk).upper() + "0",
            12,
            None,
            {"id": foreign[0]},
            [foreign[0]],
        ]
        for value in hostile:
            with self.subTest(value=value):
                EpisodicEntry.objects.filter(pk=self.answered.pk).update(source_message_ids=[value])
                query_cache().clear()  # Each search asks the endpoint for what it embeds.
                before = len(self.embedded_texts())
                result = self.search()
                assert self.embedded_texts()[before:] == [[self.QUERY]]
                assert {h.entry for h in result.hits} == {self.asked, self.answered}

    def unnamed_user_entry(self):
        """An entry taken from the person's own turn, sent without a name."""
        (turn,) = thread_append_messages(
            thread=self.thread, messages=[{"role": "user", "content": "My class painted a lake at sunrise."}]
        )
        return entry_factory(
            agent=self.agent,
            memory_user=self.person,
            content=turn.content,
            source_thread=self.thread,
            source_message_ids=[str(turn.pk)],
        )

    def test_an_entry_taken_from_an_unnamed_user_message_speaks_as_the_person(self):
        """The person's own turn sent without a name (as most chat clients send it) is theirs:
        "Caroline" in a query is searched as "I" and lifts it."""
        painted = self.unnamed_user_entry()
        before = len(self.embedded_texts())
        result = self.search("What did Caroline's class paint?")
        assert self.embedded_texts()[before:] == [
            ["What did Caroline's class paint?"],
            ["What did my class paint?"],
        ]
        assert result.hits[0].entry == painted

    def test_the_user_is_the_person_through_the_api(self):
        """`recall_memory("What did the user's class paint?")` finds the person's own entry
        as their name would, for a person known by name or only by an id."""
        painted = self.unnamed_user_entry()
        for display_name in ("Caroline", ""):
            with self.subTest(display_name=display_name):
                self.person.display_name = display_name
                self.person.save(update_fields=["display_name"])
                query_cache().clear()  # Each search asks the endpoint for what it embeds.
                before = len(self.embedded_texts())
                response = self.api().post(
                    "/api/v1/episodic-entries/search/",
                    {
                        "agent": self.agent.slug,
                        "memory_user": str(self.person.pk),
                        "query": "What did the user's class paint?",
                        "mode": "vector",
                    },
                    format="json",
                )
                assert response.status_code == 200, response.content
                assert self.embedded_texts()[before:] == [
                    ["What did the user's class paint?"],
                    ["What did my class paint?"],
                ]
                assert response.json()["results"][0]["entry"]["id"] == str(painted.pk)

    def api_search(self, query, **fields):
        body = {"agent": self.agent.slug, "memory_user": str(self.person.pk), "query": query, **fields}
        return self.api().post("/api/v1/episodic-entries/search/", body, format="json")

    def test_the_persons_own_words_through_the_api(self):
        """`asked_by_person`: the query is the message the person sent, so its "my" lifts the
        person's own entries by the speaker term, as their name would; left out, it is the
        agent's query and "my" is nobody's."""
        painted = self.unnamed_user_entry()

        def scores(**fields):
            response = self.api_search("Do my kids or my class paint?", mode="lexical", **fields)
            assert response.status_code == 200, response.content
            return {hit["entry"]["id"]: hit["score"] for hit in response.json()["results"]}

        asked, unasked = scores(asked_by_person=True), scores()
        assert unasked == scores(asked_by_person=False)
        carolines, melanies = (str(painted.pk), str(self.asked.pk)), str(self.answered.pk)
        assert set(asked) == {*carolines, melanies}
        for entry_id in carolines:
            assert asked[entry_id] - unasked[entry_id] == pytest.approx(ENTRY_WEIGHTS.speaker)
        assert asked[melanies] == pytest.approx(unasked[melanies])

    def test_the_speaker_the_person_names_is_you_through_the_api(self):
        before = len(self.embedded_texts())
        response = self.api_search("What do I know of Melanie's kids?", asked_by_person=True)
        assert response.status_code == 200, response.content
        assert self.embedded_texts()[before:] == [
            ["What do I know of Melanie's kids?"],
            ["What do I know of your kids?"],
        ]

    def test_asked_by_person_takes_only_a_boolean(self):
        for value in ("maybe", 2, [], {"a": 1}, None):
            with self.subTest(value=value):
                response = self.api_search("my class", asked_by_person=value)
                assert response.status_code == 400, response.content
                assert response.json()["error"]["fields"]["asked_by_person"]

    def test_a_note_without_a_source_is_not_buried_under_the_speakers_turns(self):
        """An agent's note about Melanie, written without a source, answers better than her
        own turn: the speaker term lifts both (nothing says the note is not hers), so the
        note stays first."""
        note = entry_factory(
            agent=self.agent,
            memory_user=self.person,
            content="Melanie's kids love the dinosaur bones at museums.",
        )
        ranked = [
            hit.entry for hit in self.search("Do Melanie's kids love the dinosaur bones at museums?").hits
        ]
        assert ranked[0] == note
        assert ranked.index(self.answered) < ranked.index(self.asked)

    def test_the_search_api_answers_whatever_the_stored_ids(self):
        EpisodicEntry.objects.filter(pk=self.answered.pk).update(source_message_ids=["x", 1, {"a": None}])
        response = self.api().post(
            "/api/v1/episodic-entries/search/",
            {"agent": self.agent.slug, "memory_user": str(self.person.pk), "query": self.QUERY},
            format="json",
        )
        assert response.status_code == 200, response.content
        found = {hit["entry"]["id"] for hit in response.json()["results"]}
        assert found == {str(self.asked.pk), str(self.answered.pk)}


class EntryNeighbourTests(MemoryTestCase):
    """An entry taken from a message has the entries of the turns around it as neighbours: a
    well-ranked neighbour lifts it, as a message's neighbours lift a message."""

    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace, display_name="Ada")
        self.thread = thread_create(
            workspace=self.workspace, agent=self.agent, memory_user=self.person, channel_chat_id="s1"
        )
        self.turns = thread_append_messages(
            thread=self.thread,
            messages=[
                {"role": "assistant", "content": "Do you have any pets at home?"},
                {"role": "user", "content": "A puppy called Max."},
                {"role": "assistant", "content": "Lovely, tell me about the garden."},
            ],
        )
        self.asked, self.answered, self.after = (
            self.taken_from(turn, content=turn.content) for turn in self.turns
        )
        # The same words as the answer, from no conversation, and newer: recency favours it.
        self.alone = entry_factory(agent=self.agent, memory_user=self.person, content="A puppy called Max.")
        EpisodicEntry.objects.exclude(pk=self.alone.pk).update(created_at=timezone.now() - timedelta(days=30))

    def taken_from(self, message, **kwargs):
        kwargs.setdefault("agent", self.agent)
        kwargs.setdefault("memory_user", self.person)
        return entry_factory(source_thread=self.thread, source_message_ids=[str(message.pk)], **kwargs)

    def ranked(self, query="pets at home, a puppy", **kwargs):
        result = entry_search_hybrid(
            agent=self.agent, memory_user=self.person, query=query, mode="lexical", **kwargs
        )
        return [hit.entry for hit in result.hits]

    # The session term lifts the answer too (its thread's other entry matches): off, to see
    # the neighbour term alone.
    WITHOUT_SESSION = replace(ENTRY_WEIGHTS, session=0.0)

    def test_the_entry_after_a_matching_turn_ranks_above_its_twin(self):
        """The answer's previous turn asked about pets: the answer goes above the same words
        said out of any conversation, which recency alone put first."""
        self.after.delete()
        ranked = self.ranked(weights=self.WITHOUT_SESSION)
        assert ranked.index(self.answered) < ranked.index(self.alone)
        alone_first = self.ranked(weights=replace(self.WITHOUT_SESSION, neighbor=0.0, neighbor2=0.0))
        assert alone_first.index(self.alone) < alone_first.index(self.answered)

    def test_neighbours_are_the_entries_of_the_turns_before_and_after(self):
        with fused_candidates() as captured:
            self.ranked(query="puppy garden pets")
        answered = captured[self.answered.pk]
        assert (answered.prev_id, answered.next_id) == (self.asked.pk, self.after.pk)
        assert (answered.prev2_id, answered.next2_id) == (None, None)
        assert (captured[self.asked.pk].prev_id, captured[self.asked.pk].next_id) == (None, self.answered.pk)
        assert (captured[self.alone.pk].prev_id, captured[self.alone.pk].next_id) == (None, None)

    def test_only_the_pairs_searchable_entries_are_neighbours(self):
        """Entries of the previous turn that another person or agent recorded, or that are
        held, rejected or superseded, never lift the answer, nor show up through it."""
        EpisodicEntry.objects.filter(pk=self.asked.pk).delete()
        other = memory_user_factory(self.workspace, canonical_id="telegram:9", display_name="Bo")
        strangers = [
            self.taken_from(self.turns[0], content="Do you have any pets at home?", memory_user=other),
            self.taken_from(self.turns[0], content="Do you have any pets at home?", agent=self.other_agent),
            self.taken_from(self.turns[0], content="Do you have pets?", review=EpisodicEntry.Review.HELD),
            self.taken_from(self.turns[0], content="Any pets at home?", review=EpisodicEntry.Review.REJECTED),
            self.taken_from(self.turns[0], content="Pets at home?", status=EpisodicEntry.Status.SUPERSEDED),
        ]
        ranked = self.ranked(weights=self.WITHOUT_SESSION)
        assert not set(ranked) & set(strangers)
        assert ranked.index(self.alone) < ranked.index(self.answered)

    def test_a_turn_with_several_entries_lends_its_earliest(self):
        later = self.taken_from(self.turns[0], content="Ada was asked about her pets.")
        EpisodicEntry.objects.filter(pk=later.pk).update(
            created_at=self.asked.created_at + timedelta(seconds=1)
        )
        with fused_candidates() as captured:
            self.ranked()
        assert captured[self.answered.pk].prev_id == self.asked.pk

    def test_turns_of_another_branch_are_not_neighbours(self):
        """A message edited into a new branch has its own turns around it (`node_id`)."""
        Message.objects.filter(pk=self.turns[0].pk).update(node_id="other-branch")
        ranked = self.ranked(weights=self.WITHOUT_SESSION)
        assert ranked.index(self.alone) < ranked.index(self.answered)


class Bm25StatisticsTests(MemoryTestCase):
    """A large scope's row count and average length are read by one search and reused by the
    next ones for SEARCH_SCOPE_SIZE_CACHE_SECONDS; document frequencies never are."""

    def setUp(self):
        self.person = memory_user_factory(self.workspace)
        self.entries = [
            entry_factory(agent=self.agent, memory_user=self.person, content=text, embed=False)
            for text in (
                "Ada flew a red kite at the beach.",
                "Ada saw a zebra at the zoo.",
                "Ada bought a kite for her nephew.",
                "Ada repaired the kite string.",
                "Ada's kite got stuck in a tree.",
                "Ada read a book about birds.",
            )
        ]

    def search(self, query="kite zebra"):
        """(the hits' ids and lexical parts, whether the statement counted the scope)."""
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as queries:
            result = entry_search_hybrid(
                agent=self.agent, memory_user=self.person, query=query, mode="lexical", top_k=30
            )
        counted = sum("count(*) FROM scope" in q["sql"] for q in queries)
        return [(h.entry.pk, h.parts["lexical"]) for h in result.hits], counted

    def test_a_large_scope_is_counted_once_and_ranks_the_same(self):
        with mock.patch("core.ranking.BM25_STATS_CACHE_MIN_ROWS", 6):
            first, first_counted = self.search()
            again, again_counted = self.search()
        assert (first_counted, again_counted) == (1, 0)
        assert again == first
        assert first[0][0] == self.entries[1].pk

    def test_a_small_scope_is_counted_by_every_search(self):
        """Under BM25_STATS_CACHE_MIN_ROWS (1,000) counting is cheap and exact."""
        assert [self.search()[1] for _ in range(2)] == [1, 1]

    def test_statistics_are_read_again_once_the_window_has_passed(self):
        with mock.patch("core.ranking.BM25_STATS_CACHE_MIN_ROWS", 6):
            self.search()
            with override_settings(SEARCH_SCOPE_SIZE_CACHE_SECONDS=0):
                assert self.search()[1] == 1

    def test_a_scope_grown_since_weighs_every_term_positively(self):
        """Remembered n = 6, then 20 more entries with "kite": its document frequency (24)
        passes the remembered count, and its weight stays positive, below the rare term's."""
        with mock.patch("core.ranking.BM25_STATS_CACHE_MIN_ROWS", 6):
            self.search()
            for i in range(20):
                entry_factory(
                    agent=self.agent, memory_user=self.person, content=f"Kite {i} flew.", embed=False
                )
            hits, counted = self.search()
        assert counted == 0
        assert len(hits) == 25
        assert all(part > 0 for _pk, part in hits)
        assert hits[0][0] == self.entries[1].pk


class BulkEntries:
    def entries(self, person, count: int) -> None:
        words = ["kite", "zebra", "lisbon", "marathon", "sourdough", "garden", "chess", "ferry"]
        contents = [f"note {i}: {words[i % 8]} and {words[(i * 3) % 8]}" for i in range(count)]
        EpisodicEntry.objects.bulk_create(
            EpisodicEntry(
                workspace=self.workspace,
                agent=self.agent,
                memory_user=person,
                content=content,
                content_hash=entry_content_hash(content),
                source=EpisodicEntry.Source.USER_ASSERTION,
                evidence=content,
            )
            for content in contents
        )


class Bm25PlanTests(BulkEntries, MemoryTestCase):
    """BM25's plan is PostgreSQL's to choose, from the table's statistics; what it costs must
    not hang on that choice."""

    def test_the_query_terms_are_built_once_for_a_person_newer_than_the_statistics(self):
        """The statistics know one person; a second one's 400 entries arrive after them, so
        the planner estimates that person at a row or so and tests each of their rows against
        the query, instead of asking the GIN index. The query's terms were then built again
        for every row (a join on their aggregate): 2.6 times the time of the other plan at
        4,500 rows. Now they are an InitPlan, built once on every plan."""
        known = memory_user_factory(self.workspace)
        newer = memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo")
        self.entries(known, 400)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE episodes_episodicentry")
        self.entries(newer, 400)
        sql = bm25_sql(
            "SELECT id, search_vector AS tsv, created_at FROM episodes_episodicentry "
            "WHERE workspace_id = %(workspace)s AND agent_id = %(agent)s "
            "AND memory_user_id = %(memory_user)s"
        )
        params = {
            "workspace": self.workspace.pk,
            "agent": self.agent.pk,
            "memory_user": newer.pk,
            "query": "kite zebra garden",
            "limit": 500,
        }
        every = plan_nodes(sql, params)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        # The plan this test is about: the person's rows read through the scope, each tested.
        tested = [n for n in every if "@@" in n.get("Filter", "") + n.get("Join Filter", "")]
        removed = ("Rows Removed by Filter", "Rows Removed by Join Filter")
        assert [n["Actual Rows"] + sum(n.get(k, 0) for k in removed) for n in tested] == [400]
        assert all(n["Actual Loops"] == 1 for n in every if n.get("CTE Name") == "q"), [
            (n["Node Type"], n["Actual Loops"]) for n in every if n.get("CTE Name") == "q"
        ]
        # Every entry holding one of the three terms: 5 of every 8 (i and 3i modulo 8).
        assert len(rows) == 250


class PersonTermsTests(BulkEntries, MemoryTestCase):
    """BM25 finds a person's entries through their own postings (`episodic_person_terms`,
    episodic 0011), not the postings of every person of the table."""

    def setUp(self):
        self.people = [
            memory_user_factory(self.workspace, canonical_id=f"telegram:{i}", display_name=name)
            for i, name in enumerate(["Ada", "Bo", "Cy"])
        ]
        for person in self.people:
            self.entries(person, 300)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE episodes_episodicentry")

    def lexical_statement(self, person, query: str):
        with statements_sent("tsv") as sent:
            result = entry_search_hybrid(
                agent=self.agent, memory_user=person, query=query, mode="lexical", top_k=300
            )
        [(sql, params)] = sent
        return sql, params, {h.entry.pk: round(h.parts["lexical"], 9) for h in result.hits}

    def test_the_match_reads_the_person_terms_index(self):
        sql, params, _hits = self.lexical_statement(self.people[1], "kite zebra garden")
        with connection.cursor() as cursor:
            # A table this small is cheaper to read whole: keep the planner to its indexes.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
            plan = json.dumps(cursor.fetchone()[0])
        assert "episodes_entry_person_terms" in plan
        # The table-wide index of the words is not read at all.
        assert '"episodes_entry_search"' not in plan

    def test_the_same_entries_and_scores_as_the_table_wide_match(self):
        for person in self.people:
            for query in ("kite zebra garden", "ferry", "Lisbon marathon chess", "the and of"):
                sql, params, hits = self.lexical_statement(person, query)
                plain = bm25_sql(
                    "SELECT id, search_vector AS tsv, created_at FROM episodes_episodicentry "
                    "WHERE workspace_id = %(workspace)s AND agent_id = %(agent)s "
                    "AND memory_user_id = %(memory_user)s"
                )
                with connection.cursor() as cursor:
                    cursor.execute(plain, {**params, "limit": 300})
                    rows = {row[0]: round(row[1], 9) for row in cursor.fetchall()}
                assert "terms" in sql and hits == rows, (person.display_name, query)
                if query == "the and of":
                    assert hits == {}
                else:
                    assert hits

    def test_the_index_keys_an_entry_by_its_person(self):
        entry = EpisodicEntry.objects.filter(memory_user=self.people[0]).first()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT episodic_person_terms(memory_user_id, search_vector) FROM episodes_episodicentry "
                "WHERE id = %s",
                [entry.pk],
            )
            keys = cursor.fetchone()[0]
        assert keys and all(key.startswith(f"{self.people[0].pk}:") for key in keys)


class VectorPlanRoutingTests(MemoryTestCase):
    """Small scopes are sorted exactly; large ones use the HNSW index with iterative scan."""

    MODEL, DIMENSIONS, INDEX = LOCAL_MODEL_NAME, 384, "entry_emb_graph"

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = memory_user_factory(cls.workspace)
        cls.entries, cls.vectors = cls.stored(cls.person, 60, seed=7)

    @classmethod
    def stored(cls, person, count: int, *, seed: int):
        """`count` entries of `person` with random unit vectors of the local model."""
        rng = np.random.default_rng(seed)
        entries = [
            EpisodicEntry(
                workspace=cls.workspace,
                agent=cls.agent,
                memory_user=person,
                content=f"note {i}",
                content_hash=f"{seed}-{i}",
                source="user_assertion",
                evidence="x",
            )
            for i in range(count)
        ]
        EpisodicEntry.objects.bulk_create(entries)
        vectors = rng.normal(size=(count, cls.DIMENSIONS))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        EntryEmbedding.objects.bulk_create(
            EntryEmbedding(
                entry=e,
                workspace=cls.workspace,
                agent=cls.agent,
                memory_user=person,
                model=cls.MODEL,
                dimensions=cls.DIMENSIONS,
                embedding=v.tolist(),
            )
            for e, v in zip(entries, vectors, strict=True)
        )
        return entries, vectors

    def run_search(self):
        query = self.vectors[3].tolist()
        return entry_search_hybrid(
            agent=self.agent,
            memory_user=self.person,
            query="note",
            mode="vector",
            query_vector=query,
            model=self.MODEL,
            top_k=5,
        )

    def vector_query(self, plan, *, limit: int) -> tuple[str, dict]:
        """The scope's nearest vectors to entry 3's on `plan`: SQL and parameters."""
        sql = vector_sql(
            table="episodes_entryembedding",
            id_column="entry_id",
            scope_where="agent_id = %(agent)s AND memory_user_id = %(memory_user)s",
            plan=plan,
            dimensions=self.DIMENSIONS,
        )
        params = {
            "agent": self.agent.pk,
            "memory_user": self.person.pk,
            "qvec": "[" + ",".join(str(x) for x in self.vectors[3]) + "]",
            "model": self.MODEL,
            "limit": limit,
        }
        return sql, params

    def explain(self, plan):
        sql, params = self.vector_query(plan, limit=5)
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            if plan == PLAN_HNSW:
                # Whether the index *can* serve it: with 60 rows, sorting the B-tree-filtered
                # scope costs about the same, and which one wins then depends on the table's
                # statistics left by earlier tests.
                cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute("EXPLAIN " + sql, params)
            return "\n".join(row[0] for row in cursor.fetchall())

    def test_small_scope_takes_the_exact_plan(self):
        """Under the threshold the search is an exact sort and returns the true nearest first."""
        result = self.run_search()
        assert result.plan == PLAN_EXACT
        assert result.scope_size == 60
        assert result.hits[0].entry == self.entries[3]
        assert self.INDEX not in self.explain(PLAN_EXACT)

    @hnsw_above(10)
    def test_large_scope_takes_the_hnsw_plan(self):
        """Over the threshold the HNSW plan is chosen, and its SQL can use the partial index."""
        result = self.run_search()
        assert result.plan == PLAN_HNSW
        assert result.hits[0].entry == self.entries[3]
        assert self.INDEX in self.explain(PLAN_HNSW)

    def test_a_filtered_search_finds_the_nearest_it_keeps_on_either_plan(self):
        """Every third entry kept, every fourth in the graph: both plans answer the kept
        entries nearest the query, in order, and only those."""
        kept = self.entries[::3]
        EpisodicEntry.objects.filter(pk__in=[e.pk for e in kept]).update(metadata={"kept": True})
        EntryEmbedding.objects.filter(entry_id__in=[e.pk for e in self.entries[::4]]).update(in_graph=True)
        kept_ids = {e.pk for e in kept}
        expected = [pk for pk in self.exact_ids(k=60) if pk in kept_ids][:5]
        for plan, settings_ in ((PLAN_EXACT, override_settings()), (PLAN_HNSW, hnsw_above(10))):
            with self.subTest(plan=plan), settings_:
                result = entry_search_hybrid(
                    agent=self.agent,
                    memory_user=self.person,
                    query="note",
                    mode="vector",
                    query_vector=self.vectors[3].tolist(),
                    model=self.MODEL,
                    top_k=5,
                    filters=EntrySearchFilters(metadata={"kept": True}),
                )
                assert result.plan == plan
                assert [hit.entry.pk for hit in result.hits] == expected

    def in_graph(self, person=None) -> int:
        rows = EntryEmbedding.objects.filter(memory_user=person or self.person, model=self.MODEL)
        return rows.filter(in_graph=True).count()

    def exact_ids(self, k=20) -> list:
        order = np.argsort(-(np.asarray(self.vectors) @ np.asarray(self.vectors[3])))
        return [self.entries[i].pk for i in order[:k]]

    def hnsw_ids(self, k=20) -> list:
        from core.ranking import _hnsw_fetch

        sql, params = self.vector_query(PLAN_HNSW, limit=k)
        with connection.cursor() as cursor:
            return [row[0] for row in _hnsw_fetch(cursor, sql, params, ef_search=200)]

    def test_new_vectors_are_stored_outside_the_graph(self):
        """Storing a vector never inserts it into the HNSW graph: the column's default."""
        assert self.in_graph() == 0
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT column_default FROM information_schema.columns "
                "WHERE table_name = 'episodes_entryembedding' AND column_name = 'in_graph'"
            )
            assert cursor.fetchone()[0] == "false"

    def test_the_hnsw_plan_finds_rows_inside_and_outside_the_graph(self):
        """Rows outside the graph are sorted exactly beside the graph's walk: the HNSW plan
        returns the true nearest whether none, some or all of the scope is in the graph."""
        expected = self.exact_ids()
        assert self.hnsw_ids() == expected
        half = [e.pk for e in self.entries[::2]]
        EntryEmbedding.objects.filter(entry_id__in=half, model=self.MODEL).update(in_graph=True)
        assert self.hnsw_ids() == expected
        EntryEmbedding.objects.filter(model=self.MODEL).update(in_graph=True)
        assert self.hnsw_ids() == expected

    @hnsw_above(10)
    def test_a_search_on_the_hnsw_plan_puts_its_scope_in_the_graph(self):
        """The first search past the threshold asks a worker to add the scope's rows to the
        graph (eager here); another person's rows stay out, and the next searches within
        VECTOR_GRAPH_REQUEST_SECONDS ask nothing more."""
        other = memory_user_factory(self.workspace, canonical_id="telegram:3")
        self.stored(other, 12, seed=11)
        from core import tasks

        with mock.patch.object(
            tasks.vector_graph_extend_task, "delay", wraps=tasks.vector_graph_extend_task.delay
        ) as sent:
            assert self.run_search().plan == PLAN_HNSW
            assert self.in_graph() == 60
            assert self.in_graph(other) == 0
            self.stored(self.person, 5, seed=12)
            assert self.run_search().hits[0].entry == self.entries[3]
            assert sent.call_count == 1
            with override_settings(VECTOR_GRAPH_REQUEST_SECONDS=0):
                self.run_search()
            assert sent.call_count == 2
        assert self.in_graph() == 65

    def test_a_small_scope_asks_nothing_of_the_graph(self):
        from core import tasks

        with mock.patch.object(tasks.vector_graph_extend_task, "delay") as sent:
            assert self.run_search().plan == PLAN_EXACT
        sent.assert_not_called()
        assert self.in_graph() == 0

    @hnsw_above(10)
    def test_a_broker_that_refuses_the_request_does_not_fail_the_search(self):
        """The search answers; the request is sent again by the next search."""
        from core import tasks

        with mock.patch.object(tasks.vector_graph_extend_task, "delay", side_effect=ConnectionError) as sent:
            result = self.run_search()
            assert result.plan == PLAN_HNSW
            assert result.hits[0].entry == self.entries[3]
            self.run_search()
        assert sent.call_count == 2
        assert self.in_graph() == 0

    def test_the_graph_is_extended_in_chunks_once(self):
        from core import services
        from core.services import vector_graph_extend

        scope = {"agent_id": self.agent.pk, "memory_user_id": self.person.pk}
        with mock.patch.object(services, "VECTOR_GRAPH_CHUNK", 7):
            assert vector_graph_extend(table="episodes_entryembedding", model=self.MODEL, scope=scope) == 60
            assert vector_graph_extend(table="episodes_entryembedding", model=self.MODEL, scope=scope) == 0
        assert self.in_graph() == 60
        assert self.hnsw_ids() == self.exact_ids()

    def test_a_chunk_is_never_more_than_its_size_whatever_the_plan(self):
        """A statement flags at most VECTOR_GRAPH_CHUNK rows, also under a plan that scans the
        table and rescans the chunk's query per row (the other plans turned off here; a CI
        run's statistics once chose it): as `id IN (subquery)` one statement took all 60."""
        from core import services
        from core.services import vector_graph_extend

        scope = {"agent_id": self.agent.pk, "memory_user_id": self.person.pk}
        with connection.cursor() as cursor:
            for setting in (
                "hashagg",
                "hashjoin",
                "mergejoin",
                "material",
                "indexscan",
                "bitmapscan",
                "sort",
            ):
                cursor.execute(f"SET LOCAL enable_{setting} = off")
        with mock.patch.object(services, "VECTOR_GRAPH_CHUNK", 7):
            first = vector_graph_extend(
                table="episodes_entryembedding", model=self.MODEL, scope=scope, seconds=0
            )
        assert first == 7
        assert self.in_graph() == 7

    def test_a_long_extension_goes_on_in_the_next_task(self):
        """The task stops starting chunks after half the soft time limit and queues itself
        for the rest, so a large scope never runs into the limit."""
        from core import services, tasks

        scope = {"agent_id": str(self.agent.pk), "memory_user_id": str(self.person.pk)}
        limits = override_settings(CELERY_TASK_SOFT_TIME_LIMIT=0)
        with mock.patch.object(services, "VECTOR_GRAPH_CHUNK", 25), limits:
            with mock.patch.object(tasks.vector_graph_extend_task, "delay") as queued:
                assert tasks.vector_graph_extend_task("episodes_entryembedding", self.MODEL, scope) == 25
            queued.assert_called_once_with("episodes_entryembedding", self.MODEL, scope)
            assert self.in_graph() == 25
            with mock.patch.object(
                tasks.vector_graph_extend_task, "delay", wraps=tasks.vector_graph_extend_task.delay
            ) as queued:
                tasks.vector_graph_extend_task("episodes_entryembedding", self.MODEL, scope)
            assert queued.call_count == 2  # 25 + 10 joined, then a last one that finds none
        assert self.in_graph() == 60

    def test_the_graph_request_names_only_vector_tables_and_scope_columns(self):
        """The task's arguments come through the broker: anything but a vector table and
        its scope columns is refused, never spliced into SQL."""
        from core.services import vector_graph_extend

        person = {"memory_user_id": self.person.pk}
        refused = [
            ("episodes_episodicentry", person),
            ("episodes_entryembedding; DROP TABLE x", person),
            ("episodes_entryembedding", {"memory_user_id = memory_user_id OR true --": 1}),
            ("episodes_entryembedding", {"model": self.MODEL}),
            ("episodes_entryembedding", {}),
            ("episodes_entryembedding", {"memory_user_id": None}),
        ]
        for table, scope in refused:
            with self.subTest(table=table, scope=scope), self.assertRaises(ValueError):
                vector_graph_extend(table=table, model=self.MODEL, scope=scope)
        assert self.in_graph() == 0

    @hnsw_above(10)
    def test_a_counted_scope_is_not_recounted_at_once(self):
        """A counted scope keeps its plan without a count for a while, on either side of the
        threshold; then one last seen under it is recounted beside its candidates, and one
        over it before them."""
        from django.test.utils import CaptureQueriesContext

        from core import ranking

        ranking._scope_sizes.clear()
        self.addCleanup(ranking._scope_sizes.clear)

        def counts():
            with CaptureQueriesContext(connection) as queries:
                result = self.run_search()
            return result.plan, sum("SELECT count(*)" in q["sql"] for q in queries)

        assert counts() == (PLAN_HNSW, 1)
        assert counts() == (PLAN_HNSW, 0)
        stale = override_settings(SEARCH_SCOPE_SIZE_CACHE_SECONDS=0)
        with hnsw_above(100):
            assert counts() == (PLAN_EXACT, 0)
            with stale:
                assert counts() == (PLAN_EXACT, 1)
            self.stored(self.person, 60, seed=9)
            assert counts() == (PLAN_EXACT, 0)
            with stale:
                # Last seen under the threshold: counted in the first round trip, and the
                # vector query run again on the HNSW plan since the count has crossed it.
                assert counts() == (PLAN_HNSW, 1)
        with stale:
            assert counts() == (PLAN_HNSW, 1)

    def test_a_small_share_of_a_large_table_keeps_the_exact_plan(self):
        """HNSW's filtered walk visits about pool x table / scope rows: the same 60-vector
        scope takes HNSW in a table of its own and the exact sort once the table holds 40
        times as many (with 10 rows of exact sort per unit of table / scope, the break-even
        scope is 24 in a table of 60 and 155 in one of 2,400)."""
        from core import ranking

        def plan():
            ranking._scope_sizes.clear()
            ranking._table_sizes.clear()
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE episodes_entryembedding")
            costs = override_settings(
                EPISODIC_EXACT_SCOPE_MAX=10, EPISODIC_HNSW_FIXED_COST_ROWS=0, EPISODIC_HNSW_RATIO_COST_ROWS=10
            )
            with costs:
                result = self.run_search()
            assert result.hits[0].entry == self.entries[3]
            return result.plan

        self.addCleanup(ranking._scope_sizes.clear)
        self.addCleanup(ranking._table_sizes.clear)
        assert plan() == PLAN_HNSW
        self.stored(memory_user_factory(self.workspace, canonical_id="telegram:2"), 2340, seed=8)
        assert plan() == PLAN_EXACT

    def test_other_models_never_take_the_hnsw_plan(self):
        """A model without an index is sorted exactly whatever the scope size."""
        from core.ranking import vector_plan

        assert vector_plan(scope_size=10**7, model="text-embedding-3-small", dimensions=1536) == PLAN_EXACT
        assert vector_plan(scope_size=10**7, model=LOCAL_MODEL_NAME, dimensions=384) == PLAN_HNSW
        assert vector_plan(scope_size=10**7, model="all-mpnet-base-v2", dimensions=768) == PLAN_HNSW
        # A model of that name with vectors of another length is not what the index holds.
        assert vector_plan(scope_size=10**7, model="all-mpnet-base-v2", dimensions=384) == PLAN_EXACT

    def test_bm25_prefers_rare_terms(self):
        """A term rare in the scope outweighs a common one (inverse document frequency)."""
        EpisodicEntry.objects.filter(pk=self.entries[0].pk).update(content="note about zebras")
        sql = bm25_sql(
            "SELECT id, search_vector AS tsv, created_at FROM episodes_episodicentry "
            "WHERE memory_user_id = %(memory_user)s"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, {"memory_user": self.person.pk, "query": "note zebras", "limit": 3})
            rows = cursor.fetchall()
        assert rows[0][0] == self.entries[0].pk
        assert rows[0][1] > 2 * rows[1][1]

    def test_hnsw_query_carries_its_scan_settings(self):
        """The HNSW query runs with iterative scan and the configured ef_search, sent with it."""
        from core.ranking import _hnsw_fetch

        sql = "SELECT current_setting('hnsw.iterative_scan'), current_setting('hnsw.ef_search'), %(x)s"
        with connection.cursor() as cursor:
            rows = _hnsw_fetch(cursor, sql, {"x": 1}, ef_search=321)
        assert rows == [("relaxed_order", "321", 1)]


class MpnetVectorPlanRoutingTests(VectorPlanRoutingTests):
    """The same for the vectors of the optional local model: 768-d rows under its own name,
    served by their own partial index once the scope is large."""

    MODEL, DIMENSIONS, INDEX = "all-mpnet-base-v2", 768, "entry_emb_mpnet_graph"


class FilteredKeptEntriesTests(TransactionTestCase):
    """A time or source filter's kept entries come from the searchable index alone (episodic
    0012: it holds the id and source, and the semi-join states its conditions), not from a heap
    read per entry of the person. Outside a transaction, VACUUM sets the visibility map as on a
    live table, so the planner weighs an index-only scan as it would there."""

    def setUp(self):
        from core.services import agent_get_or_create, workspace_create

        self.workspace = workspace_create(name="Acme")
        self.agent = agent_get_or_create(workspace=self.workspace, slug="assistant")
        other_agent = agent_get_or_create(workspace=self.workspace, slug="researcher")
        self.person = memory_user_factory(self.workspace)
        # The person is one of many, as in a real table: their scope is what the index narrows to.
        people = [
            self.person,
            *(memory_user_factory(self.workspace, canonical_id=f"other:{n}") for n in range(20)),
        ]
        EpisodicEntry.objects.bulk_create(
            EpisodicEntry(
                workspace=self.workspace,
                agent=agent,
                memory_user=person,
                content=f"Note {n}.",
                content_hash=entry_content_hash(f"{person.pk} {agent.pk} {n}"),
                source=EpisodicEntry.Source.USER_ASSERTION,
                evidence=f"Note {n}.",
            )
            for person in people
            for agent in (self.agent, other_agent)
            for n in range(30)
        )
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE episodes_episodicentry")

    def kept_ids_plan(self, filters: EntrySearchFilters) -> dict:
        """EXPLAIN of the kept entries' ids of a filtered vector search, on its own: how the
        whole statement joins them depends on statistics a test's few rows do not settle."""
        with CaptureQueriesContext(connection) as captured:
            entry_search_hybrid(
                agent=self.agent,
                memory_user=self.person,
                query="note",
                mode="vector",
                query_vector=[1.0, 0.0, 0.0],
                model="test-model",
                filters=filters,
            )
        kept = [sql for query in captured.captured_queries if (sql := kept_ids_sql(query["sql"]))]
        assert len(kept) == 1, captured.captured_queries
        with connection.cursor() as cursor:
            cursor.execute("BEGIN")
            try:
                # A table this small is cheaper to read whole: keep the planner to its indexes.
                cursor.execute("SET LOCAL enable_seqscan = off")
                cursor.execute("SET LOCAL enable_bitmapscan = off")
                cursor.execute("EXPLAIN (FORMAT JSON) " + kept[0])
                return cursor.fetchone()[0][0]["Plan"]
            finally:
                cursor.execute("ROLLBACK")

    def test_a_time_or_source_filter_reads_only_the_searchable_index(self):
        for name, filters in (
            ("created_after", EntrySearchFilters(created_after=timezone.now() - timedelta(days=3))),
            ("source", EntrySearchFilters(sources=(EpisodicEntry.Source.USER_ASSERTION,))),
        ):
            with self.subTest(filter=name):
                plan = self.kept_ids_plan(filters)
                assert plan["Node Type"] == "Index Only Scan", json.dumps(plan)
                assert plan["Index Name"] == "episodes_entry_searchable", json.dumps(plan)


class HnswSettingsScopeTests(TransactionTestCase):
    def test_scan_settings_do_not_outlive_the_query(self):
        """Outside a transaction the settings end with the query: the connection keeps its defaults."""
        from core.ranking import _hnsw_fetch

        with connection.cursor() as cursor:
            cursor.execute("SELECT '[1]'::vector")  # loads pgvector, which defines the settings
            cursor.execute("SELECT current_setting('hnsw.ef_search', true)")
            before = cursor.fetchone()[0]
            assert _hnsw_fetch(cursor, "SELECT 1", {}, ef_search=77) == [(1,)]
            cursor.execute("SELECT current_setting('hnsw.ef_search', true)")
            assert cursor.fetchone()[0] == before != "77"

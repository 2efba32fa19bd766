from unittest import mock

from django.db import connection
from django.urls import reverse

from core import ranking
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.tests.factories import entry_factory, memory_user_factory, use_test_embeddings

LIST = reverse("api:episodic_entries:list")
EXTRACT = reverse("api:episodic_entries:extract")
SEARCH = reverse("api:episodic_entries:search")
BATCH_DELETE = reverse("api:episodic_entries:batch-delete")


def detail(entry):
    return reverse("api:episodic_entries:detail", args=[entry.pk])


class EntryApiTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)
        self.entry = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada is training for a marathon."
        )
        self.other_agents_entry = entry_factory(
            agent=self.other_agent, memory_user=self.person, content="Ada asked about tax forms."
        )

    def extract_body(self, **overrides):
        body = {
            "agent": "assistant",
            "memory_user": str(self.person.pk),
            "transcript": [
                {"id": "m1", "role": "user", "content": "I signed up for the Berlin marathon in September."},
                {"role": "assistant", "content": "Good luck with the training!"},
            ],
            "candidates": [
                {
                    "content": "Signed up for the Berlin marathon in September.",
                    "source": "user_assertion",
                    "evidence": "I signed up for the Berlin marathon in September.",
                },
                {
                    "content": "Likes running.",
                    "source": "user_assertion",
                    "evidence": "Good luck with the training!",
                },
            ],
            "use_llm": False,
            "sync": True,
        }
        body.update(overrides)
        return body

    def test_list_is_paginated_filtered_and_never_shows_vectors(self):
        """Filters by agent; a fixed number of queries; no vector field in the body."""
        with self.assertNumQueries(3):  # key, page (agent select_related; short: no count)
            response = self.api().get(LIST, {"agent": "assistant"})
        assert response.status_code == 200
        body = response.json()
        assert body["count"] == 1
        (row,) = body["results"]
        assert row["id"] == str(self.entry.pk) and row["embedded"] is True
        assert "embedding" not in row and "search_vector" not in row

    def test_list_query_count_does_not_grow_with_rows(self):
        for i in range(5):
            entry_factory(agent=self.agent, memory_user=self.person, content=f"Entry number {i}", embed=False)
        with self.assertNumQueries(3):
            assert self.api().get(LIST).status_code == 200

    def test_bad_filter_is_a_400(self):
        response = self.api().get(LIST, {"status": "sleeping"})
        assert response.status_code == 400
        assert "status" in response.json()["error"]["fields"]

    def test_list_filters_by_metadata_containment(self):
        """`?metadata=` holds a JSON object the entry's metadata contains, as the checkpoint
        list reads it; anything else is a 400 naming the filter."""
        EpisodicEntry.objects.filter(pk=self.entry.pk).update(
            metadata={"topic": "sport", "tags": ["run", "race"]}
        )

        def listed(value):
            response = self.api().get(LIST, {"metadata": value})
            assert response.status_code == 200, response.content
            return {row["id"] for row in response.json()["results"]}

        assert listed('{"topic": "sport"}') == {str(self.entry.pk)}
        assert listed('{"tags": ["race"]}') == {str(self.entry.pk)}
        assert listed('{"topic": "tax"}') == set()
        assert listed("{}") == {str(self.entry.pk), str(self.other_agents_entry.pk)}
        for value in ("[]", "sport", '{"topic": ', '{"a": NaN}', '{"a": "\\u0000"}'):
            with self.subTest(value=value):
                response = self.api().get(LIST, {"metadata": value})
                assert response.status_code == 400, response.content
                assert "metadata" in response.json()["error"]["fields"]

    def test_agent_bound_key_sees_only_its_agent(self):
        ids = [r["id"] for r in self.api(self.agent_key).get(LIST).json()["results"]]
        assert ids == [str(self.entry.pk)]
        assert self.api(self.agent_key).get(detail(self.other_agents_entry)).status_code == 404

    def test_outsider_cannot_read_edit_delete_or_search(self):
        client = self.api(self.outsider_key)
        assert client.get(LIST).json()["count"] == 0
        assert client.get(detail(self.entry)).status_code == 404
        assert client.patch(detail(self.entry), {"status": "rejected"}, format="json").status_code == 404
        assert client.delete(detail(self.entry)).status_code == 404
        response = client.post(BATCH_DELETE, {"ids": [str(self.entry.pk)]}, format="json")
        assert response.json() == {"deleted": 0, "not_found": [str(self.entry.pk)]}
        response = client.post(
            SEARCH,
            {"agent": "assistant", "memory_user": str(self.person.pk), "query": "marathon"},
            format="json",
        )
        assert response.status_code == 404
        assert EpisodicEntry.objects.filter(pk=self.entry.pk, status="active").exists()

    def test_patch_edits_content_and_status(self):
        response = self.api().patch(
            detail(self.entry),
            {"content": "Ada runs the Berlin marathon.", "status": "superseded"},
            format="json",
        )
        assert response.status_code == 200
        self.entry.refresh_from_db()
        assert self.entry.content == "Ada runs the Berlin marathon." and self.entry.status == "superseded"

    def test_patch_rejects_unknown_fields_and_values(self):
        response = self.api().patch(
            detail(self.entry), {"status": "sleeping", "colour": "red"}, format="json"
        )
        assert response.status_code == 400
        assert set(response.json()["error"]["fields"]) == {"colour"}
        response = self.api().patch(detail(self.entry), {"content": "   "}, format="json")
        assert response.status_code == 400

    def test_read_only_key_can_search_but_not_write(self):
        client = self.api(self.read_only_key)
        body = {"agent": "assistant", "memory_user": str(self.person.pk), "query": "marathon"}
        assert client.post(SEARCH, body, format="json").status_code == 200
        assert client.patch(detail(self.entry), {"status": "rejected"}, format="json").status_code == 403
        assert client.post(EXTRACT, self.extract_body(), format="json").status_code == 403

    def test_delete_and_batch_delete(self):
        assert self.api().delete(detail(self.entry)).status_code == 204
        response = self.api().post(BATCH_DELETE, {"ids": [str(self.other_agents_entry.pk)]}, format="json")
        assert response.json() == {"deleted": 1, "not_found": []}
        assert not EpisodicEntry.objects.exists()

    def test_search_returns_scored_entries_and_the_memory_block(self):
        response = self.api().post(
            SEARCH,
            {"agent": "assistant", "memory_user": str(self.person.pk), "query": "marathon", "render": True},
            format="json",
        )
        assert response.status_code == 200
        body = response.json()
        assert [r["entry"]["id"] for r in body["results"]] == [str(self.entry.pk)]
        assert body["plan"] == "exact"
        assert body["memory"].startswith("<memory>") and "Ada is training for a marathon." in body["memory"]

    def test_search_bad_input(self):
        """Too long a query, an unknown person, no person at all: 4xx with the error body."""
        base = {"agent": "assistant", "memory_user": str(self.person.pk)}
        response = self.api().post(SEARCH, {**base, "query": "x" * 5000}, format="json")
        assert response.status_code == 400 and "query" in response.json()["error"]["fields"]
        response = self.api().post(
            SEARCH,
            {**base, "memory_user": "00000000-0000-0000-0000-000000000000", "query": "x"},
            format="json",
        )
        assert response.status_code == 404
        response = self.api().post(SEARCH, {"agent": "assistant", "query": "x"}, format="json")
        assert response.status_code == 400 and "memory_user" in response.json()["error"]["fields"]
        response = self.api().post(SEARCH, {**base, "agent": "ghost", "query": "x"}, format="json")
        assert response.status_code == 404

    def test_extract_sync_lists_stored_and_rejected(self):
        response = self.api().post(EXTRACT, self.extract_body(), format="json")
        assert response.status_code == 200, response.json()
        body = response.json()
        assert [e["content"] for e in body["stored"]] == ["Signed up for the Berlin marathon in September."]
        assert body["stored"][0]["source_message_ids"] == ["m1"]
        assert [r["reason"] for r in body["rejected"]] == ["evidence_not_from_user"]

    def test_extract_is_asynchronous_by_default(self):
        with self.captureOnCommitCallbacks(execute=True):
            response = self.api().post(EXTRACT, self.extract_body(sync=False), format="json")
        assert response.status_code == 202
        assert EpisodicEntry.objects.filter(content__startswith="Signed up for the Berlin").exists()

    def test_extract_from_a_thread(self):
        from threads.services import thread_append_messages, thread_create

        thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        (message,) = thread_append_messages(
            thread=thread, messages=[{"role": "user", "content": "I adopted a dog named Rex."}]
        )
        body = {
            "thread": str(thread.pk),
            "candidates": [
                {
                    "content": "Adopted a dog named Rex.",
                    "source": "user_assertion",
                    "evidence": "adopted a dog named Rex",
                }
            ],
            "use_llm": False,
            "sync": True,
        }
        response = self.api(self.agent_key).post(EXTRACT, body, format="json")
        assert response.status_code == 200, response.json()
        entry = EpisodicEntry.objects.get(content="Adopted a dog named Rex.")
        assert entry.source_thread_id == thread.pk and entry.source_message_ids == [str(message.pk)]

    def test_extract_bad_input(self):
        """Unknown fields and a missing transcript are 400s; an unknown person 404; nothing stored."""
        response = self.api().post(EXTRACT, self.extract_body(transcript=[], candidates=[]), format="json")
        assert response.status_code == 400
        response = self.api().post(
            EXTRACT, self.extract_body(transcript=[{"role": "robot", "content": "x"}]), format="json"
        )
        assert response.status_code == 400 and "transcript" in response.json()["error"]["fields"]
        response = self.api().post(
            EXTRACT, self.extract_body(memory_user="00000000-0000-0000-0000-000000000000"), format="json"
        )
        assert response.status_code == 404
        response = self.api(self.outsider_key).post(EXTRACT, self.extract_body(), format="json")
        assert response.status_code == 404
        assert EpisodicEntry.objects.count() == 2


class LocalModelSearchApiTests(MemoryTestCase):
    """With the local model, the search API embeds the query on the embedding thread while it
    resolves the agent and the person (`entry_query_vector`)."""

    def setUp(self):
        self.person = memory_user_factory(self.workspace)
        self.base = {"agent": "assistant", "memory_user": str(self.person.pk)}
        response = self.api().post(
            reverse("api:episodic_entries:list"),
            {**self.base, "content": "Ada is training for a marathon in Lisbon."},
            format="json",
        )
        assert response.status_code == 201, response.json()
        self.entry_id = response.json()["id"]

    def started(self):
        """Records, at each start of a query's embedding, the statements sent until then."""
        calls: list = []
        statements: list = []
        embed_query_started = ranking.embed_query_started

        def recorded(provider, text):
            calls.append((text, list(statements)))
            return embed_query_started(provider, text)

        def wrapper(execute, sql, params, many, context):
            statements.append(sql)
            return execute(sql, params, many, context)

        patch = mock.patch.object(ranking, "embed_query_started", recorded)
        return calls, patch, connection.execute_wrapper(wrapper)

    def test_the_query_is_embedded_before_the_person_is_resolved_and_ranks_as_before(self):
        calls, patch, wrapper = self.started()
        with patch, wrapper:
            response = self.api().post(SEARCH, {**self.base, "query": "marathon training"}, format="json")
        assert response.status_code == 200
        body = response.json()
        assert [r["entry"]["id"] for r in body["results"]] == [self.entry_id]
        assert body["plan"] == "exact"
        # Started once, before the memory user's or the agent's row was read.
        ((text, before),) = calls
        assert text == "marathon training"
        assert not [
            sql for sql in before if 'FROM "identities_memoryuser"' in sql or 'FROM "core_agent"' in sql
        ]
        again = self.api().post(SEARCH, {**self.base, "query": "marathon training"}, format="json")
        assert again.json() == body

    def test_nothing_is_embedded_for_a_query_or_a_mode_that_needs_no_vector(self):
        calls, patch, wrapper = self.started()
        with patch, wrapper:
            lexical = self.api().post(
                SEARCH, {**self.base, "query": "marathon", "mode": "lexical"}, format="json"
            )
            blank = self.api().post(SEARCH, {**self.base, "query": "  "}, format="json")
            too_long = self.api().post(SEARCH, {**self.base, "query": "x" * 5000}, format="json")
            nobody = self.api().post(
                SEARCH,
                {**self.base, "memory_user": "00000000-0000-0000-0000-000000000000", "query": ""},
                format="json",
            )
        assert [r["entry"]["id"] for r in lexical.json()["results"]] == [self.entry_id]
        assert blank.status_code == too_long.status_code == 400
        assert "query" in blank.json()["error"]["fields"] and "query" in too_long.json()["error"]["fields"]
        # The person is resolved before the query is checked, as without the early start.
        assert nobody.status_code == 404
        assert calls == []

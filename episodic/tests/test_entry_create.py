"""Storing entries directly (issue 18 item 3): POST /api/v1/episodic-entries/ and its batch route.

An agent that already knows what to remember stores it without a transcript to quote;
the entry goes through extraction's normal form, caps, dedupe and embedding.
"""

import uuid
from unittest import mock

from django.test import override_settings
from django.urls import reverse

from core.errors import ApplicationError
from core.models import AuditEvent
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services import (
    CONTENT_REQUIRED,
    EVIDENCE_NOT_IN_MESSAGE,
    EVIDENCE_REQUIRED,
    REJECT_DUPLICATE_HASH,
    REJECT_DUPLICATE_SIMILAR,
    entries_create,
    entry_create,
)
from episodic.services.creation import METADATA_NOT_JSON
from episodic.tests.factories import entry_factory, memory_user_factory, use_test_embeddings
from threads.services import thread_append_messages, thread_create

LIST = reverse("api:episodic_entries:list")
BATCH = reverse("api:episodic_entries:batch")
EXTRACT = reverse("api:episodic_entries:extract")


class EntryCreateTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)

    def body(self, **overrides):
        return {"agent": "assistant", "memory_user": str(self.person.pk), **overrides}

    def create(self, key=None, **overrides):
        return self.api(key).post(LIST, self.body(**overrides), format="json")

    def batch(self, items, key=None, **overrides):
        return self.api(key).post(BATCH, self.body(items=items, **overrides), format="json")

    # One entry

    def test_an_entry_without_evidence_is_stored_as_agent_direct_and_embedded(self):
        """201 with the entry: source `agent_direct`, normal form, vector stored inline, audited."""
        response = self.create(content="  Ada   prefers\u200b morning calls. ", metadata={"k": "v"})
        assert response.status_code == 201, response.json()
        body = response.json()
        assert body["created"] is True and body["reason"] is None and body["similarity"] is None
        assert body["content"] == "Ada prefers morning calls."
        assert body["source"] == "agent_direct" and body["evidence"] == ""
        assert body["embedded"] is True
        assert body["metadata"] == {"k": "v", "origin": "direct"}
        entry = EpisodicEntry.objects.get(pk=body["id"])
        assert entry.agent == self.agent and entry.memory_user == self.person
        assert EntryEmbedding.objects.filter(entry=entry).count() == 1
        assert AuditEvent.objects.filter(entity_type="episodic_entry", entity_id=str(entry.pk)).count() == 1

    def test_metadata_jsonb_cannot_hold_is_refused_by_the_service(self):
        """The API's parser refuses NaN, Infinity, NUL and lone surrogates; a value that did not
        come through it (a tool call's arguments) is refused by the service, not by PostgreSQL."""
        for metadata in ({"n": float("nan")}, {"a": [float("inf")]}, {"k": "a\x00b"}, {"\ud800": 1}):
            with self.subTest(metadata=repr(metadata)):
                with self.assertRaises(ApplicationError) as caught:
                    entry_create(
                        agent=self.agent,
                        memory_user=self.person,
                        content="Ada likes jazz.",
                        metadata=metadata,
                        actor="test",
                    )
                assert caught.exception.fields["metadata"] == [METADATA_NOT_JSON]
        assert not EpisodicEntry.objects.exists()

    def test_the_new_entry_is_found_by_search_and_in_the_list(self):
        entry_id = self.create(content="Ada is allergic to peanuts.").json()["id"]
        rows = self.api().get(LIST, {"memory_user": str(self.person.pk)}).json()["results"]
        assert [(r["id"], r["embedded"]) for r in rows] == [(entry_id, True)]
        search = self.api().post(
            reverse("api:episodic_entries:search"), self.body(query="peanuts", mode="vector"), format="json"
        )
        assert [hit["entry"]["id"] for hit in search.json()["results"]] == [entry_id]

    def test_an_exact_duplicate_answers_200_with_the_stored_entry(self):
        """Same normal form, case-insensitive: nothing stored, the existing entry, created false."""
        stored = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada moved to Lisbon in May."
        )
        response = self.create(content="ada moved to  LISBON in may.")
        assert response.status_code == 200
        body = response.json()
        assert body["id"] == str(stored.pk)
        assert body["created"] is False and body["reason"] == REJECT_DUPLICATE_HASH
        assert EpisodicEntry.objects.count() == 1

    def test_a_near_duplicate_answers_200_with_its_similarity(self):
        stored = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada moved to Lisbon in May."
        )
        response = self.create(content="Ada moved to Lisbon in May 2024.")
        assert response.status_code == 200
        body = response.json()
        assert body["id"] == str(stored.pk) and body["reason"] == REJECT_DUPLICATE_SIMILAR
        assert body["similarity"] >= 0.86
        assert EpisodicEntry.objects.count() == 1

    def test_another_agents_or_persons_entry_is_no_duplicate(self):
        entry_factory(agent=self.other_agent, memory_user=self.person, content="Ada moved to Lisbon.")
        other = memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo")
        entry_factory(agent=self.agent, memory_user=other, content="Ada moved to Lisbon.")
        assert self.create(content="Ada moved to Lisbon.").status_code == 201

    def test_a_superseded_entry_is_no_duplicate(self):
        entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada lives in Porto.", status="superseded"
        )
        assert self.create(content="Ada lives in Porto.").status_code == 201

    def test_evidence_sources_need_evidence(self):
        response = self.create(content="Ada got a dog.", source="user_assertion")
        assert response.status_code == 400
        assert response.json()["error"]["fields"] == {"evidence": [EVIDENCE_REQUIRED]}
        response = self.create(content="Ada got a dog.", source="user_assertion", evidence="I got a dog")
        assert response.status_code == 201
        assert response.json()["source"] == "user_assertion"

    def test_a_source_message_sets_the_thread_and_checks_the_evidence(self):
        thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=self.person)
        (message,) = thread_append_messages(
            thread=thread, messages=[{"role": "user", "content": "We adopted a puppy called Rex."}]
        )
        response = self.create(
            content="Adopted a puppy, Rex.",
            source="user_assertion",
            evidence="a puppy",
            source_message=str(message.pk),
        )
        assert response.status_code == 201, response.json()
        body = response.json()
        assert body["source_thread"] == str(thread.pk) and body["source_message_ids"] == [str(message.pk)]
        response = self.create(content="Has a cat.", evidence="a cat named", source_message=str(message.pk))
        assert response.status_code == 400
        assert response.json()["error"]["fields"] == {"evidence": [EVIDENCE_NOT_IN_MESSAGE]}

    def test_the_extraction_of_a_direct_entry_dedupes_against_it(self):
        """Both ways of storing share the dedupe: an extracted candidate repeating it is rejected."""
        self.create(content="Signed up for the Berlin marathon.")
        response = self.api().post(
            EXTRACT,
            self.body(
                transcript=[{"id": "m1", "role": "user", "content": "I signed up for the Berlin marathon."}],
                candidates=[
                    {
                        "content": "Signed up for the Berlin marathon.",
                        "source": "user_assertion",
                        "evidence": "signed up",
                    }
                ],
                use_llm=False,
                sync=True,
            ),
            format="json",
        )
        assert response.json()["stored"] == []
        assert response.json()["rejected"][0]["reason"] == REJECT_DUPLICATE_HASH

    def test_extraction_cannot_claim_the_direct_source(self):
        """`agent_direct` is for direct stores only: an extracted candidate must quote evidence."""
        response = self.api().post(
            EXTRACT,
            self.body(
                transcript=[{"role": "user", "content": "I like tea."}],
                candidates=[{"content": "Likes tea.", "source": "agent_direct", "evidence": "I like tea."}],
                use_llm=False,
                sync=True,
            ),
            format="json",
        )
        assert response.json()["rejected"][0]["reason"] == "unknown_source"

    def test_sync_extract_answers_its_entries_as_embedded(self):
        """The extract response shows each stored entry's vector, computed inline."""
        response = self.api().post(
            EXTRACT,
            self.body(
                transcript=[{"id": "m1", "role": "user", "content": "I start a new job in Porto on Monday."}],
                candidates=[
                    {
                        "content": "Starts a job in Porto on Monday.",
                        "source": "user_assertion",
                        "evidence": "new job",
                    }
                ],
                use_llm=False,
                sync=True,
            ),
            format="json",
        )
        (stored,) = response.json()["stored"]
        assert stored["embedded"] is True and stored["embedding_model"]

    def test_an_embedding_failure_stores_the_entry_and_defers_its_vector(self):
        self.server.fail_next = 1
        with self.captureOnCommitCallbacks(execute=False) as callbacks:
            response = self.create(content="Ada runs on Sundays.")
        assert response.status_code == 201 and response.json()["embedded"] is False
        assert [c for c in callbacks if "entry_embed_task" in repr(c)]

    def test_episodic_memory_switched_off_is_a_409(self):
        self.agent.memory_settings = {"episodic_memory": False}
        self.agent.save()
        response = self.create(content="Ada likes jazz.")
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "episodic_disabled"

    # Who may store

    def test_an_agent_bound_key_stores_for_its_own_agent_only(self):
        body = {"memory_user": str(self.person.pk), "content": "Ada prefers email."}
        response = self.api(self.agent_key).post(LIST, body, format="json")
        assert response.status_code == 201 and response.json()["agent"] == "assistant"
        response = self.api(self.agent_key).post(LIST, {**body, "agent": "researcher"}, format="json")
        assert response.status_code == 404
        response = self.api(self.agent_key).post(
            BATCH, {**body_items(body), "agent": "researcher"}, format="json"
        )
        assert response.status_code == 404
        assert not EpisodicEntry.objects.filter(agent=self.other_agent).exists()

    def test_another_agents_message_answers_like_an_unknown_one(self):
        """An agent-bound key naming another agent's message: the 404 of a random id, nothing stored."""
        thread = thread_create(workspace=self.workspace, agent=self.other_agent, memory_user=self.person)
        (message,) = thread_append_messages(thread=thread, messages=[{"role": "user", "content": "Secret."}])
        body = {"memory_user": str(self.person.pk), "content": "Ada said a secret."}
        theirs = self.api(self.agent_key).post(
            LIST, {**body, "source_message": str(message.pk)}, format="json"
        )
        unknown = self.api(self.agent_key).post(
            LIST, {**body, "source_message": str(uuid.uuid4())}, format="json"
        )
        assert theirs.status_code == unknown.status_code == 404
        assert theirs.json() == unknown.json()
        assert not EpisodicEntry.objects.exists()

    def test_a_message_of_another_person_is_refused(self):
        other = memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo")
        thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=other)
        (message,) = thread_append_messages(thread=thread, messages=[{"role": "user", "content": "Bo here."}])
        response = self.create(content="Ada is Bo.", source_message=str(message.pk))
        assert response.status_code == 400 and "source_message" in response.json()["error"]["fields"]

    def test_an_outsider_cannot_store_for_a_person_of_another_workspace(self):
        response = self.create(key=self.outsider_key, content="Ada owes money.")
        assert response.status_code == 404
        response = self.batch([{"content": "Ada owes money."}], key=self.outsider_key)
        assert response.status_code == 404
        assert not EpisodicEntry.objects.exists()

    def test_a_read_only_key_cannot_store(self):
        assert self.create(key=self.read_only_key, content="Ada likes jazz.").status_code == 403
        assert self.batch([{"content": "Ada likes jazz."}], key=self.read_only_key).status_code == 403
        assert not EpisodicEntry.objects.exists()

    # Hostile input

    def test_bad_content_is_a_400_naming_the_field(self):
        for content in ("", "   ", "\u200b\u200d", "x" * 501, 5, None, ["a"], {"a": 1}):
            response = self.create(content=content)
            assert response.status_code == 400, (content, response.json())
            assert "content" in response.json()["error"]["fields"], content
        assert not EpisodicEntry.objects.exists()

    def test_unknown_fields_and_wrong_types_are_400(self):
        for overrides in (
            {"content": "ok", "colour": "red"},
            {"content": "ok", "source": "rumour"},
            {"content": "ok", "metadata": ["not", "an", "object"]},
            {"content": "ok", "evidence": 7},
            {"content": "ok", "source_message": "not-a-uuid"},
        ):
            response = self.create(**overrides)
            assert response.status_code == 400, (overrides, response.json())
        assert not EpisodicEntry.objects.exists()

    @override_settings(EPISODIC_MAX_ENTRY_LENGTH=20)
    def test_the_length_cap_is_the_setting_after_normalisation(self):
        response = self.create(content="Twenty-one characters")
        assert response.status_code == 400 and "content" in response.json()["error"]["fields"]

    # Batches

    def test_a_batch_reports_each_item(self):
        """Created, duplicate of a stored entry, duplicate of an earlier item (exact and near)."""
        stored = entry_factory(
            agent=self.agent, memory_user=self.person, content="Ada moved to Lisbon in May."
        )
        response = self.batch(
            [
                {"content": "Ada has a sister, Ines."},
                {"content": "Ada moved to Lisbon in May."},
                {"content": "ada has a sister,  Ines."},
                {"content": "Ada has a sister, Ines, in Porto."},
                {
                    "content": "Ada plays chess.",
                    "source": "verified_assistant_finding",
                    "evidence": "chess club",
                },
            ]
        )
        assert response.status_code == 201, response.json()
        body = response.json()
        assert (body["created"], body["duplicates"]) == (2, 3)
        results = body["results"]
        assert [(r["index"], r["status"], r["reason"]) for r in results] == [
            (0, "created", None),
            (1, "duplicate", REJECT_DUPLICATE_HASH),
            (2, "duplicate", REJECT_DUPLICATE_HASH),
            (3, "duplicate", REJECT_DUPLICATE_SIMILAR),
            (4, "created", None),
        ]
        assert results[1]["entry"]["id"] == str(stored.pk)
        assert results[2]["entry"]["id"] == results[3]["entry"]["id"] == results[0]["entry"]["id"]
        assert results[3]["similarity"] >= 0.86
        assert all(r["entry"]["embedded"] for r in results)
        assert EpisodicEntry.objects.count() == 3

    def test_a_batch_of_duplicates_only_answers_200(self):
        entry_factory(agent=self.agent, memory_user=self.person, content="Ada likes jazz.")
        response = self.batch([{"content": "Ada likes jazz."}])
        assert response.status_code == 200 and response.json()["created"] == 0

    def test_one_invalid_item_refuses_the_whole_batch(self):
        """400 naming the item's index and field; nothing of the valid items is stored."""
        response = self.batch(
            [{"content": "Ada likes jazz."}, {"content": "   "}, {"content": "Ok", "source": "x"}]
        )
        assert response.status_code == 400
        fields = response.json()["error"]["fields"]
        assert set(fields) == {"items[1].content", "items[2].source"}
        response = self.batch([{"content": "Ada likes jazz."}, {"content": "\u200b\u2060"}])
        assert response.json()["error"]["fields"] == {"items[1].content": [CONTENT_REQUIRED]}
        response = self.batch([{"content": "Ada likes jazz."}, {"content": "Ok", "source": "user_assertion"}])
        assert response.json()["error"]["fields"] == {"items[1].evidence": [EVIDENCE_REQUIRED]}
        assert not EpisodicEntry.objects.exists()

    def test_bad_batch_shapes_are_400(self):
        for items in ([], "Ada", [1], [["a"]], [{"content": "ok", "colour": "red"}], None):
            response = self.batch(items)
            assert response.status_code == 400, (items, response.json())
        response = self.batch([{"content": "x", "source_message": str(uuid.uuid4())}])
        assert response.status_code == 404
        assert "items[0].source_message" in response.json()["error"]["fields"]
        assert not EpisodicEntry.objects.exists()

    @override_settings(EPISODIC_CREATE_BATCH_MAX=3)
    def test_too_many_items_is_a_400(self):
        """The service holds the configured maximum (the serializer holds the one at start-up)."""
        response = self.batch([{"content": f"Fact number {i}."} for i in range(4)])
        assert response.status_code == 400 and "items" in response.json()["error"]["fields"]
        response = self.batch([{"content": f"Item {i}."} for i in range(101)])
        assert response.status_code == 400
        assert not EpisodicEntry.objects.exists()

    def test_a_failure_while_storing_rolls_the_whole_batch_back(self):
        """One transaction: an error after the rows were written leaves none of them."""
        calls = []

        def fail(workspace_id, entity_type):
            # Called once the entries, their vectors and their audit events are inserted.
            calls.append(workspace_id)
            assert EpisodicEntry.objects.count() == 2 and EntryEmbedding.objects.count() == 2
            raise RuntimeError("disk full")

        items = [{"content": "Ada likes jazz."}, {"content": "Ada plays the cello."}]
        with (
            mock.patch("episodic.services.storing.audit_recorded", fail),
            self.assertRaisesMessage(RuntimeError, "disk full"),
        ):
            entries_create(agent=self.agent, memory_user=self.person, items=items, actor="test")
        assert calls == [self.workspace.pk]
        assert not EpisodicEntry.objects.exists()
        assert not EntryEmbedding.objects.exists()
        assert not AuditEvent.objects.filter(entity_type="episodic_entry").exists()


def body_items(body):
    return {"memory_user": body["memory_user"], "items": [{"content": body["content"]}]}

"""Issue 14, review queue API: GET /api/v1/review/, POST approve/reject/merge (batches), PATCH to
edit then approve, GET one item; scoped like every tier (agent-bound keys, other workspaces)."""

from django.urls import reverse

from core.models import AuditEvent
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services import entry_create
from episodic.tests.factories import memory_user_factory, use_test_embeddings
from facts.models import Fact
from facts.services import fact_remember
from procedures.models import Procedure
from procedures.services import procedure_create
from webhooks.events import event_type_for

LIST = reverse("api:review:list")
APPROVE = reverse("api:review:approve")
REJECT = reverse("api:review:reject")
MERGE = reverse("api:review:merge")


def item_url(tier, pk):
    return reverse("api:review:item", kwargs={"tier": tier, "item_id": pk})


class ReviewApiTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)
        self.approved_entry = entry_create(
            agent=self.agent, memory_user=self.person, content="Ada moved to Lisbon in May.", actor="t"
        ).entry
        self.approved_fact = self.fact("city", "Lisbon")
        for agent in (self.agent, self.other_agent):
            agent.memory_settings = {"review": "all"}
            agent.save(update_fields=["memory_settings"])
        self.entry = entry_create(
            agent=self.agent, memory_user=self.person, content="Ada keeps bees on her roof.", actor="t"
        ).entry
        self.held_fact = self.fact("favourite_tea", "oolong")
        self.other_entry = entry_create(
            agent=self.other_agent, memory_user=self.person, content="Ada asked about pricing.", actor="t"
        ).entry

    def fact(self, key, value, agent=None):
        return fact_remember(
            workspace=self.workspace,
            key=key,
            value=value,
            scope="user",
            fact_type="user_preference",
            agent=agent or self.agent,
            memory_user=self.person,
            source=Fact.Source.API,
        ).fact

    def ids(self, response):
        assert response.status_code == 200, response.json()
        return {(r["tier"], r["id"]) for r in response.json()["results"]}

    def test_the_queue_lists_held_items_across_tiers_with_counts(self):
        response = self.api().get(LIST)
        body = response.json()
        assert self.ids(response) == {
            ("entry", str(self.entry.pk)),
            ("entry", str(self.other_entry.pk)),
            ("fact", str(self.held_fact.pk)),
        }
        assert body["counts"] == {"entry": 2, "fact": 1, "procedure": 0, "total": 3}
        fact = next(r for r in body["results"] if r["tier"] == "fact")
        assert fact["text"] == "favourite_tea: oolong" and fact["agent"] == "assistant"
        assert fact["fields"]["key"] == "favourite_tea" and fact["state"] == "held"

    def test_filters_by_tier_agent_and_person(self):
        assert self.ids(self.api().get(LIST, {"tier": "fact"})) == {("fact", str(self.held_fact.pk))}
        by_agent = self.api().get(LIST, {"agent": "researcher"})
        assert self.ids(by_agent) == {("entry", str(self.other_entry.pk))}
        assert by_agent.json()["counts"]["total"] == 1
        stranger = memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo")
        assert self.ids(self.api().get(LIST, {"memory_user": str(stranger.pk)})) == set()
        assert self.ids(self.api().get(LIST, {"agent": "nobody"})) == set()

    def test_bad_filters_answer_400(self):
        for params in (
            {"tier": "thread"},
            {"state": "maybe"},
            {"limit": 0},
            {"limit": 201},
            {"memory_user": "x"},
        ):
            response = self.api().get(LIST, params)
            assert response.status_code == 400, params
            assert response.json()["error"]["fields"]

    def test_an_agent_bound_key_sees_only_its_agent(self):
        response = self.api(self.agent_key).get(LIST)
        assert self.ids(response) == {("entry", str(self.entry.pk)), ("fact", str(self.held_fact.pk))}
        outcome = self.api(self.agent_key).post(
            APPROVE, {"items": [{"tier": "entry", "id": str(self.other_entry.pk)}]}, format="json"
        )
        assert outcome.json()["results"][0]["outcome"] == "not_found"
        assert EpisodicEntry.objects.get(pk=self.other_entry.pk).review == "held"
        assert self.api(self.agent_key).get(item_url("entry", self.other_entry.pk)).status_code == 404

    def test_another_workspace_sees_nothing_and_changes_nothing(self):
        assert self.ids(self.api(self.outsider_key).get(LIST)) == set()
        for url, body in (
            (APPROVE, {"items": [{"tier": "entry", "id": str(self.entry.pk)}]}),
            (REJECT, {"items": [{"tier": "fact", "id": str(self.held_fact.pk)}], "reason": "x"}),
            (
                MERGE,
                {"items": [{"tier": "entry", "id": str(self.entry.pk), "into": str(self.approved_entry.pk)}]},
            ),
        ):
            response = self.api(self.outsider_key).post(url, body, format="json")
            assert response.json()["results"][0]["outcome"] == "not_found"
        response = self.api(self.outsider_key).patch(
            item_url("entry", self.entry.pk), {"content": "x"}, format="json"
        )
        assert response.status_code == 404
        assert EpisodicEntry.objects.get(pk=self.entry.pk).review == "held"
        assert Fact.objects.get(pk=self.held_fact.pk).review == "held"

    def test_a_read_only_key_cannot_decide(self):
        response = self.api(self.read_only_key).post(
            APPROVE, {"items": [{"tier": "entry", "id": str(self.entry.pk)}]}, format="json"
        )
        assert response.status_code == 403
        assert self.api(self.read_only_key).get(LIST).status_code == 200

    def test_batch_approve_reports_each_item(self):
        response = self.api().post(
            APPROVE,
            {
                "items": [
                    {"tier": "entry", "id": str(self.entry.pk)},
                    {"tier": "fact", "id": str(self.held_fact.pk)},
                    {"tier": "entry", "id": str(self.approved_entry.pk)},
                    {"tier": "fact", "id": "00000000-0000-4000-8000-000000000000"},
                ]
            },
            format="json",
        )
        assert response.status_code == 200
        outcomes = [r["outcome"] for r in response.json()["results"]]
        assert outcomes == ["approved", "approved", "not_held", "not_found"]
        assert response.json()["results"][0]["item"]["state"] == "approved"
        fact = Fact.objects.get(pk=self.held_fact.pk)
        assert fact.review == "approved" and fact.valid_to is None and fact.reviewed_by.startswith("api_key:")
        assert self.api().get(LIST).json()["counts"]["total"] == 1

    def test_reject_keeps_the_reason(self):
        response = self.api().post(
            REJECT,
            {"items": [{"tier": "entry", "id": str(self.entry.pk)}], "reason": "Not about Ada"},
            format="json",
        )
        assert response.json()["results"][0]["outcome"] == "rejected"
        entry = EpisodicEntry.objects.get(pk=self.entry.pk)
        assert (entry.review, entry.status, entry.review_note) == ("rejected", "rejected", "Not about Ada")
        rejected = self.api().get(LIST, {"state": "rejected"}).json()["results"]
        assert [(r["id"], r["review_note"]) for r in rejected] == [(str(self.entry.pk), "Not about Ada")]

    def test_merge_confirms_the_stored_item_and_keeps_the_evidence(self):
        response = self.api().post(
            MERGE,
            {
                "items": [
                    {"tier": "entry", "id": str(self.entry.pk), "into": str(self.approved_entry.pk)},
                    {"tier": "fact", "id": str(self.held_fact.pk), "into": str(self.approved_fact.pk)},
                    {"tier": "entry", "id": str(self.other_entry.pk), "into": str(self.approved_fact.pk)},
                ]
            },
            format="json",
        )
        results = response.json()["results"]
        assert [r["outcome"] for r in results] == ["merged", "merged", "invalid"]
        assert results[0]["item"]["id"] == str(self.approved_entry.pk)
        target = EpisodicEntry.objects.get(pk=self.approved_entry.pk)
        assert target.times_confirmed == 1
        merged = EpisodicEntry.objects.get(pk=self.entry.pk)
        assert (merged.review, merged.status, merged.superseded_by_id) == ("merged", "superseded", target.pk)
        fact = Fact.objects.get(pk=self.approved_fact.pk)
        assert fact.times_confirmed == 1 and fact.value == "Lisbon"

    def test_edit_then_approve_re_embeds_the_new_text(self):
        assert EntryEmbedding.objects.filter(entry=self.entry).exists()
        with self.captureOnCommitCallbacks(execute=True):
            response = self.api().patch(
                item_url("entry", self.entry.pk),
                {"content": "Ada keeps two beehives on her roof."},
                format="json",
            )
        assert response.status_code == 200, response.json()
        assert response.json()["state"] == "approved"
        entry = EpisodicEntry.objects.get(pk=self.entry.pk)
        assert entry.content == "Ada keeps two beehives on her roof." and entry.review == "approved"
        assert entry.embedding_model != ""
        with self.captureOnCommitCallbacks(execute=True):
            response = self.api().patch(
                item_url("fact", self.held_fact.pk), {"value": "sencha"}, format="json"
            )
        assert response.status_code == 200, response.json()
        fact = Fact.objects.get(pk=self.held_fact.pk)
        assert fact.value == "sencha" and fact.valid_to is None and fact.embeddings.exists()

    def test_edit_fields_must_fit_the_tier(self):
        response = self.api().patch(item_url("entry", self.entry.pk), {"value": "x"}, format="json")
        assert response.status_code == 400 and "value" in response.json()["error"]["fields"]
        response = self.api().patch(item_url("entry", self.entry.pk), {"colour": "x"}, format="json")
        assert response.status_code == 400
        assert self.api().patch(item_url("thread", self.entry.pk), {}, format="json").status_code == 404

    def test_deciding_twice_answers_409_on_patch(self):
        self.api().patch(item_url("entry", self.entry.pk), {}, format="json")
        response = self.api().patch(item_url("entry", self.entry.pk), {}, format="json")
        assert response.status_code == 409

    def test_decisions_are_audited_and_sent_as_review_events(self):
        self.api().post(APPROVE, {"items": [{"tier": "entry", "id": str(self.entry.pk)}]}, format="json")
        self.api().post(REJECT, {"items": [{"tier": "fact", "id": str(self.held_fact.pk)}]}, format="json")
        approved = AuditEvent.objects.get(entity_id=str(self.entry.pk), changes__review="approved")
        rejected = AuditEvent.objects.get(entity_id=str(self.held_fact.pk), changes__review="rejected")
        assert event_type_for("episodic_entry", approved.action, approved.changes) == "review.approved"
        assert event_type_for("fact", rejected.action, rejected.changes) == "review.rejected"


class LearnedProcedureReviewTests(MemoryTestCase):
    """A procedure learned from episodes is proposed inactive (procedures.services.learning): it
    waits in the same queue until approved (activated) or rejected (left inactive)."""

    def learned(self, name="Refund late parcels"):
        procedure = procedure_create(
            workspace=self.workspace,
            agent=self.agent,
            name=name,
            procedure_type="prompt_template",
            content="Apologise, then refund.",
            origin=Procedure.Origin.HUMAN,
            actor="test",
        )
        Procedure.objects.filter(pk=procedure.pk).update(
            origin=Procedure.Origin.SELF_LEARNED, is_active=False
        )
        return procedure

    def test_learned_procedures_wait_and_are_approved_by_activation(self):
        waiting, other = self.learned(), self.learned("Other")
        body = self.api().get(LIST, {"tier": "procedure"}).json()
        assert {r["id"] for r in body["results"]} == {str(waiting.pk), str(other.pk)}
        assert body["counts"]["procedure"] == 2
        response = self.api().patch(
            item_url("procedure", waiting.pk), {"name": "Refund a late parcel"}, format="json"
        )
        assert response.status_code == 200, response.json()
        waiting.refresh_from_db()
        assert waiting.is_active and waiting.name == "Refund a late parcel"
        self.api().post(
            REJECT, {"items": [{"tier": "procedure", "id": str(other.pk)}], "reason": "noise"}, format="json"
        )
        other.refresh_from_db()
        assert not other.is_active
        assert self.api().get(LIST).json()["counts"]["procedure"] == 0
        rejected = self.api().get(LIST, {"state": "rejected"}).json()["results"]
        assert [r["id"] for r in rejected] == [str(other.pk)]
        response = self.api().post(
            MERGE,
            {"items": [{"tier": "procedure", "id": str(other.pk), "into": str(waiting.pk)}]},
            format="json",
        )
        assert response.json()["results"][0]["outcome"] == "invalid"

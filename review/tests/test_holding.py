"""Issue 14, review queue: what `memory_settings.review` holds, and that a held item is invisible
to every read that recalls or injects memory until it is approved."""

from django.urls import reverse

from core.memory_settings import memory_settings_for, memory_settings_validate
from core.models import AuditEvent
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EpisodicEntry
from episodic.services import REJECT_DUPLICATE_HASH, entry_create
from episodic.services.candidates import REJECT_REVIEW_REJECTED
from episodic.tests.factories import memory_user_factory, use_test_embeddings
from facts.models import Fact
from facts.services import OUTCOME_HELD, OUTCOME_REVIEW_REJECTED, fact_remember
from review.selectors import review_counts, review_list
from review.services import review_approve, review_reject
from threads.services import thread_create
from webhooks.events import event_type_for

EXTRACT = reverse("api:episodic_entries:extract")
SEARCH = reverse("api:episodic_entries:search")
ENTRIES = reverse("api:episodic_entries:list")
FACTS = reverse("api:facts:list")
CONTEXT = reverse("api:runtime:context")
RECALL = reverse("api:runtime:recall")
TOOL_CALL = "/api/v1/tools/call/"


class HoldingTestCase(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)
        self.thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=self.person)

    def review(self, mode: str) -> None:
        self.agent.memory_settings = {**(self.agent.memory_settings or {}), "review": mode}
        self.agent.save(update_fields=["memory_settings"])

    def extract(self, content="Ada adopted a cat named Miso.", evidence="I adopted a cat named Miso"):
        body = {
            "agent": "assistant",
            "memory_user": str(self.person.pk),
            "transcript": [{"id": "t1", "role": "user", "content": f"{evidence}."}],
            "candidates": [{"content": content, "source": "user_assertion", "evidence": evidence}],
            "use_llm": False,
            "sync": True,
        }
        response = self.api().post(EXTRACT, body, format="json")
        assert response.status_code in (200, 201), response.json()
        return response.json()

    def direct(self, content="Ada keeps bees on her roof."):
        return entry_create(agent=self.agent, memory_user=self.person, content=content, actor="test")

    def user_fact(self, key="favourite_tea", value="oolong", source=Fact.Source.EXTRACTION):
        return fact_remember(
            workspace=self.workspace,
            key=key,
            value=value,
            scope="user",
            fact_type="user_preference",
            agent=self.agent,
            memory_user=self.person,
            source=source,
            overwrite=False,
        )

    def principal(self):
        from core.access import principal_for_api_key

        return principal_for_api_key(self.owner_api_key)


class SettingTests(HoldingTestCase):
    def test_the_setting_defaults_to_off_and_takes_three_values(self):
        assert memory_settings_for(self.agent).review == "off"
        for mode in ("off", "extracted", "all"):
            assert memory_settings_validate({"review": mode}) == {"review": mode}
        response = self.api().patch(
            reverse("api:agents:detail", kwargs={"slug": "assistant"}),
            {"memory_settings": {"review": "sometimes"}},
            format="json",
        )
        assert response.status_code == 400
        assert "review" in response.json()["error"]["fields"]

    def test_off_holds_nothing(self):
        self.review("off")
        stored = self.extract()["stored"]
        assert EpisodicEntry.objects.get(pk=stored[0]["id"]).review == "approved"
        assert self.direct().entry.review == "approved"
        assert self.user_fact().outcome == "created"
        assert review_counts(principal=self.principal())["total"] == 0

    def test_extracted_holds_extraction_but_not_direct_writes(self):
        self.review("extracted")
        stored = self.extract()["stored"]
        assert EpisodicEntry.objects.get(pk=stored[0]["id"]).review == "held"
        assert self.direct().entry.review == "approved"
        held_fact = self.user_fact()
        assert held_fact.outcome == OUTCOME_HELD and held_fact.fact.review == "held"
        assert self.user_fact(key="city", value="Lisbon", source=Fact.Source.API).outcome == "created"
        assert review_counts(principal=self.principal()) == {
            "entry": 1,
            "fact": 1,
            "procedure": 0,
            "total": 2,
        }

    def test_all_holds_direct_writes_and_api_facts_but_not_the_operator(self):
        self.review("all")
        assert self.direct().entry.review == "held"
        assert self.user_fact(source=Fact.Source.API).outcome == OUTCOME_HELD
        assert self.user_fact(key="city", value="Lisbon", source=Fact.Source.OPERATOR).outcome == "created"
        response = self.api(self.agent_key).post(
            reverse("api:facts:remember"),
            {"key": "tone", "value": "formal", "scope": "agent"},
            format="json",
        )
        assert response.status_code == 201, response.json()
        assert response.json()["outcome"] == "held"

    def test_held_items_are_announced_as_review_waiting(self):
        self.review("all")
        entry = self.direct().entry
        fact = self.user_fact().fact
        for entity_type, pk in (("episodic_entry", entry.pk), ("fact", fact.pk)):
            event = AuditEvent.objects.get(entity_type=entity_type, entity_id=str(pk), action="create")
            assert event.changes["review"] == "waiting"
            assert event_type_for(entity_type, "create", event.changes) == "review.waiting"


class InvisibleUntilApprovedTests(HoldingTestCase):
    def setUp(self):
        super().setUp()
        self.review("all")
        self.entry = self.direct("Ada keeps bees on her roof.").entry
        self.fact = self.user_fact(key="favourite_tea", value="oolong", source=Fact.Source.API).fact

    def search(self):
        body = {
            "agent": "assistant",
            "memory_user": str(self.person.pk),
            "query": "bees roof",
            "mode": "hybrid",
        }
        response = self.api().post(SEARCH, body, format="json")
        assert response.status_code == 200, response.json()
        return [hit["entry"]["id"] for hit in response.json()["results"]]

    def context(self):
        body = {
            "agent": "assistant",
            "memory_user": str(self.person.pk),
            "message": "Tell me about bees and tea",
        }
        response = self.api().post(CONTEXT, body, format="json")
        assert response.status_code == 200, response.json()
        return response.json()

    def tool(self, name, **arguments):
        call = {
            "name": name,
            "arguments": {"agent": "assistant", "memory_user": str(self.person.pk), **arguments},
        }
        response = self.api().post(TOOL_CALL, call, format="json")
        assert response.status_code == 200, response.content
        return response.content.decode()

    def visible_everywhere(self) -> dict:
        context = self.context()
        listed = [
            r["id"] for r in self.api().get(ENTRIES, {"memory_user": str(self.person.pk)}).json()["results"]
        ]
        facts = [
            r["id"] for r in self.api().get(FACTS, {"memory_user": str(self.person.pk)}).json()["results"]
        ]
        recall = self.api().post(
            RECALL,
            {
                "agent": "assistant",
                "memory_user": str(self.person.pk),
                "query": "oolong tea",
                "memory_type": "all",
            },
            format="json",
        )
        assert recall.status_code == 200, recall.json()
        return {
            "search": str(self.entry.pk) in self.search(),
            "memory_block": "bees" in context["memory"]["text"],
            "profile": "oolong" in context["user_profile"]["text"],
            "entry_list": str(self.entry.pk) in listed,
            "fact_list": str(self.fact.pk) in facts,
            "recall_api": "oolong" in recall.content.decode(),
            "recall_tool_key": "oolong" in self.tool("recall", key="favourite_tea"),
            "recall_memory_tool": "bees" in self.tool("recall_memory", query="bees roof"),
            "search_tool": "bees" in self.tool("search", query="bees roof"),
        }

    def test_held_items_are_not_searched_injected_listed_or_recalled(self):
        assert not any(self.visible_everywhere().values()), self.visible_everywhere()

    def test_approved_items_are_everywhere(self):
        principal = self.principal()
        review_approve(principal=principal, tier="entry", item_id=self.entry.pk)
        review_approve(principal=principal, tier="fact", item_id=self.fact.pk)
        seen = self.visible_everywhere()
        assert all(seen.values()), seen

    def test_rejected_items_stay_invisible(self):
        principal = self.principal()
        review_reject(principal=principal, tier="entry", item_id=self.entry.pk, reason="Not about Ada")
        review_reject(principal=principal, tier="fact", item_id=self.fact.pk, reason="Guess")
        assert not any(self.visible_everywhere().values())


class DedupeTests(HoldingTestCase):
    def test_a_copy_of_a_held_entry_is_not_held_twice(self):
        self.review("extracted")
        first = self.extract()["stored"][0]["id"]
        again = self.extract()
        assert again["stored"] == []
        assert [(r["reason"], r["duplicate_of"]) for r in again["rejected"]] == [
            (REJECT_DUPLICATE_HASH, first)
        ]

    def test_a_rejected_entry_is_not_proposed_again(self):
        self.review("extracted")
        first = self.extract()["stored"][0]["id"]
        review_reject(principal=self.principal(), tier="entry", item_id=first, reason="wrong cat")
        again = self.extract()
        assert again["stored"] == []
        assert again["rejected"][0]["reason"] == REJECT_REVIEW_REJECTED
        assert EpisodicEntry.objects.get(pk=first).status == "rejected"

    def test_a_direct_write_is_stored_although_its_copy_waits(self):
        """Review `extracted`: the agent storing what extraction proposed makes it memory now;
        the held copy stays in the queue, where the reviewer sees the stored twin to merge into."""
        self.review("extracted")
        held = self.extract()["stored"][0]["id"]
        result = self.direct("Ada adopted a cat named Miso.")
        assert result.created and result.entry.review == "approved" and str(result.entry.pk) != held

    def test_a_held_entry_never_supersedes_until_approved(self):
        """Consolidation's update decision waits with the held entry; approval applies it."""
        stored = self.direct("Ada lives in Lisbon, Portugal, near the river.").entry
        self.review("all")
        held = self.direct("Ada lives in Porto, Portugal, near the river.").entry
        stored.refresh_from_db()
        assert stored.status == "active"
        if held.consolidation.get("decision") in ("update", "supersede"):
            review_approve(principal=self.principal(), tier="entry", item_id=held.pk)
            stored.refresh_from_db()
            assert stored.status == "superseded" and stored.superseded_by_id == held.pk

    def test_a_rejected_fact_value_is_not_held_again_but_another_value_is(self):
        self.review("extracted")
        first = self.user_fact(value="oolong")
        review_reject(principal=self.principal(), tier="fact", item_id=first.fact.pk, reason="no")
        assert self.user_fact(value="oolong").outcome == OUTCOME_REVIEW_REJECTED
        assert self.user_fact(value="sencha").outcome == OUTCOME_HELD
        assert self.user_fact(value="sencha").fact.pk == Fact.objects.get(value="sencha").pk


class ConsolidationScopeTests(HoldingTestCase):
    """A held entry keeps the id of the stored entry its approval closes in a JSON column
    (`consolidation.old`), which an import or a stale decision may leave naming a row outside
    the entry's own agent and person. Approving it closes only a row of that scope, and the
    queue suggests only such a row."""

    def held_naming(self, other):
        self.review("all")
        held = self.direct("Ada moved to Lisbon.")
        decision = {"decision": "supersede", "reason": "She moved.", "by": "rule", "old": str(other.pk)}
        EpisodicEntry.objects.filter(pk=held.entry.pk).update(
            consolidation={**decision, "new": None, "similarity": 0.9}
        )
        return held.entry

    def test_another_workspaces_entry_is_neither_shown_nor_closed(self):
        stranger = memory_user_factory(self.other_workspace)
        foreign = entry_create(
            agent=self.outsider_agent, memory_user=stranger, content="Eve likes tea.", actor="test"
        ).entry
        held = self.held_naming(foreign)
        principal = self.principal()

        (item,) = review_list(principal=principal, tier="entry")
        assert item.similar is None
        review_approve(principal=principal, tier="entry", item_id=held.pk)

        foreign.refresh_from_db()
        assert (foreign.status, foreign.superseded_by_id) == (EpisodicEntry.Status.ACTIVE, None)

    def test_another_persons_entry_of_the_workspace_is_not_closed(self):
        other = entry_create(
            agent=self.agent,
            memory_user=memory_user_factory(self.workspace, canonical_id="telegram:2", display_name="Bo"),
            content="Bo lives in Porto.",
            actor="test",
        ).entry
        held = self.held_naming(other)

        review_approve(principal=self.principal(), tier="entry", item_id=held.pk)

        other.refresh_from_db()
        assert (other.status, other.superseded_by_id) == (EpisodicEntry.Status.ACTIVE, None)

    def test_the_persons_own_entry_is_closed(self):
        old = entry_create(
            agent=self.agent, memory_user=self.person, content="Ada lives in Porto.", actor="test"
        )
        held = self.held_naming(old.entry)

        (item,) = review_list(principal=self.principal(), tier="entry")
        assert item.similar == {"id": str(old.entry.pk), "text": "Ada lives in Porto."}
        review_approve(principal=self.principal(), tier="entry", item_id=held.pk)

        old.entry.refresh_from_db()
        assert (old.entry.status, old.entry.superseded_by_id) == (EpisodicEntry.Status.SUPERSEDED, held.pk)

from datetime import timedelta

from django.test import override_settings
from django.utils import timezone

from core.testing import MemoryTestCase
from episodes.tests.factories import EpisodeFactory
from facts.models import Fact
from facts.selectors import fact_lookup
from facts.services import fact_remember
from identities.tests.factories import MemoryUserFactory, ThreadFactory
from procedures.tests.factories import ProcedureFactory
from runtime.selectors import recall
from threads.selectors import MemoryContext

RECALL = "/api/v1/recall/"


class RecallTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)
        cls.thread = ThreadFactory(agent=cls.agent, memory_user=cls.person)
        for key in ("lesson_local_time_command", "local_time_zone", "get-local-time", "favourite_colour"):
            fact_remember(workspace=cls.workspace, key=key, value=f"value of {key}", scope="global")
        fact_remember(workspace=cls.workspace, key="unsure", value="maybe", scope="global", confidence=0.2)
        fact_remember(workspace=cls.workspace, key="name", value="Ann", scope="user", memory_user=cls.person)
        fact_remember(workspace=cls.other_workspace, key="local_time", value="theirs", scope="global")

    def context(self, **kwargs):
        return MemoryContext(workspace=self.workspace, **kwargs)

    def test_no_arguments_lists_the_visible_facts_above_min_confidence(self):
        result = recall(context=self.context(agent=self.agent))
        assert result.mode == "list"
        assert {f.key for f in result.facts} == {
            "lesson_local_time_command",
            "local_time_zone",
            "get-local-time",
            "favourite_colour",
        }
        with_user = recall(context=self.context(agent=self.agent, memory_user=self.person), min_confidence=0)
        assert {"name", "unsure"} <= {f.key for f in with_user.facts}

    def test_key_is_an_exact_lookup(self):
        result = recall(context=self.context(), key="local_time_zone")
        assert result.mode == "key"
        assert [f.key for f in result.facts] == ["local_time_zone"]

    def test_an_unknown_key_falls_back_to_fuzzy_matching(self):
        result = recall(context=self.context(), key="local time")
        assert result.mode == "fuzzy"
        assert {f.key for f in result.facts} == {
            "lesson_local_time_command",
            "local_time_zone",
            "get-local-time",
        }
        typo = recall(context=self.context(), key="favorite colour")
        assert [f.key for f in typo.facts] == ["favourite_colour"]

    def test_query_searches_facts_procedures_and_episodes(self):
        ProcedureFactory(
            workspace=self.workspace,
            name="Deploy the website",
            description="Steps to deploy",
            search_text="Deploy the website Steps to deploy",
        )
        EpisodeFactory(agent=self.agent, trigger_type="deploy", error="website deploy failed")
        fact_remember(
            workspace=self.workspace, key="deploy_target", value="the website server", scope="global"
        )
        result = recall(context=self.context(agent=self.agent), query="website")
        assert result.mode == "query"
        assert [f.key for f in result.facts] == ["deploy_target"]
        assert [p.name for p in result.procedures] == ["Deploy the website"]
        assert len(result.episodes) == 1
        only_facts = recall(context=self.context(agent=self.agent), query="website", memory_type="facts")
        assert only_facts.procedures == [] and only_facts.episodes == []

    def test_a_question_no_fact_holds_every_word_of_finds_the_facts_with_some(self):
        """Agents ask in sentences: "what is my dog called" has a word no fact holds
        ("called"). Every word required, that found nothing before the fact's vector was
        stored, or ever without vectors (`semantic` off, the endpoint down); the facts
        holding some of the words are found instead, the most confident first."""
        fact_remember(
            workspace=self.workspace, key="dog_name", value="Pixel", scope="user", memory_user=self.person
        )
        context = self.context(agent=self.agent, memory_user=self.person)
        result = recall(context=context, query="what is my dog called", semantic=False)
        assert result.mode == "query"
        assert [f.key for f in result.facts] == ["dog_name"]
        procedure = ProcedureFactory(
            workspace=self.workspace,
            name="Reset a password",
            description="Send the reset link",
            search_text="Reset a password Send the reset link",
        )
        asked = recall(
            context=context, query="how do I reset my password when I am locked out", semantic=False
        )
        assert [p.pk for p in asked.procedures] == [procedure.pk]

    def test_procedures_holding_more_of_its_words_come_before_more_successful_ones(self):
        """With no procedure holding every word of a question, those holding more of its words
        are kept within `limit` before more successful ones holding fewer; the kept ones are
        still answered most successful first."""
        for n in range(3):
            ProcedureFactory(
                workspace=self.workspace,
                name=f"Lock the screen {n}",
                search_text=f"Lock the screen {n} when you leave",
                success_count=50,
            )
        reset = ProcedureFactory(
            workspace=self.workspace,
            name="Reset a password",
            search_text="Reset a password by sending the reset link",
            success_count=1,
        )
        unlock = ProcedureFactory(
            workspace=self.workspace,
            name="Unlock a locked account",
            search_text="Unlock a locked account and reset it",
            success_count=0,
        )
        asked = recall(
            context=self.context(agent=self.agent, memory_user=self.person),
            query="how do I reset my password when I am locked out",
            semantic=False,
            limit=2,
        )
        # `reset` and `unlock` hold two of its words each (none all three), the screens one.
        assert [p.pk for p in asked.procedures] == [reset.pk, unlock.pk]

    def test_procedures_as_successful_come_holding_more_of_its_words_first(self):
        """Among procedures kept alike successful, the one holding more of the question's words
        comes first, whatever their names (found in the smoke test)."""
        office = ProcedureFactory(
            workspace=self.workspace, name="A lock for the office", search_text="Lock the office at night"
        )
        reset = ProcedureFactory(
            workspace=self.workspace, name="Reset a password", search_text="Send the password reset link"
        )
        asked = recall(
            context=self.context(agent=self.agent, memory_user=self.person),
            query="how do I reset my password when I am locked out",
            semantic=False,
        )
        assert [p.pk for p in asked.procedures] == [reset.pk, office.pk]

    def test_facts_holding_its_rarest_words_come_before_more_confident_ones(self):
        """Some words of a question are common ("called", among a dozen call_* facts): with no
        fact holding every word, the facts holding the rarest ones are kept within `limit`
        before more confident facts holding only common ones."""
        for n in range(12):
            fact_remember(
                workspace=self.workspace,
                key=f"call_slot_{n}",
                value=f"call at {n}",
                scope="user",
                memory_user=self.person,
                confidence=0.95,
            )
        fact_remember(
            workspace=self.workspace,
            key="dog_name",
            value="Pixel",
            scope="user",
            memory_user=self.person,
            confidence=0.6,
        )
        context = self.context(agent=self.agent, memory_user=self.person)
        result = recall(context=context, query="what is my dog called", semantic=False, limit=5)
        assert "dog_name" in [f.key for f in result.facts]
        assert len(result.facts) == 5
        # Still answered most confident first, the contract of every recall.
        assert [f.key for f in result.facts][-1] == "dog_name"
        with override_settings(FACTS_CONFIDENCE_HALF_LIFE_DAYS=30):
            decaying = recall(context=context, query="what is my dog called", semantic=False, limit=5)
        assert "dog_name" in [f.key for f in decaying.facts]
        assert all(abs(f.effective_confidence - f.confidence) < 0.01 for f in decaying.facts)

    def test_a_question_every_word_of_matches_keeps_to_those_facts(self):
        """When some facts hold every word, they alone answer: a word in common is no match
        then ("colour" alone would also bring the user's name in, had it said "colour")."""
        fact_remember(workspace=self.workspace, key="hair_colour", value="red", scope="global")
        result = recall(context=self.context(), query="favourite colour", semantic=False)
        assert [f.key for f in result.facts] == ["favourite_colour"]

    def test_any_word_matching_takes_each_word_as_a_word(self):
        """The words are quoted lexemes, never tsquery syntax: a URL is one word (not a phrase
        of its parts), and quotes, operators and SQL in a question are only words."""
        fact_remember(
            workspace=self.workspace, key="homepage", value="example.com/path/x?y=1", scope="global"
        )
        found = recall(context=self.context(), query="who hosts example.com/path/x?y=1 now", semantic=False)
        assert [f.key for f in found.facts] == ["homepage"]
        for query in (
            "'; DROP TABLE facts_fact; --",
            "a:b & c | !d <-> (e)",
            "O'Neil's \\ back\\slash",
            "ŻÓŁW café naïve",
            "x" * 1000,
        ):
            with self.subTest(query=query[:40]):
                response = self.api().post(RECALL, {"query": query, "semantic": False}, format="json")
                assert response.status_code == 200, response.content
                assert response.json()["facts"] == []
        assert Fact.objects.filter(workspace=self.workspace).exists()

    def test_a_question_of_stop_words_only_finds_nothing(self):
        result = recall(context=self.context(), query="what is it", semantic=False)
        assert result.facts == [] and result.procedures == []

    def test_results_are_ordered_by_confidence_then_recency(self):
        fact_remember(
            workspace=self.workspace, key="local_time_high", value=1, scope="global", confidence=0.99
        )
        result = recall(context=self.context(), key="local time")
        assert result.facts[0].key == "local_time_high"

    @override_settings(FACTS_CONFIDENCE_HALF_LIFE_DAYS=30)
    def test_confidence_decays_at_read_time_when_a_half_life_is_set(self):
        Fact.objects.filter(key="favourite_colour").update(
            confidence=0.8, last_confirmed_at=timezone.now() - timedelta(days=30)
        )
        result = recall(context=self.context(), key="favourite_colour", min_confidence=0)
        assert abs(result.facts[0].effective_confidence - 0.4) < 0.01
        assert recall(context=self.context(), key="favourite_colour").mode == "fuzzy"
        assert Fact.objects.get(key="favourite_colour").confidence == 0.8

    def test_lookup_prefers_session_then_user_then_agent_then_global(self):
        fact_remember(workspace=self.workspace, key="k", value="global", scope="global")
        fact_remember(workspace=self.workspace, key="k", value="agent", scope="agent", agent=self.agent)
        fact_remember(workspace=self.workspace, key="k", value="user", scope="user", memory_user=self.person)
        fact_remember(workspace=self.workspace, key="k", value="session", scope="session", thread=self.thread)
        lookup = {"workspace": self.workspace, "key": "k"}
        assert fact_lookup(**lookup).value == "global"
        assert fact_lookup(**lookup, agent=self.agent).value == "agent"
        assert fact_lookup(**lookup, agent=self.agent, memory_user=self.person).value == "user"
        assert (
            fact_lookup(**lookup, agent=self.agent, memory_user=self.person, thread=self.thread).value
            == "session"
        )
        assert fact_lookup(**lookup, agent=self.other_agent).value == "global"

    def test_the_recall_api_is_open_to_read_only_keys_and_isolated(self):
        response = self.api(self.read_only_key).post(RECALL, {"key": "local time"}, format="json")
        assert response.status_code == 200, response.json()
        assert response.json()["mode"] == "fuzzy"
        assert len(response.json()["facts"]) == 3
        outsider = self.api(self.outsider_key).post(RECALL, {"key": "local time"}, format="json")
        assert [f["value"] for f in outsider.json()["facts"]] == ["theirs"]
        bad = self.api().post(RECALL, {"memory_type": "dreams"}, format="json")
        assert bad.status_code == 400
        assert "memory_type" in bad.json()["error"]["fields"]
        foreign_thread = self.api(self.outsider_key).post(
            RECALL, {"thread": str(self.thread.pk)}, format="json"
        )
        assert foreign_thread.status_code == 404

    def test_tools_lists_openai_function_schemas(self):
        response = self.api(self.read_only_key).get("/api/v1/tools/")
        assert response.status_code == 200
        names = [tool["function"]["name"] for tool in response.json()]
        # The original three come first; the list grew (recall_memory, search, forget, ...).
        assert names[:3] == ["recall", "remember", "identify_user"]
        assert "recall_memory" in names
        for tool in response.json():
            assert tool["type"] == "function"
            assert tool["function"]["parameters"]["type"] == "object"

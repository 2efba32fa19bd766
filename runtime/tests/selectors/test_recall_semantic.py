from django.test import override_settings

from core.services import provider_credential_set
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from facts.models import FactEmbedding
from facts.services import fact_remember
from procedures.models import ProcedureEmbedding
from procedures.services import procedure_create
from runtime.selectors import recall
from threads.selectors import MemoryContext

# A tiny vector space: texts about drinks point one way, travel another.
TOPICS = {"drink": ("coffee", "espresso", "tea", "latte"), "travel": ("flight", "plane", "airport", "trip")}


def topic_vector(text: str) -> list[float]:
    text = text.lower()
    return [1.0 if any(word in text for word in words) else 0.0 for words in TOPICS.values()] + [0.1]


class SemanticRecallTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        self.server.embedding_handler = lambda texts: [topic_vector(t) for t in texts]
        provider_credential_set(
            workspace=self.workspace,
            purpose="embedding",
            base_url=self.server.url,
            model="topics",
            api_key="k",
        )

    def test_recall_finds_facts_and_procedures_by_meaning(self):
        with self.captureOnCommitCallbacks(execute=True):
            drink = fact_remember(
                workspace=self.workspace, key="morning_order", value="a latte", scope="global"
            )
            fact_remember(workspace=self.workspace, key="seat", value="aisle on the plane", scope="global")
            procedure_create(
                workspace=self.workspace,
                name="Book a trip",
                procedure_type="tool_sequence",
                content=[{"tool": "search_flights"}],
                trigger_conditions={"goal_contains": ["flight"]},
            )
        assert FactEmbedding.objects.count() == 2
        assert ProcedureEmbedding.objects.count() == 1

        result = recall(context=MemoryContext(workspace=self.workspace), query="espresso")
        assert [f.key for f in result.facts] == ["morning_order"]
        assert result.facts[0].pk == drink.fact.pk
        assert result.facts[0].similarity > 0.9
        travel = recall(context=MemoryContext(workspace=self.workspace), query="airport")
        assert [f.key for f in travel.facts] == ["seat"]
        assert [p.name for p in travel.procedures] == ["Book a trip"]
        off = recall(context=MemoryContext(workspace=self.workspace), query="espresso", semantic=False)
        assert off.facts == []

    def test_a_failing_provider_falls_back_to_full_text(self):
        with self.captureOnCommitCallbacks(execute=True):
            fact_remember(workspace=self.workspace, key="drink", value="espresso please", scope="global")
        self.server.fail_next = 10
        response = self.api().post("/api/v1/recall/", {"query": "espresso"}, format="json")
        assert response.status_code == 200, response.json()
        assert [f["key"] for f in response.json()["facts"]] == ["drink"]
        assert response.json()["facts"][0]["similarity"] is None

    @override_settings(EMBEDDING_QUERY_TIMEOUT_SECONDS=0.2)
    def test_an_endpoint_that_hangs_is_waited_for_at_most_the_query_timeout(self):
        """Recall asks the endpoint as a search does: a hang past the query timeout answers
        from full-text search (before, recall waited LLM_TIMEOUT_SECONDS)."""
        with self.captureOnCommitCallbacks(execute=True):
            fact_remember(workspace=self.workspace, key="drink", value="espresso please", scope="global")
        self.server.delay_seconds = 1.0
        with self.assertLogs("facts.selectors", "WARNING") as logs:
            result = recall(context=MemoryContext(workspace=self.workspace), query="espresso")
        assert [f.key for f in result.facts] == ["drink"]
        assert getattr(result.facts[0], "similarity", None) is None  # Found by its words.
        assert "timed out" in "".join(logs.output)

    def test_a_superseded_version_is_not_recalled(self):
        with self.captureOnCommitCallbacks(execute=True):
            fact_remember(workspace=self.workspace, key="drink", value="coffee", scope="global")
        with self.captureOnCommitCallbacks(execute=True):
            fact_remember(workspace=self.workspace, key="drink", value="a flight of wine", scope="global")
        result = recall(context=MemoryContext(workspace=self.workspace), query="latte")
        assert result.facts == []

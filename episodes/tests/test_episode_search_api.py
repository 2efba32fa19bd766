"""POST /api/v1/episodes/search/: hybrid search of episode records, scoped like the other episode routes."""

from datetime import timedelta

from django.utils import timezone

from core.testing import MemoryTestCase, hnsw_above
from episodes.models import EpisodeEmbedding
from episodes.services import episode_create
from identities.tests.factories import MemoryUserFactory

SEARCH = "/api/v1/episodes/search/"


class EpisodeSearchApiTests(MemoryTestCase):
    """Vectors from the workspace's default provider, the local all-MiniLM-L6-v2: "by
    meaning" is the real model's meaning, not a test double's."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.person = MemoryUserFactory(workspace=cls.workspace)

    def setUp(self):
        with self.captureOnCommitCallbacks(execute=True):
            self.kettle = self.record(
                input={"goal": "The customer wants their money back for a broken kettle"},
                outcome="failure",
                memory_user=self.person,
            )
            self.dentist = self.record(
                input={"goal": "Book a dentist appointment for Tuesday"}, outcome="success"
            )
            self.report = self.record(
                input={"goal": "Translate the quarterly report into German"},
                outcome="success",
                started_at=timezone.now() - timedelta(days=40),
            )
            self.other = self.record(
                agent=self.other_agent, input={"goal": "Customer asks for a refund of a cracked teapot"}
            )
        assert EpisodeEmbedding.objects.count() == 4

    def record(self, agent=None, **kwargs):
        kwargs.setdefault("trigger_type", "chat")
        return episode_create(workspace=self.workspace, agent=agent or self.agent, **kwargs)

    def search(self, key=None, **body):
        return self.api(key).post(SEARCH, body, format="json")

    def ids(self, response):
        assert response.status_code == 200, response.json()
        return [hit["episode"]["id"] for hit in response.json()["results"]]

    def test_finds_an_episode_by_meaning_without_a_shared_word(self):
        """ "refund request" shares no word with the kettle episode: its vector finds it first."""
        response = self.search(query="refund request", agent="assistant")
        assert self.ids(response)[0] == str(self.kettle.pk)
        top = response.json()["results"][0]
        assert top["lexical"] == 0
        assert top["vector"] > 0.2
        assert top["recency"] > 0
        assert top["score"] >= response.json()["results"][-1]["score"]
        assert response.json()["plan"] == "exact"
        # Full text alone has nothing to match.
        assert self.ids(self.search(query="refund request", mode="lexical")) == [str(self.other.pk)]
        assert self.ids(self.search(query="refund request", mode="semantic", agent="assistant"))[0] == str(
            self.kettle.pk
        )

    @hnsw_above(2)
    def test_a_large_scope_searches_the_hnsw_index(self):
        """Above the exact-scan threshold the filtered HNSW scan (iterative) still finds it."""
        elsewhere = episode_create(
            workspace=self.other_workspace, agent=self.outsider_agent, trigger_type="chat"
        )
        EpisodeEmbedding.objects.create(
            episode=elsewhere,
            workspace=self.other_workspace,
            model=EpisodeEmbedding.objects.first().model,
            dimensions=384,
            embedding=[1.0] + [0.0] * 383,
        )
        response = self.search(query="money back for a broken appliance", mode="vector")
        assert response.json()["plan"] == "hnsw"
        assert self.ids(response)[0] == str(self.kettle.pk)
        assert len(self.ids(response)) == 4
        # The search put its workspace's vectors in the graph (a worker's task; eager here),
        # not another workspace's; the same search then walks the graph and finds the same.
        graph = EpisodeEmbedding.objects.filter(in_graph=True)
        assert set(graph.values_list("workspace_id", flat=True)) == {self.workspace.pk}
        assert graph.count() == 4
        again = self.search(query="money back for a broken appliance", mode="vector")
        assert self.ids(again) == self.ids(response)

    def test_lexical_hits_carry_their_bm25_part(self):
        response = self.search(query="dentist appointment", mode="lexical")
        assert self.ids(response) == [str(self.dentist.pk)]
        hit = response.json()["results"][0]
        assert hit["lexical"] > 0
        assert hit["vector"] is None

    def test_filters_narrow_the_scope(self):
        """agent, memory_user, outcome, trigger_type and the time range all apply."""
        query = "customer problem"
        assert set(self.ids(self.search(query=query, top_k=10))) == {
            str(e.pk) for e in (self.kettle, self.dentist, self.report, self.other)
        }
        assert self.ids(self.search(query=query, memory_user=str(self.person.pk))) == [str(self.kettle.pk)]
        assert set(self.ids(self.search(query=query, outcome="success"))) == {
            str(self.dentist.pk),
            str(self.report.pk),
        }
        assert self.ids(self.search(query=query, outcome="open")) == [str(self.other.pk)]
        assert self.ids(self.search(query=query, trigger_type="cron")) == []
        since = (timezone.now() - timedelta(days=10)).isoformat()
        assert str(self.report.pk) not in self.ids(self.search(query=query, started_after=since))
        assert self.ids(self.search(query=query, started_before=since)) == [str(self.report.pk)]
        assert (
            self.ids(self.search(query=query, top_k=1))
            and len(self.ids(self.search(query=query, top_k=1))) == 1
        )

    def test_isolation(self):
        """An agent-bound key sees its agent's episodes only, naming another agent finds
        nothing; a read-only key may search; another workspace sees none of these."""
        agent_ids = self.ids(self.search(self.agent_key, query="refund for a broken teapot"))
        assert str(self.other.pk) not in agent_ids and str(self.kettle.pk) in agent_ids
        assert self.ids(self.search(self.agent_key, query="teapot refund", agent="researcher")) == []
        assert self.ids(self.search(self.read_only_key, query="teapot refund"))[0] == str(self.other.pk)
        assert self.ids(self.search(self.outsider_key, query="teapot refund")) == []
        assert self.ids(self.search(self.outsider_key, query="kettle", memory_user=str(self.person.pk))) == []

    def test_hostile_input_is_a_400(self):
        for body in (
            {},
            {"query": ""},
            {"query": "   "},
            {"query": "x" * 5000},
            {"query": 7},
            {"query": ["a"]},
            {"query": "a", "top_k": 0},
            {"query": "a", "top_k": 101},
            {"query": "a", "top_k": "many"},
            {"query": "a", "mode": "psychic"},
            {"query": "a", "outcome": "maybe"},
            {"query": "a", "memory_user": "not-a-uuid"},
            {"query": "a", "started_after": "yesterday"},
            {"query": "a", "agent": "no spaces allowed"},
            {"query": "a", "surprise": True},
        ):
            response = self.search(**body)
            assert response.status_code == 400, (body, response.status_code)
            assert set(response.json()["error"]) >= {"code", "message", "fields"}
        # Query syntax is not interpreted: operators and quotes are plain text.
        assert self.search(query="!!! & | ( ' \" <-> :*").status_code == 200

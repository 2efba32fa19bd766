"""Vectors kept when the target embeds with the same model, re-embedded otherwise; rows the
target already holds are reused and reported; a fact already held becomes a version."""

from core.services import agent_get_or_create, workspace_create
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.tests.factories import TEST_EMBEDDING_MODEL, use_test_embeddings
from facts.models import Fact, FactEmbedding
from facts.services import fact_remember
from identities.models import ChannelIdentity, MemoryUser
from identities.services import memory_user_create, memory_user_identify
from portability.registry import Scope
from portability.tests.helpers import export_bytes, import_bytes, records
from threads.services import thread_append_messages, thread_create


class VectorTests(MemoryTestCase):
    def setUp(self):
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        with self.captureOnCommitCallbacks(execute=True):
            fact_remember(
                workspace=self.workspace, key="tone", value="dry wit", scope="agent", agent=self.agent
            )
        self.target = workspace_create(name="Target")

    def embedded_texts(self):
        return [
            t for path, body in self.server.requests if path.endswith("/embeddings") for t in body["input"]
        ]

    def test_vectors_of_the_same_model_are_kept(self):
        use_test_embeddings(self.server, self.target)
        data = export_bytes(Scope(workspace=self.workspace, vectors=True))
        assert [r["model"] for r in records(data) if r.get("type") == "fact_vector"] == [TEST_EMBEDDING_MODEL]
        calls = len(self.embedded_texts())
        with self.captureOnCommitCallbacks(execute=True):
            report = import_bytes(self.target, data)
        assert report["vectors_kept"] is True and report["created"]["fact_vector"] == 1
        fact = Fact.objects.get(workspace=self.target)
        source = FactEmbedding.objects.get(fact__workspace=self.workspace)
        copied = FactEmbedding.objects.get(fact=fact)
        assert list(copied.embedding) == list(source.embedding)
        assert len(self.embedded_texts()) == calls  # nothing embedded again

    def test_whether_a_vector_was_in_the_graph_stays_behind(self):
        """`in_graph` is the source's index state: not in the file, and an imported vector is
        stored outside the target's graph like any new one."""
        from episodic.models import EntryEmbedding
        from episodic.tests.factories import entry_factory

        use_test_embeddings(self.server, self.target)
        ada = memory_user_create(workspace=self.workspace, canonical_id="ada")
        entry_factory(agent=self.agent, memory_user=ada, content="Ada moved to Lisbon in May.")
        assert EntryEmbedding.objects.filter(workspace=self.workspace).update(in_graph=True) == 1
        data = export_bytes(Scope(workspace=self.workspace, vectors=True))
        (vector,) = [r for r in records(data) if r.get("type") == "entry_vector"]
        assert "in_graph" not in vector
        with self.captureOnCommitCallbacks(execute=True):
            report = import_bytes(self.target, data)
        assert report["created"]["entry_vector"] == 1
        copied = EntryEmbedding.objects.filter(workspace=self.target)
        assert list(copied.values_list("in_graph", flat=True)) == [False]

    def test_vectors_of_another_model_are_dropped_and_re_embedded(self):
        """The target embeds locally; the file's vectors are of the test model: re-embedded."""
        other = OpenAITestServer().__enter__()
        self.addCleanup(other.__exit__, None, None, None)
        from core.services import provider_credential_set
        from episodic.tests.factories import bag_of_words_vectors

        other.embedding_handler = bag_of_words_vectors
        provider_credential_set(
            workspace=self.target, purpose="embedding", base_url=other.url, model="other-model", api_key="k"
        )
        data = export_bytes(Scope(workspace=self.workspace, vectors=True))
        with self.captureOnCommitCallbacks(execute=True):
            report = import_bytes(self.target, data)
        assert report["vectors_kept"] is False and report["vectors_dropped"] == 1
        (vector,) = FactEmbedding.objects.filter(fact__workspace=self.target)
        assert vector.model == "other-model"

    def test_without_vectors_the_import_embeds_what_it_created(self):
        use_test_embeddings(self.server, self.target)
        data = export_bytes(Scope(workspace=self.workspace))
        with self.captureOnCommitCallbacks(execute=True):
            import_bytes(self.target, data)
        (vector,) = FactEmbedding.objects.filter(fact__workspace=self.target)
        assert vector.model == TEST_EMBEDDING_MODEL


class ConflictTests(MemoryTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        ada = memory_user_identify(workspace=cls.workspace, channel="telegram", external_id="42").memory_user
        thread = thread_create(workspace=cls.workspace, agent=cls.agent, memory_user=ada, title="Hi")
        thread_append_messages(thread=thread, messages=[{"role": "user", "content": "hello"}])
        fact_remember(workspace=cls.workspace, key="city", value="Lisbon", scope="user", memory_user=ada)
        fact_remember(workspace=cls.workspace, key="motto", value="old", scope="global")
        cls.data = export_bytes(Scope(workspace=cls.workspace))
        cls.ada = ada

    def test_existing_agents_people_and_identities_are_reused_and_reported(self):
        target = workspace_create(name="Target")
        agent = agent_get_or_create(workspace=target, slug="assistant")
        person = memory_user_create(workspace=target, canonical_id=self.ada.canonical_id, display_name="Ada")
        report = import_bytes(target, self.data, dry_run=True)
        rules = {(c["type"], c["rule"]) for c in report["conflicts"]}
        assert ("agent", "reused_existing") in rules
        assert ("memory_user", "reused_existing") in rules
        report = import_bytes(target, self.data)
        assert report["reused"]["agent"] == 1 and report["reused"]["memory_user"] == 1
        assert MemoryUser.objects.filter(workspace=target).count() == 1
        thread = target.threads.get()
        assert thread.agent_id == agent.pk and thread.memory_user_id == person.pk
        assert ChannelIdentity.objects.get(workspace=target).memory_user_id == person.pk

    def test_an_identity_of_another_person_is_kept_there_and_reported(self):
        target = workspace_create(name="Target")
        bo = memory_user_identify(workspace=target, channel="telegram", external_id="42").memory_user
        MemoryUser.objects.filter(pk=bo.pk).update(canonical_id="email:bo@example.com")
        report = import_bytes(target, self.data)
        (conflict,) = [c for c in report["conflicts"] if c["rule"] == "identity_of_another_person"]
        assert conflict["detail"]["kept_with"] == str(bo.pk)
        assert ChannelIdentity.objects.get(workspace=target).memory_user_id == bo.pk

    def test_a_fact_already_held_becomes_a_version(self):
        target = workspace_create(name="Target")
        held = fact_remember(workspace=target, key="motto", value="new", scope="global").fact
        report = import_bytes(target, self.data)
        assert report["facts_versioned"] == 1
        imported = Fact.objects.get(workspace=target, key="motto", value="old")
        held.refresh_from_db()
        # The target's own value is newer: it stays current, the imported one is its past.
        assert held.valid_to is None
        assert imported.valid_to == held.valid_from and imported.superseded_by_id == held.pk

import math

from django.test import override_settings

from core.embeddings import (
    LOCAL_MODEL_NAME,
    EmbeddingError,
    LocalEmbeddingProvider,
    OpenAIEmbeddingProvider,
    embedding_provider_for,
)
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer
from episodic.models import EntryEmbedding
from episodic.services import entries_reembed, entry_embed_batch
from episodic.tests.factories import entry_factory, memory_user_factory, use_test_embeddings


class EmbeddingProviderTests(MemoryTestCase):
    def test_local_model_is_the_default_and_gives_unit_384d_vectors(self):
        """Without credentials the packaged all-MiniLM-L6-v2 runs offline."""
        provider = embedding_provider_for(self.workspace)
        assert isinstance(provider, LocalEmbeddingProvider)
        a, b, c = provider.embed(["I adopted a kitten", "We got a new cat", "Quarterly tax filing deadline"])
        assert provider.model_name == LOCAL_MODEL_NAME and len(a) == 384
        assert abs(math.sqrt(sum(x * x for x in a)) - 1) < 1e-5

        def cosine(u, v):
            return sum(x * y for x, y in zip(u, v, strict=True))

        assert cosine(a, b) > cosine(a, c)

    def test_workspace_credential_selects_the_openai_compatible_endpoint(self):
        """Vectors come from the endpoint, in order, with the model recorded."""
        with OpenAITestServer() as server:
            use_test_embeddings(server, self.workspace)
            provider = embedding_provider_for(self.workspace)
            assert isinstance(provider, OpenAIEmbeddingProvider)
            vectors = provider.embed(["alpha", "beta"])
            assert len(vectors) == 2 and len(vectors[0]) == 64
            path, body = server.requests[-1]
            assert path.endswith("/embeddings")
            assert body == {"model": "test-bag-of-words", "input": ["alpha", "beta"]}

    @override_settings(EMBEDDING_BASE_URL="http://127.0.0.1:9/v1", EMBEDDING_MODEL="env-model")
    def test_settings_endpoint_is_the_fallback(self):
        provider = embedding_provider_for(self.other_workspace)
        assert provider.model_name == "env-model"

    def test_endpoint_failure_raises_embedding_error(self):
        with OpenAITestServer() as server:
            server.fail_next = 1
            provider = OpenAIEmbeddingProvider(base_url=server.url, model_name="m")
            try:
                provider.embed(["x"])
            except EmbeddingError:
                pass
            else:
                raise AssertionError("no error")


class ReembedTests(MemoryTestCase):
    def test_model_change_reembeds_in_the_background_keeping_old_vectors(self):
        """After switching models, entries get a second vector; the old one keeps serving."""
        person = memory_user_factory(self.workspace)
        entry = entry_factory(agent=self.agent, memory_user=person, content="Ada likes tea", embed=False)
        with OpenAITestServer() as server:
            use_test_embeddings(server, self.workspace)
            assert entry_embed_batch(entry_ids=[entry.pk]) == 1
            from core.services import provider_credential_set

            provider_credential_set(
                workspace=self.workspace, purpose="embedding", base_url=server.url, model="model-two"
            )
            with self.captureOnCommitCallbacks(execute=True):
                assert entries_reembed(workspace=self.workspace) == 1
        models = sorted(EntryEmbedding.objects.filter(entry=entry).values_list("model", flat=True))
        assert models == ["model-two", "test-bag-of-words"]
        entry.refresh_from_db()
        assert entry.embedding_model == "model-two"


class ReembedCommandTests(MemoryTestCase):
    def test_command_enqueues_entries_and_messages_of_the_new_model(self):
        """The command embeds what lacks a vector of the current model (eager tasks here)."""
        from io import StringIO

        from django.core.management import call_command

        from threads.models import MessageEmbedding
        from threads.services import thread_append_messages, thread_create

        person = memory_user_factory(self.workspace)
        entry_factory(agent=self.agent, memory_user=person, content="Ada likes tea", embed=False)
        thread = thread_create(workspace=self.workspace, agent=self.agent, memory_user=person)
        thread_append_messages(thread=thread, messages=[{"role": "user", "content": "Tea, please."}])
        out = StringIO()
        with OpenAITestServer() as server:
            use_test_embeddings(server, self.workspace)
            with self.captureOnCommitCallbacks(execute=True):
                call_command("episodic_reembed", "--workspace", "Acme", "--messages", stdout=out)
        assert "Acme: 1 entries, 1 messages enqueued" in out.getvalue()
        assert EntryEmbedding.objects.filter(model="test-bag-of-words").count() == 1
        assert MessageEmbedding.objects.filter(model="test-bag-of-words").count() == 1

"""Factories and a deterministic embedding endpoint for the episodic entry tests."""

import hashlib
import math
import re

from core.models import Agent
from core.services import provider_credential_set
from core.testing import MemoryTestCase
from episodic.models import EntryEmbedding, EpisodicEntry
from episodic.services import entry_content_hash, entry_normalize
from identities.services import memory_user_create

TEST_EMBEDDING_MODEL = "test-bag-of-words"
DIMENSIONS = 64


def bag_of_words_vectors(texts: list[str]) -> list[list[float]]:
    """Unit vectors of hashed word counts: texts sharing words are close, unrelated ones far."""
    vectors = []
    for text in texts:
        vector = [0.0] * DIMENSIONS
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % DIMENSIONS
            vector[bucket] += 1.0
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        vectors.append([x / norm for x in vector] if any(vector) else [1.0] + [0.0] * (DIMENSIONS - 1))
    return vectors


def use_test_embeddings(server, workspace) -> None:
    server.embedding_handler = bag_of_words_vectors
    provider_credential_set(
        workspace=workspace, purpose="embedding", base_url=server.url, model=TEST_EMBEDDING_MODEL, api_key="k"
    )


def use_test_chat(server, workspace) -> None:
    provider_credential_set(
        workspace=workspace, purpose="chat", base_url=server.url, model="test-chat", api_key="k"
    )


def memory_user_factory(workspace, canonical_id="telegram:1", display_name="Ada"):
    return memory_user_create(workspace=workspace, canonical_id=canonical_id, display_name=display_name)


def entry_factory(*, agent, memory_user, content="Ada moved to Lisbon in May.", embed=True, **kwargs):
    content = entry_normalize(content)
    entry = EpisodicEntry.objects.create(
        workspace=agent.workspace,
        agent=agent,
        memory_user=memory_user,
        content=content,
        content_hash=entry_content_hash(content),
        source=kwargs.pop("source", EpisodicEntry.Source.USER_ASSERTION),
        evidence=kwargs.pop("evidence", content),
        **kwargs,
    )
    if embed:
        EntryEmbedding.objects.create(
            entry=entry,
            workspace=entry.workspace,
            agent=agent,
            memory_user=memory_user,
            model=TEST_EMBEDDING_MODEL,
            dimensions=DIMENSIONS,
            embedding=bag_of_words_vectors([content])[0],
        )
        EpisodicEntry.objects.filter(pk=entry.pk).update(embedding_model=TEST_EMBEDDING_MODEL)
        entry.embedding_model = TEST_EMBEDDING_MODEL
    return entry


class NewAgentWriteTestCase(MemoryTestCase):
    """Episodic writes that name the agent "newbot" for the first time, for a person of the
    workspace, against the local OpenAI-compatible server's embeddings."""

    def setUp(self):
        from core.testing_openai import OpenAITestServer

        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        use_test_embeddings(self.server, self.workspace)
        self.person = memory_user_factory(self.workspace)

    def post(self, path, **body):
        body = {"agent": "newbot", "memory_user": str(self.person.pk), **body}
        return self.api().post(path, body, format="json")

    def assert_no_agent(self):
        """Neither the agent nor an entry was stored."""
        assert not Agent.objects.filter(workspace=self.workspace, slug="newbot").exists()
        assert not EpisodicEntry.objects.exists()

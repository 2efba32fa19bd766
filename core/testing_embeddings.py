"""An embedding provider for tests that lets something happen while vectors are computed.

Embedding is the slow step of every embed task (seconds for a batch), so it is where a
concurrent request deletes or edits the rows being embedded. `RacingEmbeddingProvider`
runs `during()` inside `embed()`, deterministically, on the test's own connection.
"""

import hashlib

TEST_MODEL = "test-racing"
DIMENSIONS = 16


def hashed_vectors(texts) -> list[list[float]]:
    """A fixed, non-zero vector per text."""
    vectors = []
    for text in texts:
        digest = hashlib.sha256(text.encode()).digest()
        vectors.append([(byte + 1) / 256 for byte in digest[:DIMENSIONS]])
    return vectors


class RacingEmbeddingProvider:
    def __init__(self, during=None, model_name: str = TEST_MODEL):
        self.model_name = model_name
        self.dimensions = DIMENSIONS
        self.during = during
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return hashed_vectors(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]

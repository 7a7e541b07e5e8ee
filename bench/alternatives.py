"""The alternatives on the same data (SciFact, 5,183 documents) with the same MiniLM vectors.

Document texts (title + abstract), vectors and query vectors are all read from the hybridlab
benchmark index of SciFact, so every system ranks the same embeddings:

- ChromaDB (PersistentClient, HNSW, inner product): vector search, a metadata `where` filter
  (the same collection split hybridlab filters on) and a `where_document` `$contains` filter.
- LanceDB: exact vector search, its native full-text search (BM25, English stemming and stop
  words) and its hybrid query (RRF reranker), with `where(..., prefilter=True)` filters.
- rank-bm25 (BM25Okapi over hybridlab's own tokenizer terms) and plain bm25s (its own
  tokenizer, English stemmer and stop words) for the lexical side.

Latency is the library call alone (query vectors precomputed), one query at a time; end-to-end
adds hybridlab's measured query-encoding P50, as every system needs the same query vector. Each
system runs in its own subprocess (its own peak RSS). nDCG@10 on the SciFact test split.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import make_row, median_summary, peak_rss_mb, worker_main

SYSTEMS = ("chromadb", "lancedb", "rank-bm25", "bm25s")
DEPTH = 100  # results per query for nDCG
PACKAGE_OF = {"chromadb": "chromadb", "lancedb": "lancedb", "rank-bm25": "rank_bm25", "bm25s": "bm25s"}


def load_corpus(index_dir: str) -> dict[str, Any]:
    """doc ids, texts (what hybridlab indexes), collections and vectors, row-aligned by chunk id."""
    from hybridlab.index.format import layout, store
    from hybridlab.index.format.dense import DenseIndex

    manifest = layout.read_manifest(Path(index_dir))
    generation = Path(index_dir) / manifest.path
    con = store.connect(generation / layout.STORE_FILE, read_only=True)
    try:
        rows = con.execute(
            "SELECT c.chunk_id, c.doc_id, c.embed_text, d.collection FROM chunks c "
            "JOIN documents d USING (doc_id) ORDER BY c.chunk_id"
        ).fetchall()
    finally:
        con.close()
    model, info = next(iter(manifest.models.items()))
    dense = DenseIndex.load(generation / info.file, model)
    if not np.array_equal(dense.ids, np.asarray([r[0] for r in rows], dtype=np.int64)):
        raise RuntimeError(f"{index_dir}: vectors and chunks do not align")
    return {
        "doc_ids": [r[1] for r in rows],
        "texts": [r[2] for r in rows],
        "collections": [r[3] for r in rows],
        "vectors": np.ascontiguousarray(dense.vectors, dtype=np.float32),
    }


def time_calls(call: Callable[[int], Any], n: int, repeats: int, warmup: int = 5) -> dict[str, float]:
    """Percentiles (median over repeats) of call(i) for i in range(n), milliseconds."""
    for i in range(min(warmup, n)):
        call(i)
    runs = []
    for _ in range(repeats):
        samples = []
        for i in range(n):
            started = time.perf_counter()
            call(i)
            samples.append((time.perf_counter() - started) * 1000)
        runs.append(samples)
    return median_summary(runs)


def contains_term(query: str) -> str:
    """The `$contains` text for a Chroma `where_document` filter: the query's longest word."""
    words = [w.strip(".,;:()?!\"'").lower() for w in query.split()]
    return max(words, key=len) if words else query


class _Bench:
    """Shared state of one system's worker: corpus, queries, vectors, judgements."""

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.corpus = load_corpus(arguments["index_dir"])
        self.n = len(self.corpus["doc_ids"])
        shared = Path(arguments["shared_dir"])
        self.latency_queries: list[str] = json.loads((shared / "latency_queries.json").read_text())
        self.latency_vectors = np.load(shared / "latency_vectors.npy", allow_pickle=False)
        self.judged: dict[str, str] = json.loads((shared / "judged_queries.json").read_text())
        self.judged_vectors = np.load(shared / "judged_vectors.npy", allow_pickle=False)
        self.qrels = json.loads((shared / "qrels.json").read_text())
        self.filter_collection = arguments["filter_collection"]
        self.repeats = int(arguments["repeats"])
        self.encode_p50 = arguments.get("encode_p50_ms")
        self.rows: list[dict[str, Any]] = []

    def ndcg(self, ranked: Callable[[int, str], dict[str, float]]) -> float:
        from hybridlab.eval.evaluate import score

        run = {qid: ranked(i, text) for i, (qid, text) in enumerate(self.judged.items())}
        return score(self.qrels, run, ["ndcg@10"])["ndcg@10"]

    def add(self, system: str, mode: str, filtered: bool, stats: dict[str, float], **fields: Any) -> None:
        encode = self.encode_p50 if mode != "bm25" else 0.0
        e2e = {k: (v + encode if encode is not None else None) for k, v in stats.items()}
        self.rows.append(
            make_row(
                system,
                self.n,
                mode,
                filtered,
                p50_ms=e2e["p50"],
                p95_ms=e2e["p95"],
                p99_ms=e2e["p99"],
                search_p50_ms=stats["p50"],
                search_p95_ms=stats["p95"],
                search_p99_ms=stats["p99"],
                encode_p50_ms=encode if mode != "bm25" else None,
                dataset="scifact",
                queries=len(self.latency_queries),
                repeats=self.repeats,
                **fields,
            )
        )
        print(
            f"  {system} {mode} filtered={filtered} {fields.get('variant', '')}: search p50 {stats['p50']:.2f} "
            f"p95 {stats['p95']:.2f} ms {fields.get('ndcg@10', '')}",
            file=sys.stderr,
            flush=True,
        )


def bench_chromadb(b: _Bench, work: Path) -> None:
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(
        path=str(work / "chroma"), settings=Settings(anonymized_telemetry=False)
    )
    collection = client.get_or_create_collection(
        "scifact", embedding_function=None, configuration={"hnsw": {"space": "ip"}}
    )
    ids = [str(i) for i in range(b.n)]
    started = time.perf_counter()
    step = 1000
    for s in range(0, b.n, step):
        collection.add(
            ids=ids[s : s + step],
            embeddings=b.corpus["vectors"][s : s + step],
            documents=b.corpus["texts"][s : s + step],
            metadatas=[{"collection": c} for c in b.corpus["collections"][s : s + step]],
        )
    build_s = time.perf_counter() - started
    doc_ids = b.corpus["doc_ids"]

    def query(vector: np.ndarray, k: int, **filters: Any) -> dict[str, float]:
        found = collection.query(
            query_embeddings=vector.reshape(1, -1), n_results=k, include=["distances"], **filters
        )
        return {doc_ids[int(i)]: -d for i, d in zip(found["ids"][0], found["distances"][0])}

    where = {"collection": b.filter_collection}
    b.add(
        "chromadb",
        "index",
        False,
        {"p50": build_s * 1000, "p95": build_s * 1000, "p99": build_s * 1000},
        variant="build",
        seconds=build_s,
        chunks_per_s=b.n / build_s,
        size_mb=_mb(work / "chroma"),
    )
    b.rows[-1].update(
        {
            "p50_ms": None,
            "p95_ms": None,
            "p99_ms": None,
            "search_p50_ms": None,
            "search_p95_ms": None,
            "search_p99_ms": None,
        }
    )
    ndcg = b.ndcg(lambda i, _t: query(b.judged_vectors[i], DEPTH))
    b.add(
        "chromadb",
        "vector",
        False,
        time_calls(lambda i: query(b.latency_vectors[i], 10), len(b.latency_queries), b.repeats),
        **{"ndcg@10": ndcg},
        variant="hnsw",
    )
    ndcg_f = b.ndcg(lambda i, _t: query(b.judged_vectors[i], DEPTH, where=where))
    b.add(
        "chromadb",
        "vector",
        True,
        time_calls(lambda i: query(b.latency_vectors[i], 10, where=where), len(b.latency_queries), b.repeats),
        **{"ndcg@10": ndcg_f},
        variant="hnsw+where",
    )
    b.add(
        "chromadb",
        "vector",
        True,
        time_calls(
            lambda i: query(
                b.latency_vectors[i], 10, where_document={"$contains": contains_term(b.latency_queries[i])}
            ),
            len(b.latency_queries),
            b.repeats,
        ),
        variant="hnsw+where_document",
        note="where_document {$contains: longest query word}: a substring filter, no hybridlab equivalent",
    )


def bench_lancedb(b: _Bench, work: Path) -> None:
    import lancedb
    import pyarrow as pa

    db = lancedb.connect(str(work / "lance"))
    dim = b.corpus["vectors"].shape[1]
    table_data = pa.table(
        {
            "row": pa.array(np.arange(b.n, dtype=np.int64)),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(b.corpus["vectors"].reshape(-1)), dim),
            "text": pa.array(b.corpus["texts"]),
            "collection": pa.array(b.corpus["collections"]),
        }
    )
    started = time.perf_counter()
    table = db.create_table("scifact", data=table_data, mode="overwrite")
    table.create_fts_index("text", replace=True, stem=True, remove_stop_words=True, language="English")
    build_s = time.perf_counter() - started
    doc_ids = b.corpus["doc_ids"]
    where = f"collection = '{b.filter_collection}'"

    def ranked(result, column: str, sign: float) -> dict[str, float]:
        rows = result.column("row").to_pylist()
        scores = result.column(column).to_pylist()
        return {doc_ids[r]: sign * s for r, s in zip(rows, scores)}

    def vector(v: np.ndarray, k: int, filtered: bool = False):
        q = table.search(v, query_type="vector").distance_type("dot").limit(k).select(["row"])
        if filtered:
            q = q.where(where, prefilter=True)
        return q.to_arrow()

    def fts(text: str, k: int, filtered: bool = False):
        q = table.search(text, query_type="fts").limit(k).select(["row"])
        if filtered:
            q = q.where(where, prefilter=True)
        return q.to_arrow()

    def hybrid(v: np.ndarray, text: str, k: int, filtered: bool = False):
        q = table.search(query_type="hybrid").vector(v).text(text).limit(k).select(["row"])
        if filtered:
            q = q.where(where, prefilter=True)
        return q.to_arrow()

    b.add(
        "lancedb",
        "index",
        False,
        {"p50": build_s * 1000, "p95": build_s * 1000, "p99": build_s * 1000},
        variant="build",
        seconds=build_s,
        chunks_per_s=b.n / build_s,
        size_mb=_mb(work / "lance"),
    )
    b.rows[-1].update(
        {
            "p50_ms": None,
            "p95_ms": None,
            "p99_ms": None,
            "search_p50_ms": None,
            "search_p95_ms": None,
            "search_p99_ms": None,
        }
    )
    lq, lv, n, reps = b.latency_queries, b.latency_vectors, len(b.latency_queries), b.repeats
    for filtered in (False, True):
        ndcg = b.ndcg(
            lambda i, _t, f=filtered: ranked(vector(b.judged_vectors[i], DEPTH, f), "_distance", -1.0)
        )
        b.add(
            "lancedb",
            "vector",
            filtered,
            time_calls(lambda i, f=filtered: vector(lv[i], 10, f), n, reps),
            **{"ndcg@10": ndcg},
            variant="flat",
        )
        ndcg = b.ndcg(lambda _i, t, f=filtered: ranked(fts(t, DEPTH, f), "_score", 1.0))
        b.add(
            "lancedb",
            "bm25",
            filtered,
            time_calls(lambda i, f=filtered: fts(lq[i], 10, f), n, reps),
            **{"ndcg@10": ndcg},
            variant="native-fts",
        )
        ndcg = b.ndcg(
            lambda i, t, f=filtered: ranked(hybrid(b.judged_vectors[i], t, DEPTH, f), "_relevance_score", 1.0)
        )
        b.add(
            "lancedb",
            "hybrid",
            filtered,
            time_calls(lambda i, f=filtered: hybrid(lv[i], lq[i], 10, f), n, reps),
            **{"ndcg@10": ndcg},
            variant="rrf-reranker",
        )


def bench_rank_bm25(b: _Bench, work: Path) -> None:
    from rank_bm25 import BM25Okapi

    from hybridlab.config import Bm25Config
    from hybridlab.index.format.tokenizer import Tokenizer

    tokenizer = Tokenizer(Bm25Config())
    started = time.perf_counter()
    bm25 = BM25Okapi([tokenizer.tokenize(t) for t in b.corpus["texts"]], k1=Bm25Config().k1, b=Bm25Config().b)
    build_s = time.perf_counter() - started
    doc_ids = b.corpus["doc_ids"]

    def search(text: str, k: int) -> dict[str, float]:
        scores = bm25.get_scores(tokenizer.query_terms(text))
        top = np.argsort(-scores, kind="stable")[:k]
        return {doc_ids[i]: float(scores[i]) for i in top if scores[i] > 0}

    ndcg = b.ndcg(lambda _i, t: search(t, DEPTH))
    b.add(
        "rank-bm25",
        "bm25",
        False,
        time_calls(lambda i: search(b.latency_queries[i], 10), len(b.latency_queries), b.repeats),
        **{"ndcg@10": ndcg},
        variant="BM25Okapi",
        seconds=build_s,
        note="hybridlab's tokenizer terms; no filter support",
    )


def bench_bm25s(b: _Bench, work: Path) -> None:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    started = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(b.corpus["texts"], stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    build_s = time.perf_counter() - started
    doc_ids = b.corpus["doc_ids"]
    mask = np.asarray([c == b.filter_collection for c in b.corpus["collections"]], dtype=np.float32)

    def search(text: str, k: int, filtered: bool = False) -> dict[str, float]:
        tokens = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            return {}
        docs, scores = retriever.retrieve(
            tokens, k=min(k, b.n), show_progress=False, n_threads=1, weight_mask=mask if filtered else None
        )
        return {doc_ids[int(d)]: float(s) for d, s in zip(docs[0], scores[0]) if s > 0}

    for filtered in (False, True):
        ndcg = b.ndcg(lambda _i, t, f=filtered: search(t, DEPTH, f))
        b.add(
            "bm25s",
            "bm25",
            filtered,
            time_calls(
                lambda i, f=filtered: search(b.latency_queries[i], 10, f), len(b.latency_queries), b.repeats
            ),
            **{"ndcg@10": ndcg},
            variant="plain-bm25s",
            seconds=build_s,
            note="bm25s defaults (Lucene), its own tokenizer, English stemmer and stop words",
        )


BENCHES: dict[str, Callable[[_Bench, Path], None]] = {
    "chromadb": bench_chromadb,
    "lancedb": bench_lancedb,
    "rank-bm25": bench_rank_bm25,
    "bm25s": bench_bm25s,
}


def _mb(path: Path) -> float:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file()) / 1e6


def measure_system(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Worker: one alternative system's rows."""
    system = arguments["system"]
    if system not in BENCHES:
        raise ValueError(f"unknown system {system!r}; choose from {sorted(BENCHES)}")
    bench = _Bench(arguments)
    work = Path(tempfile.mkdtemp(prefix=f"hybridlab-bench-{system}-"))
    try:
        BENCHES[system](bench, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rss = peak_rss_mb()
    for row in bench.rows:
        row["peak_rss_mb"] = round(rss, 1)
    return {"rows": bench.rows}


def measure_hybridlab_quality(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Worker: hybridlab's nDCG@10 per mode on the judged queries (no timing)."""
    from bench.latency import mode_options
    from hybridlab.eval.evaluate import score
    from hybridlab.search.engine import open_index

    index = open_index(arguments["index_dir"])
    shared = Path(arguments["shared_dir"])
    judged = json.loads((shared / "judged_queries.json").read_text())
    qrels = json.loads((shared / "qrels.json").read_text())
    index.query_models.encode_queries(index.snapshot(), index.models[0], list(judged.values()))
    result = {}
    for mode in arguments["modes"]:
        for filtered in (False, True):
            options = mode_options(mode)
            if filtered:
                options["filters"] = index.make_filters(collection=arguments["filter_collection"])
            run = {qid: index.run(text, **options) for qid, text in judged.items()}
            result[f"{mode}/{filtered}"] = score(qrels, run, ["ndcg@10"])["ndcg@10"]
    return result


def prepare_queries(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Worker: the query vectors every system uses, encoded once by hybridlab's index (torch MiniLM)."""
    from hybridlab.search.engine import open_index

    index = open_index(arguments["index_dir"])
    shared = Path(arguments["shared_dir"])
    model = index.models[0]
    for name in ("latency", "judged"):
        data = json.loads((shared / f"{name}_queries.json").read_text())
        texts = data if isinstance(data, list) else list(data.values())
        index.query_models.encode_queries(index.snapshot(), model, texts)
        np.save(
            shared / f"{name}_vectors.npy",
            np.stack([index.query_models.query_vector(index.snapshot(), model, t) for t in texts]),
            allow_pickle=False,
        )
    return {"model": model}


def _dispatch(arguments: Mapping[str, Any]) -> Any:
    task = arguments.get("task", "system")
    handlers = {"system": measure_system, "quality": measure_hybridlab_quality, "prepare": prepare_queries}
    if task not in handlers:
        raise ValueError(f"unknown task {task!r}; choose from {sorted(handlers)}")
    return handlers[task](arguments)


def available(system: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(PACKAGE_OF[system]) is not None


def run(
    index_dir: Path,
    shared_dir: Path,
    *,
    latency_queries: Sequence[str],
    judged: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    filter_collection: str,
    repeats: int,
    encode_p50_ms: float | None,
    modes: Sequence[str],
    systems: Sequence[str] = SYSTEMS,
) -> dict[str, Any]:
    """Every alternative, then hybridlab's quality; rows plus notes for systems that could not run."""
    from bench.common import run_worker

    shared_dir.mkdir(parents=True, exist_ok=True)
    (shared_dir / "latency_queries.json").write_text(json.dumps(list(latency_queries)))
    (shared_dir / "judged_queries.json").write_text(json.dumps(dict(judged)))
    (shared_dir / "qrels.json").write_text(json.dumps({q: dict(d) for q, d in qrels.items()}))
    common = {
        "index_dir": str(index_dir),
        "shared_dir": str(shared_dir),
        "filter_collection": filter_collection,
    }
    run_worker("bench.alternatives", {**common, "task": "prepare"})
    rows, notes = [], []
    for system in systems:
        if not available(system):
            notes.append(f"{system} not measured: its package is not installed (pip install -e '.[bench]')")
            continue
        try:
            rows += run_worker(
                "bench.alternatives",
                {
                    **common,
                    "task": "system",
                    "system": system,
                    "repeats": repeats,
                    "encode_p50_ms": encode_p50_ms,
                },
            )["rows"]
        except Exception as error:  # noqa: BLE001 -- one library's failure must not stop the others
            notes.append(f"{system} failed: {str(error)[-400:]}")
    quality = run_worker("bench.alternatives", {**common, "task": "quality", "modes": list(modes)})
    return {"rows": rows, "quality": quality, "notes": notes}


if __name__ == "__main__":
    if not worker_main(sys.argv[1:], _dispatch):
        raise SystemExit("usage: python -m bench.alternatives --worker JSON (run `python -m bench`)")

"""`hybridlab demo` / `make demo`: the main job on the embedded default (the memories ground truth).

Indexes `ground_truth/memories`, runs a few queries with their results, and evaluates BM25 vs
vector vs hybrid on the judged queries, printing the table.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from hybridlab.eval.evalsets import get_evalset
from hybridlab.eval.evaluate import compare, make_run
from hybridlab.index.write.build import index_paths
from hybridlab.search.engine import open_index

DEMO_QUERIES = (
    "rathole project codebase architecture",
    "ERR_TLS_CERT_ALTNAME_INVALID",
    "how does the tunnel come back after it crashes on the server",
    "what is the current litesearch staging server",
)


def run_demo(index_dir: str | os.PathLike, *, quick: bool = False) -> None:
    """Index the memories ground truth into `index_dir`, print a few searches with their results and,
    unless `quick`, the evaluation table of BM25, vector and hybrid search on its judged queries."""
    evalset = get_evalset("memories")
    print(f"== indexing {', '.join(_shown(s) for s in evalset.sources)} into {index_dir}")
    report = index_paths(list(evalset.sources), index_dir, progress=True)
    print(report.summary())
    index = open_index(index_dir)
    stats = index.stats()
    print(
        f"{stats.documents} memories in {len(stats.documents_by_collection)} projects, "
        f"{stats.tags} distinct tags, models {list(stats.models)}"
    )
    now = evalset.now
    print(f"\n== queries (now = {now}, hybrid defaults: adaptive alpha, convex fusion, tags, recency)")
    for query in DEMO_QUERIES:
        started = time.perf_counter()
        results = index.search(query, limit=3, now=now, explain=True)
        elapsed = (time.perf_counter() - started) * 1000
        print(f"\n> {query}   ({elapsed:.1f} ms)")
        for r in results:
            e = r.explain or {}
            print(
                f"  {r.rank}. {r.doc_id} [{', '.join(r.tags)}] score {r.score:.4f} "
                f"(tags {e.get('matched_tags')}, recency {e.get('recency_factor', 1):.2f})"
            )
            print(f"     {r.snippet[:140]}")
    if quick:
        return
    dataset = evalset.dataset()
    print(f"\n== evaluation on {len(dataset.queries)} judged queries (document level, ranx)")
    systems: dict[str, dict[str, Any]] = {
        "bm25": {"mode": "bm25"},
        "vector": {"mode": "vector"},
        "hybrid (default)": {},
    }
    runs = {name: make_run(index, dataset.queries, now=now, **options) for name, options in systems.items()}
    order = ["hybrid (default)", "bm25", "vector"]
    comparison = compare(dataset.qrels, {name: runs[name] for name in order})
    print(comparison.to_markdown())


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)

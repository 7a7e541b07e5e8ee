"""Corpus graph: the full build a first index makes, and the update each later generation makes
from the previous graph when a share of the vectors changed (half deleted, half added)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import make_row


def changed_vectors(vectors: np.ndarray, share: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`vectors` with `share / 2` of the rows deleted and as many added (noisy copies of kept rows,
    unit length), and each old row's new row (-1 when deleted)."""
    rng = np.random.default_rng(seed)
    n = len(vectors)
    n_changed = max(1, round(n * share / 2))
    keep = np.ones(n, dtype=bool)
    keep[rng.choice(n, n_changed, replace=False)] = False
    kept = vectors[keep]
    added = kept[rng.choice(len(kept), n_changed, replace=False)]
    added = added + rng.normal(0.0, 0.5 / np.sqrt(vectors.shape[1]), size=added.shape).astype(np.float32)
    added /= np.linalg.norm(added, axis=1, keepdims=True)
    old_to_new = np.full(n, -1, dtype=np.int64)
    old_to_new[keep] = np.arange(len(kept))
    return np.concatenate([kept, added]).astype(np.float32), old_to_new


def run(
    index_dir: Path, shares: Sequence[float] = (0.001, 0.01, 0.1), k: int | None = None
) -> dict[str, Any]:
    """Rows: seconds of a full graph build of the index's vectors, and of the update per changed share."""
    from hybridlab.index.format.graph import DEFAULT_GRAPH_K, build_corpus_graph, update_corpus_graph
    from hybridlab.search.engine import open_index

    k = k or DEFAULT_GRAPH_K
    with open_index(index_dir) as index:
        vectors = np.array(index.dense[index.models[0]].vectors, dtype=np.float32)
    n = len(vectors)
    started = time.perf_counter()
    graph = build_corpus_graph(vectors, k)
    full = time.perf_counter() - started
    rows = [
        make_row(
            "hybridlab",
            n,
            "index",
            False,
            variant="graph-build",
            seconds=full,
            speedup=1.0,
            note=f"exact corpus graph, k={k}, every row searched",
        )
    ]
    print(f"  corpus graph of {n:,} vectors: full build {full:.1f} s", file=sys.stderr, flush=True)
    for share in shares:
        new_vectors, old_to_new = changed_vectors(vectors, share)
        started = time.perf_counter()
        _, how = update_corpus_graph(new_vectors, graph, old_to_new, k)
        seconds = time.perf_counter() - started
        rows.append(
            make_row(
                "hybridlab",
                n,
                "index",
                False,
                variant=f"graph-update-{share:.1%}",
                seconds=seconds,
                speedup=full / seconds,
                note=f"{share:.1%} of the vectors changed (half deleted, half added): {how}",
            )
        )
        print(
            f"  corpus graph, {share:.1%} changed: {how} in {seconds:.1f} s ({full / seconds:.1f}x faster)",
            file=sys.stderr,
            flush=True,
        )
    return {"rows": rows}

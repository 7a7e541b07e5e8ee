"""The tiered merge policy and the merge of adjacent segments into one."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab.config import IndexConfig
from hybridlab.errors import InvalidValueError
from hybridlab.index.format import layout, segments, store
from hybridlab.index.format.artifacts import build_artifacts
from hybridlab.index.format.faults import checkpoint
from hybridlab.index.format.manifest import Manifest, Segment

# ---------------------------------------------------------------------------------------------- segments
#: tiered merge policy: this many adjacent segments of the same size tier (log10 of live chunks) are
#: merged into one after a commit, so an index holds at most ~(MERGE_FACTOR - 1) segments per tier
MERGE_FACTOR = 10
#: a segment of at least `MIN_REWRITE_ROWS` rows whose share of tombstoned chunks exceeds this is
#: rewritten without them by the next merge (smaller ones are merged by their tier soon enough)
MAX_DELETED_SHARE = 0.5
MIN_REWRITE_ROWS = 1000


def merge_factor() -> int:
    """`MERGE_FACTOR`, or env `HYBRIDLAB_MERGE_FACTOR` (>= 2; small in fault-injection tests)."""
    value = os.environ.get("HYBRIDLAB_MERGE_FACTOR")
    if value is None:
        return MERGE_FACTOR
    if not value.isdigit() or int(value) < 2:
        raise InvalidValueError(f"HYBRIDLAB_MERGE_FACTOR must be an integer >= 2, got {value!r}")
    return int(value)


def merge_plan(entries: Sequence[Segment], factor: int | None = None) -> tuple[int, int] | None:
    """The adjacent segments [start, end) the tiered policy merges next, None when none: the oldest
    run of `factor` adjacent segments in the same size tier (floor(log10(live chunks))), else a
    segment of `MIN_REWRITE_ROWS`+ rows (with its right neighbour when there is one) whose
    tombstoned share exceeds `MAX_DELETED_SHARE`."""
    factor = factor or merge_factor()
    tiers = [int(math.log10(max(entry.chunks, 1))) for entry in entries]
    start = 0
    for i in range(1, len(tiers) + 1):
        if i == len(tiers) or tiers[i] != tiers[start]:
            if i - start >= factor:
                return start, start + factor
            start = i
    for i, entry in enumerate(entries):
        rows = entry.rows
        if rows >= MIN_REWRITE_ROWS and (rows - entry.chunks) / rows > MAX_DELETED_SHARE:
            return i, min(i + 2, len(entries))
    return None


class _SegmentVectors:
    """The vectors of the merged segments, by model (a `VectorSource`): each model's FAISS files are
    read from the segments that hold it once, when first asked for."""

    def __init__(self, index_dir: Path, manifest: Manifest | None, entries: Sequence[Segment]) -> None:
        self.index_dir, self.manifest, self.entries = index_dir, manifest, entries
        self._loaded: dict[str, list[Any]] = {}

    def _dense(self, model: str) -> list[Any]:
        """The FAISS indexes of `model` of every segment that has vectors of it, in order."""
        if model not in self._loaded:
            held = [
                (
                    segments.segment_folder(self.index_dir, entry),
                    self.manifest.segment_models(entry) if self.manifest is not None else entry.models,
                )
                for entry in self.entries
            ]
            self._loaded[model] = [
                segments.load_dense(folder / models[model].file, model)
                for folder, models in held
                if model in models
            ]
        return self._loaded[model]

    def __call__(self, model: str, pairs: dict[str, np.ndarray], dim: int) -> np.ndarray:
        """The vectors of `model` of the chunk ids of `pairs` (`chunk_vectors` rows), in their order;
        RuntimeError when the segments' FAISS files lack any."""
        wanted = pairs["chunk_id"].astype(np.int64)
        parts = []
        for dense in self._dense(model):
            rows = dense.rows_of(wanted)
            parts.append((dense.ids[rows], dense.take(rows)))
        ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        matrix = np.concatenate([p[1] for p in parts]) if parts else np.zeros((0, dim), np.float32)
        if not np.array_equal(ids, wanted):
            raise RuntimeError(
                f"merging {model!r}: the segments' FAISS ids do not cover their stores' vectors"
            )
        return matrix


def _copy_live_rows(con, index_dir: Path, entries: Sequence[Segment]) -> None:
    """Copy the segments' live rows into the merged store: from their Parquet files when every one is
    a Parquet segment, else from their DuckDB stores, attached for the copy."""
    folders = [segments.segment_folder(index_dir, entry) for entry in entries]
    if all(store.is_parquet_segment(folder) for folder in folders):
        segments.copy_live_parquet(con, folders, entries)
    else:
        aliases = segments.attach(con, index_dir, entries)
        segments.copy_live_rows(con, aliases, entries)
        segments.detach(con, aliases)


def _set_merged_meta(con, index_dir: Path, manifest: Manifest | None, number: int) -> None:
    """The merged store's meta: the generation it is built for, and the next free chunk id (past the
    index's and past its own highest)."""
    highest = con.execute("SELECT max(chunk_id) FROM chunks").fetchone()[0]
    store.set_meta(
        con,
        {
            "next_chunk_id": max(
                segments.next_chunk_id(index_dir, manifest), -1 if highest is None else highest + 1
            ),
            "generation": number,
        },
    )


def build_merged(
    index_dir: Path,
    manifest: Manifest | None,
    entries: Sequence[Segment],
    config: IndexConfig,
    dims: dict[str, int],
    progress: bool,
) -> tuple[Segment | None, Path]:
    """Merge `entries` (adjacent segments) into one new segment in a private folder: live rows only,
    vectors taken from their FAISS files (nothing re-embedded), BM25 postings re-derived. Returns its
    entry (None when no live row is left) and the folder."""
    number = layout.next_generation_number(index_dir)
    name = layout.generation_name(number)
    tmp = index_dir / f"{name}.tmp-{os.getpid()}"
    tmp.mkdir(parents=True)
    con = None
    try:
        checkpoint("merge-start")
        small = sum(entry.chunks for entry in entries) < store.SMALL_SEGMENT_ROWS
        con = store.ScratchConnection() if small else store.connect(tmp / layout.STORE_FILE)
        store.create_schema(con)
        _copy_live_rows(con, index_dir, entries)
        _set_merged_meta(con, index_dir, manifest, number)
        checkpoint("merge-store-written")
        counts = segments.store_counts(con)
        models = build_artifacts(
            con, _SegmentVectors(index_dir, manifest, entries), tmp, config, dims, progress=progress
        )
        segments.persist(con, tmp)
        con.close()
        con = None
        if not counts["chunks"] and not counts["documents"]:
            return None, tmp
        return segments.new_segment(name, counts, models, tmp), tmp
    except BaseException:
        if con is not None:
            con.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise

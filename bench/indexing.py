"""Indexing speed: chunks/s end to end versus the raw encoder on the same texts (our overhead),
re-indexing an unchanged corpus (the embeddings cache and the no-change check), size on disk and
peak RSS. Each (corpus, model) runs in a fresh subprocess with a private, empty embeddings cache.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.common import make_row, peak_rss_mb, worker_main


def folder_mb(path: Path) -> float:
    """Size of every file below `path` (or of the file itself), MB."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def overhead(end_to_end_s: float, encoder_s: float) -> float:
    """Share of indexing time beyond the raw encoder's: e2e / encoder - 1."""
    if encoder_s <= 0:
        raise ValueError(f"encoder time must be positive, got {encoder_s}")
    return end_to_end_s / encoder_s - 1.0


def measure_indexing(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Worker: raw encoder pass, first build, unchanged re-index, sizes, peak RSS."""
    from bench.corpus import embed_texts_of
    from hybridlab.config import IndexConfig
    from hybridlab.encoders.registry import load_encoder
    from hybridlab.eval.evalsets import get_evalset
    from hybridlab.index.write.build import apply_changes
    from hybridlab.ingest.sources import IngestReport, read_source

    model = arguments["model"]
    documents = read_source(get_evalset("scifact").sources[0], IngestReport())[: int(arguments["documents"])]
    config = IndexConfig(models=(model,))
    texts = [t for chunk_texts in embed_texts_of(documents, config) for t in chunk_texts]
    encoder = load_encoder(model)
    encoder.encode_documents(texts[:8], batch_size=config.embed_batch_size)  # warm-up
    started = time.perf_counter()
    encoder.encode_documents(texts, batch_size=config.embed_batch_size)
    raw_s = time.perf_counter() - started
    del encoder
    work = Path(tempfile.mkdtemp(prefix="hybridlab-bench-index-"))
    try:
        index_dir, cache = work / "index", work / "embeddings.duckdb"
        started = time.perf_counter()
        first = apply_changes(
            index_dir, [(documents[0].source, documents, True)], config, progress=False, cache_path=cache
        )
        first_s = time.perf_counter() - started
        started = time.perf_counter()
        again = apply_changes(
            index_dir, [(documents[0].source, documents, True)], config, progress=False, cache_path=cache
        )
        again_s = time.perf_counter() - started
        rebuilt = apply_changes(
            index_dir,
            [(documents[0].source, [replace(d, collection=d.collection + "-x") for d in documents], True)],
            config,
            progress=False,
            cache_path=cache,
        )
        index_mb, cache_mb = folder_mb(index_dir), folder_mb(cache)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = len(texts)
    rss = peak_rss_mb()
    common = {"encoder": model, "dataset": f"scifact[:{len(documents)}]", "peak_rss_mb": rss}
    rows = [
        make_row("raw-encoder", n, "index", False, seconds=raw_s, chunks_per_s=n / raw_s, **common),
        make_row(
            "hybridlab",
            n,
            "index",
            False,
            seconds=first_s,
            chunks_per_s=n / first_s,
            variant="first-build",
            size_mb=index_mb + cache_mb,
            note=f"index {index_mb:.1f} MB + embeddings cache {cache_mb:.1f} MB; "
            f"embedding {first.embed_seconds:.1f} s; overhead beyond the raw encoder "
            f"{overhead(first_s, raw_s):+.1%}",
            **common,
        ),
        make_row(
            "hybridlab",
            n,
            "index",
            False,
            seconds=again_s,
            chunks_per_s=n / again_s,
            variant="unchanged-reindex",
            speedup=first_s / again_s,
            note=f"{again.unchanged} unchanged documents, committed={again.committed}",
            **common,
        ),
        make_row(
            "hybridlab",
            n,
            "index",
            False,
            seconds=rebuilt.seconds,
            chunks_per_s=n / rebuilt.seconds,
            variant="changed-metadata-reindex",
            speedup=first_s / rebuilt.seconds,
            note=f"every document's collection changed: {rebuilt.embedded} embedded, "
            f"{rebuilt.cache_hits} from the cache",
            **common,
        ),
    ]
    print(
        f"  indexing {model} {n} chunks: raw {n / raw_s:.1f}/s, e2e {n / first_s:.1f}/s "
        f"({overhead(first_s, raw_s):+.1%}), unchanged re-index {again_s:.3f} s ({first_s / again_s:.0f}x)",
        file=sys.stderr,
        flush=True,
    )
    return {"rows": rows}


def run(model: str, documents: int) -> dict[str, Any]:
    from bench.common import run_worker

    return run_worker("bench.indexing", {"model": model, "documents": documents})


if __name__ == "__main__":
    if not worker_main(sys.argv[1:], measure_indexing):
        raise SystemExit("usage: python -m bench.indexing --worker JSON (run `python -m bench`)")

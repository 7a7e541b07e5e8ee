"""Issue 19, measured: stronger embedding models, and the cross-encoder rerank stage.

    python -m bench.rerank grid [--dataset scifact] [--split test] [--depths 20,50,100]
                                          [--weights 1.0,0.5] [--model all-MiniLM-L6-v2] [--untimed]
    python -m bench.rerank models [--datasets scifact,memories,holoviz,cisi,cranfield,med]
                                            [--models all-MiniLM-L6-v2,bge-small-en-v1.5,bge-small-en-v1.5-noinstruct]
    python -m bench.rerank report

`grid`: the default hybrid against hybrid + rerank (`rerank_depth` x `rerank_weight`) over every
judged query of a split: nDCG@10, MRR, recall@100, the paired randomisation test of nDCG@10
against the hybrid (Holm over the grid), and the rerank step's cost per query
(`RunResponse.timings["rerank_ms"]`: passages read + cross-encoder; median and P95, numpy linear,
:func:`bench.common.percentile`). A pair's cross-encoder score does not depend on the
other pairs (one pair per ONNX run), so the first weight of each depth runs the cross-encoder
(timed) and the other weights reuse its scores (same cost, not re-timed); `--untimed` also reuses
scores across depths (deepest first) and reports no cost: for a tuning split, where only the
ranking matters.

`models`: vector and default hybrid per embedding model on each set's report split (SciFact: its
300 test queries; memories, HoloViz: all judged queries; CISI, Cranfield, MED: all), with the
query encoding cost. bge-small's two registry names share their document vectors (the
instruction goes on queries only), so the index of the second is built from the first's cached
vectors.

Both write into `reports/rerank/<date>/results.json` (merged: each run replaces its own entry)
and regenerate `report.md` beside it, with the command that made each entry. Benchmarks, not
tests: nothing here asserts; timings depend on the load of the machine (2 shared cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import PERCENTILE_LABEL, percentile
from hybridlab.config import REPO_ROOT, ChunkConfig, IndexConfig, apply_offline_environment

METRICS = ("ndcg@10", "mrr", "recall@100")
LIMIT = 100  # documents per query in evaluation runs (recall@100 needs 100)
HYBRID = "hybrid"
MODELS = ("all-MiniLM-L6-v2", "bge-small-en-v1.5", "bge-small-en-v1.5-noinstruct")
DATASETS = ("scifact", "memories", "holoviz", "cisi", "cranfield", "med")
#: registry names whose document vectors equal another's (the query instruction is all that differs)
SHARED_DOCUMENT_VECTORS = {"bge-small-en-v1.5-noinstruct": "bge-small-en-v1.5"}


# ------------------------------------------------------------------------------------ pieces
class PairCache:
    """Cross-encoder scores by (model, query, passage sha1), around a scorer: `reading` False =
    always score (and remember), True = score only the pairs not seen yet. With a `path`, scores
    are appended to that JSON-lines file and read back from it on start (an interrupted untimed
    grid resumes where it stopped)."""

    def __init__(self, score: Callable[[str, str, list[str]], np.ndarray], path: Path | None = None) -> None:
        self._score = score
        self._scores: dict[tuple[str, str, str], float] = {}
        self.reading = False
        self.path = path
        if path is not None and path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    self._scores[(row["model"], row["query"], row["passage_sha1"])] = row["score"]

    def __call__(self, model: str, query: str, passages: list[str]) -> np.ndarray:
        keys = [(model, query, hashlib.sha1(passage.encode()).hexdigest()) for passage in passages]
        todo: dict[tuple[str, str, str], int] = {}  # key -> its first position, each pair scored once
        for i, key in enumerate(keys):
            if key not in todo and not (self.reading and key in self._scores):
                todo[key] = i
        if todo:
            scores = self._score(model, query, [passages[i] for i in todo.values()])
            new = dict(zip(todo, np.asarray(scores, dtype=np.float64).tolist()))
            self._scores.update(new)
            if self.path is not None:
                with self.path.open("a") as handle:
                    handle.writelines(
                        json.dumps({"model": k[0], "query": k[1], "passage_sha1": k[2], "score": v}) + "\n"
                        for k, v in new.items()
                    )
        return np.array([self._scores[key] for key in keys], dtype=np.float64)


def condition_name(depth: int, weight: float) -> str:
    return f"rerank-{depth}-w{weight:g}"


def runs_of(
    index, queries: Mapping[str, str], now: str | None, **options: Any
) -> tuple[dict, dict[str, list[float]]]:
    """The run (`{qid: {doc_id: score}}`) of these options and each timing key's values per query."""
    run, timings = {}, {}
    for qid, text in queries.items():
        response = index.run_response(text, now=now, limit=LIMIT, **options)
        run[qid] = response.run
        for key, value in response.timings.items():
            timings.setdefault(key, []).append(value)
    return run, timings


def ms_summary(values: Sequence[float]) -> dict[str, float] | None:
    return (
        None
        if not values
        else {"p50": round(percentile(values, 50), 2), "p95": round(percentile(values, 95), 2)}
    )


def scored(qrels, run) -> tuple[dict[str, float], dict[str, float]]:
    """Mean metrics and per-query nDCG@10 of a run."""
    from hybridlab.eval.evaluate import score, score_per_query

    return score(qrels, run, METRICS), score_per_query(qrels, run, ("ndcg@10",))["ndcg@10"]


def split_queries(evalset, split: str):
    """The judged queries and qrels of `split` (`report` = the set's report split, `cv` = all judged)."""
    dataset = evalset.report_dataset() if split == "report" else evalset.dataset(split)
    queries = {qid: dataset.queries[qid] for qid in dataset.qrels if qid in dataset.queries}
    return queries, dataset.qrels


# ------------------------------------------------------------------------------------ the rerank grid
def measure_grid(
    index,
    queries: Mapping[str, str],
    qrels,
    depths: Sequence[int],
    weights: Sequence[float],
    *,
    now: str | None = None,
    timed: bool = True,
    progress: bool = True,
    pair_cache: Path | None = None,
) -> dict[str, Any]:
    """The hybrid and every (depth, weight) condition over `queries`: metrics, paired test, costs
    (`timed`); `pair_cache`: a file keeping the cross-encoder's scores (untimed only)."""
    from hybridlab.eval.significance import holm, paired_test

    if timed and pair_cache is not None:
        raise ValueError(
            "a pair-score file would make the timed rerank cost meaningless; use it with --untimed"
        )
    model = index.choose_model(None, None)
    index.query_models.encode_queries(index.snapshot(), model, list(queries.values()))
    cache = PairCache(index.query_models.rerank_scores, pair_cache)
    index.query_models.rerank_scores = cache  # type: ignore[method-assign]  # every rerank of the grid goes through the cache
    outcomes: dict[str, dict[str, Any]] = {}
    base_run, base_timings = runs_of(index, queries, now)
    base_metrics, base_per_query = scored(qrels, base_run)
    outcomes[HYBRID] = {
        "depth": 0,
        "weight": None,
        **base_metrics,
        "search_ms": ms_summary(base_timings["search_ms"]),
        "rerank_ms": None,
    }
    per_query = {}
    for depth in sorted(depths, reverse=not timed):
        for position, weight in enumerate(weights):
            cache.reading = (not timed) or position > 0
            started = time.perf_counter()
            run, timings = runs_of(index, queries, now, rerank_depth=depth, rerank_weight=weight)
            metrics, per_query[condition_name(depth, weight)] = scored(qrels, run)
            outcomes[condition_name(depth, weight)] = {
                "depth": depth,
                "weight": weight,
                **metrics,
                "search_ms": ms_summary(timings["search_ms"]),
                "rerank_ms": ms_summary(timings.get("rerank_ms", [])) if timed and position == 0 else None,
                "rerank_ms_from": (condition_name(depth, weights[0]) if timed and position > 0 else None),
            }
            if progress:
                print(
                    f"  {condition_name(depth, weight)}: nDCG@10 {metrics['ndcg@10']:.4f} "
                    f"({time.perf_counter() - started:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
    tests = {name: paired_test(values, base_per_query) for name, values in per_query.items()}
    adjusted = dict(zip(tests, holm([test.p_value for test in tests.values()])))
    for name, test in tests.items():
        outcomes[name].update({"ndcg@10_delta": test.difference, "p": test.p_value, "p_holm": adjusted[name]})
    if timed:
        for depth in depths:
            rerank = outcomes[condition_name(depth, weights[0])]["rerank_ms"]
            for weight in weights[1:]:
                outcomes[condition_name(depth, weight)]["rerank_ms"] = rerank
    return {
        "model": model,
        "queries": len(queries),
        "chunks": index.n_chunks,
        "depths": list(depths),
        "weights": list(weights),
        "timed": timed,
        "conditions": outcomes,
    }


# ------------------------------------------------------------------------------------ models
def share_document_vectors(evalset, config: IndexConfig, source: str, *, progress: bool) -> None:
    """Put `source`'s cached document vectors under `config`'s model in the shared embeddings cache
    (its index of the same chunking built first if needed), so `config`'s index embeds nothing:
    they are the same vectors."""
    from hybridlab.encoders.registry import get_spec
    from hybridlab.eval.evalsets import cache_root, ensure_index
    from hybridlab.index.format.embedding_cache import EmbeddingCache
    from hybridlab.search.engine import open_index

    (model,) = config.models
    a, b = get_spec(model), get_spec(source)
    if (a.package, a.backend, a.dim, a.max_seq_length, a.document_prefix) != (
        b.package,
        b.backend,
        b.dim,
        b.max_seq_length,
        b.document_prefix,
    ):
        raise ValueError(f"{model!r} and {source!r} do not embed documents alike")
    source_config = dataclasses.replace(config, models=(source,))
    with open_index(ensure_index(evalset, source_config, progress=progress)) as index:
        hashes = [
            row[0]
            for row in index._con.execute(
                "SELECT DISTINCT embed_sha256 FROM chunk_vectors WHERE model = ?", [source]
            ).fetchall()
        ]
    cache = EmbeddingCache(cache_root() / "embeddings.duckdb")
    try:
        missing = cache.missing(model, hashes, dim=a.dim)
        if missing:
            vectors = cache.get(source, missing, dim=b.dim)
            have = [sha for sha in missing if sha in vectors]
            cache.put(model, have, np.stack([vectors[sha] for sha in have]))
    finally:
        cache.close()


def encode_cost(model: str, queries: Sequence[str], n: int = 50) -> dict[str, float]:
    """Query encoding, one query at a time as a search does: p50/p95 ms over the first `n` queries."""
    from hybridlab.encoders.registry import load_query_encoder

    encoder = load_query_encoder(model)
    encoder.encode_queries([queries[0]])  # warm-up
    samples = []
    for query in queries[:n]:
        started = time.perf_counter()
        encoder.encode_queries([query])
        samples.append((time.perf_counter() - started) * 1000)
    return ms_summary(samples)


def model_systems(evalset) -> dict[str, dict[str, Any]]:
    """vector and the default hybrid; without recency too where the set has dates (`now`)."""
    systems = {"vector": {"mode": "vector"}, "hybrid": {}}
    if evalset.now is not None:
        systems.update(
            {"vector, no recency": {"mode": "vector", "decay": 0.0}, "hybrid, no recency": {"decay": 0.0}}
        )
    return systems


def measure_models(
    datasets: Sequence[str], models: Sequence[str], *, whole_documents: bool = False, progress: bool = True
) -> dict[str, Any]:
    """Per set and model: nDCG@10 / MRR / recall@100 of each system on the report split, with the
    paired randomisation test of nDCG@10 against the first model (the reference), the index build
    time when it was built here, query encoding cost. `whole_documents`: one chunk per document
    (as MTEB embeds a document: cut at the model's token limit)."""
    from hybridlab.eval.evalsets import ensure_index, get_evalset
    from hybridlab.eval.significance import paired_test
    from hybridlab.search.engine import open_index

    chunk = ChunkConfig(strategy="whole") if whole_documents else ChunkConfig()
    out: dict[str, Any] = {}
    for name in datasets:
        evalset = get_evalset(name)
        queries, qrels = split_queries(evalset, "report")
        key = f"{name}, whole documents" if whole_documents else name
        out[key] = {
            "split": evalset.report_split,
            "queries": len(queries),
            "chunking": chunk.strategy,
            "reference": models[0],
            "models": {},
        }
        per_query: dict[str, dict[str, dict[str, float]]] = {}
        for model in models:
            config = IndexConfig(chunk=chunk, models=(model,))
            if model in SHARED_DOCUMENT_VECTORS:
                share_document_vectors(evalset, config, SHARED_DOCUMENT_VECTORS[model], progress=progress)
            started = time.perf_counter()
            folder = ensure_index(evalset, config, progress=progress)
            seconds = time.perf_counter() - started
            entry: dict[str, Any] = {"index": folder.name, "ensure_index_s": round(seconds, 1), "systems": {}}
            with open_index(folder) as index:
                index.query_models.encode_queries(index.snapshot(), model, list(queries.values()))
                entry["chunks"] = index.n_chunks
                for system, options in model_systems(evalset).items():
                    run, _ = runs_of(index, queries, evalset.now, **options)
                    entry["systems"][system], per_query.setdefault(model, {})[system] = scored(qrels, run)
                    if model != models[0]:
                        test = paired_test(per_query[model][system], per_query[models[0]][system])
                        entry["systems"][system].update({"ndcg@10_delta": test.difference, "p": test.p_value})
            entry["query_encode_ms"] = encode_cost(model, list(queries.values()))
            out[key]["models"][model] = entry
            if progress:
                print(
                    f"  {key} {model}: "
                    + ", ".join(f"{s} {m['ndcg@10']:.4f}" for s, m in entry["systems"].items()),
                    file=sys.stderr,
                    flush=True,
                )
    return out


# ------------------------------------------------------------------------------------ the report
def _fmt(value: float | None, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render(results: Mapping[str, Any]) -> str:
    """report.md from results.json."""
    lines = [
        f"# Issue 19: stronger models and a rerank stage ({results.get('date', '')[:10]})",
        "",
        (
            f"Machine: {results.get('machine', '')}; percentiles: {PERCENTILE_LABEL}. "
            "Timings were taken while other jobs shared the 2 cores: compare them within a table."
        ),
        "",
    ]
    for paragraph in results.get("notes", ()):  # findings, written by hand into results.json
        lines += [paragraph, ""]
    for key, grid in sorted(results.get("grids", {}).items()):
        lines += [
            f"## Rerank grid: {key}",
            "",
            f"Command: `{grid['command']}`",
            "",
            (
                f"{grid['queries']} queries, {grid['chunks']} chunks, embedding model {grid['model']}, "
                f"cross-encoder {grid['rerank_model']}; depth = chunks of the fused list re-scored; weight 1.0 = "
                "the cross-encoder's order, 0.5 = half min-max cross-encoder + half min-max hybrid. "
                "p = paired randomisation test of nDCG@10 against the hybrid (Holm over the grid)."
            ),
            "",
            "| condition | depth | weight | nDCG@10 | Δ | MRR | R@100 | p (Holm) | rerank ms p50 | p95 |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, c in grid["conditions"].items():
            ms = c.get("rerank_ms") or {}
            weight = "" if c["weight"] is None else f"{c['weight']:g}"
            delta = f"{c['ndcg@10_delta']:+.4f}" if "ndcg@10_delta" in c else ""
            p_holm = f"{c['p_holm']:.3g}" if "p_holm" in c else ""
            lines.append(
                f"| {name} | {c['depth']} | {weight} | {_fmt(c['ndcg@10'])} | {delta} | {_fmt(c['mrr'])} | "
                f"{_fmt(c['recall@100'])} | {p_holm} | {_fmt(ms.get('p50'), 0)} | {_fmt(ms.get('p95'), 0)} |"
            )
        lines.append("")
    if results.get("models"):
        models = results["models"]
        commands = sorted({entry["command"] for entry in models.values()})
        lines += [
            "## Embedding models",
            "",
            *(f"Command: `{command}`" for command in commands),
            "",
            (
                "Each set's report split; default search settings (tuned on memories with MiniLM, "
                "so memories favours MiniLM; every other set is out of sample for both models)."
            ),
            "",
            (
                "Δ and p: nDCG@10 against the first model of the set's rows, same system (paired "
                "randomisation test, not corrected for the number of comparisons)."
            ),
            "",
            "| set | queries | model | system | nDCG@10 | Δ | p | MRR | R@100 |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, entry in models.items():
            for model, m in entry["models"].items():
                for system, s in m["systems"].items():
                    delta = f"{s['ndcg@10_delta']:+.4f}" if "ndcg@10_delta" in s else ""
                    p = f"{s['p']:.3g}" if "p" in s else ""
                    lines.append(
                        f"| {name} | {entry['queries']} | {model} | {system} | {_fmt(s['ndcg@10'])} | "
                        f"{delta} | {p} | {_fmt(s['mrr'])} | {_fmt(s['recall@100'])} |"
                    )
        lines += ["", "Query encoding, one query at a time (ms, p50 / p95 over 50 queries):", ""]
        for name, entry in models.items():
            for model, m in entry["models"].items():
                cost = m["query_encode_ms"]
                lines.append(f"- {name}, {model}: {cost['p50']:.1f} / {cost['p95']:.1f}")
        lines.append("")
    return "\n".join(lines)


def update_results(out: Path, section: str, key: str, value: Any) -> dict[str, Any]:
    """Merge one entry into `out/results.json`, rewrite `out/report.md`; the merged results."""
    path = out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results.update({"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.platform()})
    results.setdefault(section, {})[key] = value
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (out / "report.md").write_text(render(results))
    return results


# ------------------------------------------------------------------------------------ CLI
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.rerank", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="report folder (default reports/rerank/<date>)")
    sub = parser.add_subparsers(dest="part", required=True)
    grid = sub.add_parser("grid", help="hybrid vs hybrid + rerank over depth x weight")
    grid.add_argument("--dataset", default="scifact")
    grid.add_argument(
        "--split", default="test", help="test, train, dev, all, or report (the set's report split)"
    )
    grid.add_argument("--depths", default="20,50,100")
    grid.add_argument("--weights", default="1.0,0.5")
    grid.add_argument("--model", default="all-MiniLM-L6-v2", help="the index's embedding model")
    grid.add_argument(
        "--untimed", action="store_true", help="reuse cross-encoder scores across depths; no cost"
    )
    grid.add_argument(
        "--pair-cache",
        default=None,
        help="with --untimed: a JSON-lines file of cross-encoder "
        "scores, appended to and read back (resumes an interrupted grid)",
    )
    models = sub.add_parser("models", help="vector and hybrid per embedding model per set")
    models.add_argument("--datasets", default=",".join(DATASETS))
    models.add_argument("--models", default=",".join(MODELS))
    models.add_argument("--whole-documents", action="store_true", help="one chunk per document (as MTEB)")
    sub.add_parser("report", help="rewrite report.md from results.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from hybridlab.eval.evalsets import ensure_index, get_evalset
    from hybridlab.search.engine import open_index

    apply_offline_environment()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    command = "python -m bench.rerank " + " ".join(argv)
    out = (
        Path(args.out)
        if args.out
        else REPO_ROOT / "reports" / "rerank" / datetime.now(UTC).strftime("%Y-%m-%d")
    )
    if args.part == "report":
        path = out / "results.json"
        (out / "report.md").write_text(render(json.loads(path.read_text())))
        return {}
    if args.part == "models":
        results: dict[str, Any] = {}
        for key, entry in measure_models(
            args.datasets.split(","), args.models.split(","), whole_documents=args.whole_documents
        ).items():
            results = update_results(out, "models", key, {"command": command, **entry})
        return results
    evalset = get_evalset(args.dataset)
    queries, qrels = split_queries(evalset, args.split)
    with open_index(ensure_index(evalset, IndexConfig(models=(args.model,)), progress=False)) as index:
        grid = measure_grid(
            index,
            queries,
            qrels,
            [int(d) for d in args.depths.split(",")],
            [float(w) for w in args.weights.split(",")],
            now=evalset.now,
            timed=not args.untimed,
            pair_cache=Path(args.pair_cache) if args.pair_cache else None,
        )
    from hybridlab.config import SearchConfig

    grid.update(
        {
            "command": command,
            "dataset": args.dataset,
            "split": args.split,
            "rerank_model": SearchConfig().rerank_model,
        }
    )
    return update_results(out, "grids", f"{args.dataset}-{args.split}-{args.model}", grid)


if __name__ == "__main__":
    main()

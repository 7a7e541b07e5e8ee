"""What the learned fusion costs a SciFact search (issue 33): `python -m bench.learned_fusion
[--queries N] [--rounds R] [--model DIR] [--out DIR]`.

The SciFact evaluation index (default index config, cached in .cache/indexes), its test queries
encoded once beforehand (so encoding is not timed), then each query searched with the default
fusion and with `fusion="learned"` alternately (and with `--before DIR`, a second model: before /
after in one run), R rounds, in one process: the search time the engine reports (`search_ms`:
retrieval, fusion, recency; not encoding, grouping or hydration), P50/P95/P99, the per-query paired
difference learned - default, and the feature computation alone (`candidate_features` on the query's
runs) and each model's scoring alone. Results: `reports/bench/<date>-learned-fusion/` (`learned_fusion.json`, `README.md`).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.common import machine_info, percentile
from hybridlab.config import REPO_ROOT, apply_offline_environment


def _relative(path: Path) -> str:
    """`path` relative to the checkout where it lies inside it (no machine paths in reports)."""
    path = path.resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else path.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.learned_fusion", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="", help="the learned model folder (default: the shipped one)")
    parser.add_argument(
        "--before", default="", help="a second model folder timed alongside (e.g. the previous one)"
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    apply_offline_environment()
    from hybridlab.eval.systems import open_evalset
    from hybridlab.search.filters import Filters
    from hybridlab.search.learned import model_path
    from hybridlab.search.pipeline import scoring

    opened = open_evalset("scifact")
    index = opened.index
    queries = list(opened.evalset.dataset("test").queries.values())[: args.queries]
    index.query_models.encode_queries(index.snapshot(), index.choose_model(None, None), queries)
    models = {"learned": args.model, **({"learned-before": args.before} if args.before else {})}
    rankers = {name: index.query_models.learned_ranker(folder) for name, folder in models.items()}
    systems = {
        "default": {},
        **{name: {"fusion": "learned", "learned_model": folder} for name, folder in models.items()},
    }
    search_ms: dict[str, list[float]] = {name: [] for name in systems}
    features_ms: list[float] = []
    model_ms: dict[str, list[float]] = {name: [] for name in models}
    load_before = machine_info()["load_average"]
    now = datetime.now(UTC)
    for query in queries[:20]:  # warm-up
        for options in systems.values():
            index.run_response(query, **options)
    for _ in range(args.rounds):
        for query in queries:
            for name, options in systems.items():
                search_ms[name].append(index.run_response(query, **options).timings["search_ms"])
            retrieval = index._retrieve(query, {}, Filters(), None, now)
            started = time.perf_counter()
            _, matrix = scoring.candidate_features(
                index.snapshot(), retrieval.runs, retrieval.evidence, retrieval.facts, now, retrieval.config
            )
            features_ms.append((time.perf_counter() - started) * 1000)
            for name, ranker in rankers.items():
                started = time.perf_counter()
                ranker.score(matrix)
                model_ms[name].append((time.perf_counter() - started) * 1000)
    p50 = {name: percentile(values, 50) for name, values in search_ms.items()}
    paired = {name: [a - b for a, b in zip(search_ms[name], search_ms["default"])] for name in models}
    result = {
        "queries": len(queries),
        "rounds": args.rounds,
        "n_chunks": index.n_chunks,
        "model": _relative(model_path(args.model)),
        "model_kind": rankers["learned"].meta["kind"],
        "before": _relative(Path(args.before)) if args.before else None,
        "trees": {name: r.booster.num_trees() if r.booster else 0 for name, r in rankers.items()},
        "search_p50_ms": p50,
        "search_p95_ms": {n: percentile(v, 95) for n, v in search_ms.items()},
        "search_p99_ms": {n: percentile(v, 99) for n, v in search_ms.items()},
        "added_p50_ms": p50["learned"] - p50["default"],
        "paired_added_ms": {
            n: {"p50": percentile(v, 50), "p95": percentile(v, 95)} for n, v in paired.items()
        },
        "features_p50_ms": percentile(features_ms, 50),
        "features_p95_ms": percentile(features_ms, 95),
        "model_p50_ms": percentile(model_ms["learned"], 50),
        "model_ms": {n: {"p50": percentile(v, 50), "p95": percentile(v, 95)} for n, v in model_ms.items()},
        "load_average_before": load_before,
        "machine": machine_info(),
    }
    out = Path(args.out or REPO_ROOT / "reports" / "bench" / f"{datetime.now(UTC):%Y-%m-%d}-learned-fusion")
    out.mkdir(parents=True, exist_ok=True)
    (out / "learned_fusion.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "README.md").write_text(
        "# Learned fusion: search latency on SciFact (issue 33)\n\n"
        f"`python -m bench.learned_fusion --queries {args.queries} --rounds {args.rounds}"
        f"{' --before ' + result['before'] if args.before else ''}`: {len(queries)} test "
        f"queries x {args.rounds} rounds, default and learned alternately in one process; {index.n_chunks} "
        f"chunks; model {result['model_kind']}. Times in ms (the engine's `search_ms`: retrieval + fusion, "
        "no encoding).\n\n"
        f"Load average before / after: {load_before} / {result['machine']['load_average']} (a machine shared with "
        "other work: tails move with its load; the paired per-query difference is the steadier figure).\n\n"
        "| | P50 | P95 | P99 |\n|---|---|---|---|\n"
        + "".join(
            f"| search, {name} | {p50[name]:.2f} | {result['search_p95_ms'][name]:.2f} | "
            f"{result['search_p99_ms'][name]:.2f} |\n"
            for name in systems
        )
        + "".join(
            f"| {name} - default, paired per query | {v['p50']:+.2f} | {v['p95']:+.2f} | |\n"
            for name, v in result["paired_added_ms"].items()
        )
        + f"| feature computation alone | {result['features_p50_ms']:.3f} | {result['features_p95_ms']:.3f} | |\n"
        + "".join(
            f"| model scoring alone, {name} ({result['trees'][name]} trees) | {v['p50']:.3f} | {v['p95']:.3f} | |\n"
            for name, v in result["model_ms"].items()
        ),
        encoding="utf-8",
    )
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

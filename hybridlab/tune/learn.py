"""Learning the fusion across collections: candidates, features and labels from the engine's own
retrieval, a LightGBM LambdaRank ranker (or a logistic-regression baseline), leave-one-collection-out.
See docs/internals/tune-eval.md#learned-fusion-training.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import numpy as np

from hybridlab.config import REPO_ROOT
from hybridlab.errors import InvalidValueError
from hybridlab.eval.evaluate import score_per_query
from hybridlab.eval.significance import paired_test
from hybridlab.eval.systems import open_evalset, per_kind, system_runs
from hybridlab.extras import require
from hybridlab.search import evidence, features
from hybridlab.search.engine import resolve_now
from hybridlab.search.features import FEATURE_NAMES
from hybridlab.search.filters import Filters
from hybridlab.search.learned import KINDS, base_logit, load_ranker, metadata, save_model, used_columns
from hybridlab.search.pipeline import first_stage, runs, scoring, settings

SETS = ("scifact", "cisi", "cranfield", "med", "memories", "holoviz")
TRAIN_SPLIT = {"scifact": "train"}  # others: "all"
REPORT_SPLIT = {"scifact": "test"}
EVAL_LIMIT = 100
LIGHTGBM_PARAMS: dict[str, Any] = {
    "objective": "lambdarank",
    "learning_rate": 0.05,
    "num_leaves": 7,
    "min_data_in_leaf": 200,
    "feature_fraction": 0.8,
    "lambdarank_truncation_level": 20,
    "eval_at": [10],
    "verbosity": -1,
    "deterministic": True,
    "force_row_wise": True,
    "num_threads": 1,
    "seed": 0,
}
ROUNDS = 150
#: Features whose scale depends on the collection (raw scores, the query's top scores, document
#: frequency, chunks per document) or that mark a collection (newness: 0 wherever documents are
#: undated; recency still applies after fusion): what a model that must transfer should not read.
COLLECTION_SPECIFIC = (
    "dense_score",
    "bm25_score",
    "tags_score",
    "dense_top",
    "bm25_top",
    "rare_term_df",
    "doc_candidates",
    "newness",
)
CACHE = REPO_ROOT / ".cache" / "learned-fusion"  # extracted examples (.npz, no pickle)
L2 = 0.1  # the linear model's L2 penalty (per unit of the weighted mean loss; 1e-3 did worse left out)
METRICS = ("ndcg@10", "mrr", "hit_rate@10")


@dataclass(frozen=True)
class Recipe:
    """How a LightGBM model is trained: the features it leaves out, its parameters and rounds."""

    drop: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=lambda: dict(LIGHTGBM_PARAMS))
    rounds: int = ROUNDS

    def used(self) -> list[str]:
        """The features the trees read."""
        return [name for name in FEATURE_NAMES if name not in self.drop]


RECIPES = {
    "full": Recipe(),
    # (a): within-query evidence only (normalised scores, ranks, agreement, lexical shares, query form),
    # smaller and more regularised trees
    "transferable": Recipe(
        COLLECTION_SPECIFIC,
        {**LIGHTGBM_PARAMS, "num_leaves": 5, "min_data_in_leaf": 400, "lambda_l2": 10.0},
        rounds=100,
    ),
}
RECIPE = (
    "transferable"  # what `learn-fusion` trains unless told (it beat "full" left out: reports/learned-fusion)
)


@dataclass(frozen=True)
class Examples:
    """Candidates of one set's queries: features, graded labels, the query of each row."""

    name: str
    matrix: np.ndarray
    labels: np.ndarray
    groups: np.ndarray  # rows per query, in order

    @staticmethod
    def concat(parts: Sequence[Examples]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(matrix, labels, groups, weights): each part weighs the same in total (weights per row)."""
        mean_queries = np.mean([len(p.groups) for p in parts])
        weights = [np.full(len(p.labels), mean_queries / len(p.groups)) for p in parts]
        return (
            np.concatenate([p.matrix for p in parts]),
            np.concatenate([p.labels for p in parts]),
            np.concatenate([p.groups for p in parts]),
            np.concatenate(weights),
        )


def examples(
    name: str, index: Any, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], now: str | None
) -> Examples:
    """Features and labels of every judged query's candidates, from the engine's own retrieval
    (the default settings, `limit` as in evaluation); queries without a relevant candidate are left out."""
    judged = {qid: text for qid, text in queries.items() if any(g > 0 for g in qrels.get(qid, {}).values())}
    if index.dense:
        index.query_models.encode_queries(
            index.snapshot(), index.choose_model(None, None), list(judged.values())
        )
    snapshot, moment = index.snapshot(), resolve_now(now)
    doc_ids = snapshot.generation.doc_ids
    matrices, labels, groups = [], [], []
    for qid, text in judged.items():
        retrieval = index._retrieve(text, {"limit": EVAL_LIMIT}, Filters(), None, moment)
        rows, matrix = scoring.candidate_features(
            snapshot, retrieval.runs, retrieval.evidence, retrieval.facts, moment, retrieval.config
        )
        grades = qrels[qid]
        label = np.fromiter(
            (max(0, min(int(grades.get(doc_ids[row], 0)), 30)) for row in rows.tolist()), np.int32, len(rows)
        )
        if label.any():
            matrices.append(matrix)
            labels.append(label)
            groups.append(len(rows))
    if not groups:
        raise InvalidValueError(f"{name}: no judged query has a relevant document among its candidates")
    return Examples(name, np.concatenate(matrices), np.concatenate(labels), np.asarray(groups))


def set_examples(name: str, split: str | None = None) -> Examples:
    """The examples of an evaluation set's training split (SciFact: train; others: all queries)."""
    opened = open_evalset(name)
    split = split or TRAIN_SPLIT.get(name, "all")
    sources = "".join(  # modules of the package: each has its source file
        Path(cast(str, m.__file__)).read_text(encoding="utf-8")
        for m in (evidence, features, settings, runs, scoring, first_stage)
    )
    key = hashlib.sha256(f"{opened.index_dir.name}/{split}/{sources}".encode()).hexdigest()[:12]
    path = CACHE / f"{name}-{split}-{key}.npz"  # a new index or feature code: extracted again
    if path.is_file():
        with np.load(path, allow_pickle=False) as saved:
            return Examples(name, saved["matrix"], saved["labels"], saved["groups"])
    dataset = opened.evalset.dataset(split)
    found = examples(name, opened.index, dataset.queries, dataset.qrels, opened.evalset.now)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(path, matrix=found.matrix, labels=found.labels, groups=found.groups)
    return found


def train(
    parts: Sequence[Examples], kind: str = "lightgbm", rounds: int | None = None, recipe: Recipe | None = None
) -> tuple[dict[str, Any], Any]:
    """A model trained on the parts: (metadata, booster or None)."""
    matrix, labels, groups, weights = Examples.concat(parts)
    trained_at = datetime.now(UTC).isoformat(timespec="seconds")
    names = [p.name for p in parts]
    if kind == "lightgbm":
        require("lightgbm", extra="learn")
        import lightgbm as lgb

        recipe = recipe or RECIPES[RECIPE]
        rounds, used = rounds or recipe.rounds, recipe.used()
        columns = used_columns({"used_features": used})
        data = lgb.Dataset(
            matrix[:, columns],
            labels,
            group=groups,
            weight=weights,
            init_score=base_logit(matrix),
            feature_name=used,
        )
        booster = lgb.train(dict(recipe.params), data, num_boost_round=rounds)
        return metadata(
            kind, names, trained_at, params={**recipe.params, "rounds": rounds}, used_features=used
        ), booster
    if kind != "linear":
        raise InvalidValueError(f"unknown model kind {kind!r}; choose from {list(KINDS)}")
    mean, scale = matrix.mean(axis=0), matrix.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    coef, intercept = logistic_with_offset((matrix - mean) / scale, labels > 0, base_logit(matrix), weights)
    linear = {
        "low": matrix.min(axis=0).tolist(),
        "high": matrix.max(axis=0).tolist(),
        "mean": mean.tolist(),
        "scale": scale.tolist(),
        "coef": coef.tolist(),
        "intercept": intercept,
        "offset": "logit_fused",
    }
    return metadata(
        kind, names, trained_at, linear=linear, params={"l2": L2, "class_weight": "balanced"}
    ), None


def logistic_with_offset(
    x: np.ndarray, y: np.ndarray, offset: np.ndarray, weights: np.ndarray, l2: float | None = None
) -> tuple[np.ndarray, float]:
    """Weighted logistic regression of `y` on `x` over a fixed `offset` (logit of the base fusion),
    classes balanced, L2 penalty on the coefficients: (coefficients, intercept). L-BFGS (scipy)."""
    from scipy.optimize import minimize

    l2 = L2 if l2 is None else l2
    y = y.astype(np.float64)
    positive = y.sum()
    w = weights * np.where(y > 0, len(y) / (2 * max(positive, 1)), len(y) / (2 * max(len(y) - positive, 1)))
    w = w / w.sum()

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        z = x @ theta[:-1] + theta[-1] + offset
        residual = w * (1.0 / (1.0 + np.exp(-z)) - y)
        value = float(np.sum(w * (np.logaddexp(0.0, z) - y * z))) + 0.5 * l2 * float(theta[:-1] @ theta[:-1])
        return value, np.append(x.T @ residual + l2 * theta[:-1], residual.sum())

    theta = minimize(loss, np.zeros(x.shape[1] + 1), jac=True, method="L-BFGS-B").x
    return theta[:-1], float(theta[-1])


def importance(booster: Any) -> dict[str, float]:
    """LightGBM's total gain per feature, normalised to sum 1, largest first."""
    gain = np.asarray(booster.feature_importance("gain"), dtype=np.float64)
    shares = gain / gain.sum() if gain.sum() > 0 else gain
    return dict(sorted(zip(booster.feature_name(), shares.round(4).tolist()), key=lambda kv: -kv[1]))


def learn(
    sets: Sequence[str],
    out: str | Path,
    kind: str = "lightgbm",
    cache: dict[str, Examples] | None = None,
    recipe: str = RECIPE,
) -> Path:
    """Train on the sets' training queries and write the model folder `out`."""
    cache = {} if cache is None else cache
    for name in sets:
        if name not in cache:
            cache[name] = set_examples(name)
    meta, booster = train([cache[name] for name in sets], kind, recipe=RECIPES[recipe])
    if kind == "lightgbm":
        meta.update(recipe=recipe, importance=importance(booster))
    folder = save_model(out, meta, booster)
    load_ranker(folder)  # written as it will be read
    return folder


# ------------------------------------------------------------------------------------ leave one out
def score_set(name: str, systems: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per system, the means and per-query values of METRICS on the set's report queries, and
    per kind where the set's queries have kinds."""
    opened = open_evalset(name)
    dataset = opened.evalset.dataset(REPORT_SPLIT.get(name, "all"))
    runs = system_runs(
        opened,
        dataset.queries,
        {label: {"limit": EVAL_LIMIT, **options} for label, options in systems.items()},
    )
    result: dict[str, Any] = {}
    for label, run in runs.items():
        per_query = score_per_query(dataset.qrels, run, METRICS)
        kinds = per_kind(opened.evalset.queries_path, per_query["mrr"], opened.evalset.kinds)
        result[label] = {
            "means": {m: float(np.mean(list(v.values()))) for m, v in per_query.items()},
            "per_query": per_query,
            "mrr_per_kind": kinds if len(kinds) > 1 else {},
        }
    return result


def loco(
    out: str | Path,
    sets: Sequence[str] = SETS,
    kinds: Sequence[str] = KINDS,
    cache: dict[str, Examples] | None = None,
    recipe: str = RECIPE,
) -> dict[str, Any]:
    """Leave each set out: train on the others (each kind; LightGBM by `recipe`), score it against the
    default and the single retrievers, paired randomisation tests; writes results.json and report.md
    under `out` (with each fold's feature importance and the seconds the run took)."""
    out, started = Path(out), time.perf_counter()
    cache = {} if cache is None else cache
    table: dict[str, Any] = {}
    for left in sets:
        systems: dict[str, dict[str, Any]] = {
            "default": {},
            "bm25": {"mode": "bm25"},
            "vector": {"mode": "vector"},
        }
        models = {}
        for kind in kinds:
            folder = learn(
                [s for s in sets if s != left], out / "models" / f"{left}-{kind}", kind, cache, recipe
            )
            systems[f"learned-{kind}"] = {"fusion": "learned", "learned_model": str(folder)}
            models[kind] = json.loads((folder / "model.json").read_text(encoding="utf-8"))
        scored = score_set(left, systems)
        best = max(("bm25", "vector"), key=lambda s: scored[s]["means"]["ndcg@10"])
        tests = {
            f"{system} vs {other}": {
                m: paired_test(scored[system]["per_query"][m], scored[other]["per_query"][m]).p_value
                for m in METRICS
            }
            for system in systems
            if system.startswith("learned")
            for other in ("default", best)
        }
        table[left] = {
            "best_single": best,
            "queries": len(scored["default"]["per_query"]["mrr"]),
            "means": {s: v["means"] for s, v in scored.items()},
            "mrr_per_kind": {s: v["mrr_per_kind"] for s, v in scored.items() if v["mrr_per_kind"]},
            "p_values": tests,
            "recipe": recipe,
            "importance": models.get("lightgbm", {}).get("importance", {}),
        }
        print(
            f"{left}: " + ", ".join(f"{s} {v['means']['ndcg@10']:.4f}" for s, v in scored.items()), flush=True
        )
    table["_run"] = {"recipe": recipe, "seconds": round(time.perf_counter() - started, 1)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    (out / "report.md").write_text(loco_markdown(table, kinds), encoding="utf-8")
    return table


def loco_markdown(table: Mapping[str, Any], kinds: Sequence[str] = KINDS) -> str:
    """The LOCO table: per left-out set and metric, default / learned / best single, delta, p."""
    lines = [
        "| left out | metric | default | "
        + " | ".join(f"learned ({k})" for k in kinds)
        + " | best single | Δ vs default | p vs default | p vs best single |",
        "|---|---|---|" + "---|" * len(kinds) + "---|---|---|---|",
    ]
    table = {left: row for left, row in table.items() if not left.startswith("_")}
    for left, row in table.items():
        means, best = row["means"], row["best_single"]
        for metric in METRICS:
            learned = [means[f"learned-{k}"][metric] for k in kinds]
            first = f"learned-{kinds[0]}"
            lines.append(
                f"| {left} ({row['queries']}) | {metric} | {means['default'][metric]:.4f} | "
                + " | ".join(f"{v:.4f}" for v in learned)
                + f" | {means[best][metric]:.4f} ({best}) | {learned[0] - means['default'][metric]:+.4f} | "
                f"{row['p_values'][f'{first} vs default'][metric]:.3g} | "
                f"{row['p_values'][f'{first} vs {best}'][metric]:.3g} |"
            )
    lines.append("")
    for left, row in table.items():
        for system, groups in row["mrr_per_kind"].items():
            lines.append(
                f"- {left} MRR per kind, {system}: "
                + ", ".join(f"{k} {v['mean']:.3f} (n={v['n']})" for k, v in groups.items())
            )
    return (
        "\n".join(
            [
                *lines,
                "",
                *no_regret_markdown(table, f"learned-{kinds[0]}"),
                "",
                *importance_markdown(
                    {left: row["importance"] for left, row in table.items() if row.get("importance")}
                ),
            ]
        )
        + "\n"
    )


def no_regret_markdown(
    table: Mapping[str, Any], learned: str = "learned-lightgbm", floor: float = 0.95
) -> list[str]:
    """Per query kind: MRR of the default, the learned model and the best single retriever of that
    kind, the ratio learned / best single, flagged under `floor`."""
    lines = [
        "| set | kind (n) | default | learned | best single | learned / best single |",
        "|---|---|---|---|---|---|",
    ]
    for left, row in table.items():
        kinds = row.get("mrr_per_kind", {})
        if learned not in kinds:
            continue
        for kind, value in kinds[learned].items():
            best = max(("bm25", "vector"), key=lambda s: kinds[s][kind]["mean"])
            ratio = value["mean"] / kinds[best][kind]["mean"] if kinds[best][kind]["mean"] else float("inf")
            lines.append(
                f"| {left} | {kind} ({value['n']}) | {kinds['default'][kind]['mean']:.3f} | {value['mean']:.3f} "
                f"| {kinds[best][kind]['mean']:.3f} ({best}) | {ratio:.2f}{' **< 0.95**' if ratio < floor else ''} |"
            )
    return lines


def importance_markdown(importances: Mapping[str, Mapping[str, float]], top: int = 10) -> list[str]:
    """Each model's top features by normalised gain (share of the total), one column per model."""
    if not importances:
        return []
    ranked = {name: list(shares.items())[:top] for name, shares in importances.items()}
    lines = ["| # | " + " | ".join(ranked) + " |", "|---|" + "---|" * len(ranked)]
    for i in range(top):
        lines.append(
            f"| {i + 1} | "
            + " | ".join(f"{r[i][0]} {r[i][1]:.2f}" if i < len(r) else "" for r in ranked.values())
            + " |"
        )
    return lines

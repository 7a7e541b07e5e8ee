"""Does a late-interaction second stage transfer? Every collection we have, scored where nothing was chosen.

For each collection (our memories and HoloViz sets, SciFact test, CISI, Cranfield, MED, LoCoMo turns
stored as memories with nothing more, LoCoMo sessions) the engine's default first stage is run once
per query; its top `MAX_DEPTH` chunks get MaxSim scores from token vectors stored as the index would
store them (content-addressed, `hybridlab.index.format.tokens.TokenStore`). Every setting of the stage
(depth x weight x combination) is then applied offline with the pipeline's own functions
(`hybridlab.search.late.reorder`, then the group step), and chosen by leave-one-origin-out: the
setting that gains most on the other origins (mean relative gain of the primary metric) is scored on
the held-out one. LoCoMo's two levels are one origin (held out together).

    python -m bench.late_stage --out reports/bench/late-stage [--locomo PATH/locomo10.json] [--cross-encoder]

Writes `results.json` (per collection: first stage, chosen setting out of fold, every setting's mean),
`README.md` (the tables) and `late-stage.png`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hybridlab.encoders.late import get_late_spec, load_late_encoder
from hybridlab.eval.conversations import metrics as conv_metrics
from hybridlab.eval.conversations.locomo import read_locomo
from hybridlab.eval.conversations.runner import BenchSettings, build_index
from hybridlab.eval.evalsets import cache_root, get_evalset
from hybridlab.eval.systems import open_evalset
from hybridlab.index.format.tokens import TokenStore
from hybridlab.search import late
from hybridlab.search.engine import Index, resolve_now
from hybridlab.search.filters import Filters
from hybridlab.search.pipeline import first_stage, group, records

MAX_DEPTH = 100
DEPTHS = (10, 20, 30, 50, 100)
WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
COMBINATIONS = tuple(sorted(late.COMBINATIONS))
EVALSETS = ("memories", "holoviz", "scifact", "cisi", "cranfield", "med")


@dataclass
class Query:
    """One query's first stage: its head hits (up to MAX_DEPTH), the hits below, MaxSim of the head."""

    qid: str
    head: list[records.Hit]
    tail: list[records.Hit]
    maxsim: np.ndarray
    relevant: Mapping[str, int]  # doc id -> grade
    ranker: Any = None  # the snapshot (group) and config
    cross: np.ndarray | None = None  # cross-encoder scores of the head's first CROSS_DEPTH (--cross-encoder)


@dataclass
class Collection:
    name: str
    origin: str
    metric: str  # "ndcg@10" or "recall@5"
    queries: list[Query] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    scores: dict[str, list[float]] = field(default_factory=dict)  # setting -> per-query metric


def setting_name(depth: int, weight: float, combination: str) -> str:
    return f"{combination}:d{depth}:w{weight:g}"


CROSS_DEPTH = 30
CROSS_MODEL = "ms-marco-MiniLM-L-12-v2"
#: the side-by-side run (--cross-encoder): the first stage, the default second stage, the cross-encoder
SIDE_BY_SIDE = ["none", "convex:d20:w0.6", f"cross:d{CROSS_DEPTH}"]
#: what one run does (set by `main`): the cross-encoder side by side, how many LoCoMo conversations
RUN: dict[str, Any] = {"cross": False, "conversations": None}
SETTINGS = ["none"] + [setting_name(d, w, c) for c in COMBINATIONS for d in DEPTHS for w in WEIGHTS]


def parse_setting(name: str) -> tuple[str, int, float]:
    """(combination, depth, weight) of `convex:d20:w0.6`; the cross-encoder's `cross:d30` is its order."""
    combination, depth, *weight = name.split(":")
    return combination, int(depth[1:]), float(weight[0][1:]) if weight else 1.0


# ------------------------------------------------------------------------------------ metrics
def ndcg_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k with linear gains (ranx's and trec_eval's `ndcg`)."""
    gains = [relevant.get(doc, 0) for doc in ranked[:k]]
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains) if g > 0)
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 5) -> float:
    return conv_metrics.fractional_recall(list(ranked), list(relevant), k)


METRICS = {"ndcg@10": ndcg_at, "recall@5": recall_at}


# ------------------------------------------------------------------------------------ collecting
class Vectors:
    """Token vectors of chunk texts, stored once in a TokenStore (as an index stores them)."""

    def __init__(self, folder: Path) -> None:
        self.spec = get_late_spec("answerai-colbert-small")
        self.encoder = load_late_encoder(self.spec)
        self.store = TokenStore(folder / self.spec.key, self.spec.to_json())
        self.encode_seconds = 0.0
        self.encoded = 0
        self.tokens = 0

    def ensure(self, embedded: Sequence[tuple[str, str]], desc: str) -> None:
        texts = dict(embedded)
        todo = self.store.missing(texts)
        batch = 256
        for start in tqdm(range(0, len(todo), batch), desc=f"token vectors ({desc})", unit="x256"):
            hashes = todo[start : start + batch]
            started = time.perf_counter()
            vectors = self.encoder.encode_documents([texts[sha] for sha in hashes])
            self.encode_seconds += time.perf_counter() - started
            self.encoded += len(hashes)
            self.tokens += sum(len(v) for v in vectors)
            self.store.add(hashes, vectors)

    def maxsim(self, query: str, embedded: Sequence[tuple[str, str]]) -> tuple[np.ndarray, float, float]:
        started = time.perf_counter()
        q = self.encoder.encode_query(query)
        encoded = time.perf_counter()
        docs = [v for v in self.store.get([sha for sha, _ in embedded]) if v is not None]
        scores = late.maxsim(q, docs)
        return scores, (encoded - started) * 1000, (time.perf_counter() - encoded) * 1000


def _first_stage(index: Index, text: str, now: Any) -> records.Retrieval:
    asked = records.Search(text, {"limit": 100}, Filters(), None, resolve_now(now), index.config_file)
    return first_stage.retrieve(index.snapshot(), asked, index.query_models)


def collect(
    collection: Collection,
    index: Index,
    questions: Sequence[tuple[str, str, Any, Mapping[str, int]]],
    vectors: Vectors,
    qualify: Any = None,
    cross: bool = False,
) -> None:
    """The first stage of every question (qid, text, now, relevant ids), then MaxSim of each head
    (and, with `cross`, the cross-encoder's scores of its top CROSS_DEPTH)."""
    snapshot = index.snapshot()
    firsts = []
    started = time.perf_counter()
    for qid, text, now, relevant in tqdm(questions, desc=f"first stage ({collection.name})", leave=False):
        firsts.append((qid, text, relevant, _first_stage(index, text, now)))
    collection.seconds["first_stage_ms_per_query"] = (
        (time.perf_counter() - started) * 1000 / max(1, len(questions))
    )
    rows = {hit.row for *_, retrieval in firsts for hit in retrieval.hits[:MAX_DEPTH]}
    vectors.ensure(snapshot.store.embedded(sorted(rows)), collection.name)
    encode_ms, maxsim_ms, cross_ms = [], [], []
    for qid, text, relevant, retrieval in firsts:
        head, tail = retrieval.hits[:MAX_DEPTH], retrieval.hits[MAX_DEPTH:]
        scores, enc, ms = vectors.maxsim(text, snapshot.store.embedded([hit.row for hit in head]))
        encode_ms.append(enc)
        maxsim_ms.append(ms)
        query = Query(qid, head, tail, scores, relevant, (snapshot, retrieval.config, qualify))
        if cross:
            started = time.perf_counter()
            passages = snapshot.store.passages([hit.row for hit in head[:CROSS_DEPTH]])
            query.cross = np.asarray(
                index.query_models.rerank_scores(CROSS_MODEL, text, passages), dtype=np.float64
            )
            cross_ms.append((time.perf_counter() - started) * 1000)
        collection.queries.append(query)
    if cross_ms:
        collection.seconds["cross_encoder_30_ms_p50"] = statistics.median(cross_ms)
    collection.seconds["query_encode_ms_p50"] = statistics.median(encode_ms) if encode_ms else 0.0
    collection.seconds["maxsim_100_ms_p50"] = statistics.median(maxsim_ms) if maxsim_ms else 0.0


def ranking(query: Query, setting: str) -> list[str]:
    """The query's document ranking under a setting, through the pipeline's own reorder and group."""
    snapshot, config, qualify = query.ranker
    hits = query.head + query.tail
    if setting != "none" and query.head:
        combination, depth, weight = parse_setting(setting)
        head = query.head[:depth]
        second = query.maxsim if combination in late.COMBINATIONS else query.cross
        assert second is not None
        order, mixed = late.reorder(
            [h.row for h in head],
            [h.score for h in head],
            second[: len(head)],
            weight if combination in late.COMBINATIONS else 1.0,
            combination if combination in late.COMBINATIONS else "convex",
        )
        hits = records.on_top(head, query.head[depth:] + query.tail, order, mixed)  # as the pipeline does
    grouped = group.group(snapshot, hits, config)
    doc_ids = snapshot.generation.doc_ids
    ids = [doc_ids[h.row] for h in grouped]
    return [qualify(i) for i in ids] if qualify else ids


def score_settings(collection: Collection, queries: Sequence[Query]) -> None:
    """Score `queries` (the collection's newly collected ones) under every setting, then let go of
    their snapshots."""
    metric = METRICS[collection.metric]
    for setting in tqdm(SIDE_BY_SIDE if RUN["cross"] else SETTINGS, desc=f"settings ({collection.name})"):
        collection.scores.setdefault(setting, []).extend(
            metric(ranking(q, setting), q.relevant) for q in queries
        )
    for query in queries:
        query.ranker = None


def evalset_collection(name: str, vectors: Vectors) -> Collection:
    evalset = get_evalset(name)
    dataset = evalset.report_dataset()
    opened = open_evalset(name, progress=True)
    collection = Collection(name, name, "ndcg@10")
    questions = [
        (qid, text, evalset.now, {doc: int(g) for doc, g in dataset.qrels[qid].items()})
        for qid, text in dataset.queries.items()
    ]
    collect(collection, opened.index, questions, vectors, cross=RUN["cross"])
    score_settings(collection, collection.queries)
    opened.index.close()
    return collection


def locomo_collections(path: Path, vectors: Vectors, work: Path) -> list[Collection]:
    haystacks = read_locomo(path)[: RUN["conversations"]]
    out = []
    for level in ("turn", "session"):
        collection = Collection(f"locomo-{level}", "locomo", "recall@5")
        settings = BenchSettings(granularity=level, context=False)
        for haystack in tqdm(haystacks, desc=f"LoCoMo {level}"):
            folder = build_index(haystack, settings, work / "indexes", work / "embeddings.duckdb")
            with Index(folder) as index:
                questions = [
                    (
                        q.question_id,
                        q.text,
                        q.date or haystack.last_date,
                        dict.fromkeys(haystack.relevant(q, level), 1),
                    )
                    for q in haystack.questions
                    if haystack.relevant(q, level) and not q.abstention
                ]
                done = len(collection.queries)
                collect(collection, index, questions, vectors, cross=RUN["cross"])
                score_settings(collection, collection.queries[done:])
        out.append(collection)
    return out


# ------------------------------------------------------------------------------------ choosing
def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def relative_gains(collection: Collection) -> dict[str, float]:
    base = mean(collection.scores["none"])
    return {s: (mean(v) - base) / base if base else 0.0 for s, v in collection.scores.items()}


def _origin_gains(collections: Sequence[Collection]) -> list[dict[str, float]]:
    """Per origin (LoCoMo's two levels averaged first), each setting's relative gain."""
    by_origin: dict[str, list[dict[str, float]]] = {}
    for collection in collections:
        by_origin.setdefault(collection.origin, []).append(relative_gains(collection))
    return [{s: mean([g[s] for g in gains]) for s in SETTINGS} for gains in by_origin.values()]


def choose(collections: Sequence[Collection], criterion: str = "maximin") -> str:
    """The setting to use, from the collections' relative gains, each origin one vote.

    `maximin` (the default's rule: a default must improve EVERY collection): the best worst-origin
    gain, then the best mean; `mean`: the best mean gain. Ties to the shallower, lower weight."""
    votes = _origin_gains(collections)

    def key(setting: str) -> tuple[float, ...]:
        gains = [v[setting] for v in votes]
        ranked = (
            (round(min(gains), 6), round(mean(gains), 6))
            if criterion == "maximin"
            else (round(mean(gains), 6),)
        )
        return (*ranked, -SETTINGS.index(setting))

    return max(SETTINGS, key=key)


def leave_one_origin_out(collections: Sequence[Collection], criterion: str = "maximin") -> dict[str, Any]:
    origins = sorted({c.origin for c in collections})
    table: dict[str, Any] = {}
    for origin in origins:
        chosen = choose([c for c in collections if c.origin != origin], criterion)
        for collection in (c for c in collections if c.origin == origin):
            first, stage = collection.scores["none"], collection.scores[chosen]
            table[collection.name] = {
                "metric": collection.metric,
                "queries": len(first),
                "first_stage": mean(first),
                "chosen_out_of_fold": chosen,
                "with_stage": mean(stage),
                "wins": sum(b > a + 1e-12 for a, b in zip(first, stage)),
                "losses": sum(b < a - 1e-12 for a, b in zip(first, stage)),
                "paired_p": paired_randomization(first, stage),
            }
    return table


def paired_randomization(
    a: Sequence[float], b: Sequence[float], trials: int = 10_000, seed: int = 0
) -> float:
    """Two-sided paired randomization test of the mean difference (Smucker et al. 2007)."""
    diffs = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    if not len(diffs) or not diffs.any():
        return 1.0
    observed = abs(diffs.mean())
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(trials, len(diffs)))
    return float(((np.abs((signs * diffs).mean(axis=1)) >= observed - 1e-15).sum() + 1) / (trials + 1))


# ------------------------------------------------------------------------------------ report
def write_report(
    out: Path, collections: Sequence[Collection], vectors: Vectors, extra: dict[str, Any]
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    tables = {criterion: leave_one_origin_out(collections, criterion) for criterion in ("maximin", "mean")}
    chosen = {criterion: choose(collections, criterion) for criterion in ("maximin", "mean")}
    per_setting = {c.name: {s: round(mean(v), 4) for s, v in c.scores.items()} for c in collections}
    results = {
        "late_model": vectors.spec.to_json(),
        "max_depth": MAX_DEPTH,
        "leave_one_origin_out": tables,
        "chosen_on_all": chosen,
        "per_setting": per_setting,
        "best_in_sample": {c: max(v, key=v.get) for c, v in per_setting.items()},
        "seconds": {c.name: c.seconds for c in collections},
        **extra,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True))
    lines = [
        "# Late interaction as a second stage, every collection, leave-one-origin-out",
        "",
        (
            f"Model: {vectors.spec.name} ({vectors.spec.source}, first {vectors.spec.dims} dims, "
            f"{vectors.spec.dtype}), re-scoring the default first stage's top chunks (up to {MAX_DEPTH}). "
            f"Command: `python -m bench.late_stage --locomo PATH/locomo10.json --out {out.as_posix()}`"
        ),
        "",
        "Each row: the setting (combination:depth:weight) chosen on the OTHER origins, scored on this one",
        "(LoCoMo's two levels are one origin, held out together). p: paired randomization test.",
    ]
    for criterion, table in tables.items():
        lines += ["", f"## Criterion `{criterion}`", ""]
        lines += [
            "| collection | metric | queries | first stage | chosen on the other origins | with the stage | wins / losses | p |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, row in table.items():
            lines.append(
                f"| {name} | {row['metric']} | {row['queries']} | {row['first_stage']:.4f} | "
                f"`{row['chosen_out_of_fold']}` | {row['with_stage']:.4f} | {row['wins']} / {row['losses']} | "
                f"{row['paired_p']:.4f} |"
            )
        lines += ["", f"Chosen on all origins: `{chosen[criterion]}`"]
    lines += ["", "## Best setting of each collection, in sample (what a per-collection tune would take)", ""]
    lines += [
        f"- {c}: `{s}` {per_setting[c][s]:.4f} (first stage {per_setting[c]['none']:.4f})"
        for c, s in results["best_in_sample"].items()
    ]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    _plot(out, tables["maximin"])
    return results


def side_by_side(out: Path, collections: Sequence[Collection]) -> None:
    """The first stage, the default second stage and the cross-encoder on the same candidates."""
    out.mkdir(parents=True, exist_ok=True)
    rows = {
        c.name: {
            "metric": c.metric,
            "queries": len(c.scores["none"]),
            **{s: mean(c.scores[s]) for s in SIDE_BY_SIDE},
            **c.seconds,
        }
        for c in collections
    }
    (out / "side-by-side.json").write_text(json.dumps(rows, indent=2, sort_keys=True))
    lines = [
        "# The second stage beside the cross-encoder, on the same first-stage candidates",
        "",
        (
            f"Late interaction: the default (`{SIDE_BY_SIDE[1]}`); cross-encoder: {CROSS_MODEL} (INT8, shipped) "
            f"over the top {CROSS_DEPTH}, its order. Times: P50 per query, 2 cores, one query at a time."
        ),
        "",
        (
            "| collection | metric | queries | first stage | + late interaction | + cross-encoder | "
            "late: encode query + MaxSim of 100 (ms) | cross-encoder (ms) |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['metric']} | {row['queries']} | {row['none']:.4f} | {row[SIDE_BY_SIDE[1]]:.4f} | "
            f"{row[SIDE_BY_SIDE[2]]:.4f} | {row['query_encode_ms_p50']:.1f} + {row['maxsim_100_ms_p50']:.1f} | "
            f"{row.get('cross_encoder_30_ms_p50', float('nan')):.0f} |"
        )
    (out / "README.md").write_text("\n".join(lines) + "\n")


def _plot(out: Path, loo: Mapping[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(loo)
    first = [loo[n]["first_stage"] for n in names]
    stage = [loo[n]["with_stage"] for n in names]
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar(x - 0.2, first, 0.4, label="first stage (defaults)")
    ax.bar(x + 0.2, stage, 0.4, label="+ late interaction (chosen out of fold)")
    ax.set_xticks(x, names, rotation=20)
    ax.set_ylabel("nDCG@10 / R@5")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "late-stage.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports/bench/late-stage")
    parser.add_argument("--locomo", default=None, help="locomo10.json (else LoCoMo is left out)")
    parser.add_argument("--sets", default=",".join(EVALSETS))
    parser.add_argument("--work", default=str(cache_root() / "late-stage"))
    parser.add_argument("--resume", action="store_true", help="reuse the collections a previous run finished")
    parser.add_argument(
        "--cross-encoder",
        action="store_true",
        help="side by side instead of the choice: first stage, the default second stage, the cross-encoder",
    )
    parser.add_argument("--conversations", type=int, default=None, help="LoCoMo's first N conversations")
    args = parser.parse_args(argv)
    work = Path(args.work)
    vectors = Vectors(work / "tokens")
    RUN.update(cross=args.cross_encoder, conversations=args.conversations)
    checkpoint = work / ("collections-cross.json" if args.cross_encoder else "collections.json")
    saved = json.loads(checkpoint.read_text()) if args.resume and checkpoint.exists() else {}
    collections: list[Collection] = [
        Collection(name, row["origin"], row["metric"], seconds=row["seconds"], scores=row["scores"])
        for name, row in saved.items()
    ]

    def keep(new: list[Collection]) -> None:
        collections.extend(new)
        saved.update(
            {
                c.name: {"origin": c.origin, "metric": c.metric, "seconds": c.seconds, "scores": c.scores}
                for c in new
            }
        )
        checkpoint.write_text(json.dumps(saved))

    for name in [s for s in args.sets.split(",") if s and s not in saved]:
        keep([evalset_collection(name, vectors)])
    if args.locomo and "locomo-turn" not in saved:
        keep(locomo_collections(Path(args.locomo), vectors, work / "locomo"))
    if args.cross_encoder:
        side_by_side(Path(args.out), collections)
    else:
        write_report(Path(args.out), collections, vectors, {})
    print((Path(args.out) / "README.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

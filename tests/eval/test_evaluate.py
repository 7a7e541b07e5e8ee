"""Tests for hybridlab.eval.evaluate and `hybridlab eval`: metrics on tiny hand-made qrels and runs.

Expected values are derived by hand in the comments (ranx: nDCG with linear gain, log2(rank + 1)).
"""

from __future__ import annotations

import json
import math

import pytest

from hybridlab.eval.evaluate import (
    METRICS,
    compare,
    make_run,
    score,
    score_per_query,
    wins_losses,
    write_trec_run,
)

QRELS = {
    "q1": {"d1": 1},
    "q2": {"d2": 2, "d3": 1},
    "q3": {"d4": 1},
}
RUN = {
    "q1": {"a": 0.9, "b": 0.8, "d1": 0.7},  # first relevant at rank 3
    "q2": {"d3": 0.9, "d2": 0.8, "x": 0.1},  # both relevant, the grade-1 one first
    # q3 is missing from the run: it scores 0 everywhere
}

# q2's nDCG@10: DCG = 1/log2(2) + 2/log2(3); ideal DCG = 2/log2(2) + 1/log2(3).
NDCG_Q2 = (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))


def test_metric_names():
    assert METRICS == ("hit_rate@10", "mrr", "ndcg@10", "recall@100")


def test_score_per_query_hand_values():
    per_query = score_per_query(QRELS, RUN)
    assert per_query["mrr"] == pytest.approx({"q1": 1 / 3, "q2": 1.0, "q3": 0.0})
    assert per_query["hit_rate@10"] == pytest.approx({"q1": 1.0, "q2": 1.0, "q3": 0.0})
    # q1: DCG = 1/log2(4) = 1/2; ideal = 1/log2(2) = 1.
    assert per_query["ndcg@10"] == pytest.approx({"q1": 0.5, "q2": NDCG_Q2, "q3": 0.0})
    assert per_query["recall@100"] == pytest.approx({"q1": 1.0, "q2": 1.0, "q3": 0.0})


def test_score_means_over_all_judged_queries():
    assert score(QRELS, RUN) == pytest.approx(
        {
            "hit_rate@10": 2 / 3,
            "mrr": (1 / 3 + 1 + 0) / 3,
            "ndcg@10": (0.5 + NDCG_Q2 + 0) / 3,
            "recall@100": 2 / 3,
        }
    )


def test_hit_rate_cuts_at_ten_but_recall_at_hundred_does_not():
    # The only relevant document at rank 11.
    run = {"q": {**{f"x{i:02d}": 100.0 - i for i in range(10)}, "rel": 1.0}}
    result = score({"q": {"rel": 1}}, run)
    assert result["hit_rate@10"] == 0.0
    assert result["ndcg@10"] == 0.0
    assert result["recall@100"] == 1.0
    assert result["mrr"] == pytest.approx(1 / 11)


def test_recall_counts_the_fraction_of_relevant_documents_found():
    run = {"q": {"d1": 2.0, "x": 1.0}}
    assert score({"q": {"d1": 1, "d2": 1, "d3": 1, "d4": 1}}, run, ["recall@100"]) == {"recall@100": 0.25}


def test_score_does_not_mutate_inputs():
    qrels, run = json.loads(json.dumps(QRELS)), json.loads(json.dumps(RUN))
    score(qrels, run)
    assert qrels == QRELS and run == RUN


def _ranked_run(rank_of_relevant: dict[str, int]) -> dict[str, dict[str, float]]:
    """A run that puts query q's relevant document `rel-q` at the given rank among fillers."""
    run = {}
    for qid, rank in rank_of_relevant.items():
        docs = {f"filler-{qid}-{i}": 10.0 - i for i in range(5)}
        docs[f"rel-{qid}"] = 10.0 - (rank - 1) + 0.5  # between the fillers at ranks rank-1 and rank
        run[qid] = docs
    return run


N = 20
QRELS_N = {f"q{i:02d}": {f"rel-q{i:02d}": 1} for i in range(N)}
# baseline: relevant at rank 2 or 3 (MRR 1/2 or 1/3); better: always rank 1; same: baseline but one
# query moved from rank 3 to rank 2.
BASELINE = _ranked_run({q: 2 if i % 2 else 3 for i, q in enumerate(QRELS_N)})
BETTER = _ranked_run({q: 1 for q in QRELS_N})
SAME = _ranked_run({q: 2 if (i % 2 or i == 0) else 3 for i, q in enumerate(QRELS_N)})


def test_ranked_run_helper_places_the_relevant_document():
    assert score_per_query({"q00": {"rel-q00": 1}}, {"q00": BASELINE["q00"]})["mrr"]["q00"] == pytest.approx(
        1 / 3
    )


def test_compare_scores_and_significance():
    comparison = compare(QRELS_N, {"baseline": BASELINE, "better": BETTER, "same": SAME}, ["mrr"])
    assert comparison.systems == ["baseline", "better", "same"]
    assert comparison.scores["baseline"]["mrr"] == pytest.approx((10 * 1 / 2 + 10 * 1 / 3) / N)
    assert comparison.scores["better"]["mrr"] == pytest.approx(1.0)
    assert comparison.scores["same"]["mrr"] == pytest.approx((11 * 1 / 2 + 9 * 1 / 3) / N)
    assert comparison.significant("better", "mrr")
    assert not comparison.significant("same", "mrr")
    assert comparison.p_values["better"]["mrr"] < 0.001
    assert comparison.p_values["same"]["mrr"] > 0.05
    assert comparison.per_query["better"]["mrr"]["q00"] == pytest.approx(1.0)
    assert comparison.per_query["baseline"]["mrr"]["q00"] == pytest.approx(1 / 3)


def test_compare_markdown_marks_non_significant_differences():
    table = compare(QRELS_N, {"baseline": BASELINE, "better": BETTER, "same": SAME}, ["mrr"]).to_markdown()
    rows = {
        line.split("|")[1].strip(): line.split("|")[2].strip()
        for line in table.splitlines()
        if line.startswith("| ") and "system" not in line
    }
    assert rows == {
        "baseline (baseline)": f"{(10 / 2 + 10 / 3) / N:.4f}",
        "better": "**1.0000**",
        "same": f"{(11 / 2 + 9 / 3) / N:.4f} †",
    }
    assert "† not significantly different from the baseline (student paired test" in table


def test_compare_identical_runs_are_not_significant_and_json_safe():
    comparison = compare(QRELS_N, {"a": BASELINE, "b": BASELINE}, ["mrr", "hit_rate@10"])
    assert comparison.p_values["b"] == {"mrr": 1.0, "hit_rate@10": 1.0}  # ranx says NaN: no difference
    json.loads(json.dumps(comparison.to_dict(), allow_nan=False))
    row_b = next(line for line in comparison.to_markdown().splitlines() if line.startswith("| b |"))
    assert [cell.strip().endswith("†") for cell in row_b.split("|")[2:-1]] == [True, True]


def test_compare_needs_two_runs():
    with pytest.raises(ValueError, match="at least two runs"):
        compare(QRELS, {"only": RUN})


def test_write_trec_run_format(tmp_path):
    path = tmp_path / "run.trec"
    write_trec_run({"q1": {"b": 0.5, "a": 0.5, "c": 0.9}, "q2": {"z": 1.0}}, path, name="sys")
    assert path.read_text().splitlines() == [
        "q1 Q0 c 1 0.900000 sys",
        "q1 Q0 a 2 0.500000 sys",  # ties broken by doc id
        "q1 Q0 b 3 0.500000 sys",
        "q2 Q0 z 1 1.000000 sys",
    ]


def test_trec_run_reads_back_with_ranx(tmp_path):
    from ranx import Run

    path = tmp_path / "run.trec"
    write_trec_run(RUN, path)
    back = Run.from_file(str(path), kind="trec").to_dict()
    assert {q: dict(d) for q, d in back.items()} == RUN  # six decimals hold these scores exactly


def test_wins_losses():
    a = {"q1": 1.0, "q2": 0.5, "q3": 0.2}
    b = {"q1": 0.5, "q2": 0.5, "q3": 0.3}
    assert wins_losses(a, b) == {"wins": ["q1"], "ties": ["q2"], "losses": ["q3"]}


class FakeIndex:
    """Just what make_run needs: no dense vectors, and a run per query that records its options."""

    def __init__(self):
        self.dense = {}
        self.calls = []

    def run(self, text, **options):
        self.calls.append((text, options))
        return {f"doc-{text}": 1.0}


def test_make_run_searches_every_query_with_limit_100():
    index = FakeIndex()
    run = make_run(index, {"q1": "one", "q2": "two"}, mode="bm25", now="2026-01-01")
    assert run == {"q1": {"doc-one": 1.0}, "q2": {"doc-two": 1.0}}
    assert index.calls == [
        ("one", {"limit": 100, "mode": "bm25", "now": "2026-01-01"}),
        ("two", {"limit": 100, "mode": "bm25", "now": "2026-01-01"}),
    ]


# ------------------------------------------------------------------ the CLI on a tiny index
DOCS = {
    "volcano.md": "# Volcanoes\n\nMagma rises through the crust and erupts as lava from a volcano.\n",
    "bread.md": "# Baking bread\n\nKnead the dough, let the yeast work, then bake the loaf in a hot oven.\n",
    "chess.md": "# Chess openings\n\nThe Sicilian defence answers the king's pawn with the c-pawn.\n",
    "orbit.md": "# Orbits\n\nA satellite in orbit falls around the planet; Kepler's laws describe the ellipse.\n",
    "violin.md": "# Violin\n\nThe bow draws across the strings; rosin gives the hair its grip.\n",
}
QUERIES = {"v": "lava eruption", "b": "yeast dough", "c": "Sicilian defence", "o": "Kepler ellipse"}
CLI_QRELS = {"v": "volcano.md", "b": "bread.md", "c": "chess.md", "o": "orbit.md"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A five-document index (wordllama vectors: fast) plus BEIR queries and qrels files."""
    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import index_paths

    root = tmp_path_factory.mktemp("tiny")
    docs = root / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    index_dir = root / "index"
    index_paths(
        [docs],
        index_dir,
        IndexConfig(models=("wordllama",)),
        progress=False,
        cache_path=root / "embeddings.duckdb",
    )
    queries = root / "queries.jsonl"
    queries.write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items())
        + json.dumps({"_id": "unjudged", "text": "violin rosin"})
        + "\n"
    )
    qrels = root / "qrels-test.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in CLI_QRELS.items()))
    return {"root": root, "index": index_dir, "queries": queries, "qrels": qrels}


def _eval(tiny, *extra, capsys):
    from hybridlab.cli import main

    code = main(
        [
            "eval",
            "--index",
            str(tiny["index"]),
            "--queries",
            str(tiny["queries"]),
            "--qrels",
            str(tiny["qrels"]),
            "-q",
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_eval_bm25_json(tiny, capsys):
    # Every query's words occur in exactly its one document: each relevant document is ranked first.
    code, out, _ = _eval(tiny, "--mode", "bm25", "--json", capsys=capsys)
    assert code == 0
    assert json.loads(out) == {"queries": 4, "metrics": {m: 1.0 for m in METRICS}}


def test_cli_eval_prints_a_markdown_table(tiny, capsys):
    code, out, _ = _eval(tiny, "--mode", "bm25", capsys=capsys)
    assert code == 0
    assert out.splitlines() == [
        "4 queries",
        "| metric | value |",
        "|---|---|",
        *(f"| {m} | 1.0000 |" for m in METRICS),
    ]


def test_cli_eval_save_run_matches_printed_metrics(tiny, capsys):
    from ranx import Run

    from hybridlab.eval.datasets import load_qrels

    path = tiny["root"] / "hybrid.trec"
    code, out, _ = _eval(tiny, "--json", "--save-run", str(path), capsys=capsys)
    assert code == 0
    lines = path.read_text().splitlines()
    assert {line.split()[0] for line in lines} == set(QUERIES)
    assert all(len(line.split()) == 6 and line.split()[1] == "Q0" for line in lines)
    run = {q: dict(d) for q, d in Run.from_file(str(path), kind="trec").to_dict().items()}
    assert json.loads(out)["metrics"] == pytest.approx(score(load_qrels(tiny["qrels"]), run), abs=1e-6)


def test_cli_eval_reads_search_settings_from_config_file(tiny, capsys):
    # BM25 finds only the one document holding a query's words; vector search ranks all five.
    counts = {}
    for mode in ("bm25", "vector"):
        config = tiny["root"] / f"{mode}.json"
        config.write_text(json.dumps({"search": {"mode": mode}}))
        path = tiny["root"] / f"{mode}.trec"
        assert _eval(tiny, "--config", str(config), "--save-run", str(path), capsys=capsys)[0] == 0
        counts[mode] = len(path.read_text().splitlines())
    assert counts == {"bm25": 4, "vector": 4 * 5}


def test_cli_eval_without_judged_queries_is_an_error(tiny, capsys, tmp_path):
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("nobody\tvolcano.md\t1\n")
    from hybridlab.cli import main

    code = main(
        ["eval", "--index", str(tiny["index"]), "--queries", str(tiny["queries"]), "--qrels", str(qrels)]
    )
    assert code == 2
    assert "error: no query of" in capsys.readouterr().err


def test_cli_eval_split_scores_one_half_of_the_queries(tiny, capsys):
    # sha1 buckets: v .477 and o .479 (dev), b .913 and c .518 (test)
    scored = {}
    for split in ("dev", "test"):
        path = tiny["root"] / f"{split}.trec"
        code, out, _ = _eval(
            tiny, "--mode", "bm25", "--json", "--split", split, "--save-run", str(path), capsys=capsys
        )
        assert code == 0 and json.loads(out)["queries"] == 2
        scored[split] = {line.split()[0] for line in path.read_text().splitlines()}
    assert scored == {"dev": {"v", "o"}, "test": {"b", "c"}}

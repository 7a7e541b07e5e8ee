"""Runs from files (hybridlab.eval.runs) and their report (hybridlab.eval.run_report, `eval --run`):
a hand-written TREC run scores as ranx and ir_measures score it."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from hybridlab.cli import main
from hybridlab.eval.evaluate import score, score_per_query, write_trec_run
from hybridlab.eval.run_report import score_runs
from hybridlab.eval.runs import read_run, run_name, write_run
from hybridlab.eval.significance import holm, paired_test

# graded judgements; every query has a relevant document and appears in every run
QRELS = {
    "q1": {"d1": 2, "d4": 1, "d9": 0},
    "q2": {"d2": 1, "d3": 1},
    "q3": {"d7": 3, "d8": 1, "d5": 2},
    "q4": {"d6": 1},
    "q5": {"d1": 1, "d2": 2},
}
# distinct scores within a query (no tie-breaking convention involved); rank column deliberately wrong
# in q2 (trec_eval and ranx rank by score)
TREC_RUN = """\
q1 Q0 d3 1 9.5 other
q1 Q0 d1 2 7.25 other
q1 Q0 d9 3 3.0 other
q1 Q0 d4 4 1.5 other
q2 Q0 d2 9 0.5 other
q2 Q0 d5 1 0.75 other
q2 Q0 d3 2 0.25 other
q3 Q0 d8 1 12.0 other
q3 Q0 d7 2 11.0 other
q3 Q0 d1 3 10.0 other
q3 Q0 d5 4 2.0 other
q4 Q0 d1 1 -0.1 other
q4 Q0 d2 2 -0.2 other
q4 Q0 d3 3 -0.3 other
q4 Q0 d6 4 -0.4 other
q5 Q0 d9 1 3.0 other
q5 Q0 d8 2 2.0 other
q5 Q0 d7 3 1.0 other
"""
KINDS = {"q1": "lookup", "q2": "lookup", "q3": "howto", "q4": "howto", "q5": "howto"}


def write_qrels(path, qrels=QRELS):
    path.write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{d}\t{r}\n" for q, docs in qrels.items() for d, r in docs.items()),
        encoding="utf-8",
    )
    return path


@pytest.fixture
def files(tmp_path):
    run = tmp_path / "other.trec"
    run.write_text(TREC_RUN, encoding="utf-8")
    return run, write_qrels(tmp_path / "qrels.tsv")


def test_read_trec_equals_ranx_reader(files):
    ranx = pytest.importorskip("ranx")
    run_path, _ = files
    assert read_run(run_path) == ranx.Run.from_file(str(run_path), kind="trec").to_dict()


def test_gzip_and_json_read_alike(tmp_path, files):
    run_path, _ = files
    run = read_run(run_path)
    gz = tmp_path / "other.trec.gz"
    gz.write_bytes(gzip.compress(run_path.read_bytes()))
    js = tmp_path / "other.json"
    js.write_text(json.dumps(run))
    assert read_run(gz) == read_run(js) == run
    for out in ("w.trec", "w.json", "w.trec.gz", "w.json.gz"):
        write_run(run, tmp_path / out)
        assert read_run(tmp_path / out) == run


def test_hybridlab_save_run_reads_back(tmp_path):
    run = {"q1": {"a": 0.5, "b": 0.25}, "q2": {"c": 1.0}}
    write_trec_run(run, tmp_path / "h.trec")
    assert read_run(tmp_path / "h.trec") == run


def test_scores_as_ir_measures_and_ranx(files):
    ir_measures = pytest.importorskip("ir_measures")
    ranx = pytest.importorskip("ranx")
    from ir_measures import RR, R, Success, nDCG

    run_path, _qrels_path = files
    ours = score(QRELS, read_run(run_path))
    theirs = ir_measures.calc_aggregate(
        [Success @ 10, RR, nDCG @ 10, R @ 100], QRELS, ir_measures.read_trec_run(str(run_path))
    )
    expected = {
        "hit_rate@10": theirs[Success @ 10],
        "mrr": theirs[RR],
        "ndcg@10": theirs[nDCG @ 10],
        "recall@100": theirs[R @ 100],
    }
    assert ours == pytest.approx(expected, abs=1e-9)
    plain = ranx.evaluate(ranx.Qrels(QRELS), ranx.Run.from_file(str(run_path), kind="trec"), list(expected))
    assert ours == pytest.approx(plain, abs=1e-9)
    # one hand value (linear gains, as trec_eval): q1 ranks d3 (0), d1 (2), d9 (0), d4 (1); ideal d1, d4
    q1 = (2 / math.log2(3) + 1 / math.log2(5)) / (2 + 1 / math.log2(3))
    assert score_per_query(QRELS, read_run(run_path), ["ndcg@10"])["ndcg@10"]["q1"] == pytest.approx(
        q1, abs=1e-12
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2\n", ":2: expected 6 fields"),
        ("q1 Q0 d1 1 high t\n", ":1: score 'high' is not a number"),
        ("q1 Q0 d1 1 nan t\n", ":1: score 'nan' is not a finite number"),
        ("\nq1 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n", ":3: document 'd1' listed twice for query 'q1'"),
        ('{"q1": {"d1": 0.5,}}', ":1: not valid JSON"),
        ('{"q1": {"d1": "x"}}', "(query 'q1'): score 'x' is not a number"),
    ],
)
def test_malformed_runs_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.run"
    path.write_text(text)
    with pytest.raises(ValueError) as error:
        read_run(path)
    assert str(error.value).startswith(str(path)) and message in str(error.value)


def test_run_name():
    assert run_name("runs/bm25.trec.gz") == "bm25"
    assert run_name("splade.json") == "splade"
    assert run_name("run.dense") == "run.dense"


def _runs(run_path):
    other = read_run(run_path)
    perfect = {q: {d: float(r) for d, r in docs.items()} for q, docs in QRELS.items()}
    partial = {q: docs for q, docs in other.items() if q != "q5"}
    return {"other": other, "perfect": perfect, "partial": partial}


def test_report_tests_each_run_against_the_first_with_holm(files):
    run_path, _ = files
    runs = _runs(run_path)
    report = score_runs(QRELS, runs, kinds=KINDS)
    for metric in report.metrics:
        raw = [
            paired_test(
                score_per_query(QRELS, runs[s], [metric])[metric],
                score_per_query(QRELS, runs["other"], [metric])[metric],
            ).p_value
            for s in ("perfect", "partial")
        ]
        assert [report.tests[s][metric]["p_value"] for s in ("perfect", "partial")] == pytest.approx(raw)
        assert [report.tests[s][metric]["p_holm"] for s in ("perfect", "partial")] == pytest.approx(holm(raw))
        assert report.intervals["other"][metric].mean == pytest.approx(score(QRELS, runs["other"])[metric])
    assert report.missing == {"other": 0, "perfect": 0, "partial": 1}
    assert report.intervals["perfect"]["ndcg@10"].mean == 1.0
    assert report.per_kind["lookup"]["n"] == 2 and report.per_kind["howto"]["n"] == 3
    lookup = score_per_query(QRELS, runs["other"], ["ndcg@10"])["ndcg@10"]
    assert report.per_kind["lookup"]["other"]["ndcg@10"] == pytest.approx((lookup["q1"] + lookup["q2"]) / 2)


def test_cli_eval_runs(tmp_path, files, capsys):
    run_path, qrels_path = files
    runs = _runs(run_path)
    perfect, partial = tmp_path / "perfect.json.gz", tmp_path / "partial.trec"
    write_run(runs["perfect"], perfect)
    write_run(runs["partial"], partial)
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        "".join(json.dumps({"_id": q, "text": q, "metadata": {"kind": k}}) + "\n" for q, k in KINDS.items())
    )
    args = [
        "eval",
        "--qrels",
        str(qrels_path),
        "--run",
        str(run_path),
        "--run",
        str(perfect),
        "--run",
        str(partial),
    ]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["systems"] == ["other", "perfect", "partial"] and data["baseline"] == "other"
    assert data["scores"]["other"]["ndcg@10"]["mean"] == pytest.approx(score(QRELS, runs["other"])["ndcg@10"])
    assert data["missing_queries"]["partial"] == 1 and data["correction"] == "holm"
    assert main([*args, "--queries", str(queries)]) == 0
    out = capsys.readouterr().out
    assert "| other (baseline) |" in out and "Paired tests against other" in out
    assert "| lookup | 2 |" in out and "partial has no results for 1 of the 5 queries" in out
    assert main([*args, "--queries", str(queries), "--kind", "lookup", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["queries"] == 2


def test_cli_eval_run_errors(tmp_path, files, capsys):
    _run_path, qrels_path = files
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 d1 1 0.5\n")
    assert main(["eval", "--qrels", str(qrels_path), "--run", str(bad)]) == 2
    assert f"error: {bad}:1: expected 6 fields" in capsys.readouterr().err
    assert main(["eval", "--qrels", str(qrels_path)]) == 2
    assert "--run FILE" in capsys.readouterr().err

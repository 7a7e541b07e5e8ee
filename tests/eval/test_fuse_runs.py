"""Fusing run files (hybridlab.eval.fuse_runs, `hybridlab fuse`): hand values, agreement with
`ranx.fuse`, and a tuning that cannot see the report split."""

from __future__ import annotations

import copy
import json
import random

import pytest

from hybridlab.cli import main
from hybridlab.eval.evaluate import score
from hybridlab.eval.fuse_runs import (
    FusionSetting,
    candidate_settings,
    fuse_runs,
    tune_fusion,
    tune_fusion_optuna,
    weight_grid,
)
from hybridlab.eval.runs import read_run, write_run


def _random_runs(seed: int = 7) -> dict[str, dict[str, dict[str, float]]]:
    """Two runs over 6 queries, 12-20 of 20 documents each (some missing from one run), no ties."""
    rng = random.Random(seed)
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for name, (low, high) in {"bm25": (0.0, 25.0), "dense": (-1.0, 1.0)}.items():
        runs[name] = {}
        for q in range(6):
            docs = rng.sample([f"d{i:02d}" for i in range(20)], rng.randint(12, 20))
            runs[name][f"q{q}"] = {doc: rng.uniform(low, high) for doc in docs}
    return runs


def test_rrf_of_two_runs_by_hand():
    runs = {"a": {"q": {"x": 3.0, "y": 2.0}}, "b": {"q": {"y": 9.0, "z": 1.0}, "q2": {"x": 1.0}}}
    before = copy.deepcopy(runs)
    fused = fuse_runs(runs, FusionSetting("rrf", (("a", 1.0), ("b", 2.0)), rrf_k=10))
    assert fused == {"q": {"y": 1 / 12 + 2 / 11, "x": 1 / 11, "z": 2 / 12}, "q2": {"x": 2 / 11}}
    assert list(fused["q"]) == ["y", "z", "x"]
    assert fuse_runs(runs, FusionSetting("rrf", (("a", 1.0), ("b", 2.0)), rrf_k=10), limit=1) == {
        "q": {"y": 1 / 12 + 2 / 11},
        "q2": {"x": 2 / 11},
    }
    assert runs == before


def test_convex_by_hand():
    runs = {"a": {"q": {"x": 4.0, "y": 2.0, "z": 0.0}}, "b": {"q": {"y": 1.0, "z": 3.0}}}
    fused = fuse_runs(runs, FusionSetting("convex", (("a", 0.25), ("b", 0.75))))
    assert fused["q"] == pytest.approx({"x": 0.25, "y": 0.25 * 0.5, "z": 0.75})


def test_errors():
    with pytest.raises(ValueError, match="unknown fusion 'borda'; choose from"):
        FusionSetting("borda", ())
    with pytest.raises(ValueError, match="at least two runs"):
        fuse_runs({"a": {}}, FusionSetting("rrf", (("a", 1.0),)))
    with pytest.raises(ValueError, match=r"weights name runs \['c'\]"):
        fuse_runs({"a": {}, "b": {}}, FusionSetting("rrf", (("c", 1.0),)))
    with pytest.raises(ValueError, match="must divide 1"):
        weight_grid(["a", "b"], 0.3)


def test_weight_grid():
    assert weight_grid(["a", "b"], 0.5) == [{"a": 0.0, "b": 1.0}, {"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 0.0}]
    three = weight_grid(["a", "b", "c"], 0.25)
    assert len(three) == 15 and all(sum(w.values()) == pytest.approx(1.0) for w in three)
    settings = candidate_settings(["bm25", "dense"], step=0.5)
    # rrf, dbsf: 3 weightings each; convex: 3 x (min-max, z-score, theoretical-min-max)
    assert len(settings) == 3 + 3 + 9


@pytest.mark.filterwarnings("ignore:unsafe cast")  # numba warning inside ranx's rrf
@pytest.mark.parametrize(
    ("method", "normalization", "weights", "ranx_method", "ranx_norm"),
    [
        ("rrf", "min-max", ["1", "1"], "rrf", None),
        ("convex", "min-max", ["0.3", "0.7"], "wsum", "min-max"),
        ("convex", "z-score", ["0.6", "0.4"], "wsum", "zmuv"),
        ("convex", "none", ["0.5", "2"], "wsum", None),
    ],
)
def test_fuse_files_equals_ranx_fuse(
    tmp_path, capsys, method, normalization, weights, ranx_method, ranx_norm
):
    ranx = pytest.importorskip("ranx")
    runs = _random_runs()
    write_run(runs["bm25"], tmp_path / "bm25.trec")
    write_run(runs["dense"], tmp_path / "dense.json.gz")
    out = tmp_path / "fused.trec"
    assert (
        main(
            [
                "fuse",
                str(tmp_path / "bm25.trec"),
                str(tmp_path / "dense.json.gz"),
                "--method",
                method,
                "--normalization",
                normalization,
                "--weights",
                *weights,
                "--limit",
                "1000",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert f"fused 2 runs ({method}" in capsys.readouterr().out
    params = {"k": 60} if ranx_method == "rrf" else {"weights": [float(w) for w in weights]}
    theirs = ranx.fuse(
        [ranx.Run(copy.deepcopy(runs[n]), name=n) for n in ("bm25", "dense")],
        norm=ranx_norm,
        method=ranx_method,
        params=params,
    ).to_dict()
    ours = read_run(out)
    assert set(ours) == set(theirs)
    for qid, docs in theirs.items():
        assert ours[qid] == {doc: pytest.approx(value, rel=1e-9, abs=1e-12) for doc, value in docs.items()}


def _split_runs_and_qrels():
    """Run `lex` finds the relevant document of the tuning queries (t*), run `sem` of the report
    queries (r*), each ranking it first where it finds it and last where it does not."""
    docs = [f"d{i}" for i in range(10)]
    lex: dict[str, dict[str, float]] = {}
    sem: dict[str, dict[str, float]] = {}
    tune_qrels, report_qrels = {}, {}
    for i, qid in enumerate([f"t{i}" for i in range(4)] + [f"r{i}" for i in range(12)]):
        relevant = docs[i % 10]
        others = [d for d in docs if d != relevant]
        good = {relevant: 10.0, **{d: 9.0 - j for j, d in enumerate(others)}}
        bad = {**{d: 9.0 - j for j, d in enumerate(others)}, relevant: -1.0}
        lex[qid], sem[qid] = (good, bad) if qid.startswith("t") else (bad, good)
        (tune_qrels if qid.startswith("t") else report_qrels)[qid] = {relevant: 1}
    return {"lex": lex, "sem": sem}, tune_qrels, report_qrels


def test_tuning_never_sees_the_report_split():
    """The report split (three times the tuning one) favours `sem` entirely: a tuning that looked at
    it, or at its queries' results, would move weight to `sem`."""
    runs, tune_qrels, report_qrels = _split_runs_and_qrels()
    settings = candidate_settings(list(runs), step=0.25)
    best, table = tune_fusion(runs, tune_qrels, settings)
    assert dict(best.weights) == {"lex": 1.0, "sem": 0.0}
    assert table[settings.index(best)]["ndcg@10"] == 1.0
    # peeking would show: on the union the best weighting is all `sem`, and the report split favours it
    union, _ = tune_fusion(runs, {**tune_qrels, **report_qrels}, settings)
    assert dict(union.weights)["sem"] > 0.5
    assert score(report_qrels, fuse_runs(runs, best))["ndcg@10"] < score(report_qrels, runs["sem"])["ndcg@10"]
    # the report queries' results do not matter to the tuning: scramble them, same choice and values
    scrambled = {
        name: {
            q: ({d: -s for d, s in docs.items()} if q.startswith("r") else docs) for q, docs in run.items()
        }
        for name, run in runs.items()
    }
    assert tune_fusion(scrambled, tune_qrels, settings) == (best, table)


def test_optuna_tuning_never_sees_the_report_split():
    """The same check with Optuna proposing the settings (weights continuous): seeded, so the choice
    repeats; it keeps `lex` ahead as the tuning split says, and scrambling the report queries changes nothing."""
    pytest.importorskip("optuna")
    runs, tune_qrels, report_qrels = _split_runs_and_qrels()
    settings = candidate_settings(list(runs), step=0.25)
    best, table = tune_fusion_optuna(runs, tune_qrels, settings, trials=20)
    assert len(table) == 20 and max(row["ndcg@10"] for row in table) == 1.0
    assert (
        dict(best.weights)["lex"] > 0.5
    )  # a tuning that peeked would give `sem` the weight (as `union` does)
    assert score(tune_qrels, fuse_runs(runs, best))["ndcg@10"] == 1.0
    union, _ = tune_fusion_optuna(runs, {**tune_qrels, **report_qrels}, settings, trials=20)
    assert dict(union.weights)["sem"] > 0.5
    assert (
        score(report_qrels, fuse_runs(runs, union))["ndcg@10"]
        > score(report_qrels, fuse_runs(runs, best))["ndcg@10"]
    )
    scrambled = {
        name: {
            q: ({d: -s for d, s in docs.items()} if q.startswith("r") else docs) for q, docs in run.items()
        }
        for name, run in runs.items()
    }
    assert tune_fusion_optuna(scrambled, tune_qrels, settings, trials=20) == (best, table)


def test_cli_tune_on_report_on(tmp_path, capsys):
    runs, tune_qrels, report_qrels = _split_runs_and_qrels()
    for name, run in runs.items():
        write_run(run, tmp_path / f"{name}.trec")
    for name, qrels in (("tune", tune_qrels), ("report", report_qrels)):
        (tmp_path / f"{name}.tsv").write_text(
            "".join(f"{q}\t{d}\t{r}\n" for q, ds in qrels.items() for d, r in ds.items())
        )
    args = [
        "fuse",
        str(tmp_path / "lex.trec"),
        str(tmp_path / "sem.trec"),
        "--out",
        str(tmp_path / "f.trec"),
        "--tune-on",
        str(tmp_path / "tune.tsv"),
        "--grid-step",
        "0.5",
    ]
    assert main([*args, "--report-on", str(tmp_path / "report.tsv"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["setting"]["weights"] == {"lex": 1.0, "sem": 0.0}
    assert data["tuning"]["queries"] == 4 and data["tuning"]["settings"] == 3 + 3 + 6
    report = data["report"]
    assert report["systems"] == ["fused", "lex", "sem"] and report["queries"] == 12
    assert report["tests"]["sem"]["ndcg@10"]["difference"] > 0
    assert read_run(tmp_path / "f.trec").keys() == runs["lex"].keys()
    assert main([*args, "--report-on", str(tmp_path / "report.tsv")]) == 0
    assert "Paired tests against fused" in capsys.readouterr().out
    assert (
        main(
            [
                *args,
                "--search",
                "optuna",
                "--trials",
                "8",
                "--report-on",
                str(tmp_path / "report.tsv"),
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert (
        data["tuning"]["search"] == "optuna"
        and data["tuning"]["settings"] == 8
        and data["report"]["queries"] == 12
    )
    assert main([*args, "--report-on", str(tmp_path / "tune.tsv")]) == 2
    assert "share 4 queries" in capsys.readouterr().err


def test_cli_errors(tmp_path, capsys):
    runs = _random_runs()
    write_run(runs["bm25"], tmp_path / "a.trec")
    out = str(tmp_path / "f.trec")
    assert main(["fuse", str(tmp_path / "a.trec"), "--out", out]) == 2
    assert "at least two runs" in capsys.readouterr().err
    assert (
        main(["fuse", str(tmp_path / "a.trec"), f"b={tmp_path / 'a.trec'}", "--weights", "1", "--out", out])
        == 2
    )
    assert "one weight per run (2), got 1" in capsys.readouterr().err
    assert (
        main(
            [
                "fuse",
                f"x={tmp_path / 'a.trec'}",
                f"y={tmp_path / 'a.trec'}",
                "--method",
                "convex",
                "--normalization",
                "theoretical-min-max",
                "--out",
                out,
            ]
        )
        == 2
    )
    assert "no theoretical minimum for retriever 'x'" in capsys.readouterr().err


@pytest.mark.slow
def test_fused_files_equal_the_unstaged_engine(scifact, tmp_path):
    """The repro condition scifact-test-fused-files, per query: a BM25 and a dense run through files,
    fused at the fixed hybrid's weights, score exactly as the engine's hybrid without staging, dense
    fill-in and adaptive fusion (the differences the files cannot carry; the session's cached index)."""
    from hybridlab.eval.evaluate import score_per_query

    files = {}
    for name, options in {"bm25": {"mode": "bm25"}, "dense": {"mode": "vector"}}.items():
        write_run(scifact.run(**options), tmp_path / f"{name}.trec")
        files[name] = read_run(tmp_path / f"{name}.trec")
    fused = fuse_runs(files, FusionSetting("convex", (("bm25", 0.4), ("dense", 0.6)), "min-max"), 100)
    engine = scifact.run(adaptive_fusion=False, staged=False, fill_dense=False, late_depth=0)  # fusion alone
    ours, theirs = (
        score_per_query(scifact.dataset.qrels, fused),
        score_per_query(scifact.dataset.qrels, engine),
    )
    assert len(ours["ndcg@10"]) == 300
    for metric, values in ours.items():
        assert all(abs(values[q] - theirs[metric][q]) <= 1e-9 for q in values), metric

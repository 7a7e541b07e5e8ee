"""The reproduction record: conditions file, OK/FAIL per metric, and the cheap conditions themselves
(these are the figures `make test` re-runs, so an engine change that moves one fails here)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import pytest

from hybridlab.cli import build_parser, main
from hybridlab.cli.grid import add_grid_arguments
from hybridlab.tune.repro import (
    DEFAULT_CONDITIONS,
    Condition,
    command_environment,
    expand,
    format_outcome,
    load_conditions,
    run_condition,
    select,
)


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def printing(metrics: dict, queries: int = 2) -> str:
    """A command printing what `hybridlab eval --json` prints."""
    payload = json.dumps({"queries": queries, "metrics": metrics})
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(f'print({payload!r})')}"


def test_conditions_file_is_validated(tmp_path):
    with pytest.raises(
        ValueError, match=r"condition 'a' needs \['name', 'dataset', 'split', 'command', 'metrics'\]"
    ):
        load_conditions(write(tmp_path / "c.yaml", "conditions:\n  - {name: a, dataset: memories}\n"))
    with pytest.raises(ValueError, match=r"unknown keys \['colour'\]"):
        load_conditions(
            write(
                tmp_path / "c.yaml",
                "conditions:\n  - {name: a, dataset: d, split: all, command: x, "
                "metrics: {mrr: 0.5}, colour: red}\n",
            )
        )
    with pytest.raises(ValueError, match="'a' appears twice"):
        load_conditions(
            write(
                tmp_path / "c.yaml",
                "conditions:\n" + "  - {name: a, dataset: d, split: all, "
                "command: x, metrics: {mrr: 0.5}}\n" * 2,
            )
        )


def test_select_cheap_and_named_conditions():
    conditions = [Condition("a", "d", "all", "x", {}, cheap=True), Condition("b", "d", "all", "x", {})]
    assert [c.name for c in select(conditions, cheap=True)] == ["a"]
    assert [c.name for c in select(conditions, names=["b"])] == ["b"]
    with pytest.raises(ValueError, match=r"unknown condition\(s\) \['z'\]; choose from \['a', 'b'\]"):
        select(conditions, names=["z"])


def test_commands_run_without_the_search_environment():
    env = command_environment(
        {
            "HYBRIDLAB_ALPHA": "0.1",
            "HYBRIDLAB_RECENCY_DECAY": "1",
            "HYBRIDLAB_NOW": "2020",
            "HYBRIDLAB_DATA": "/data",
            "PATH": "/bin",
        }
    )
    assert env["HYBRIDLAB_DATA"] == "/data" and env["PATH"] == "/bin" and env["HF_HUB_OFFLINE"] == "1"
    assert not {"HYBRIDLAB_ALPHA", "HYBRIDLAB_RECENCY_DECAY", "HYBRIDLAB_NOW"} & set(env)


def test_placeholders_are_filled_and_unknown_ones_named(tmp_path):
    argv = expand(
        Condition("a", "d", "all", "hybridlab eval --index ${index} --queries ${data}/x", {}), tmp_path
    )
    assert argv[:3] == [sys.executable, "-m", "hybridlab.cli"] and argv[3:6] == [
        "eval",
        "--index",
        str(tmp_path),
    ]
    with pytest.raises(ValueError, match=r"unknown placeholder \$\{nope\}"):
        expand(Condition("a", "d", "all", "hybridlab eval ${nope}", {}), None)


def test_ok_and_fail_per_metric(tmp_path, capsys):
    command = printing({"mrr": 0.50004, "ndcg@10": 0.61})
    outcome = run_condition(Condition("fake", "d", "all", command, {"mrr": 0.5, "ndcg@10": 0.6}, queries=2))
    assert [(m, ok) for m, _, _, ok in outcome.rows] == [("mrr", True), ("ndcg@10", False)]
    record = write(
        tmp_path / "c.yaml",
        json.dumps(
            {
                "conditions": [
                    {
                        "name": "good",
                        "dataset": "d",
                        "split": "all",
                        "command": command,
                        "metrics": {"mrr": 0.5},
                        "cheap": True,
                    },
                    {
                        "name": "bad",
                        "dataset": "d",
                        "split": "all",
                        "command": command,
                        "metrics": {"ndcg@10": 0.6},
                        "queries": 3,
                    },
                ]
            }
        ),
    )
    assert main(["repro", "--cheap", "--conditions", str(record)]) == 0
    assert "OK   mrr          expected 0.5000  measured 0.5000" in capsys.readouterr().out
    assert main(["repro", "--all", "--conditions", str(record)]) == 1
    out = capsys.readouterr().out
    assert "FAIL ndcg@10      expected 0.6000  measured 0.6100" in out and "FAIL queries" in out
    assert "the same command run again: ndcg@10 0.6100 (the same: a persistent change)" in out
    assert "1 of 2 condition(s) FAILED: bad" in out


def test_every_recorded_command_is_a_valid_eval_sweep_or_grid_command():
    conditions = load_conditions(DEFAULT_CONDITIONS)
    assert {c.dataset for c in conditions} >= {"memories", "holoviz", "scifact", "cisi", "cranfield", "med"}
    base = {"hit_rate@10", "mrr", "ndcg@10", "recall@100"}
    for condition in conditions:
        *before, argv = [
            shlex.split(
                step.replace("${index}", "IDX")
                .replace("${data}", "DATA")
                .replace("${tmp}", "TMP")
                .replace("${locomo}", "LOCOMO")
            )
            for step in condition.steps
        ]
        for step in before:  # steps that write files into ${tmp} (runs to fuse and score)
            args = build_parser().parse_args(step[1:])
            assert step[0] == "hybridlab" and (
                args.out if args.command in {"fuse", "learn-fusion"} else args.save_run
            ).startswith("TMP")
        if "--run" in argv:  # a report of run files: its baseline's metrics, and <run>/<metric> of the others
            assert set(condition.metrics) >= base and all(
                m in base or m.split("/")[1] in base for m in condition.metrics
            ), condition.name
            continue
        assert argv[0] == "hybridlab", condition.name
        if argv[1] == "grid":  # a value chosen by cross-validation: its out-of-fold figures
            grid = argparse.ArgumentParser()
            add_grid_arguments(grid)
            args = grid.parse_args(argv[2:])
            assert args.cv >= 2 and args.json and args.out.startswith("TMP"), condition.name
            assert set(condition.metrics) >= {"p_value"}, condition.name
            assert all(round(v, 4) == v for v in condition.metrics.values()), condition.name
            continue
        args = build_parser().parse_args(argv[1:])
        if (
            args.command == "membench"
        ):  # a memory benchmark from a file that is never committed: `needs` names it
            assert args.json and args.path == "LOCOMO" and condition.needs == ("locomo",), condition.name
            assert args.out.startswith("TMP") and set(condition.metrics) >= {"recall@5", "recall@10"}, (
                condition.name
            )
            continue
        assert args.command in ("eval", "sweep") and args.json, condition.name
        if args.command == "eval":
            assert set(condition.metrics) == base, condition.name
        else:  # a sweep's out-of-sample figures, written into the temporary folder, never configs/
            assert set(condition.metrics) >= base | {"defaults_ndcg@10", "p_value"}, condition.name
            assert args.export.startswith("TMP") and args.reports.startswith("TMP") and args.seed == 0, (
                condition.name
            )
        assert all(round(v, 4) == v for v in condition.metrics.values()), condition.name


def test_steps_run_in_order_and_a_run_report_gives_its_baseline_metrics(tmp_path):
    python = shlex.quote(sys.executable)
    write_step = f"{python} -c " + shlex.quote("import sys; open(sys.argv[1], 'w').write('x')") + " ${tmp}/a"
    report = {
        "baseline": "fused",
        "metrics": ["mrr"],
        "queries": 2,
        "scores": {"fused": {"mrr": {"mean": 0.5}}, "engine": {"mrr": {"mean": 0.25}}},
    }
    read_step = (
        f"{python} -c "
        + shlex.quote(f"import sys, json; open(sys.argv[1]).read(); print(json.dumps({report!r}))")
        + " ${tmp}/a"
    )
    outcome = run_condition(
        Condition("steps", "d", "all", [write_step, read_step], {"mrr": 0.5, "engine/mrr": 0.25})
    )
    assert outcome.ok and outcome.queries == 2, outcome
    failing = run_condition(
        Condition("steps", "d", "all", [f"{python} -c 'raise SystemExit(3)'", read_step], {"mrr": 0.5})
    )
    assert failing.error == "step 1 exited 3: (no output)"


@pytest.mark.slow
def test_the_cheap_conditions_reproduce(capsys):
    """The figures `make test` guards (memories, a few seconds each)."""
    cheap = select(load_conditions(DEFAULT_CONDITIONS), cheap=True)
    assert cheap and all(c.dataset == "memories" for c in cheap)
    assert main(["repro", "--cheap"]) == 0, capsys.readouterr().out
    assert f"all {len(cheap)} conditions reproduced" in capsys.readouterr().out


@pytest.mark.parametrize(
    "config",
    [
        "configs/best.json",
        pytest.param("configs/best-scifact.json", marks=pytest.mark.slow),
        pytest.param("configs/best-holoviz.json", marks=pytest.mark.slow),
    ],
)
def test_the_served_config_reproduces(config, capsys):
    """The config the README's MCP section serves: pinned, so an engine-default change cannot move it."""
    from hybridlab.eval.datasets import REPO_ROOT

    assert main(["repro", str(REPO_ROOT / config)]) == 0, capsys.readouterr().out
    assert "all metrics reproduced" in capsys.readouterr().out


def test_recording_rewrites_only_the_expected_values_of_that_condition():
    from hybridlab.tune.repro import recorded_text

    text = (
        "# a comment\nconditions:\n- name: a\n  command: x\n  metrics:\n    mrr: 0.1000\n    ndcg@10: 0.2000\n"
        "- name: b\n  command: y\n  metrics:\n    mrr: 0.3000\n"
    )
    out = recorded_text(text, "a", {"mrr": 0.55556, "ndcg@10": 0.25})
    assert out == text.replace("mrr: 0.1000", "mrr: 0.5556").replace("ndcg@10: 0.2000", "ndcg@10: 0.2500")
    with pytest.raises(ValueError, match="'c' not found"):
        recorded_text(text, "c", {"mrr": 0.5})
    with pytest.raises(ValueError, match="no expected value"):
        recorded_text(text, "b", {"ndcg@10": 0.5})


def test_a_condition_waits_for_an_index_another_process_is_writing(monkeypatch):
    from hybridlab.errors import IndexLockedError, StoreLockedError
    from hybridlab.tune import repro

    calls = []

    def ensure(evalset, config, progress=False):
        calls.append(1)
        if len(calls) == 1:
            raise IndexLockedError("index x is locked by PID 1 (another process is writing it)")
        if len(calls) == 2:  # the shared embeddings cache, held by another build
            raise StoreLockedError(".cache/embeddings.duckdb is opened for writing by another process")
        return Path("/nonexistent-index")

    monkeypatch.setattr(repro, "ensure_index", ensure)
    condition = repro.Condition(
        "c", "memories", "all", "hybridlab eval --index ${index} --json", {"mrr": 0.5}
    )
    assert repro._ensure_waiting(condition, False, timeout=10, poll_s=0.01) == Path("/nonexistent-index")
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(IndexLockedError):
        repro._ensure_waiting(condition, False, timeout=0, poll_s=0.01)


def test_a_failing_condition_is_run_again_and_says_whether_it_moves(tmp_path, monkeypatch):
    monkeypatch.setenv("HYBRIDLAB_CACHE", str(tmp_path / "cache"))
    counter = tmp_path / "runs"
    script = (
        f"import json, pathlib; p = pathlib.Path({str(counter)!r}); n = len(p.read_text()) if p.exists() else 0; "
        "p.write_text('x' * (n + 1)); print(json.dumps({'queries': 2, 'metrics': {'mrr': 0.1 if n == 0 else 0.5}}))"
    )
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}"
    outcome = run_condition(Condition("flaky", "d", "all", command, {"mrr": 0.5}))
    assert not outcome.ok and outcome.rerun == {"mrr": 0.5}  # still a FAIL: the first run counts
    lines = format_outcome(outcome, 0.0005)
    assert (
        lines[-2]
        == "     the same command run again: mrr 0.5000 (different: a one-off, look for what differed)"
    )
    assert "evidence" in lines[-1]
    kept = list((tmp_path / "cache" / "repro-failures").glob("flaky-*/commands.txt"))
    assert len(kept) == 1 and kept[0].read_text().count("## attempt") == 2


def test_tmp_placeholder_is_a_fresh_folder_and_the_last_json_printed_counts(tmp_path):
    script = (
        "import json, pathlib, sys; d = pathlib.Path(sys.argv[1]); assert d.is_dir() and not any(d.iterdir()); "
        "print('a {verdict} line'); print(json.dumps({'queries': 1, 'metrics': {'mrr': 0.25}}, indent=2))"
    )
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(script)} ${{tmp}}"
    outcome = run_condition(Condition("sweepish", "d", "cv", command, {"mrr": 0.25}))
    assert outcome.ok, outcome


def test_sweep_figures_are_the_out_of_sample_ones():
    from hybridlab.tune.record import SweepRecord
    from hybridlab.tune.sweep.finalize import out_of_sample_figures

    comparison = {"test": "randomization", "n": 3, "mean_a": 0.6, "mean_b": 0.5, "p_value": 0.2}
    interval = {"mean": 0.6, "low": 0.5, "high": 0.7, "confidence": 0.95, "method": "t"}
    scores = {"fold_means": [], "per_query": {}, **interval}
    cv = {
        "k": 3,
        "trials_per_fold": 10,
        "metric": "ndcg@10",
        "folds": [],
        "configs": [],
        "tuned": {**scores, "metrics": {"ndcg@10": 0.6, "mrr": 0.7}},
        "defaults": {**scores, "metrics": {"ndcg@10": 0.5}},
        "comparison": comparison,
        "significant": False,
        "verdict": "the tuning procedure does NOT significantly beat the defaults",
    }
    cv_record = {
        "metric": "ndcg@10",
        "comparison": comparison,
        "best": {"test_metrics": {"ndcg@10": 0.9}},
        "cross_validation": cv,
        "per_kind": {"tuned": {"api": {"n": 2, "mean": 0.55}, "-": {"n": 1, "mean": 0.0}}},
    }
    assert out_of_sample_figures(SweepRecord.from_json({"dataset": "x", **cv_record})) == {
        "queries": 3,
        "metrics": {
            "ndcg@10": 0.6,
            "mrr": 0.7,
            "defaults_ndcg@10": 0.5,
            "p_value": 0.2,
            "ndcg@10_low": 0.5,
            "ndcg@10_high": 0.7,
            "ndcg@10[api]": 0.55,
        },
    }
    split_record = {"metric": "ndcg@10", "comparison": comparison, "best": {"test_metrics": {"ndcg@10": 0.9}}}
    assert out_of_sample_figures(SweepRecord.from_json({"dataset": "x", **split_record}))["metrics"] == {
        "ndcg@10": 0.9,
        "defaults_ndcg@10": 0.5,
        "p_value": 0.2,
    }

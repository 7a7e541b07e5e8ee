"""The notebooks run under papermill on a tiny set; run folders, reports/index.md, the report lock."""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import os
import re

import nbformat
import pytest
from tiny_evalset import tiny_env, tiny_index  # noqa: F401  (fixtures)

from hybridlab.cli import main
from hybridlab.eval.datasets import REPO_ROOT
from hybridlab.tune.engine import engine_state, stale_reason
from hybridlab.tune.notebooks import NOTEBOOKS, notebook_path, relative_paths, shorten_paths
from hybridlab.tune.notebooks import run_notebook as _run_notebook
from hybridlab.tune.record import SweepRecord
from hybridlab.tune.runs import new_run_dir, run_lock, update_index


def run_notebook(*args, **kwargs):
    """The package's runner with a cell timeout: a kernel that stops answering (seen once in a loaded
    test run) fails its test instead of holding the suite."""
    kwargs.setdefault("timeout", 900)
    return _run_notebook(*args, **kwargs)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_parameters_cell_holds_literal_assignments_only(name):
    book = nbformat.read(notebook_path(name), as_version=4)
    tagged = [c for c in book.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    for statement in ast.parse(tagged[0].source).body:
        assert isinstance(statement, ast.Assign)
        ast.literal_eval(statement.value)  # raises on anything but a literal


def test_executed_notebooks_name_no_machine_paths(tmp_path):
    run = tmp_path / "reports" / "2026-01-02-sweep-x"
    replacements = [(str(run), "."), (str(REPO_ROOT), "."), (str(REPO_ROOT.parent), ".."), ("/home/me", "~")]
    text = (
        f"{run}/summary.md | {run} | {REPO_ROOT}/.venv/lib/tqdm/auto.py:21 | {REPO_ROOT.parent}/shared/x | "
        f"/home/me/notes | {REPO_ROOT}x/y"
    )
    assert shorten_paths(text, replacements) == (
        f"summary.md | . | .venv/lib/tqdm/auto.py:21 | ../shared/x | ~/notes | ../{REPO_ROOT.name}x/y"
    )
    notebook = tmp_path / "n.ipynb"
    image = f"iVBOR{REPO_ROOT}/x"  # outputs' images are left alone
    notebook.write_text(
        json.dumps(
            {
                "cells": [
                    {
                        "source": [f'run_dir = "{run}"\n'],
                        "outputs": [{"data": {"image/png": image, "text/plain": f"{run}/a.png"}}],
                    }
                ],
                "metadata": {"papermill": {"input_path": str(REPO_ROOT / "notebooks/sweep.ipynb")}},
            }
        )
    )
    data = json.loads(relative_paths(notebook, run).read_text())
    assert data["cells"][0]["source"] == ['run_dir = "."\n']
    assert data["cells"][0]["outputs"][0]["data"] == {"image/png": image, "text/plain": "a.png"}
    assert data["metadata"]["papermill"]["input_path"] == "notebooks/sweep.ipynb"


def test_a_sweep_is_stale_once_the_engine_sources_change():
    now = engine_state()
    assert len(now.source_sha256) == 64 and "hybridlab/search" in now.paths
    swept = functools.partial(SweepRecord, "memories", "ndcg@10")
    assert stale_reason(swept(engine=now), now) is None
    assert "the engine changed since the sweep" in stale_reason(
        swept(engine=dataclasses.replace(now, source_sha256="0" * 64)), now
    )
    assert "predates engine records" in stale_reason(swept(), now)


def test_unknown_notebook_lists_the_choices():
    with pytest.raises(ValueError, match="choose from"):
        notebook_path("nope")


def test_new_run_dir_never_reuses_a_folder(tmp_path):
    first = new_run_dir(tmp_path, "sweep-x", date="2026-11-22")
    second = new_run_dir(tmp_path, "sweep-x", date="2026-11-22")
    assert (first.name, second.name) == ("2026-11-22-sweep-x", "2026-11-22-sweep-x-2")


def test_index_lists_runs_newest_first_with_their_verdicts(tmp_path):
    for age, (name, verdict) in enumerate(
        (("2026-11-20-sweep-a", "old one"), ("2026-11-22-report", "new one"))
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.md").write_text(f"# Title {name}\n\n**Verdict:** {verdict}.\n")
        os.utime(tmp_path / name / "summary.md", (1_000_000 + age, 1_000_000 + age))
    lines = update_index(tmp_path).read_text().splitlines()
    rows = [line for line in lines if line.startswith("| [")]
    assert rows == [
        "| [2026-11-22-report](2026-11-22-report/summary.md) | Title 2026-11-22-report | new one. |",
        "| [2026-11-20-sweep-a](2026-11-20-sweep-a/summary.md) | Title 2026-11-20-sweep-a | old one. |",
    ]


def test_report_exits_nonzero_while_another_holds_the_lock(tmp_path, capsys):
    run = tmp_path / "2026-11-22-sweep-x"
    run.mkdir()
    (run / "metrics.json").write_text("{}")
    with run_lock(tmp_path):
        assert main(["report", "--reports", str(tmp_path), "--run", str(run)]) == 1
    assert "another report run holds" in capsys.readouterr().err


def test_report_without_sweeps_is_an_error(tmp_path, capsys):
    assert main(["report", "--reports", str(tmp_path)]) == 2
    assert "no finished sweep" in capsys.readouterr().err


def _outputs(notebook) -> str:
    book = nbformat.read(notebook, as_version=4)
    texts = []
    for cell in book.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            texts.append(
                str(data.get("text/markdown", ""))
                + str(data.get("text/html", ""))
                + str(data.get("text/plain", ""))
                + output.get("text", "")
            )
    return "\n".join(texts)


def _quiet(notebook) -> None:
    """No error, no stderr block, no progress bar and no warning in an executed notebook's outputs."""
    book = nbformat.read(notebook, as_version=4)
    for cell in book.cells:
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error", output
            assert output.get("name") != "stderr", output.get("text")
            assert "Warning" not in output.get("text", ""), output.get("text")
    html = notebook.with_suffix(".html").read_text()
    assert re.findall(r'<script[^>]*src="(?:https?:)?//', html) == []  # nothing fetched from the network
    assert re.findall(r'import\(\s*"https?://', html) == []


def test_the_landing_notebook_links_every_notebook_and_the_latest_runs(tmp_path):
    reports = tmp_path / "reports"
    for name in (
        "2026-11-20-report",
        "2026-11-22-report",
        "2026-11-21-sweep-memories",
        "2026-11-22-sweep-memories",
    ):
        (reports / name).mkdir(parents=True)
        (reports / name / "summary.md").write_text(f"# {name}\n")
    (reports / "2026-11-22-report" / "report.ipynb").write_text("{}")
    out = run_notebook("start", tmp_path / "run", {"reports": str(reports)})
    text = _outputs(out)
    for name in ("explore", "sweep", "staged", "report"):
        assert f"[{name}](" in text and f"notebooks/{name}.ipynb)" in text
    assert (
        "`2026-11-22-report` — [summary](../reports/2026-11-22-report/summary.md), "
        "[report.ipynb](../reports/2026-11-22-report/report.ipynb)" in text
    )
    assert "memories `2026-11-22-sweep-memories`" in text and "2026-11-21-sweep" not in text
    _quiet(out)


def test_make_lab_is_rooted_at_the_repository_and_opens_the_landing_notebook():
    makefile = (REPO_ROOT / "Makefile").read_text()
    lab = next(line for line in makefile.splitlines() if "jupyter lab" in line)
    assert "--notebook-dir=. " in lab and lab.endswith("notebooks/start.ipynb")


def test_explore_notebook_shows_text_marks_and_the_score_breakdown(tiny_env, tmp_path):  # noqa: F811
    out = run_notebook(
        "explore", tmp_path, {"dataset": str(tiny_env), "models": ["wordllama"], "n_queries": 2}
    )
    text = _outputs(out)
    assert (
        "m-docker-0" in text and "how do I build the docker container image" in text
    )  # the first judged queries
    assert "<mark" in text and "✓ highly relevant" in text and "relevant documents in the top 5" in text
    assert "dense " in text and "bm25 " in text and "recency " in text and "final " in text
    _quiet(out)


def test_explore_notebook_searches_an_index_folder_of_ones_own(tiny_env, tmp_path):  # noqa: F811
    from hybridlab.config import IndexConfig
    from hybridlab.eval.evalsets import index_folder
    from hybridlab.eval.evaluator import resolve_evalset

    folder = index_folder(resolve_evalset(tiny_env), IndexConfig(models=("wordllama",)))
    out = run_notebook(
        "explore",
        tmp_path,
        {"index_dir": str(folder), "queries": ["rust borrow checker"], "box_query": "helm chart"},
        html=False,
    )
    text = _outputs(out)
    assert "no judgements" in text and "m-rust-0" in text and "<mark" in text and "✓" not in text


def test_explore_notebook_on_the_qdrant_backend(tiny_env, tmp_path):  # noqa: F811
    pytest.importorskip("qdrant_client")
    from hybridlab.index.admin import qdrant as qdrant_mirror

    store = tmp_path / "qdrant"
    out = run_notebook(
        "explore",
        tmp_path,
        {
            "dataset": str(tiny_env),
            "models": ["wordllama"],
            "n_queries": 2,
            "backend": "qdrant",
            "qdrant_path": str(store),
            "qdrant_collection": "explore",
        },
        html=False,
    )
    text = _outputs(out)
    assert "backend qdrant" in text and "dense " in text and "m-docker-0" in text
    client = qdrant_mirror.connect(path=store)  # the notebook's kernel has exited and released the folder
    try:
        assert qdrant_mirror.mirror_marker(client, "explore")["generation"] >= 1
    finally:
        client.close()


@pytest.mark.slow
def test_staged_notebook_plots_the_tradeoff(tiny_env, tmp_path):  # noqa: F811
    run_notebook(
        "staged",
        tmp_path,
        {"dataset": str(tiny_env), "models": ["wordllama"], "candidates": [2, 5], "run_dir": str(tmp_path)},
    )
    rows = json.loads((tmp_path / "staged.json").read_text())
    assert [r["candidates"] for r in rows] == [None, 2, 5]
    assert rows[0]["overlap@10"] == 1.0 and all(0 <= r["overlap@10"] <= 1 for r in rows)
    assert (tmp_path / "staged.png").stat().st_size > 0


@pytest.mark.slow
def test_sweep_export_report_and_repro_end_to_end(tiny_env, tmp_path, capsys):  # noqa: F811
    reports, best = tmp_path / "reports", tmp_path / "configs" / "best.json"
    assert (
        main(
            [
                "sweep",
                "--dataset",
                str(tiny_env),
                "--trials",
                "4",
                "--reports",
                str(reports),
                "--export",
                str(best),
                "--model",
                "wordllama",
                "--max-index-configs",
                "2",
            ]
        )
        == 0
    )
    [run] = [p for p in reports.iterdir() if p.is_dir()]
    assert run.name.endswith("-sweep-tiny")
    for name in (
        "sweep.ipynb",
        "sweep.html",
        "metrics.json",
        "summary.md",
        "study.db",
        "history.png",
        "params.png",
    ):
        assert (run / name).is_file(), name
    record = SweepRecord.read(run)
    assert (
        record.trials is not None and record.trials.complete == 4 and record.queries == {"dev": 5, "test": 3}
    )
    assert (
        (record.tuned_on, record.split) == ("dev", "test") and record.engine and record.engine.source_sha256
    )
    config = json.loads(best.read_text())
    # the exported config records the tuned trial's test figures when it beats the defaults, else the defaults'
    exported = (
        record.best.test_metrics if config["provenance"]["beats_defaults"] else record.baselines["defaults"]
    )
    recorded = config["provenance"]["test_metrics"]
    assert recorded == pytest.approx({metric: exported[metric] for metric in recorded})
    assert run.name in (reports / "index.md").read_text()
    executed = (run / "sweep.ipynb").read_text()
    assert str(run.resolve()) not in executed and str(REPO_ROOT) not in executed
    _quiet(run / "sweep.ipynb")

    # as if the engine had changed since the sweep
    dataclasses.replace(record, engine=dataclasses.replace(record.engine, source_sha256="0" * 64)).write(run)
    capsys.readouterr()
    assert main(["report", "--reports", str(reports)]) == 0
    assert f"WARNING: STALE SWEEP {run.name}" in capsys.readouterr().err
    [report] = [p for p in reports.iterdir() if p.name.endswith("-report")]
    for name in ("report.ipynb", "report.html", "summary.md", "comparison.png", "metrics.json"):
        assert (report / name).is_file(), name
    summary = (report / "summary.md").read_text()
    assert "defaults (baseline)" in summary and "tuned vs defaults on ndcg@10" in summary
    assert summary.startswith(f"# Report — {report.name}") and "**STALE:** 1 of 1 sweeps" in summary
    assert "| parameter | value | importance |" in summary and "{" not in summary  # tables, no JSON blobs
    _quiet(report / "report.ipynb")
    capsys.readouterr()
    assert main(["repro", str(best)]) == 0
    assert "all metrics reproduced" in capsys.readouterr().out


def test_sweep_rejects_an_unknown_metric_or_dataset_before_running(tmp_path, capsys):
    assert main(["sweep", "--dataset", "memories", "--metric", "p@3", "--reports", str(tmp_path)]) == 2
    assert "unknown metric 'p@3'" in capsys.readouterr().err
    assert main(["sweep", "--dataset", "nosuchset", "--reports", str(tmp_path)]) == 2
    assert "unknown dataset 'nosuchset'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []

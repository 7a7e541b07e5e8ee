"""Reports worth reading: tables instead of JSON, "all ties" instead of an empty table, readable
figures without warnings, static HTML that fetches nothing, a trial bar."""

from __future__ import annotations

import warnings

import nbformat
import pytest

from hybridlab.eval.evaluate import compare
from hybridlab.reports.report import plot_comparison, plot_kinds, split_label, wins_losses_table
from hybridlab.reports.staged import top_overlap, tradeoff_table
from hybridlab.tune.notebooks import EXTERNAL_SCRIPT, WIDGET_NOTE, static_copy, to_html
from hybridlab.tune.record import CrossValidationRecord, SweepRecord
from hybridlab.tune.summary import importances_table, params_table, space_table
from hybridlab.tune.sweep.figures import importances, plot_study
from hybridlab.tune.sweep.progress import TrialBar
from hybridlab.tune.sweep.space import Param

QRELS = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}


def test_wins_and_losses_say_all_ties_instead_of_an_empty_table():
    run = {"q1": {"a": 1.0}, "q2": {"x": 1.0, "b": 0.5}, "q3": {"c": 1.0}}
    comparison = compare(QRELS, {"defaults": run, "tuned": run})
    text = wins_losses_table(comparison, "ndcg@10")
    assert text.startswith("tuned vs defaults on ndcg@10: 0 wins, 3 ties, 0 losses — all ties")
    assert "|" not in text
    better = compare(QRELS, {"defaults": run, "tuned": {**run, "q2": {"b": 1.0}}})
    table = wins_losses_table(better, "ndcg@10", queries={"q2": "second"})
    assert "1 wins, 2 ties, 0 losses" in table and "| q2 | second | 1.000 | 0.631 | +0.369 |" in table


def test_parameters_and_importances_are_tables_most_important_first():
    assert params_table(
        {"alpha": 0.35, "fusion": "rrf", "k": 3}, {"fusion": 0.7, "alpha": 0.2}
    ).splitlines() == [
        "| parameter | value | importance |",
        "|---|---:|---:|",
        "| fusion | `rrf` | 0.700 |",
        "| alpha | 0.35 | 0.200 |",
        "| k | 3 | — |",
    ]
    assert params_table({"b": True, "a": 0.5}).splitlines()[2:] == ["| a | 0.5 |", "| b | `True` |"]
    assert importances_table({"a": 0.1, "b": 0.6, "c": 0.3}, top=2).splitlines()[2:] == [
        "| b | 0.600 |",
        "| c | 0.300 |",
        "| 1 others | 0.100 |",
    ]
    assert importances_table({}).startswith("No parameter importances")


def test_the_search_space_is_a_table():
    space = [
        Param("fusion", "categorical", choices=("rrf", "convex")),
        Param("rrf_k", "int", 5, 200, log=True, when=("fusion", ("rrf",))),
        Param("alpha", "float", 0.0, 1.0, step=0.05),
    ]
    assert space_table(space).splitlines()[2:] == [
        "| fusion | categorical | `rrf`, `convex` | always |",
        "| rrf_k | int | 5 – 200 (log) | `fusion` in `rrf` |",
        "| alpha | float | 0 – 1, step 0.05 | always |",
    ]


def test_split_labels_name_cross_validation_and_splits():
    interval = {"mean": 0.8, "low": 0.7, "high": 0.9, "confidence": 0.95, "method": "t"}
    cv = CrossValidationRecord.from_json(
        {
            "k": 5,
            "trials_per_fold": 40,
            "metric": "ndcg@10",
            "folds": [],
            "configs": [],
            "tuned": {**interval, "metrics": {}, "fold_means": [], "per_query": {}},
            "defaults": {**interval, "metrics": {}, "fold_means": [], "per_query": {}},
            "comparison": {"test": "randomization", "n": 79, "mean_a": 0.8, "mean_b": 0.8, "p_value": 1.0},
            "significant": False,
            "verdict": "the tuning procedure does NOT significantly beat the defaults",
        }
    )
    cross_validated = SweepRecord("memories", "ndcg@10", split="cv", queries={"cv": 79}, cross_validation=cv)
    assert split_label(cross_validated) == "out of fold, 79 queries"
    tested = SweepRecord("scifact", "ndcg@10", split="test", queries={"test": 300})
    assert split_label(tested) == "test split, 300 queries"


def test_the_comparison_figure_has_a_panel_per_set(tmp_path):
    per_query = {
        "memories": {
            "defaults": {"q1": 0.8, "q2": 0.9, "q3": 0.85},
            "bm25": {"q1": 0.5, "q2": 0.7, "q3": 0.6},
        },
        "scifact": {"defaults": {"q1": 0.7, "q2": 0.75}, "bm25": {"q1": 0.69, "q2": 0.71}},
    }
    path = plot_comparison(per_query, "ndcg@10", tmp_path / "c.png", {"memories": "out of fold, 3 queries"})
    assert path.stat().st_size > 0
    kinds = {"q1": "tag", "q2": "tag", "q3": "identifier"}  # a kind of one query has a zero-width interval
    assert (
        plot_kinds(per_query["memories"], kinds, "ndcg@10", tmp_path / "k.png", title="m").stat().st_size > 0
    )


def _study(values):
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    for i, value in enumerate(values):
        study.enqueue_trial({"alpha": i / len(values), "fusion": ["rrf", "convex"][i % 2], "k1": 1.2})
        study.optimize(
            lambda trial, value=value: (
                (trial.suggest_float("alpha", 0, 1), value)[1]
                + 0 * len(trial.suggest_categorical("fusion", ["rrf", "convex"]))
                + 0 * trial.suggest_float("k1", 0.5, 2.0)
            ),
            n_trials=1,
        )
    return study


def test_study_figures_are_panels_of_the_important_parameters_and_raise_no_warning(tmp_path):
    pytest.importorskip("matplotlib")
    study = _study([0.1, 0.5, 0.2, 0.9, 0.4, 0.3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning escaping the filters fails the test
        assert set(importances(study)) == {"alpha", "fusion", "k1"}
        written = plot_study(study, tmp_path, prefix="x-", top=2)
    assert [p.name for p in written] == ["x-history.png", "x-importances.png", "x-params.png"]
    assert all(p.stat().st_size > 0 for p in written)


def test_the_trial_bar_counts_completed_trials_and_shows_the_best(tmp_path):
    study = _study([])
    with TrialBar(3) as bar:
        study.optimize(lambda trial: trial.suggest_float("alpha", 0, 1), n_trials=3, callbacks=[bar])
        assert bar.bar.n == 3
        assert bar.bar.postfix == f"best {study.best_value:.4f} (#{study.best_trial.number})"


def test_static_html_loads_nothing_from_the_network_and_notes_widgets():
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("box")])
    book.cells[0].outputs = [
        nbformat.v4.new_output(
            "execute_result",
            data={"application/vnd.jupyter.widget-view+json": {"model_id": "x"}, "text/plain": "VBox(...)"},
            execution_count=1,
        )
    ]
    book.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    copy = static_copy(book)
    assert "widgets" not in copy.metadata and copy.cells[0].outputs[0]["data"] == {"text/plain": WIDGET_NOTE}
    assert "widgets" in book.metadata  # the notebook itself is left alone
    page = (
        '<script src="https://cdnjs.cloudflare.com/x/require.min.js"></script><script src="local.js"></script>'
        '<script type="text/javascript" src="//cdn.example/mathjax.js?config=TeX"> </script>'
        '<script type="module">\nif (!n) {return;}\nconst m = (await import("https://cdn.example/m.mjs")).default;\n'
        "</script><script>var kept = 1;</script>"
    )
    assert EXTERNAL_SCRIPT.sub("", page) == '<script src="local.js"></script><script>var kept = 1;</script>'


def test_staged_overlap_and_table():
    assert top_overlap({"a": 3, "b": 2, "c": 1}, {"a": 3, "c": 2, "z": 1}, top=2) == 0.5  # {a, c} vs {a, b}
    assert top_overlap({}, {"a": 1}) == 1.0
    rows = [
        {"candidates": None, "staged": False, "median_ms": 2.0, "overlap@10": 1.0},
        {"candidates": 50, "staged": True, "median_ms": 1.0, "overlap@10": 0.9},
    ]
    assert tradeoff_table(rows).splitlines() == [
        "| system | median_ms | overlap@10 |",
        "|---|---|---|",
        "| parallel hybrid | 2.0000 | 1.0000 |",
        "| staged, 50 candidates | 1.0000 | 0.9000 |",
    ]


def test_a_report_reads_without_its_code(tmp_path):
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print_the_secret_sauce()")])
    book.cells[0].outputs = [
        nbformat.v4.new_output("display_data", data={"text/markdown": "**Verdict:** kept"})
    ]
    nbformat.write(book, tmp_path / "report.ipynb")
    assert "print_the_secret_sauce" in to_html(tmp_path / "report.ipynb").read_text()
    page = to_html(tmp_path / "report.ipynb", code=False).read_text()
    assert "print_the_secret_sauce" not in page and "Verdict" in page

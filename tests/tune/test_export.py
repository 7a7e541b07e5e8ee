"""The exported winning config: its format, that the CLI loads it, and the repro check."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tiny_evalset import MODELS, tiny_env, tiny_index  # noqa: F401  (fixtures)

from hybridlab.cli import main
from hybridlab.config import SEARCH_FIELDS, IndexConfig, load_config_file, resolve_search_config
from hybridlab.eval.evaluator import Evaluator, full_search_config, resolve_evalset
from hybridlab.tune.export import (
    _now_utc,
    export_config,
    git_commit,
    package_version,
    repro,
    write_config,
)
from hybridlab.tune.record import SweepRecord

METRIC_NAMES = ("hit_rate@10", "mrr", "ndcg@10", "recall@100")


def sweep_winner(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The sweep's winner as the sweep recorded it (settings, index, its test metrics), not checked
    against the defaults and not pinned: what a run found, not a config to serve (see
    :func:`export_config`); a helper of these tests."""
    run_dir = Path(run_dir)
    record = SweepRecord.read(run_dir)
    best = record.best
    search = full_search_config({k: v for k, v in best.search.items() if k in SEARCH_FIELDS})
    return {
        "search": search,
        "index": best.index,
        "provenance": {
            "dataset": record.dataset,
            "dataset_path": record.dataset_path,
            "split": record.split,
            "tuned_on": record.tuned_on,
            "metric": record.metric,
            "dev_value": best.dev_value,
            "test_value": best.test_metrics[record.metric],
            "trial": best.trial,
            "study": record.study,
            "run": run_dir.name,
            "now": record.now,
            "eval_limit": 100 if record.eval_limit is None else record.eval_limit,
            "package_version": package_version(),
            "git_commit": git_commit(),
            "date": _now_utc(),
            "test_metrics": best.test_metrics,
            "defaults_test_metrics": record.baselines["defaults"],
            "beats_defaults": record.beats_defaults,
            "verdict": record.verdict,
        },
    }


def fake_record(
    search: dict,
    index: IndexConfig,
    test_metrics: dict,
    dataset: str = "tiny",
    dataset_path: str | None = None,
    now: str | None = None,
) -> dict:
    """A sweep run's metrics.json as `hybridlab.tune.sweep.finalize` writes it."""
    return {
        "dataset": dataset,
        "dataset_path": dataset_path,
        "metric": "ndcg@10",
        "split": "test",
        "tuned_on": "dev",
        "now": now,
        "study": "tiny-ndcg@10",
        "eval_limit": 100,
        "best": {
            "trial": 7,
            "params": {"alpha": search["alpha"]},
            "dev_value": 0.8,
            "search": search,
            "index": index.to_dict(),
            "test_metrics": test_metrics,
        },
        "baselines": {"defaults": dict.fromkeys(METRIC_NAMES, 0.5)},
        "beats_defaults": test_metrics["ndcg@10"] > 0.5,
    }


def test_export_holds_every_search_field_index_and_provenance(tmp_path):
    search = full_search_config({"alpha": 0.35, "fusion": "convex", "normalization": "z-score"})
    metrics = dict.fromkeys(METRIC_NAMES, 0.75)
    run = tmp_path / "2026-11-22-sweep-tiny"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps(fake_record(search, IndexConfig(), metrics)))
    config = sweep_winner(run)
    assert set(config["search"]) == set(SEARCH_FIELDS)
    assert IndexConfig.from_dict(config["index"]) == IndexConfig()
    provenance = config["provenance"]
    assert (provenance["dataset"], provenance["split"], provenance["metric"], provenance["trial"]) == (
        "tiny",
        "test",
        "ndcg@10",
        7,
    )
    assert (provenance["dev_value"], provenance["test_value"]) == (0.8, 0.75)
    assert provenance["test_metrics"] == metrics and provenance["beats_defaults"] is True
    assert {"package_version", "git_commit", "date", "run"} <= set(provenance)
    path = write_config(config, tmp_path / "configs" / "best.json")
    assert load_config_file(path) == config


def test_exported_config_is_read_with_env_override(tmp_path):
    config = {
        "search": full_search_config({"alpha": 0.35, "fusion": "dbsf"}),
        "index": IndexConfig().to_dict(),
    }
    path = write_config(config, tmp_path / "best.json")
    resolved, sources = resolve_search_config({}, config_file=load_config_file(path), env={})
    assert (resolved.alpha, resolved.fusion, sources["alpha"]) == (0.35, "dbsf", "config")
    resolved, sources = resolve_search_config(
        {}, config_file=load_config_file(path), env={"HYBRIDLAB_ALPHA": "0.9"}
    )
    assert (resolved.alpha, sources["alpha"]) == (0.9, "env")


def test_export_of_a_folder_without_metrics_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.json"):
        export_config(tmp_path)


def _write_measured_config(folder, path, search):
    """A config whose recorded test metrics are what the tiny set really gives."""
    evalset = resolve_evalset(folder)
    index = IndexConfig(models=MODELS)
    measured = Evaluator(evalset).score(search, index, "test")
    record = fake_record(
        search, index, measured, dataset=evalset.name, dataset_path=str(folder), now=evalset.now
    )
    run = path.parent / "run"
    run.mkdir(exist_ok=True)
    (run / "metrics.json").write_text(json.dumps(record))
    return write_config(export_config(run), path), measured


def test_repro_ok_then_fail_when_a_recorded_metric_is_off(tiny_env, tmp_path, capsys, monkeypatch):  # noqa: F811
    search = full_search_config({"alpha": 0.6, "fusion": "convex"})
    path, measured = _write_measured_config(tiny_env, tmp_path / "best.json", search)
    monkeypatch.setenv("HYBRIDLAB_ALPHA", "0.0")  # env must not change what repro re-runs
    assert all(ok for *_, ok in repro(load_config_file(path)))
    assert main(["repro", str(path)]) == 0
    assert "OK   ndcg@10" in capsys.readouterr().out
    config = load_config_file(path)
    config["provenance"]["test_metrics"]["mrr"] = measured["mrr"] - 0.01
    path.write_text(json.dumps(config))
    assert main(["repro", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL mrr" in out and "OK   ndcg@10" in out


def test_search_cli_applies_the_exported_config(tiny_env, tmp_path, capsys):  # noqa: F811
    from hybridlab.eval.evalsets import ensure_index

    index_dir = ensure_index(resolve_evalset(tiny_env), IndexConfig(models=MODELS), progress=False)
    path = write_config(
        {"search": full_search_config({"alpha": 0.35, "fusion": "dbsf"})}, tmp_path / "best.json"
    )
    assert (
        main(
            [
                "search",
                "docker container image",
                "--index",
                str(index_dir),
                "--config",
                str(path),
                "--explain",
                "--json",
            ]
        )
        == 0
    )
    explain = json.loads(capsys.readouterr().out)[0]["explain"]
    assert (explain["alpha"], explain["alpha_source"], explain["fusion"]) == (0.35, "config", "dbsf")

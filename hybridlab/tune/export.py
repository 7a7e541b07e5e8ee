"""The exported winning configuration and its reproduction check (pyserini-style records).

`configs/best.json` = ``{"search": {every SearchConfig field}, "index": {IndexConfig},
"provenance": {dataset, split, metric, dev/test values, trial, version, commit, date, test metrics}}``
— the file `hybridlab search|eval|mcp --config` read. `hybridlab repro` re-runs the evaluation it
records and prints OK/FAIL per metric.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hybridlab.eval.datasets import REPO_ROOT

DEFAULT_TOLERANCE = 0.0005


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hybridlab")
    except PackageNotFoundError:
        return "unknown"


def git_commit(repo: Path = REPO_ROOT) -> str | None:
    """HEAD's commit (with `+dirty` when the tree has changes), or None outside git."""
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               check=False, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def export_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The config document of a finished sweep run (its `metrics.json`)."""
    from hybridlab.config import SEARCH_FIELDS
    from hybridlab.eval.evaluator import full_search_config

    run_dir = Path(run_dir)
    record_path = run_dir / "metrics.json"
    if not record_path.is_file():
        raise FileNotFoundError(f"{record_path} not found: is {run_dir} a finished sweep run?")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    best = record["best"]
    search = full_search_config({k: v for k, v in best["search"].items() if k in SEARCH_FIELDS})
    return {
        "search": search,
        "index": best["index"],
        "provenance": {
            "dataset": record["dataset"], "dataset_path": record.get("dataset_path"),
            "split": "test", "tuned_on": record.get("tuned_on", "dev"), "metric": record["metric"],
            "dev_value": best["dev_value"], "test_value": best["test_metrics"][record["metric"]],
            "trial": best["trial"], "study": record.get("study"), "run": run_dir.name,
            "now": record.get("now"), "eval_limit": record.get("eval_limit", 100),
            "package_version": package_version(), "git_commit": git_commit(),
            "date": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
            "test_metrics": best["test_metrics"],
            "defaults_test_metrics": record["baselines"]["defaults"],
            "beats_defaults": record["beats_defaults"],
            "verdict": record.get("verdict"),
        },
    }


def write_config(config: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write a config document as pretty JSON (creating the folder) and check it loads back."""
    from hybridlab.config import load_config_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    load_config_file(path)
    return path


def repro(config: Mapping[str, Any], tolerance: float = DEFAULT_TOLERANCE) -> list[tuple[str, float, float, bool]]:
    """Re-run the evaluation a config records: its dataset's test split, its exact index and
    search settings (as arguments, so env variables cannot change them), its fixed `now`.
    Returns (metric, recorded, measured, ok) per recorded test metric."""
    from hybridlab.config import IndexConfig
    from hybridlab.eval.evalsets import EvalSet
    from hybridlab.eval.evaluator import Evaluator, resolve_evalset

    provenance = config.get("provenance") or {}
    if "dataset" not in provenance or "test_metrics" not in provenance:
        raise ValueError("the config has no provenance.dataset / provenance.test_metrics to reproduce")
    evalset = resolve_evalset(provenance.get("dataset_path") or provenance["dataset"])
    if provenance.get("now") != evalset.now:
        evalset = EvalSet(evalset.name, evalset.sources, evalset.judgements, provenance.get("now"))
    recorded = provenance["test_metrics"]
    measured = Evaluator(evalset).score(config["search"], IndexConfig.from_dict(config["index"]),
                                        provenance.get("split", "test"), metrics=list(recorded))
    return [(m, float(recorded[m]), measured[m], abs(measured[m] - float(recorded[m])) <= tolerance)
            for m in recorded]


def cli_export_config(args: argparse.Namespace) -> int:
    path = write_config(export_config(args.run_dir), args.output)
    print(f"wrote {path}")
    return 0


def cli_repro(args: argparse.Namespace) -> int:
    """`hybridlab repro CONFIG`: OK/FAIL per metric; exit 1 on any FAIL."""
    from hybridlab.config import load_config_file

    config = load_config_file(args.config)
    rows = repro(config, args.tolerance)
    provenance = config["provenance"]
    print(f"repro {args.config}: {provenance['dataset']} {provenance.get('split', 'test')} "
          f"(trial {provenance.get('trial')}, commit {provenance.get('git_commit')})")
    for metric, recorded, measured, ok in rows:
        print(f"{'OK  ' if ok else 'FAIL'} {metric:<12} recorded {recorded:.4f}  measured {measured:.4f}  "
              f"(Δ {measured - recorded:+.4f}, tolerance ±{args.tolerance})")
    failed = sum(not ok for *_, ok in rows)
    print("all metrics reproduced" if not failed else f"{failed} metric(s) FAILED")
    return 1 if failed else 0

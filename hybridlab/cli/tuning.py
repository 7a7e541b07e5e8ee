"""`sweep`, `grid`, `report`, `export-config`, `learn-fusion` and `repro`: tuning, reporting and
reproducing. The handlers call hybridlab.tune and hybridlab.reports, imported when a command runs
(they bring the evaluation stack: `--help` stays instant); `grid` is in :mod:`~hybridlab.cli.grid`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from hybridlab.cli.options import evalsets_arg, positive_int
from hybridlab.errors import InvalidValueError, PathNotFoundError


def add_sweep(sub: argparse._SubParsersAction) -> None:
    """The `sweep` command (:func:`cmd_sweep`)."""
    p = sub.add_parser("sweep", help="run the sweep notebook (Optuna) through papermill into reports/")
    p.add_argument("--dataset", required=True)
    evalsets_arg(p)
    p.add_argument("--trials", type=positive_int, default=None)
    p.add_argument(
        "--storage",
        help="Optuna storage: postgresql://user@host/db, sqlite:///PATH or journal:PATH "
        "(a file on shared storage); default SQLite in the run folder",
    )
    p.add_argument("--study", help="study name (default <dataset>-<metric>); the same name joins the study")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="worker processes on this machine (default 1); run the same command on other "
        "machines with a shared --storage to add theirs (docs/scale-out.md)",
    )
    p.add_argument("--metric", default="ndcg@10")
    p.add_argument("--reports", default="reports", help="reports folder")
    p.add_argument("--export", default="configs/best.json", help="where the winning config is exported")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the TPE sampler (default 0); workers joining a study derive theirs from it",
    )
    p.add_argument(
        "--max-index-configs",
        type=positive_int,
        default=4,
        help="distinct index builds (BM25 k1/b, chunking) a study may use (default 4)",
    )
    p.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME",
        help="embedding model of the swept indexes (repeatable; default all-MiniLM-L6-v2)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="last, print the out-of-sample figures as JSON (for the reproduction record)",
    )
    p.set_defaults(func=cmd_sweep)


def add_report(sub: argparse._SubParsersAction) -> None:
    """The `report` command (:func:`cmd_report`)."""
    p = sub.add_parser("report", help="run the report notebook over the latest sweeps")
    p.add_argument("--reports", default="reports")
    p.add_argument("--run", help="a sweep run folder (default: the latest of each dataset)")
    p.set_defaults(func=cmd_report)


def add_export_config(sub: argparse._SubParsersAction) -> None:
    """The `export-config` command (:func:`cmd_export_config`)."""
    p = sub.add_parser(
        "export-config",
        help="export a sweep's winner if it beats the defaults out of sample "
        "(paired test, Holm-corrected), else the defaults with the verdict; every knob pinned",
    )
    p.add_argument("run_dir")
    p.add_argument("-o", "--output", default="configs/best.json")
    p.add_argument(
        "--test",
        choices=["randomization", "t-test"],
        default="randomization",
        help="paired significance test against the defaults (default randomization)",
    )
    p.set_defaults(func=cmd_export_config)


def add_learn_fusion(sub: argparse._SubParsersAction) -> None:
    """The `learn-fusion` command (:func:`cmd_learn_fusion`)."""
    p = sub.add_parser(
        "learn-fusion",
        help="train the learned fusion on the evaluation sets (or its "
        "leave-one-collection-out table, --loco)",
    )
    p.add_argument("--sets", nargs="+", help="evaluation sets to use (default: all six)")
    p.add_argument("--leave-out", help="a set left out of training")
    p.add_argument("--model", choices=["lightgbm", "linear"], help="default lightgbm (--loco: both)")
    p.add_argument("--loco", action="store_true", help="train and score every leave-one-out fold into --out")
    p.add_argument("--recipe", help="LightGBM recipe: transferable (the default) or full (every feature)")
    p.add_argument("--out", required=True, help="the model folder (--loco: the report folder)")
    p.set_defaults(func=cmd_learn_fusion)


def add_repro(sub: argparse._SubParsersAction) -> None:
    """The `repro` command (:func:`cmd_repro`)."""
    p = sub.add_parser(
        "repro",
        help="re-run the evaluation a config records, or every condition of the "
        "reproduction record (--all); OK/FAIL per metric",
    )
    p.add_argument("config", nargs="?", help="an exported config (configs/*.json)")
    p.add_argument("--all", action="store_true", help="every condition of the reproduction record")
    p.add_argument(
        "--cheap", action="store_true", help="only the cheap conditions (seconds; what `make test` runs)"
    )
    p.add_argument("--conditions", default=None, help="the conditions file (default repro/conditions.yaml)")
    evalsets_arg(p)
    p.add_argument(
        "--record",
        action="store_true",
        help="write the measured values of the selected conditions that moved into the conditions "
        "file (a deliberate re-record after an engine change; commit it with that change)",
    )
    p.add_argument(
        "--condition", action="append", dest="names", metavar="NAME", help="only this condition (repeatable)"
    )
    p.add_argument("--tolerance", type=float, default=0.0005)
    p.set_defaults(func=cmd_repro)


def cmd_sweep(args: argparse.Namespace) -> int:
    """`hybridlab sweep`: run notebooks/sweep.ipynb into a new run folder (a cross-validated set also
    runs its nested cross-validation there), then export what may be served (:mod:`hybridlab.tune.export`)
    into the run folder's `config.json` and to `--export`.
    With `--workers N` the notebook runs N worker processes on each study (docs/scale-out.md)."""
    from hybridlab.extras import require

    require("optuna", "papermill")
    from papermill.exceptions import PapermillExecutionError

    from hybridlab.eval.evaluate import METRICS
    from hybridlab.eval.evaluator import resolve_evalset
    from hybridlab.tune.export import export_config, write_config
    from hybridlab.tune.notebooks import run_notebook
    from hybridlab.tune.record import SweepRecord
    from hybridlab.tune.runs import new_run_dir, sweep_name, update_index
    from hybridlab.tune.summary import write_summary
    from hybridlab.tune.sweep.crossval import fold_trials
    from hybridlab.tune.sweep.finalize import out_of_sample_figures
    from hybridlab.tune.sweep.objective import DEFAULT_MAX_INDEX_CONFIGS, tuning_split
    from hybridlab.tune.sweep.storage import absolute_storage
    from hybridlab.tune.sweep.study import DEFAULT_TRIALS

    if args.metric not in METRICS:
        raise InvalidValueError(
            f"unknown metric {args.metric!r}; choose from {list(METRICS)}", field="metric"
        )
    evalset = resolve_evalset(args.dataset)  # an unknown name fails here, listing the choices
    tuning_split(evalset)  # so does a set that is never tuned on
    trials = args.trials or DEFAULT_TRIALS.get(Path(args.dataset).name, 30)
    workers = getattr(args, "workers", 1)
    if workers < 1:
        raise InvalidValueError(f"workers must be >= 1, got {workers}", field="workers")
    run_dir = new_run_dir(args.reports, sweep_name(args.dataset))
    parameters = {
        "dataset": str(args.dataset),
        "trials": trials,
        "storage": absolute_storage(args.storage),
        "study": args.study,
        "workers": workers,
        "metric": args.metric,
        "seed": getattr(args, "seed", 0),
        "max_index_configs": getattr(args, "max_index_configs", DEFAULT_MAX_INDEX_CONFIGS),
        "models": getattr(args, "models", None),
        "fold_trials": getattr(args, "fold_trials", None),
        "run_dir": ".",
    }
    folds = (
        f", nested {evalset.cv_folds}-fold CV with "
        f"{getattr(args, 'fold_trials', None) or fold_trials(trials, evalset.cv_folds)} trials per fold"
        if evalset.cv_folds is not None  # cross-validated
        else ""
    )
    print(
        f"sweep {args.dataset}: {trials} trials{folds}{f' on {workers} workers' if workers > 1 else ''} -> {run_dir}",
        flush=True,
    )
    started = time.perf_counter()
    try:
        run_notebook("sweep", run_dir, parameters)
    except PapermillExecutionError as error:  # the partial notebook is kept in the run folder
        print(
            f"error: the sweep notebook failed: {error.ename}: {error.evalue} (see {run_dir / 'sweep.ipynb'})",
            file=sys.stderr,
        )
        return 1
    record = SweepRecord.read(run_dir)
    config = export_config(run_dir)  # what may be served, kept with the run: config.json
    write_config(config, run_dir / "config.json")
    write_summary(run_dir, record)
    update_index(args.reports)
    print(config["provenance"]["verdict"])
    if args.export:
        print(f"exported to {write_config(config, args.export)}")
    print(f"{record.verdict} ({time.perf_counter() - started:.0f} s)")
    if getattr(args, "json", False):
        print(json.dumps(out_of_sample_figures(record), indent=2))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """`hybridlab report`: the report notebook over the latest sweep per dataset (or `--run`),
    under a lock; says loudly (stderr, the summary's first lines, reports/index.md) when a sweep is
    older than the engine's last change; exits 1 when another run holds the lock or the notebook fails."""
    from hybridlab.extras import require

    require("papermill", "matplotlib")
    from papermill.exceptions import PapermillExecutionError

    from hybridlab.reports.report import stale_sweeps
    from hybridlab.tune.notebooks import run_notebook
    from hybridlab.tune.record import RECORD_FILE, is_finished_sweep
    from hybridlab.tune.runs import REPORT_NAME, latest_sweeps, new_run_dir, run_lock, update_index

    runs = [Path(args.run)] if args.run else latest_sweeps(args.reports)
    if not runs:
        raise PathNotFoundError(f"no finished sweep in {args.reports}; run `make sweep` first")
    for run in runs:
        if not is_finished_sweep(run):
            raise PathNotFoundError(f"{run} has no {RECORD_FILE} (not a finished sweep run)")
    try:
        with run_lock(args.reports):
            stale = stale_sweeps(runs)
            for name, reason in stale.items():
                print(
                    f"WARNING: STALE SWEEP {name}: {reason}; its figures may not hold for today's engine — "
                    f"re-run it (make sweep)",
                    file=sys.stderr,
                    flush=True,
                )
            run_dir = new_run_dir(args.reports, REPORT_NAME)
            print(f"report over {', '.join(r.name for r in runs)} -> {run_dir}", flush=True)
            run_notebook(
                "report",
                run_dir,
                {"runs": [os.path.relpath(r.resolve(), run_dir.resolve()) for r in runs], "run_dir": "."},
            )
            update_index(args.reports)
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except PapermillExecutionError as error:  # the partial notebook is kept in the run folder
        print(
            f"error: the report notebook failed in cell {error.exec_count}: {error.ename}: {error.evalue}"
            f" (see {run_dir / 'report.ipynb'})",
            file=sys.stderr,
        )
        return 1
    print(f"wrote {run_dir / 'summary.md'}" + (f" (STALE: {', '.join(stale)})" if stale else ""))
    return 0


def cmd_export_config(args: argparse.Namespace) -> int:
    """`hybridlab export-config RUN_DIR`: the sweep's servable config, written to `--output`."""
    from hybridlab.tune.export import DEFAULT_TEST, export_config, write_config

    config = export_config(args.run_dir, test=getattr(args, "test", DEFAULT_TEST))
    path = write_config(config, args.output)
    print(config["provenance"]["verdict"])
    print(f"wrote {path}")
    return 0


def cmd_learn_fusion(args: argparse.Namespace) -> int:
    """`hybridlab learn-fusion`: train a fusion model (or the whole LOCO table with --loco)."""
    from hybridlab.tune.learn import KINDS, RECIPE, RECIPES, SETS, learn, loco

    sets = list(args.sets or SETS)
    unknown = sorted(set(sets) - set(SETS))
    if unknown or (args.leave_out and args.leave_out not in SETS):
        raise InvalidValueError(f"unknown set {unknown or args.leave_out}; choose from {list(SETS)}")
    recipe = getattr(args, "recipe", None) or RECIPE
    if recipe not in RECIPES:
        raise InvalidValueError(f"unknown recipe {recipe!r}; choose from {sorted(RECIPES)}")
    if args.loco:
        loco(args.out, sets, [args.model] if args.model else KINDS, recipe=recipe)
        return 0
    folder = learn(
        [s for s in sets if s != args.leave_out], args.out, args.model or "lightgbm", recipe=recipe
    )
    print(f"wrote {folder} (trained on {', '.join(s for s in sets if s != args.leave_out)})")
    return 0


def cmd_repro(args: argparse.Namespace) -> int:
    """`hybridlab repro CONFIG` (OK/FAIL per metric of an exported config) or `hybridlab repro --all`
    (every condition of the reproduction record, :func:`_repro_conditions`); exit 1 on any FAIL."""
    from hybridlab.config import load_config_file
    from hybridlab.tune.export import repro

    if (
        getattr(args, "all", False)
        or getattr(args, "cheap", False)
        or getattr(args, "names", None)
        or getattr(args, "record", False)
    ):
        return _repro_conditions(args)
    if not args.config:
        raise InvalidValueError("give a config file to reproduce, or --all for the reproduction record")
    config = load_config_file(args.config)
    rows = repro(config, args.tolerance)
    provenance = config["provenance"]
    trial = provenance.get("trial")
    print(
        f"repro {args.config}: {provenance['dataset']} {provenance.get('split', 'test')} "
        f"({provenance.get('queries', 'all')} queries; {'defaults' if trial is None else f'trial {trial}'}, "
        f"commit {provenance.get('git_commit')})"
    )
    for metric, recorded, measured, ok in rows:
        print(
            f"{'OK  ' if ok else 'FAIL'} {metric:<12} recorded {recorded:.4f}  measured {measured:.4f}  "
            f"(Δ {measured - recorded:+.4f}, tolerance ±{args.tolerance})"
        )
    failed = sum(not ok for *_, ok in rows)
    print("all metrics reproduced" if not failed else f"{failed} metric(s) FAILED")
    return 1 if failed else 0


def _repro_conditions(args: argparse.Namespace) -> int:
    """`hybridlab repro --all [--cheap] [--condition NAME] [--conditions FILE] [--record]`."""
    from hybridlab.tune.repro import (
        DEFAULT_CONDITIONS,
        DEFAULT_TOLERANCE,
        format_outcome,
        load_conditions,
        missing_need,
        recorded_text,
        repo_relative,
        run_condition,
        select,
    )

    path = Path(args.conditions) if getattr(args, "conditions", None) else DEFAULT_CONDITIONS
    tolerance = getattr(args, "tolerance", DEFAULT_TOLERANCE)
    conditions = select(
        load_conditions(path), cheap=getattr(args, "cheap", False), names=getattr(args, "names", None)
    )
    if not conditions:
        raise InvalidValueError(f"no condition of {path} selected")
    print(f"repro {repo_relative(path)}: {len(conditions)} condition(s), tolerance ±{tolerance}", flush=True)
    failed = []
    record = getattr(args, "record", False)
    for condition in conditions:
        outcome = run_condition(condition, tolerance)
        print("\n".join(format_outcome(outcome, tolerance)), flush=True)
        measured = {
            metric: value
            for metric, _, value, _ in outcome.rows
            if metric in condition.metrics and value is not None
        }
        # a metric the command did not print (None) is not recorded: the condition fails below
        if record and outcome.error is None and not outcome.ok and len(measured) == len(condition.metrics):
            path.write_text(
                recorded_text(path.read_text(encoding="utf-8"), condition.name, measured), encoding="utf-8"
            )
            print(f"recorded the measured values of {condition.name} in {repo_relative(path)}", flush=True)
            continue
        if not outcome.ok:
            failed.append(condition.name)
    skipped = [c.name for c in conditions if missing_need(c)]
    ran = len(conditions) - len(skipped)
    print(
        f"all {ran} conditions reproduced"
        if not failed
        else f"{len(failed)} of {ran} condition(s) FAILED: {', '.join(failed)}"
    )
    if skipped:
        print(f"{len(skipped)} skipped (a file they need is absent): {', '.join(skipped)}")
    return 1 if failed else 0

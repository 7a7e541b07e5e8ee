"""`sweep`, `grid`, `report`, `export-config`, `learn-fusion` and `repro`: tuning, reporting and
reproducing (each run by its module in hybridlab.tune or hybridlab.reports)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from hybridlab.cli.options import delegate, evalsets_arg, positive_int


def add_sweep(sub: argparse._SubParsersAction) -> None:
    """The `sweep` command (hybridlab.tune.sweep runs it)."""
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
    p.set_defaults(func=delegate("hybridlab.tune.sweep", "cli_sweep"))


def add_grid(sub: argparse._SubParsersAction) -> None:
    """The `grid` command, listed for `--help`: `main` hands `hybridlab grid ...` to :func:`run_grid`."""
    # listed here; `main` hands `hybridlab grid ...` to hybridlab.tune.grid, whose options it has
    # (importing it here would load the engine for every command)
    p = sub.add_parser(
        "grid",
        add_help=False,
        help="one setting over a list of values on the evaluation sets; "
        "--cv K chooses its value for the default hybrid by K-fold cross-validation "
        "(hybridlab grid --help)",
    )
    p.add_argument("grid_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda args: run_grid(args.grid_args))


def run_grid(argv: Sequence[str]) -> int:
    """`hybridlab grid ARGS`: hybridlab.tune.grid parses its own options."""
    from hybridlab.tune.grid import main as grid_main

    return grid_main(list(argv), prog="hybridlab grid")


def add_report(sub: argparse._SubParsersAction) -> None:
    """The `report` command (hybridlab.reports.runs runs it)."""
    p = sub.add_parser("report", help="run the report notebook over the latest sweeps")
    p.add_argument("--reports", default="reports")
    p.add_argument("--run", help="a sweep run folder (default: the latest of each dataset)")
    p.set_defaults(func=delegate("hybridlab.reports.runs", "cli_report"))


def add_export_config(sub: argparse._SubParsersAction) -> None:
    """The `export-config` command (hybridlab.tune.export runs it)."""
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
    p.set_defaults(func=delegate("hybridlab.tune.export", "cli_export_config"))


def add_learn_fusion(sub: argparse._SubParsersAction) -> None:
    """The `learn-fusion` command (hybridlab.tune.learn runs it)."""
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
    p.set_defaults(func=delegate("hybridlab.tune.learn", "cli_learn_fusion"))


def add_repro(sub: argparse._SubParsersAction) -> None:
    """The `repro` command (hybridlab.tune.export runs it)."""
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
    p.set_defaults(func=delegate("hybridlab.tune.export", "cli_repro"))

"""Run folders under `reports/` and their index: this module alone names, dates, creates and lists
them, and finds the newest of a kind. A run folder is `reports/<YYYY-MM-DD>-<name>[-N]/` (`sweep-<set>`
for a sweep, `report` for a report run), holding the executed notebooks and their HTML copies, PNG
figures, `metrics.json` (a sweep's: :mod:`hybridlab.tune.record`; a report run's:
:mod:`hybridlab.reports.report`) and `summary.md`, whose first line is its title and whose
`**Verdict:**` line `reports/index.md` lists."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from hybridlab.filelock import exclusive_lock
from hybridlab.tune.record import RECORD_FILE, SweepRecord

SWEEP_PREFIX = "sweep-"
REPORT_NAME = "report"
LOCK_FILE = ".report.lock"
SUMMARY_FILE = "summary.md"


def run_date() -> str:
    """Today's date, UTC, as a run folder's name starts with it."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")


def new_run_dir(reports: str | os.PathLike, name: str, date: str | None = None) -> Path:
    """A fresh `reports/<date>-<name>[-N]/` (never reuses an existing folder; date: today, UTC)."""
    base = Path(reports) / f"{date or run_date()}-{name}"
    folder, n = base, 1
    while folder.exists():
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    folder.mkdir(parents=True)
    return folder


def sweep_name(dataset: str | os.PathLike) -> str:
    """The name of a sweep run of `dataset` (a set's name or a BEIR folder): `sweep-<set>`."""
    return f"{SWEEP_PREFIX}{Path(dataset).name}"


def scratch_dir(run_dir: str | os.PathLike | None) -> Path:
    """The notebook's output folder: `run_dir` (created), or a fresh temporary one when a notebook is
    opened interactively without a run folder."""
    if run_dir is None:
        import tempfile

        return Path(tempfile.mkdtemp(prefix="hybridlab-"))
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def run_lock(reports: str | os.PathLike) -> Iterator[Path]:
    """An exclusive, non-blocking flock on `reports/.report.lock`; a second holder gets
    RuntimeError at once (cron runs must not pile up)."""
    path = Path(reports) / LOCK_FILE
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(exclusive_lock(path, blocking=False))
        except BlockingIOError:
            raise RuntimeError(f"another report run holds {path}") from None
        yield path


def summarised_runs(reports: str | os.PathLike) -> list[Path]:
    """Every run folder with a `summary.md`, newest first (by the date in its name, then by when
    its summary was written)."""
    summaries = Path(reports).glob(f"*/{SUMMARY_FILE}")
    ordered = sorted(summaries, key=lambda p: (p.parent.name[:10], p.stat().st_mtime), reverse=True)
    return [summary.parent for summary in ordered]


def run_kind(run: Path) -> str:
    """What a run folder holds, from its name: `report`, `sweep-<set>[-N]`, ... (its date left off)."""
    return run.name[11:]


def latest_report(runs: Sequence[Path]) -> Path | None:
    """The newest report run among `runs` (newest first, :func:`summarised_runs`)."""
    return next((run for run in runs if run_kind(run).startswith(REPORT_NAME)), None)


def latest_sweep_per_set(runs: Sequence[Path]) -> dict[str, Path]:
    """The newest sweep run of each set among `runs` (newest first, :func:`summarised_runs`), by
    the set named in the folder's name."""
    latest: dict[str, Path] = {}
    for run in runs:
        kind = run_kind(run).split("-")[1] if run_kind(run).startswith(SWEEP_PREFIX) else None
        if kind and kind not in latest:
            latest[kind] = run
    return latest


def latest_sweeps(reports: str | os.PathLike) -> list[Path]:
    """The newest finished sweep run (a folder with a record) of each dataset its record names."""
    folders = [p.parent for p in Path(reports).glob(f"*-{SWEEP_PREFIX}*/{RECORD_FILE}")]
    latest: dict[str, Path] = {}
    for folder in sorted(folders, key=lambda p: (p.stat().st_mtime, p.name)):  # oldest first
        latest[SweepRecord.read(folder).dataset] = folder
    return [latest[name] for name in sorted(latest)]


def update_index(reports: str | os.PathLike) -> Path:
    """`reports/index.md`: every run folder (newest first) with the first verdict line of its summary."""
    reports = Path(reports)
    rows = []
    for run in summarised_runs(reports):
        text = (run / SUMMARY_FILE).read_text(encoding="utf-8").splitlines()
        verdict = next(
            (line.replace("**Verdict:**", "").strip() for line in text if line.startswith("**Verdict")), ""
        )
        title = text[0].lstrip("# ").strip() if text else run.name
        rows.append(f"| [{run.name}]({run.name}/{SUMMARY_FILE}) | {title} | {verdict} |")
    content = [
        "# Reports",
        "",
        "Generated by `hybridlab sweep` / `hybridlab report` (newest first).",
        "",
        "| run | title | verdict |",
        "|---|---|---|",
        *rows,
    ]
    path = reports / "index.md"
    path.write_text("\n".join(content) + "\n", encoding="utf-8")
    return path

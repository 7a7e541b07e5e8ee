"""The reproduction record (pyserini's `2cr/*.yaml` style): every quoted figure as a condition.

See docs/internals/tune-eval.md#reproduction-record (the file's fields and placeholders).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridlab.config import ENV_ALIASES, ENV_PREFIX, SEARCH_FIELDS, IndexConfig, offline_environment
from hybridlab.errors import (
    HybridlabError,
    IndexLockedError,
    InvalidValueError,
    PathNotFoundError,
    StoreLockedError,
)
from hybridlab.eval.datasets import REPO_ROOT, data_dir
from hybridlab.eval.evalsets import cache_root, ensure_index, get_evalset

DEFAULT_CONDITIONS = REPO_ROOT / "repro" / "conditions.yaml"
DEFAULT_TOLERANCE = 0.0005
#: the uncommitted files a condition may need: name -> how to get it (its path: env HYBRIDLAB_<NAME>)
NEEDS = {
    "locomo": "LoCoMo's data/locomo10.json (github.com/snap-research/LoCoMo, commit 3eb6f2c; CC BY-NC 4.0, "
    "never committed here)"
}
REQUIRED = ("name", "dataset", "split", "command", "metrics")


@dataclass(frozen=True)
class Condition:
    """One recorded figure: what to run and what it gave when recorded."""

    name: str
    dataset: str
    split: str
    command: str | list[str]
    metrics: dict[str, float]
    queries: int | None = None
    cheap: bool = False
    index: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    #: files the command reads that are not committed (their licences keep them out of git), by name:
    #: each is `${name}` in the command, its path taken from env `HYBRIDLAB_<NAME>` (see :data:`NEEDS`)
    needs: tuple[str, ...] = ()

    @property
    def steps(self) -> list[str]:
        """The commands, in order; the last one prints the metrics."""
        return [self.command] if isinstance(self.command, str) else list(self.command)


@dataclass(frozen=True)
class Outcome:
    """A condition re-run: (metric, expected, measured, ok) rows, or the error that stopped it."""

    condition: Condition
    rows: list[tuple[str, float, float | None, bool]]
    queries: int | None
    seconds: float
    error: str | None = None
    #: a failing condition's command run once more: its measured metrics (None = not re-run or it
    #: printed none); the condition still fails, this only tells a persistent change from a one-off
    rerun: dict[str, float] | None = None
    skipped: str | None = None  # why it did not run (a file it needs is absent)

    @property
    def ok(self) -> bool:
        return self.error is None and all(ok for *_, ok in self.rows)


def missing_need(condition: Condition, env: Mapping[str, str] | None = None) -> str | None:
    """Why the condition cannot run here (a file it needs is not given or not there), or None."""
    env = os.environ if env is None else env
    for name in condition.needs:
        if name not in NEEDS:
            return f"unknown need {name!r}; known: {sorted(NEEDS)}"
        variable = f"HYBRIDLAB_{name.upper()}"
        path = env.get(variable)
        if not path or not Path(path).is_file():
            return f"needs {NEEDS[name]}: set {variable}=/path/to/it" + (
                f" ({path} is not a file)" if path else ""
            )
    return None


def load_conditions(path: str | os.PathLike = DEFAULT_CONDITIONS) -> list[Condition]:
    """The conditions of a record file; ValueError names the condition and what is wrong."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise PathNotFoundError(f"conditions file not found: {path}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    entries = data.get("conditions") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise InvalidValueError(f"{path}: expected a mapping with a 'conditions' list")
    conditions, seen = [], set()
    for i, entry in enumerate(entries):
        name = entry.get("name", f"#{i + 1}") if isinstance(entry, dict) else f"#{i + 1}"
        if not isinstance(entry, dict) or any(key not in entry for key in REQUIRED):
            raise InvalidValueError(f"{path}: condition {name!r} needs {list(REQUIRED)}")
        unknown = set(entry) - {f for f in Condition.__dataclass_fields__}
        if unknown:
            raise InvalidValueError(f"{path}: condition {name!r} has unknown keys {sorted(unknown)}")
        if name in seen:
            raise InvalidValueError(f"{path}: condition {name!r} appears twice")
        seen.add(name)
        conditions.append(
            Condition(
                **{
                    **entry,
                    "metrics": {k: float(v) for k, v in entry["metrics"].items()},
                    "index": dict(entry.get("index") or {}),
                    "needs": tuple(entry.get("needs") or ()),
                }
            )
        )
    return conditions


def select(
    conditions: Sequence[Condition], *, cheap: bool = False, names: Sequence[str] | None = None
) -> list[Condition]:
    """The cheap ones and/or the named ones (ValueError for an unknown name, listing the choices)."""
    if names:
        known = {c.name for c in conditions}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise InvalidValueError(f"unknown condition(s) {unknown}; choose from {sorted(known)}")
        conditions = [c for c in conditions if c.name in names]
    return [c for c in conditions if c.cheap or not cheap]


def command_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default os.environ) without the variables that would change a search: every
    `HYBRIDLAB_<SEARCH FIELD>`, its aliases and `HYBRIDLAB_NOW`; plus the offline settings."""
    env = dict(os.environ if env is None else env)
    drop = {ENV_PREFIX + name.upper() for name in SEARCH_FIELDS} | {ENV_PREFIX + "NOW"}
    drop |= {alias for aliases in ENV_ALIASES.values() for alias in aliases}
    return {**{k: v for k, v in env.items() if k not in drop}, **offline_environment()}


def expand(
    condition: Condition, index_dir: Path | None, tmp_dir: Path | None = None, command: str | None = None
) -> list[str]:
    """The condition's command (or one of its steps) as argv: placeholders filled, `hybridlab` run by
    this interpreter."""
    values = {"data": str(data_dir())}
    values.update({name: os.environ.get(f"HYBRIDLAB_{name.upper()}", "") for name in condition.needs})
    if index_dir is not None:
        values["index"] = repo_relative(index_dir)
    if tmp_dir is not None:
        values["tmp"] = str(tmp_dir)
    try:
        text = string.Template(condition.steps[-1] if command is None else command).substitute(values)
    except KeyError as error:
        raise InvalidValueError(
            f"condition {condition.name!r}: unknown placeholder ${{{error.args[0]}}}"
        ) from None
    argv = shlex.split(text)
    if argv[:1] == ["hybridlab"]:
        argv = [sys.executable, "-m", "hybridlab.cli", *argv[1:]]
    return argv


def repo_relative(path: Path) -> str:
    """`path` relative to the repository when inside it (as the record and its messages show it)."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _ensure_waiting(condition: Condition, progress: bool, timeout: float, poll_s: float = 2.0) -> Path:
    """The condition's index, built once; while another process writes it or the shared
    embeddings cache (a test run, a sweep), wait for it rather than fail, up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ensure_index(
                get_evalset(condition.dataset), IndexConfig.from_dict(condition.index), progress=progress
            )
        except (IndexLockedError, StoreLockedError):  # the index, or the embeddings cache, is being written
            if time.monotonic() > deadline:
                raise
            time.sleep(poll_s)


def run_condition(
    condition: Condition,
    tolerance: float = DEFAULT_TOLERANCE,
    *,
    progress: bool = False,
    timeout: float = 3600.0,
) -> Outcome:
    """Build (or reuse) the index, run the command, compare the metrics it prints as JSON."""
    started = time.perf_counter()
    absent = missing_need(condition)
    if absent:
        return Outcome(condition, [], None, 0.0, skipped=absent)
    with tempfile.TemporaryDirectory(prefix="hybridlab-repro-") as tmp:
        return _run_condition(condition, tolerance, progress, timeout, Path(tmp), started)


def _run_condition(
    condition: Condition, tolerance: float, progress: bool, timeout: float, tmp_dir: Path, started: float
) -> Outcome:
    def failed(message: str) -> Outcome:
        return Outcome(condition, [], None, time.perf_counter() - started, message)

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv,
            cwd=REPO_ROOT,
            env=command_environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def last_line(done: subprocess.CompletedProcess) -> str:
        return (done.stderr.strip().splitlines() or ["(no output)"])[-1]

    try:
        index_dir = None
        if any("${index}" in step for step in condition.steps):
            index_dir = _ensure_waiting(condition, progress, timeout)
        *before, argv = [expand(condition, index_dir, tmp_dir, step) for step in condition.steps]
    except (ValueError, FileNotFoundError, HybridlabError) as error:
        return failed(str(error))
    for number, step in enumerate(before, 1):
        done = run(step)
        if done.returncode != 0:
            return failed(f"step {number} exited {done.returncode}: {last_line(done)}")
    last = shlex.split(condition.steps[-1])
    is_eval = last[:2] == ["hybridlab", "eval"] and "--run" not in last
    first_run = tmp_dir / "first.trec"

    def saving(
        run_file: Path,
    ) -> list[str]:  # an eval logs at INFO (which encoders it loads) and saves its run
        return [*argv[:3], "-v", *argv[3:], "--save-run", str(run_file)] if is_eval else argv

    done = run(saving(first_run))  # the run is kept only if the condition fails
    if done.returncode != 0:
        return failed(f"the command exited {done.returncode}: {last_line(done)}")
    printed = _printed_metrics(done.stdout)
    if printed is None:
        return failed("the command printed no JSON metrics (does it pass --json?)")
    measured = printed["metrics"]
    rows = [
        (m, expected, measured.get(m), m in measured and abs(measured[m] - expected) <= tolerance)
        for m, expected in condition.metrics.items()
    ]
    queries = printed.get("queries")
    if condition.queries is not None and queries != condition.queries:
        rows.append(("queries", float(condition.queries), None if queries is None else float(queries), False))
    rerun = None
    if not all(ok for *_, ok in rows):
        evidence = failure_folder(condition)
        again = run(saving(evidence / "rerun.trec"))
        rerun = (_printed_metrics(again.stdout) or {}).get("metrics") if again.returncode == 0 else None
        if first_run.exists():
            shutil.copyfile(first_run, evidence / "first.trec")
        _keep_evidence(evidence, argv, index_dir, (done, again))
    return Outcome(condition, rows, queries, time.perf_counter() - started, rerun=rerun)


def failure_folder(condition: Condition) -> Path:
    """Where a failing condition's evidence goes: `.cache/repro-failures/<name>-<time>/`."""
    folder = failure_folder_root() / f"{condition.name}-{time.strftime('%Y%m%dT%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _keep_evidence(
    folder: Path, argv: Sequence[str], index_dir: Path | None, attempts: Sequence[subprocess.CompletedProcess]
) -> None:
    """The command, both attempts' output (an eval's at INFO level) and the index's manifest and
    file listing, to diff against a passing run (the runs are first.trec and rerun.trec)."""
    lines = [shlex.join(argv)]
    for number, attempt in enumerate(attempts, 1):
        lines += [
            f"## attempt {number}: exit {attempt.returncode}",
            "### stdout",
            attempt.stdout,
            "### stderr",
            attempt.stderr,
        ]
    (folder / "commands.txt").write_text("\n".join(lines), encoding="utf-8")
    if index_dir is not None and (Path(index_dir) / "manifest.json").exists():
        (folder / "manifest.json").write_text(
            (Path(index_dir) / "manifest.json").read_text(encoding="utf-8"), encoding="utf-8"
        )
        listing = [
            f"{p.relative_to(index_dir)}\t{p.stat().st_size}\t{p.stat().st_mtime_ns}"
            for p in sorted(Path(index_dir).rglob("*"))
            if p.is_file()
        ]
        (folder / "index-files.tsv").write_text("\n".join(listing), encoding="utf-8")


def _printed_metrics(stdout: str) -> dict[str, Any] | None:
    """The `{"queries", "metrics"}` JSON a condition's command printed, or None."""
    lines = stdout.splitlines()
    for start in (i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("{")):
        try:
            printed = json.loads("\n".join(lines[start:]))
        except ValueError:
            continue
        if isinstance(printed, dict) and isinstance(printed.get("scores"), dict) and "baseline" in printed:
            # a run report: {"baseline": run, "scores": {run: {metric: {"mean": ...}}}}
            baseline = printed["baseline"]
            printed["metrics"] = {
                (m if run == baseline else f"{run}/{m}"): interval["mean"]
                for run, by_metric in printed["scores"].items()
                for m, interval in by_metric.items()
            }
        return printed if isinstance(printed, dict) and isinstance(printed.get("metrics"), dict) else None
    return None


def recorded_text(text: str, name: str, measured: dict[str, float]) -> str:
    """The conditions file's `text` with condition `name`'s expected metrics replaced by `measured`
    (4 decimals); everything else, comments included, stays as it was."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.strip() == f"- name: {name}"), None)
    if start is None:
        raise InvalidValueError(f"condition {name!r} not found in the conditions file")
    in_metrics, done = False, set()
    for i in range(start + 1, len(lines)):
        stripped = lines[i].strip()
        if stripped.startswith("- name:"):
            break
        if stripped == "metrics:":
            in_metrics = True
            continue
        if in_metrics:
            key, _, _ = stripped.partition(":")
            if not lines[i].startswith("    ") or key not in measured:
                in_metrics = False
                continue
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            lines[i] = f"{indent}{key}: {measured[key]:.4f}\n"
            done.add(key)
    missing = [key for key in measured if key not in done]
    if missing:
        raise InvalidValueError(f"condition {name!r}: no expected value for {missing} to record")
    return "".join(lines)


def format_outcome(outcome: Outcome, tolerance: float) -> list[str]:
    """OK/FAIL lines of one condition."""
    condition = outcome.condition
    queries = outcome.queries if outcome.queries is not None else "?"
    lines = [
        f"# {condition.name} ({condition.dataset} {condition.split}, {queries} queries, {outcome.seconds:.0f} s)"
    ]
    if outcome.skipped:
        return [*lines, f"SKIP {outcome.skipped}"]
    if outcome.error:
        return [*lines, f"FAIL {outcome.error}"]
    for metric, expected, measured, ok in outcome.rows:
        shown = "missing" if measured is None else f"{measured:.4f}"
        delta = (
            ""
            if measured is None
            else f"  (Δ {round(measured - expected, 4) + 0.0:+.4f}, tolerance ±{tolerance})"
        )
        lines.append(
            f"{'OK  ' if ok else 'FAIL'} {metric:<12} expected {expected:.4f}  measured {shown}{delta}"
        )
    if not outcome.ok and outcome.rerun is not None:
        same = all(
            abs(outcome.rerun.get(m, float("nan")) - v) <= 1e-9
            for m, _, v, _ in outcome.rows
            if v is not None and m != "queries"
        )
        shown = ", ".join(f"{m} {outcome.rerun[m]:.4f}" for m in condition.metrics if m in outcome.rerun)
        lines.append(
            f"     the same command run again: {shown} ("
            + ("the same: a persistent change" if same else "different: a one-off, look for what differed")
            + ")"
        )
        lines.append(
            f"     evidence (both attempts' output and TREC runs, the index manifest): "
            f"{repo_relative(failure_folder_root() / condition.name)}-*"
        )
    return lines


def failure_folder_root() -> Path:
    return cache_root() / "repro-failures"

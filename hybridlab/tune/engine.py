"""The engine a sweep's figures were measured on, and whether they still hold: the state of the
engine's sources a sweep records, and why a recorded sweep is stale."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from hybridlab.eval.datasets import REPO_ROOT
from hybridlab.tune.record import EngineState, SweepRecord

#: "The engine" whose changes make a sweep stale: what builds the index and ranks (ingest, index,
#: search, encoders, the config defaults) and what scores (eval/evaluate.py). Its state is the sha256
#: of these files' contents (*.py, by path), so it holds outside git and for uncommitted changes; the
#: newest git commit touching them is recorded too, for people.
ENGINE_PATHS = (
    "hybridlab/config.py",
    "hybridlab/encoders",
    "hybridlab/eval/evaluate.py",
    "hybridlab/index",
    "hybridlab/ingest",
    "hybridlab/search",
)


def git(*args: str, repo: Path = REPO_ROOT) -> str | None:
    """The stdout of `git -C repo args...`, or None outside git (or when git fails)."""
    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def engine_state(root: Path = REPO_ROOT) -> EngineState:
    """The hash of the engine's sources (:data:`ENGINE_PATHS`, *.py sorted by path) and the newest
    commit touching them (commit/date/dirty None outside git; dirty = uncommitted changes there)."""
    files: list[Path] = []
    for path in (root / name for name in ENGINE_PATHS):
        files += path.rglob("*.py") if path.is_dir() else [path] if path.is_file() else []
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda f: f.relative_to(root).as_posix()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    log = (git("log", "-1", "--format=%H %cI", "--", *ENGINE_PATHS, repo=root) or "").split()
    status = git("status", "--porcelain", "--untracked-files=no", "--", *ENGINE_PATHS, repo=root)
    known = len(log) == 2 and status is not None
    return EngineState(
        source_sha256=digest.hexdigest(),
        commit=log[0] if known else None,
        date=log[1] if known else None,
        dirty=bool(status.strip()) if known and status is not None else None,
        paths=ENGINE_PATHS,
    )


def stale_reason(record: SweepRecord, current: EngineState | None = None) -> str | None:
    """Why a sweep record's figures may not hold for today's engine (None when its engine sources
    are today's): the engine changed since, or the record predates engine records."""
    current = current or engine_state()
    recorded = record.engine
    last = (
        f"the engine last changed in {current.commit[:10]} ({current.date})"
        if current.commit
        else "the engine's sources differ"
    )
    if not recorded:
        return f"the sweep predates engine records (hybridlab.tune.engine.ENGINE_PATHS); {last}"
    if recorded.source_sha256 == current.source_sha256:
        return None
    swept = (
        f"swept on {recorded.commit[:10]}{' + uncommitted changes' if recorded.dirty else ''}"
        if recorded.commit
        else "swept on another engine"
    )
    now = (
        f"now {current.commit[:10]} ({current.date}){' + uncommitted changes' if current.dirty else ''}"
        if current.commit
        else "now other sources"
    )
    return f"the engine changed since the sweep ({swept}; {now})"

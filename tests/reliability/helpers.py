"""Helpers of the reliability tests: a small synthetic markdown corpus indexed with the fast
`wordllama` model, CLI runs in subprocesses, and result snapshots at a fixed `now`."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

NOW = "2026-11-01T00:00:00Z"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "panel",
    "holoviews",
    "bokeh",
    "widget",
    "plot",
    "layout",
    "stream",
    "param",
    "server",
    "notebook",
    "table",
    "chart",
    "slider",
    "data",
    "frame",
    "index",
    "vector",
    "search",
    "memory",
    "tag",
    "python",
    "async",
    "render",
    "cache",
]
QUERIES = (
    "panel widget",
    "holoviews stream plot",
    "data frame table",
    "vector search memory",
    "async render cache",
    "slider",
    "bokeh server layout notebook",
)
MODEL_ARGS = ("--model", "wordllama")


def env(**extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: offline, quiet, deterministic."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HYBRIDLAB_NOW": NOW,
        **extra,
    }


def cli(*args: str, check: bool = True, **extra_env: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "hybridlab.cli", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env(**extra_env),
        timeout=600,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"hybridlab {' '.join(args)} exited {result.returncode}: {result.stderr[-2000:]}"
        )
    return result


def doc_text(i: int, version: int = 0) -> str:
    rng = random.Random(i * 7919 + version)
    paragraphs = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))) for _ in range(rng.randint(1, 3))
    ]
    return f"# Document {i} v{version}\n\n" + "\n\n".join(paragraphs) + "\n"


def write_corpus(folder: Path, ids: range | list[int], version: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in ids:
        (folder / f"doc{i:04d}.md").write_text(doc_text(i, version), encoding="utf-8")


def snapshot(index_dir: Path) -> dict[str, dict[str, float]]:
    """Every query's full ranking `{doc_id: score}` (rounded), with the consistency check on open."""
    from hybridlab.search.engine import open_index

    index = open_index(index_dir)
    try:
        return {
            q: {d: round(s, 9) for d, s in index.run(q, now=NOW, depth=1000, limit=1000).items()}
            for q in QUERIES
        }
    finally:
        index.close()


def _record_path() -> Path | None:
    value = os.environ.get("HYBRIDLAB_RELIABILITY_RECORD")
    return Path(value) if value else None


def record(name: str, value: object) -> None:
    """Add a figure to the reliability record (read by `python tests/reliability/report.py`)."""
    path = _record_path()
    if path is None:
        return
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = value
    path.write_text(json.dumps(data, indent=2, sort_keys=True))

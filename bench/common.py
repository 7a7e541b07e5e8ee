"""Shared pieces of the benchmark: the results row schema, workers, machine facts, and the one
percentile of every benchmark and report (:mod:`bench.percentiles`, re-exported here).

Everything here but `run_worker`, `peak_rss_mb` and `machine_info` is a pure function.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.percentiles import PERCENTILE_LABEL, PERCENTILE_METHOD, median_summary, percentile, summarize  # noqa: F401
from hybridlab.config import offline_environment
from hybridlab.ingest.files import find_file, iter_jsonl
from hybridlab.reports.staged import top_overlap  # noqa: F401 - one definition, the package's

SYSTEMS = ("hybridlab", "chromadb", "lancedb", "rank-bm25", "bm25s", "raw-encoder")
MODES = ("vector", "bm25", "hybrid", "staged", "encode", "index")
REQUIRED_FIELDS = ("system", "n_chunks", "mode", "filtered")
NUMBER_FIELDS = (
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "search_p50_ms",
    "search_p95_ms",
    "search_p99_ms",
    "encode_p50_ms",
    "ndcg@10",
    "peak_rss_mb",
)
OPTIONAL_FIELDS = (
    "encoder",
    "variant",
    "dataset",
    "queries",
    "repeats",
    "note",
    "candidates",
    "overlap@10",
    "chunks_per_s",
    "seconds",
    "size_mb",
    "speedup",
    "dense_index",
    "ef_search",
    "recall@10",
    "cpu_p50_ms",
    "cpu_p95_ms",
    "cpu_p99_ms",
)
PACKAGES = (
    "hybridlab",
    "numpy",
    "faiss-cpu",
    "bm25s",
    "duckdb",
    "torch",
    "sentence-transformers",
    "onnxruntime",
    "wordllama",
    "chromadb",
    "lancedb",
    "pylance",
    "pyarrow",
    "rank-bm25",
    "psutil",
    "ranx",
    "matplotlib",
)


def ratio(value: float | None, reference: float | None) -> float | None:
    """value / reference, None when either is missing or the reference is not positive."""
    if value is None or reference is None or reference <= 0:
        return None
    return value / reference


def make_row(system: str, n_chunks: int, mode: str, filtered: bool, **fields: Any) -> dict[str, Any]:
    """One results.json row; unknown systems/modes/fields raise ValueError listing the choices."""
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; choose from {list(SYSTEMS)}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {list(MODES)}")
    unknown = set(fields) - set(NUMBER_FIELDS) - set(OPTIONAL_FIELDS)
    if unknown:
        raise ValueError(
            f"unknown row fields {sorted(unknown)}; choose from {sorted(NUMBER_FIELDS + OPTIONAL_FIELDS)}"
        )
    row: dict[str, Any] = {
        "system": system,
        "n_chunks": int(n_chunks),
        "mode": mode,
        "filtered": bool(filtered),
    }
    for name in NUMBER_FIELDS:
        value = fields.get(name)
        row[name] = None if value is None else round(float(value), 4)
    for name in OPTIONAL_FIELDS:
        if name in fields:
            row[name] = fields[name]
    return row


def validate_rows(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Problems with results rows (empty list = valid)."""
    problems = []
    for i, row in enumerate(rows):
        missing = [f for f in REQUIRED_FIELDS + NUMBER_FIELDS if f not in row]
        if missing:
            problems.append(f"row {i}: missing {missing}")
            continue
        if row["system"] not in SYSTEMS:
            problems.append(f"row {i}: unknown system {row['system']!r}")
        if row["mode"] not in MODES:
            problems.append(f"row {i}: unknown mode {row['mode']!r}")
        if not isinstance(row["filtered"], bool):
            problems.append(f"row {i}: filtered must be a bool")
        for name in NUMBER_FIELDS:
            if row[name] is not None and not isinstance(row[name], (int, float)):
                problems.append(f"row {i}: {name} must be a number or null")
    return problems


def find_rows(rows: Iterable[Mapping[str, Any]], **match: Any) -> list[Mapping[str, Any]]:
    """Rows whose fields equal every given value (a missing field never matches)."""
    return [row for row in rows if all(k in row and row[k] == v for k, v in match.items())]


def peak_rss_mb() -> float:
    """Peak resident set size of this process, MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench_env() -> dict[str, str]:
    """The environment every benchmark subprocess runs in: offline, no tokenizer threads."""
    return {**os.environ, **offline_environment(), "ANONYMIZED_TELEMETRY": "False"}


def run_worker(module: str, arguments: Mapping[str, Any], timeout: float = 3600) -> Any:
    """Run `python -m module --worker JSON` in a fresh process (clean peak RSS, no shared caches);
    the worker prints its JSON result as the last line of stdout."""
    command = [sys.executable, "-m", module, "--worker", json.dumps(dict(arguments))]
    done = subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=timeout, env=bench_env()
    )
    if done.returncode != 0:
        raise RuntimeError(f"{module} worker failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError(f"{module} worker printed nothing; stderr: {done.stderr.strip()[-1000:]}")
    return json.loads(lines[-1])


def worker_main(argv: Sequence[str], handler) -> bool:
    """If argv is `--worker JSON`, run handler(arguments) and print its JSON result; True if it ran."""
    if len(argv) >= 2 and argv[0] == "--worker":
        result = handler(json.loads(argv[1]))
        sys.stdout.write("\n" + json.dumps(result) + "\n")
        sys.stdout.flush()
        return True
    return False


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_versions(packages: Sequence[str] = PACKAGES) -> dict[str, str | None]:
    import importlib.metadata as md

    found: dict[str, str | None] = {}
    for package in packages:
        try:
            found[package] = md.version(package)
        except md.PackageNotFoundError:
            found[package] = None
    return found


def machine_info() -> dict[str, Any]:
    """CPU model, cores, memory, load, Python and package versions."""
    memory_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": memory_gb,
        "load_average": list(os.getloadavg()),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "faiss_threads": os.environ.get("HYBRIDLAB_FAISS_THREADS", "1"),
        "shared_machine": True,
    }


def iter_corpus(folder: Path) -> Iterator[tuple[int, dict]]:
    """(line number, `{_id, title, text, metadata?}`) of `corpus.jsonl[.gz]`."""
    yield from iter_jsonl(find_file(folder, "corpus.jsonl"))

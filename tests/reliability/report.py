"""Run the reliability tests and write their figures to `reports/reliability.md`.

    python tests/reliability/report.py            # the `make test` part (a few minutes)
    python tests/reliability/report.py --soak     # also the soak loops (`make soak`)

The tests add their figures (kill points survived, hypothesis examples, malformed inputs, load
held) to a JSON record named by `HYBRIDLAB_RELIABILITY_RECORD`; this module runs pytest with it set
and renders the record with the pytest outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybridlab.config import offline_environment

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests" / "reliability"
REPORT = REPO / "reports" / "reliability.md"


def run_tests(soak: bool) -> tuple[dict[str, Any], str, int, float]:
    """(record, pytest summary line, exit code, seconds) of one run of tests/reliability."""
    with tempfile.TemporaryDirectory() as folder:
        record = Path(folder) / "record.json"
        marker = ["-m", "soak or not soak"] if soak else ["-m", "not soak"]
        command = [sys.executable, "-m", "pytest", str(TESTS), "-q", "-p", "no:cacheprovider", *marker]
        started = time.perf_counter()
        result = subprocess.run(
            command,
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, **offline_environment(), "HYBRIDLAB_RELIABILITY_RECORD": str(record)},
        )
        seconds = time.perf_counter() - started
        data = json.loads(record.read_text()) if record.exists() else {}
    lines = [line for line in result.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    return data, (lines[-1].strip("= ") if lines else result.stdout[-300:]), result.returncode, seconds


def render(record: dict[str, Any], summary: str, code: int, seconds: float, soak: bool) -> str:
    """The markdown report."""
    kill_points = record.get("kill_stage_points", 0)
    soak_kills = sum(v for k, v in record.items() if k.startswith("kill_time_points"))
    soak_states: dict[str, int] = {}
    for key, states in record.items():
        if key.startswith("kill_time_states"):
            for state, count in states.items():
                soak_states[state] = soak_states.get(state, 0) + count
    examples = record.get("hypothesis_examples", {})
    load = record.get("mcp_load_soak") or record.get("mcp_load_small") or {}
    rows = [
        (
            "SIGKILL points survived (one per indexer stage, `make test`)",
            kill_points,
            (
                "index opens, `verify` clean, results identical to before the run; the next run completes it "
                "(results equal the uninterrupted run's) and re-embeds only what the killed run had not cached"
            ),
        ),
        (
            "SIGKILL points survived (time-based, soak)",
            soak_kills if soak else "not run",
            f"same checks, two kills per copy (the second on the resuming run); outcomes {json.dumps(soak_states)}",
        ),
        (
            "kill outcomes",
            json.dumps(record.get("kill_stage_states", {})),
            ("previous = killed before the manifest swap, committed = after"),
        ),
        (
            "corruption cases",
            record.get("corruption_cases", 0),
            (
                "each: CorruptIndexError naming the file and "
                "`hybridlab verify --repair`; repair restores the results"
            ),
        ),
        ("hypothesis examples", sum(examples.values()), json.dumps(examples)),
        (
            "malformed inputs tried",
            record.get("malformed_inputs", 0),
            (
                "tests/data/bad/ + 3 generated (50 MB file, "
                "200 kB line, 20,000 headings); each skipped/warned/errored as the table in test_bad_inputs.py says"
            ),
        ),
        ("odd queries", record.get("odd_queries", 0), "answered or refused with a ValueError, in 3 modes"),
        (
            "MCP mixed load",
            f"{load.get('calls', 0)} calls, {load.get('concurrency', 0)} concurrent",
            (
                f"{load.get('stored', 0)} memories stored, {load.get('errors', 'n/a')} errors, every memory found "
                f"afterwards; {load.get('seconds', 'n/a')} s"
            ),
        ),
    ]
    for key, label in (
        ("processes_short", "3 writer + 2 reader processes (`make test`)"),
        ("processes_soak", "3 writer + 2 reader processes (soak)"),
    ):
        run = record.get(key)
        rows.append(
            (
                label,
                f"{run['seconds']:.0f} s, wal_records {run['wal_records']}" if run else "not run",
                (
                    f"{run['stores']} stores, {run['acknowledged_ids']} ids, {run['reader_opens']} reader opens, "
                    f"{run['errors']} errors; every acknowledged memory found as one document; verify clean"
                )
                if run
                else "",
            )
        )
    two = record.get("mcp_load_two_servers")
    if two:
        rows.append(
            (
                "two MCP server processes on one index",
                f"{two['calls']} calls, {two['clients']} clients",
                f"{two['acknowledged']} memories stored, {two['errors']} errors, nothing lost",
            )
        )
    table = "\n".join(f"| {name} | {value} | {note} |" for name, value, note in rows)
    status = "all passed" if code == 0 else f"FAILURES (pytest exit {code})"
    command = "python tests/reliability/report.py" + (" --soak" if soak else "")
    return f"""# Reliability

Generated by `{command}` on {datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")} in {seconds:.0f} s:
pytest `tests/reliability` {"with" if soak else "without"} the soak loops: **{summary}** ({status}).

| check | figure | what held |
|---|---|---|
{table}

## What the tests establish
- **Transactions.** An `index` run writes a new generation folder aside (DuckDB changes in one
  transaction, then BM25 and FAISS, a manifest copy; every file flushed), renames it, and commits by
  atomically replacing `manifest.json`, which records each file's size and sha256. Embeddings are
  committed to the cache batch by batch, so a killed run loses no embedding work.
- **Verification on open.** Opening an index checks every file against the manifest's checksums
  before any parser sees it, then that DuckDB, BM25 and each FAISS index hold the same chunk ids
  (`Index.consistency_problems`). A damaged file raises `CorruptIndexError` naming the file and
  `hybridlab verify --repair --index DIR`; a truncated FAISS file of a manifest without checksums is
  also a clear error (checked in a subprocess, so a segfault would show).
- **Repair** (`hybridlab verify --repair`): a lost or corrupt manifest is rewritten from the newest
  intact generation's copy; damaged BM25/FAISS files are rebuilt from DuckDB and the embeddings
  cache; a damaged DuckDB store falls back to the previous generation (each run keeps one; that
  run's changes must be indexed again); a corrupt index-local embeddings cache is moved aside and
  refilled. A damaged store without an intact previous generation is not repairable: rebuild.
- **Locks.** Writers queue: in one process on a first-come lock, across processes on a blocking
  `flock`, for up to `HYBRIDLAB_LOCK_WAIT` seconds (30); then `index DIR is locked by PID N (...)`
  names the holding thread of this process or the other process and its command. Readers are never
  blocked, and writers leave a retired generation's files in place while a reader opens one.
- **One id, one document.** A write bringing an id twice keeps its last version; a writer sees the
  other writers' log appends; `verify` finds ids held twice and `--repair` keeps the newest.
- **No pickle** in the package; every `np.load` passes `allow_pickle=False`; documents are looked up
  by id in DuckDB (no file access); `hybridlab mcp` binds HTTP to 127.0.0.1 unless told otherwise.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/reliability/report.py", description=__doc__)
    parser.add_argument("--soak", action="store_true", help="also run the soak loops (slow)")
    parser.add_argument("--output", default=str(REPORT))
    args = parser.parse_args(argv)
    record, summary, code, seconds = run_tests(args.soak)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render(record, summary, code, seconds, args.soak), encoding="utf-8")
    print(f"{summary}; wrote {output}")
    return code


if __name__ == "__main__":
    sys.exit(main())

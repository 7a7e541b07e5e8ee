"""Several processes on one index (issue 28): 3 writer processes (`wal_records=1`: every store
appends and folds, new ids and replacements of ids the others write too) and 2 reader processes,
for a bounded time (`make soak`: 5 minutes, every writer at `wal_records=1`): 0 errors, every acknowledged memory found as its last acknowledged version,
no id ever held twice, `verify` clean. 20 s in `make test`; 5 minutes in `make soak`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import env, record

WORKER = Path(__file__).with_name("soak_worker.py")


def _run(small_index: Path, tmp_path: Path, seconds: float, wal_records: tuple[int, int, int]) -> dict:
    from hybridlab.index.admin.verify import verify
    from hybridlab.search.engine import open_index

    index_dir = tmp_path / "index"
    shutil.copytree(small_index, index_dir)
    roles = [("write", f"w{n}", records) for n, records in enumerate(wal_records)] + [
        ("read", f"r{n}", 0) for n in range(2)
    ]
    processes = []
    for role, name, records in roles:
        out = tmp_path / f"{name}.jsonl"
        processes.append(
            (
                name,
                out,
                subprocess.Popen(
                    [
                        sys.executable,
                        str(WORKER),
                        role,
                        str(index_dir),
                        str(seconds),
                        name,
                        str(out),
                        str(records),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env(PYTHONPATH=os.pathsep.join(sys.path)),
                ),
            )
        )
    summaries, acknowledged, failures = {}, {}, []
    for name, out, process in processes:
        _, stderr = process.communicate(timeout=seconds + 600)
        lines = (
            [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
            if out.exists()
            else []
        )
        summaries[name] = lines[-1]["summary"] if lines and "summary" in lines[-1] else None
        if process.returncode != 0 or summaries[name] is None or summaries[name]["errors"]:
            failures.append(f"{name}: exit {process.returncode}, {summaries[name]}: {stderr[-3000:]}")
        for line in lines:
            if "id" in line:
                acknowledged.setdefault(line["id"], []).append(line["content"])
    assert failures == []
    assert all(summaries[f"r{n}"]["duplicates"] == 0 for n in range(2))
    assert verify(index_dir) == []
    with open_index(index_dir) as index:
        store = index.snapshot().generation.store
        for memory_id, contents in acknowledged.items():
            texts = [
                row[0] for row in store.fetchall("SELECT text FROM documents WHERE doc_id = ?", [memory_id])
            ]
            # exactly one document; a shared id holds one of its acknowledged versions (writers race on it)
            assert len(texts) == 1 and texts[0] in contents, (memory_id, texts)
    stores = sum(summaries[f"w{n}"]["stores"] for n in range(3))
    return {
        "seconds": seconds,
        "wal_records": list(wal_records),
        "writers": 3,
        "readers": 2,
        "stores": stores,
        "acknowledged_ids": len(acknowledged),
        "reader_opens": sum(summaries[f"r{n}"]["opens"] for n in range(2)),
        "reader_searches": sum(summaries[f"r{n}"]["searches"] for n in range(2)),
        "errors": 0,
    }


@pytest.mark.slow
def test_three_writer_and_two_reader_processes_on_one_index(small_index, tmp_path):
    """Short, and with two writers keeping a log of 8 records open beside one folding at every store:
    each writer must see the others' appends (a replacement of a shared id is then a replacement)."""
    record("processes_short", _run(small_index, tmp_path, seconds=20, wal_records=(1, 8, 8)))


@pytest.mark.soak
def test_three_writer_and_two_reader_processes_on_one_index_soak(small_index, tmp_path):
    seconds = float(os.environ.get("HYBRIDLAB_SOAK_SECONDS", "300"))
    record("processes_soak", _run(small_index, tmp_path, seconds=seconds, wal_records=(1, 1, 1)))

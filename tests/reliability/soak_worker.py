"""One process of the multi-process soak (`test_processes.py`): a writer storing memories (new ids,
and ids that every writer stores at about the same time) or a reader opening, refreshing and
searching, until a deadline. Each acknowledged store is one line of the output file, flushed at once;
the last line of a reader's file is its JSON summary."""

from __future__ import annotations

import json
import random
import sys
import time
import traceback


def write(index_dir: str, seconds: float, name: str, out: str, wal_records: int) -> None:
    from hybridlab.index.write.memory import MemoryWriter, make_memory

    writer = MemoryWriter(index_dir, wal_records=wal_records, lock_wait=60)
    deadline = time.monotonic() + seconds
    errors = 0
    with open(out, "a", encoding="utf-8") as log:
        i = 0
        while time.monotonic() < deadline:
            i += 1
            # every third store: the id of these two seconds, which the other writers store now too (a
            # new id each time, so its first stores race in the log, not in a commit)
            memory_id = f"shared-{int(time.time() / 2)}" if i % 3 == 0 else f"{name}-{i:05d}"
            content = f"soak memory {memory_id} by {name} number {i} token zz{name}x{i}"
            try:
                writer.store_document(make_memory(content, ["load"], memory_id=memory_id))
            except Exception:  # noqa: BLE001 - counted, the test fails on any
                errors += 1
                traceback.print_exc()
                continue
            log.write(json.dumps({"id": memory_id, "content": content}) + "\n")
            log.flush()
        log.write(json.dumps({"summary": {"stores": i, "errors": errors}}) + "\n")
    writer.close()


def read(index_dir: str, seconds: float, name: str, out: str, wal_records: int = 0) -> None:
    from hybridlab.search.engine import open_index

    deadline = time.monotonic() + seconds
    opens = searches = errors = duplicates = 0
    words = ["soak", "memory", "token", "shared", "number", "load"]
    rng = random.Random(name)
    while time.monotonic() < deadline:
        try:
            with open_index(index_dir) as index:
                opens += 1
                for _ in range(5):
                    index.search(" ".join(rng.sample(words, 2)), limit=10)
                    searches += 1
                    doc_ids = index.snapshot().generation.doc_ids  # memories: one chunk each
                    if len(set(doc_ids)) != len(doc_ids):
                        duplicates += 1
        except Exception:  # noqa: BLE001 - counted, the test fails on any
            errors += 1
            traceback.print_exc()
    with open(out, "a", encoding="utf-8") as log:
        log.write(
            json.dumps(
                {
                    "summary": {
                        "opens": opens,
                        "searches": searches,
                        "errors": errors,
                        "duplicates": duplicates,
                    }
                }
            )
            + "\n"
        )


if __name__ == "__main__":
    role, index_dir, seconds, name, out, wal_records = sys.argv[1:7]
    (write if role == "write" else read)(index_dir, float(seconds), name, out, int(wal_records))

"""Scratch connections let go of their databases in the process-wide DuckDB instance even when
dropped without `close` (a snapshot replaced by a refresh): an MCP server that stored ~4,000
memories ran out of DuckDB memory (512MB pool) because every generation it had opened stayed
attached (LoCoMo through the MCP server, issue 39)."""

from __future__ import annotations

import gc
import json

from hybridlab.index.format import store


def attached() -> int:
    return store.scratch().execute("SELECT count(*) FROM duckdb_databases()").fetchone()[0]


def test_dropped_and_closed_connections_detach_their_databases():
    gc.collect()  # what earlier tests of this process dropped lets go first, not during the count
    before = attached()
    con = store.ScratchConnection()
    con.attach("extra_db_x", "ATTACH ':memory:' AS extra_db_x")
    assert attached() == before + 2
    del con
    gc.collect()
    assert attached() == before
    closed = store.ScratchConnection()
    closed.close()
    closed.close()  # twice is harmless
    assert attached() == before
    owner, other = store.ScratchConnection(), store.ScratchConnection()
    name = owner.adopt(other)
    del other
    gc.collect()
    assert (
        owner.execute(f"SELECT count(*) FROM duckdb_databases() WHERE database_name = '{name}'").fetchone()[0]
        == 1
    )
    owner.close()
    assert attached() == before


def test_a_server_storing_memories_keeps_a_bounded_number_of_databases(tmp_path):
    from hybridlab.index.write.build import index_paths
    from hybridlab.index.write.memory import MemoryWriter
    from hybridlab.search.engine import Index

    (tmp_path / "m.jsonl").write_text(json.dumps({"id": "m0", "content": "first memory"}) + "\n")
    index_paths([tmp_path / "m.jsonl"], tmp_path / "index", progress=False)
    writer = MemoryWriter(tmp_path / "index", wal_records=8)
    counts = []
    with Index(tmp_path / "index") as index:
        for n in range(40):
            writer.store(f"memory number {n} about topic {n % 7}")
            index.search("topic 3", limit=3)  # refreshes: a new snapshot each time
            gc.collect()
            counts.append(attached())
    writer.close()
    assert max(counts[20:]) <= max(counts[:20]) + 2, counts  # flat, not one more per store

"""Issue 20's MCP load target, with issue 32's updates and deletes: 2,000 mixed calls (store_memory,
search, search_by_tag, get_document, update_memory, delete_memory) from 4 concurrent streamable-HTTP
clients against one real `hybridlab mcp` process, which is SIGKILLed mid-run and restarted on the same
index: 0 errors, every acknowledged store and update there afterwards (exact text, found by search,
first in BM25 for its unique token), every acknowledged delete gone (and no deleted memory returned
by any call started after its deletion), every store, update or delete in flight at the kill either
done whole or not at all, the index verifying after the kill and at the end. The scenario lives in
`bench.mcp_load` (its docstring has the details), which also benchmarks it.
"""

from __future__ import annotations

import time

import pytest

from .helpers import record

CALLS = 2000
CLIENTS = 4


@pytest.mark.slow
@pytest.mark.xdist_group("mcp-load-2000")  # the longest test here: may run beside the module's others
def test_2000_mixed_calls_from_4_clients_survive_a_sigkill(tmp_path):
    pytest.importorskip("mcp")
    from bench.mcp_load import LoadConfig, run_load

    started = time.perf_counter()
    result = run_load(LoadConfig(calls=CALLS, clients=CLIENTS, kill_at=0.5, timeout=600), tmp_path)
    seconds = time.perf_counter() - started
    record(
        "mcp_load_kill",
        {
            "calls": result.calls,
            "clients": CLIENTS,
            "errors": len(result.errors),
            "acknowledged": result.acknowledged,
            "interrupted": result.interrupted,
            "updates": result.updates,
            "deletes": result.deletes,
            "in_flight_changes": result.in_flight_changes,
            "calls_per_second": round(result.calls_per_second, 1),
            "seconds": round(seconds, 1),
        },
    )

    assert result.errors == [], f"{len(result.errors)} errors, the first: {result.errors[:5]}"
    assert result.calls == CALLS
    assert all(result.latencies[tool] for tool in result.latencies)  # every tool was called
    assert (
        result.updates >= 20 and result.deletes >= 20
    )  # acknowledged, each checked after restart and at the end
    # the kill landed mid-run, with calls in flight, on an index holding acknowledged memories
    assert result.killed and result.interrupted >= 1
    assert 0 < result.acknowledged_before_kill < result.acknowledged
    assert result.checked_after_restart == result.acknowledged_before_kill
    assert result.verify_after_kill == [] and result.verify_at_end == []
    # every acknowledged memory (and every in-flight store that made it) checked at the end
    assert result.checked_at_end == result.acknowledged + result.in_flight_stores_found
    assert result.in_flight_stores_found <= result.in_flight_stores


@pytest.mark.slow
def test_two_server_processes_on_one_index_lose_nothing(tmp_path):
    """Two `hybridlab mcp` processes on one memory folder (two desktop clients each spawning the
    server): 4 clients, two per server, every check crossing processes; 0 errors, nothing lost, one
    document per id (issue 28)."""
    pytest.importorskip("mcp")
    from bench.mcp_load import LoadConfig, run_load

    started = time.perf_counter()
    result = run_load(LoadConfig(calls=600, clients=CLIENTS, kill_at=None, servers=2, timeout=600), tmp_path)
    record(
        "mcp_load_two_servers",
        {
            "calls": result.calls,
            "clients": CLIENTS,
            "servers": 2,
            "errors": len(result.errors),
            "acknowledged": result.acknowledged,
            "seconds": round(time.perf_counter() - started, 1),
        },
    )
    assert result.errors == [], f"{len(result.errors)} errors, the first: {result.errors[:5]}"
    assert result.calls == 600 and result.acknowledged > 0 and result.updates > 0 and result.deletes > 0
    assert result.verify_at_end == [] and result.checked_at_end == result.acknowledged


def test_a_generation_retired_while_it_is_read_stays_readable(tmp_path, monkeypatch):
    """Found by the load above: a reader opening generation N while two commits land (the second
    removed N's corpus graph) failed with 'graph-….npy cannot be read' although nothing was damaged;
    `store_memory` reported a committed memory as an error. Now the reader holds the files it opens
    (issue 28): the writers leave N's files in place, the reader finishes opening N, and the next
    read sees the new generation."""
    from bench.mcp_load import build_index
    from hybridlab.index import reader
    from hybridlab.index.write.memory import MemoryWriter

    index_dir = build_index(tmp_path, 20)
    writer = MemoryWriter(index_dir, wal_records=0)  # every store a commit: what retires generations
    first = writer.store("The first memory holds zqfirstword.")
    load_graph = reader.load_graph
    commits = []

    def two_commits_first(path, n_vectors):
        if not commits:  # the reader has read the manifest; two writes land before it reads the graph
            commits.extend(writer.store(f"Memory number {n} holds zqword{n}.") for n in (2, 3))
        return load_graph(path, n_vectors)

    monkeypatch.setattr(reader, "load_graph", two_commits_first)
    generation = reader.read_generation(index_dir)
    assert len(commits) == 2
    assert generation.number == first.generation  # opened whole, though two commits retired it meanwhile
    generation.store.close()
    monkeypatch.setattr(reader, "load_graph", load_graph)
    newest = reader.read_generation(index_dir)
    assert newest.number == commits[-1].generation
    assert {commit.id for commit in commits} <= set(newest.doc_ids)
    newest.store.close()

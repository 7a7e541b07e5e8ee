"""Issue 20's MCP load target: 2,000 mixed calls (store_memory, search, search_by_tag, get_document)
from 4 concurrent streamable-HTTP clients against one real `hybridlab mcp` process, which is SIGKILLed
mid-run and restarted on the same index: 0 errors, every acknowledged memory there afterwards (exact
text, found by search, first in BM25 for its unique token), every store in flight at the kill absent
or whole, the index verifying after the kill and at the end. The scenario lives in
`hybridlab.bench.mcp_load` (its docstring has the details), which also benchmarks it.
"""
from __future__ import annotations

import time

import pytest

from .helpers import record

CALLS = 2000
CLIENTS = 4


def test_2000_mixed_calls_from_4_clients_survive_a_sigkill(tmp_path):
    pytest.importorskip("mcp")
    from hybridlab.bench.mcp_load import LoadConfig, run_load

    started = time.perf_counter()
    result = run_load(LoadConfig(calls=CALLS, clients=CLIENTS, kill_at=0.5), tmp_path)
    seconds = time.perf_counter() - started
    record("mcp_load_kill", {"calls": result.calls, "clients": CLIENTS, "errors": len(result.errors),
                             "acknowledged": result.acknowledged, "interrupted": result.interrupted,
                             "calls_per_second": round(result.calls_per_second, 1), "seconds": round(seconds, 1)})

    assert result.errors == [], f"{len(result.errors)} errors, the first: {result.errors[:5]}"
    assert result.calls == CALLS
    assert all(result.latencies[tool] for tool in result.latencies)  # every tool was called
    # the kill landed mid-run, with calls in flight, on an index holding acknowledged memories
    assert result.killed and result.interrupted >= 1
    assert 0 < result.acknowledged_before_kill < result.acknowledged
    assert result.checked_after_restart == result.acknowledged_before_kill
    assert result.verify_after_kill == [] and result.verify_at_end == []
    # every acknowledged memory (and every in-flight store that made it) checked at the end
    assert result.checked_at_end == result.acknowledged + result.in_flight_stores_found
    assert result.in_flight_stores_found <= result.in_flight_stores

"""The sweep record (`metrics.json` of a sweep run folder): every committed run folder loads, typed, and
writes back byte for byte."""

from __future__ import annotations

import json

import pytest

from hybridlab.eval.datasets import REPO_ROOT
from hybridlab.eval.significance import Interval, PairedTest
from hybridlab.tune.record import (
    RECORD_FILE,
    Candidate,
    CrossValidationRecord,
    EngineState,
    KindFigure,
    SweepRecord,
)

SWEEP_RUNS = sorted(path.parent for path in (REPO_ROOT / "reports").rglob(f"*-sweep-*/{RECORD_FILE}"))


def test_the_committed_sweep_runs_are_found():
    assert len(SWEEP_RUNS) >= 7  # reports/ holds sweeps of memories, holoviz and scifact


@pytest.mark.parametrize("run", SWEEP_RUNS, ids=lambda run: run.relative_to(REPO_ROOT).as_posix())
def test_a_committed_sweep_record_loads_typed_and_writes_back_byte_for_byte(run, tmp_path):
    text = (run / RECORD_FILE).read_text(encoding="utf-8")
    record = SweepRecord.read(run)
    assert not record.extra  # every key of the file is a field
    assert isinstance(record.engine, EngineState) and isinstance(record.comparison, PairedTest)
    if record.cross_validation is not None:
        cv = record.cross_validation
        assert isinstance(cv, CrossValidationRecord) and isinstance(cv.tuned.interval, Interval)
        assert len(cv.folds) == len(cv.configs) == cv.k
    for kinds in (record.per_kind or {}).values():
        assert all(isinstance(figure, KindFigure) for figure in kinds.values())
    assert record.write(tmp_path).read_text(encoding="utf-8") == text


def test_keys_a_finalized_record_never_has_round_trip_and_unknown_keys_are_kept():
    data = {
        "dataset": "stub",
        "metric": "ndcg@10",
        "tuned_on_queries": ["q1", "q2"],
        "candidates": [{"trial": 1, "search": {"alpha": 0.5}, "index": {"models": ["wordllama"]}}],
        "note": {"kept": True},
    }
    record = SweepRecord.from_json(data)
    assert record.tuned_on_queries == ("q1", "q2")
    assert record.candidates == (Candidate(1, {"alpha": 0.5}, {"models": ["wordllama"]}),)
    assert record.extra == {"note": {"kept": True}}
    written = record.to_json()
    assert written["tuned_on_queries"] == ["q1", "q2"] and written["candidates"] == data["candidates"]
    assert list(written)[-1] == "note" and SweepRecord.from_json(json.loads(json.dumps(written))) == record
    assert "candidates" not in SweepRecord("x", "ndcg@10").to_json()  # written only when set

"""Conditions that need an uncommitted file (LoCoMo) skip with a message naming it when it is absent."""

from __future__ import annotations

from hybridlab.tune.repro import Condition, format_outcome, missing_need, run_condition


def condition() -> Condition:
    return Condition(
        "locomo-x",
        "locomo",
        "all",
        "hybridlab membench locomo ${locomo} --json -q",
        {"recall@5": 0.5},
        needs=("locomo",),
    )


def test_an_absent_file_skips_the_condition_with_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.delenv("HYBRIDLAB_LOCOMO", raising=False)
    outcome = run_condition(condition())
    assert outcome.ok and outcome.skipped and "HYBRIDLAB_LOCOMO" in outcome.skipped
    assert "snap-research/LoCoMo" in outcome.skipped
    assert format_outcome(outcome, 0.0005)[-1].startswith("SKIP needs LoCoMo")
    missing = tmp_path / "nope.json"
    assert "is not a file" in missing_need(condition(), {"HYBRIDLAB_LOCOMO": str(missing)})
    missing.write_text("[]")
    assert missing_need(condition(), {"HYBRIDLAB_LOCOMO": str(missing)}) is None

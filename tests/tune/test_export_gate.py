"""The export gate: a sweep's winner is exported only when it beats the defaults out of sample,
significantly (Holm over the candidates); every knob pinned as resolved; `repro` re-runs it."""

from __future__ import annotations

import json

import pytest
from tiny_evalset import MODELS, tiny_env, tiny_index  # noqa: F401  (fixtures)

from hybridlab.config import SEARCH_FIELDS, IndexConfig, load_config_file
from hybridlab.eval.datasets import Dataset, split_query_ids
from hybridlab.eval.evalsets import EvalSet
from hybridlab.eval.evaluator import resolve_evalset
from hybridlab.tune.export import (
    export_config,
    pinned_index,
    pinned_search,
    repro,
    tuned_on_ids,
    write_config,
)
from hybridlab.tune.record import SweepRecord

QIDS = [f"q{i:02d}" for i in range(20)]
QRELS = {q: {f"d-{q}": 1} for q in QIDS}


class StubEvaluator:
    """Runs made up per alpha: 0.9 ranks each query's relevant document first, anything else
    second behind a wrong one (nDCG@10 1 vs 1/log2(3))."""

    def __init__(self):
        self.evalset = EvalSet("stub", (), None, None)  # type: ignore[arg-type]

    class _Index:
        n_chunks = 100

    def index(self, config):
        return self._Index()

    def dataset(self, split):
        ids = QIDS if split in {"test", "all"} else []
        return Dataset("stub", None, {q: q for q in ids}, {q: QRELS[q] for q in ids})  # type: ignore[arg-type]

    def run(self, search, config=None, split="dev"):
        good = search["alpha"] == 0.9
        return {
            q: ({f"d-{q}": 1.0} if good else {"wrong": 1.0, f"d-{q}": 0.5})
            for q in self.dataset(split).queries
        }


def stub_record(alphas):
    index = IndexConfig(models=MODELS).to_dict()
    candidates = [{"trial": i, "search": {"alpha": a}, "index": index} for i, a in enumerate(alphas)]
    return {
        "dataset": "stub",
        "metric": "ndcg@10",
        "tuned_on": "dev",
        "tuned_on_queries": QIDS[:5],
        "best": {**candidates[0], "dev_value": 0.9, "test_metrics": {}},
        "candidates": candidates,
    }


def export(tmp_path, alphas, **options):
    run = tmp_path / "2026-11-25-sweep-stub"
    run.mkdir(exist_ok=True)
    (run / "metrics.json").write_text(json.dumps(stub_record(alphas)))
    return export_config(run, evaluator=StubEvaluator(), **options)


def test_pinned_search_resolves_every_auto_setting():
    small, large = pinned_search({}, 100), pinned_search({}, 6000)
    assert set(small) == set(SEARCH_FIELDS)
    assert (small["alpha"], small["staged"], small["fill_dense"]) == (0.5, False, False)
    assert (large["alpha"], large["staged"], large["fill_dense"]) == (0.6, True, True)
    given = pinned_search({"alpha": 0.3, "staged": True, "candidates": 40, "fill_dense": None}, 100)
    assert (given["alpha"], given["staged"], given["fill_dense"], given["candidates"]) == (
        0.3,
        True,
        False,
        100,
    )
    assert [k for k, v in large.items() if v is None] == ["min_score"]  # None there means "no minimum"


def test_pinned_index_decides_the_graph_size():
    assert pinned_index(IndexConfig(), 5183).graph_k == 16
    assert pinned_index(IndexConfig(), 200_000).graph_k == 0
    assert pinned_index(IndexConfig(graph_k=8), 5183).graph_k == 8


def test_a_significant_winner_is_exported_pinned(tmp_path):
    config = export(tmp_path, [0.9, 0.2])
    provenance = config["provenance"]
    assert config["search"]["alpha"] == 0.9 and config["search"]["staged"] is False
    assert IndexConfig.from_dict(config["index"]).graph_k == 16
    assert (provenance["exported"], provenance["beats_defaults"], provenance["trial"]) == ("tuned", True, 0)
    assert provenance["query_ids"] == QIDS[5:] and provenance["split"] == "test"  # tuned-on queries left out
    good, same = provenance["candidates"]
    # 15 equal differences: only the all-plus / all-minus sign patterns reach the observed mean
    assert good["p_value"] < 0.001 and good["p_holm"] == pytest.approx(2 * good["p_value"])
    assert same["p_value"] == 1.0 and not same["significant"]
    assert provenance["test_metrics"]["ndcg@10"] == 1.0
    assert "exported the tuned config: trial 0 beats the defaults on ndcg@10" in provenance["verdict"]


def test_no_significant_winner_keeps_the_defaults_with_the_verdict(tmp_path):
    config = export(tmp_path, [0.2], test="t-test")
    provenance = config["provenance"]
    assert (provenance["exported"], provenance["beats_defaults"], provenance["trial"]) == (
        "defaults",
        False,
        None,
    )
    assert config["search"]["alpha"] == 0.5  # the adaptive default at 100 chunks, pinned
    assert provenance["test_metrics"] == provenance["defaults_test_metrics"]
    verdict = provenance["verdict"]
    assert verdict.startswith(
        "kept the defaults: trial 0 does not significantly beat the defaults on ndcg@10"
    )
    assert (
        "15 out-of-sample queries" in verdict and "t-test p = 1" in verdict and "0.6309 vs 0.6309" in verdict
    )


class LegacyStub(StubEvaluator):
    """A set with an official train split (dev = train) whose older sweep tuned on a sha1 half."""

    def dataset(self, split):
        if split in {"dev", "train"}:
            return Dataset("stub", None, {"t1": "x", "t2": "y"}, {"t1": {"d": 1}, "t2": {"d": 1}})  # type: ignore[arg-type]
        return super().dataset(split)


def test_tuned_on_queries_of_an_older_record_are_the_sha1_half():
    evaluator = LegacyStub()
    half = split_query_ids(QRELS, "dev")

    def record(**fields):
        return SweepRecord("stub", "ndcg@10", **fields)

    assert tuned_on_ids(record(tuned_on="dev", queries={"dev": len(half)}), evaluator) == set(half)
    assert tuned_on_ids(record(tuned_on="dev", queries={"dev": 2}), evaluator) == {"t1", "t2"}
    assert tuned_on_ids(record(tuned_on_queries=("q01",)), evaluator) == {"q01"}
    with pytest.raises(ValueError, match="cannot tell which queries"):
        tuned_on_ids(record(tuned_on="dev", queries={"dev": 3}), evaluator)


def test_export_and_repro_on_the_tiny_set(tiny_env, tmp_path, monkeypatch):  # noqa: F811
    evalset = resolve_evalset(tiny_env)
    record = {
        "dataset": evalset.name,
        "dataset_path": str(tiny_env),
        "metric": "ndcg@10",
        "tuned_on": "dev",
        "now": evalset.now,
        "best": {
            "trial": 3,
            "dev_value": 0.9,
            "test_metrics": {},
            "search": {"alpha": 0.7, "fusion": "rrf"},
            "index": IndexConfig(models=MODELS).to_dict(),
        },
    }
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps(record))
    path = write_config(export_config(run), tmp_path / "best.json")
    config = load_config_file(path)
    assert config["provenance"]["exported"] == "defaults"  # 3 test queries cannot be significant
    assert all(config["search"][k] is not None for k in ("alpha", "staged", "fill_dense"))
    assert config["index"]["graph_k"] == 16 and config["provenance"]["package_version"]
    monkeypatch.setenv("HYBRIDLAB_FUSION", "rrf")  # the environment cannot move a pinned config
    assert all(ok for *_, ok in repro(config))

"""Session fixtures for the quality gates: each evaluation index is ensured (built once into
.cache/indexes, then reused) and opened once per test session; each run is made once."""

from __future__ import annotations

import pytest

from bench.quality_report import WHOLE_DOCUMENTS
from hybridlab.eval.datasets import data_dir
from hybridlab.eval.evalsets import corpora_dir
from hybridlab.eval.evaluate import score, score_per_query
from hybridlab.eval.systems import open_evalset, system_runs


class Gate:
    """One opened evaluation set with its queries and qrels, and memoised runs per system."""

    def __init__(self, name: str, config=None):
        self.opened = open_evalset(name, config)
        self.dataset = self.opened.evalset.dataset("all")
        self._runs: dict[str, dict] = {}

    def run(self, **options):
        key = repr(sorted(options.items()))
        if key not in self._runs:
            self._runs[key] = system_runs(self.opened, self.dataset.queries, {"run": options})["run"]
        return self._runs[key]

    def score(self, **options) -> dict[str, float]:
        return score(self.dataset.qrels, self.run(**options))

    def per_query(self, **options) -> dict[str, dict[str, float]]:
        return score_per_query(self.dataset.qrels, self.run(**options))


def _need(path, what):
    if not path.is_dir():
        pytest.skip(f"{what} not found at {path} (set HYBRIDLAB_DATA / HYBRIDLAB_CORPORA)")


@pytest.fixture(scope="session")
def scifact() -> Gate:
    _need(data_dir() / "scifact", "SciFact")
    return Gate("scifact")


@pytest.fixture(scope="session")
def memories() -> Gate:
    return Gate("memories")


@pytest.fixture(scope="session")
def memories_tag_blind() -> Gate:
    """The memories set indexed without its tags in the text (the index before `index_tags`)."""
    from hybridlab.config import ChunkConfig, IndexConfig

    return Gate("memories", IndexConfig(chunk=ChunkConfig(index_tags=False)))


@pytest.fixture(scope="session")
def holoviz() -> Gate:
    _need(corpora_dir() / "holoviz", "the HoloViz corpus")
    return Gate("holoviz")


@pytest.fixture(scope="session")
def holoviz_whole() -> Gate:
    _need(corpora_dir() / "holoviz", "the HoloViz corpus")
    return Gate("holoviz", WHOLE_DOCUMENTS)


@pytest.fixture(scope="session", params=["cisi", "cranfield", "med"])
def out_of_domain(request) -> Gate:
    _need(data_dir() / request.param, request.param)
    return Gate(request.param)

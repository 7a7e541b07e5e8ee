"""The pipeline's steps, in order, and the one call that runs them on one snapshot.

:data:`STEPS` is the table (docs/internals/search.md#pipeline prints it; a test keeps the two
equal). The invariant every step keeps, checked per step by tests/search/test_pipeline_steps.py:

- it reads one snapshot and the :class:`~hybridlab.search.models.QueryModels` it is given, and
  nothing else: no step calls back into the `Index`;
- it returns a new :class:`~hybridlab.search.pipeline.records.Retrieval` (or the same object when
  it is off), never mutating the one it got;
- the hits stay best first (:func:`~hybridlab.search.pipeline.records.in_rank_order`): a
  re-scoring step (second stage, rerank) keeps the hits it re-scored above the rest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hybridlab.search.models import QueryModels
from hybridlab.search.pipeline import first_stage, group, hydrate, rerank, second_stage, settings
from hybridlab.search.pipeline.records import Retrieval, Search
from hybridlab.search.results import RunResponse, SearchResponse
from hybridlab.search.snapshot import Snapshot


@dataclass(frozen=True)
class Step:
    """One row of the step table: its name, the function that does it, what it reads besides the
    Retrieval so far, and what it adds to it."""

    name: str
    function: Callable[..., Any]
    reads: str
    adds: str


STEPS: tuple[Step, ...] = (
    Step(
        "settings", settings.settings, "options, config file, the index's size", "the resolved SearchConfig"
    ),
    Step("encode", QueryModels.query_vector, "QueryModels' query encoder", "the dense query vector"),
    Step("retrieve + fuse", first_stage.widen, "the snapshot's retrievers", "runs, fused hits"),
    Step("dense feedback", first_stage.with_feedback, "the dense retriever", "the moved query's run"),
    Step(
        "second stage", second_stage.late_stage, "QueryModels.late_scorer, token store", "MaxSim of the head"
    ),
    Step("rerank", rerank.rerank, "QueryModels.rerank_scores, chunk texts", "cross-encoder scores"),
    Step("group", group.by_document, "doc ids", "one hit per document"),
    Step("hydrate", hydrate.hydrate, "the store", "SearchResults"),
)


def step_table() -> str:
    """:data:`STEPS` as the markdown table the docs print."""
    rows = [
        f"| {step.name} | `{step.function.__module__.rsplit('.', 1)[-1]}.{step.function.__qualname__}` "
        f"| {step.reads} | {step.adds} |"
        for step in STEPS
    ]
    return "\n".join(["| step | function | reads | adds to the Retrieval |", "|---|---|---|---|", *rows])


def ranked(snapshot: Snapshot, search: Search, models: QueryModels) -> Retrieval:
    """One search's ranking on one snapshot, every step of :data:`STEPS` but hydrate, in order:
    the first stage (settings, encode, retrieve + fuse, dense feedback), the second stage, rerank,
    group. The retrieval keeps what each step found."""
    retrieval = first_stage.retrieve(snapshot, search, models)
    retrieval = second_stage.late_stage(snapshot, retrieval, models)
    retrieval = rerank.rerank(snapshot, retrieval, models)
    return group.by_document(snapshot, retrieval)


def search(snapshot: Snapshot, asked: Search, models: QueryModels, explain: bool = False) -> SearchResponse:
    """The whole search on one snapshot: :func:`ranked`, then hydrate (with the text `asked.content`
    names); the typed response with the search's timings, mode and the generation that answered."""
    retrieval = ranked(snapshot, asked, models)
    results = hydrate.hydrate(snapshot, retrieval, explain, asked.content)
    return SearchResponse(results, retrieval.timings, retrieval.mode, snapshot.number)


def run(snapshot: Snapshot, asked: Search, models: QueryModels) -> RunResponse:
    """The search as an evaluation run: `{doc_id: score}` of the ranked hits (documents when
    grouped), with the timings, mode and generation."""
    retrieval = ranked(snapshot, asked, models)
    doc_ids = snapshot.generation.doc_ids
    return RunResponse(
        {doc_ids[hit.row]: hit.score for hit in retrieval.hits},
        retrieval.timings,
        retrieval.mode,
        snapshot.number,
    )

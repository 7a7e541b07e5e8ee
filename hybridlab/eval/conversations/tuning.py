"""Leave-one-haystack-out cross-validation of search and chunking settings (LoCoMo: leave one
conversation out).

Every setting of a grid is run once over all haystacks; for each held-out haystack the setting with
the best mean on the other haystacks (ties: the first in grid order, the defaults first) is chosen
and its scores on the held-out haystack are kept: the out-of-fold figure nothing was chosen on."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from hybridlab.config import ChunkConfig
from hybridlab.errors import InvalidValueError
from hybridlab.eval.conversations import metrics
from hybridlab.eval.conversations.records import Haystack
from hybridlab.eval.conversations.runner import BenchSettings, relevant_ids, run_haystacks


def grid(axes: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the axes' values, the first value of each axis first."""
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*(axes[name] for name in names))]


def parse_axis(text: str) -> tuple[str, list[Any]]:
    """`alpha=0.4,0.5` -> ("alpha", [0.4, 0.5]) (values read as JSON where they parse)."""
    name, _, values = text.partition("=")
    if not name or not values:
        raise InvalidValueError(f"--cv wants NAME=V1,V2,...; got {text!r}")

    def value(v: str) -> Any:
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return v

    return name.strip(), [value(v.strip()) for v in values.split(",")]


#: axes that are chunking settings (the haystacks are indexed again for each value), not search options
CHUNK_AXES = frozenset(f.name for f in fields(ChunkConfig))


def with_setting(settings: BenchSettings, setting: Mapping[str, Any]) -> BenchSettings:
    """The hybrid alone with one grid point: chunking axes into the index config, the rest into the
    search options."""
    chunk = {name: value for name, value in setting.items() if name in CHUNK_AXES}
    options = {name: value for name, value in setting.items() if name not in CHUNK_AXES}
    index_config = replace(settings.index_config, chunk=replace(settings.index_config.chunk, **chunk))
    return replace(
        settings, systems=("hybrid",), options={**settings.options, **options}, index_config=index_config
    )


def per_question(result, k: int, metric: str = "recall") -> dict[str, float]:
    """Evidence recall@k (fractional; or `recall_any`) of every question with evidence (the hybrid system)."""
    level = result.settings.granularity
    return {
        qid: metrics.METRICS[metric](result.rankings["hybrid"][qid], relevant_ids(result, qid, level), k)
        for qid, question in result.questions.items()
        if relevant_ids(result, qid, level)
    }


def cross_validate(
    haystacks: Sequence[Haystack],
    settings: BenchSettings,
    settings_grid: Sequence[dict[str, Any]],
    work: str | Path,
    *,
    k: int = 5,
    progress: bool = True,
) -> dict[str, Any]:
    """Leave-one-haystack-out: the out-of-fold recall@k (and @10), the setting each fold chose."""
    owner = {q.question_id: h.haystack_id for h in haystacks for q in h.questions}
    scores: list[dict[int | str, dict[str, float]]] = []  # per setting: {k, 10, "any": per question}
    for setting in settings_grid:
        run = run_haystacks(haystacks, with_setting(settings, setting), work, progress=progress)
        scores.append(
            {kk: per_question(run, kk) for kk in (k, 10)} | {"any": per_question(run, k, "recall_any")}
        )
    folds = []
    out_of_fold: dict[int | str, list[float]] = {k: [], 10: [], "any": []}
    for haystack in haystacks:
        held = haystack.haystack_id

        def tuning_mean(i: int, held: str = held) -> float:
            values = [v for qid, v in scores[i][k].items() if owner[qid] != held]
            return sum(values) / len(values)

        best = max(range(len(settings_grid)), key=lambda i: (tuning_mean(i), -i))
        for kk in (k, 10, "any"):
            out_of_fold[kk] += [v for qid, v in scores[best][kk].items() if owner[qid] == held]
        folds.append(
            {"held_out": held, "chosen": settings_grid[best], "tuning_recall": round(tuning_mean(best), 4)}
        )
    in_sample = [sum(s[k].values()) / len(s[k]) for s in scores]
    in_sample_any = [sum(s["any"].values()) / len(s["any"]) for s in scores]
    return {
        "k": k,
        "grid": list(settings_grid),
        "folds": folds,
        f"out_of_fold_recall@{k}": sum(out_of_fold[k]) / len(out_of_fold[k]),
        "out_of_fold_recall@10": sum(out_of_fold[10]) / len(out_of_fold[10]),
        f"out_of_fold_recall_any@{k}": sum(out_of_fold["any"]) / len(out_of_fold["any"]),
        "n": len(out_of_fold[k]),
        "in_sample_recall_by_setting": [round(v, 4) for v in in_sample],
        "in_sample_recall_any_by_setting": [round(v, 4) for v in in_sample_any],
        "defaults_recall": round(in_sample[0], 4),
    }

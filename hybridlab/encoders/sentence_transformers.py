"""A sentence-transformers model on the CPU (torch, imported only when the encoder is built)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from hybridlab.encoders.base import Encoder, ModelSpec, package_model_path

if TYPE_CHECKING:
    import numpy as np


class SentenceTransformerEncoder(Encoder):
    """A sentence-transformers model on the CPU (torch, default thread count)."""

    def __init__(self, spec: ModelSpec):
        from sentence_transformers import SentenceTransformer

        super().__init__(spec)
        self.model = SentenceTransformer(str(package_model_path(spec.package)), device="cpu")
        self.model.max_seq_length = spec.max_seq_length

    def encode_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        prefix = self.prefix(is_query=is_query)
        return self.model.encode(
            [prefix + t for t in texts], batch_size=max(len(texts), 1), convert_to_numpy=True,
            normalize_embeddings=False, show_progress_bar=False,
        )

"""WordLlama static token embeddings (the `wordllama` package, imported only when the encoder is built)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hybridlab.encoders.base import Encoder, ModelSpec


class WordLlamaEncoder(Encoder):
    """WordLlama static embeddings, loaded from the package's own folder with downloads disabled."""

    def __init__(self, spec: ModelSpec):
        import wordllama

        super().__init__(spec)
        folder = Path(wordllama.__file__).resolve().parent
        self.model = wordllama.WordLlama.load(cache_dir=folder, dim=spec.dim, disable_download=True)

    def encode_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        prefix = self.prefix(is_query=is_query)
        # norm=False: wordllama divides by zero on empty text; encode_in_batches normalises safely.
        return self.model.embed([prefix + t for t in texts], norm=False, batch_size=max(len(texts), 1))

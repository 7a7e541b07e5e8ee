"""What one write of an index did: `IndexReport` (counts, timings, the generation it committed)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class IndexReport:
    """What one indexing run did, with its timing."""

    index_dir: str
    generation: int | None = None
    documents: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    chunks: int = 0
    new_chunks: int = 0
    embedded: int = 0
    cache_hits: int = 0  # vectors not embedded: found in the cache, or kept in an earlier segment
    imported: int = 0  # vectors read from a file (`index --vectors`), counted apart from the cache hits
    skipped: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    embed_seconds: float = 0.0
    committed: bool = False

    @property
    def chunks_per_second(self) -> float:
        return self.new_chunks / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "chunks_per_second": round(self.chunks_per_second, 1)}

    def summary(self) -> str:
        state = f"generation {self.generation}" if self.committed else "no change (index untouched)"
        return (
            f"{self.documents} documents: {self.added} added, {self.changed} changed, {self.removed} removed, "
            f"{self.unchanged} unchanged; {self.chunks} chunks ({self.new_chunks} new), {self.embedded} embedded, "
            + (f"{self.imported} imported, " if self.imported else "")
            + f"{self.cache_hits - self.imported} from cache; {len(self.skipped)} files skipped; {self.seconds:.1f} s, "
            f"{self.chunks_per_second:.1f} chunks/s; {state}"
        )

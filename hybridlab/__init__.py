"""hybridlab: hybrid retrieval (dense + BM25 + tags + recency, fused), evaluated with ranx.

The public names are imported lazily, so `import hybridlab` (and `hybridlab --help`) stays instant.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "open_index": "hybridlab.search.engine",
    "Index": "hybridlab.search.engine",
    "SearchResult": "hybridlab.search.engine",
    "index_paths": "hybridlab.index.write.build",
    "IndexConfig": "hybridlab.config",
    "ChunkConfig": "hybridlab.config",
    "SearchConfig": "hybridlab.config",
    "make_run": "hybridlab.eval.evaluate",
    "score": "hybridlab.eval.evaluate",
    "compare": "hybridlab.eval.evaluate",
}

__all__ = [
    "ChunkConfig",
    "Index",
    "IndexConfig",
    "SearchConfig",
    "SearchResult",
    "compare",
    "index_paths",
    "make_run",
    "open_index",
    "score",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'hybridlab' has no attribute {name!r}")

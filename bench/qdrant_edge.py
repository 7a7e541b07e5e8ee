"""Qdrant's own engine in process (`qdrant-edge-py`) behind the subset of the QdrantClient API that
:mod:`hybridlab.search.qdrant` writes and queries BM25 with, so the benchmark runs the backend's real
export and sync code on Qdrant's Rust engine (its sparse index and IDF modifier), not only on the
client's pure-Python local mode.

One `EdgeShard` per collection in `root/<collection>/`; Qdrant Edge has no collection metadata, so the
metadata (the hybridlab marker) is a JSON file beside the shard. Only what the sync and the sparse
retriever call is translated: create/delete/exists, payload indexes, upsert, update_vectors, delete by a
`doc_id` filter, scroll, sparse `query_points`, metadata. A benchmark helper, not a supported backend.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

PAYLOAD_SCHEMAS = {"keyword": "Keyword", "float": "Float", "integer": "Integer"}


def _edge():
    try:
        import qdrant_edge
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the Qdrant Edge comparison needs qdrant-edge-py: pip install 'hybridlab[qdrant]'"
        ) from None
    return qdrant_edge


class EdgeClient:
    """QdrantClient-like access to Qdrant Edge shards under `root` (see the module docstring)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._shards: dict[str, Any] = {}

    # -------------------------------------------------------------- collections
    def _shard(self, name: str) -> Any:
        if name not in self._shards:
            self._shards[name] = _edge().EdgeShard.load(str(self.root / name))
        return self._shards[name]

    def _meta_path(self, name: str) -> Path:
        return self.root / f"{name}.json"

    def collection_exists(self, name: str) -> bool:
        return (self.root / name).is_dir()

    def delete_collection(self, name: str) -> None:
        shard = self._shards.pop(name, None)
        if shard is not None:
            shard.close()
        shutil.rmtree(self.root / name, ignore_errors=True)
        self._meta_path(name).unlink(missing_ok=True)

    def create_collection(
        self,
        name: str,
        vectors_config: dict[str, Any],
        sparse_vectors_config: dict[str, Any],
        **_cluster: Any,
    ) -> None:
        edge = _edge()
        from qdrant_client import models

        vectors = {
            model: edge.EdgeVectorParams(size=params.size, distance=edge.Distance.Dot)
            for model, params in vectors_config.items()
        }
        sparse = {
            vector: edge.EdgeSparseVectorParams(
                modifier=edge.Modifier.Idf if params.modifier == models.Modifier.IDF else None
            )
            for vector, params in sparse_vectors_config.items()
        }
        modes = {
            vector: "idf" if params.modifier == models.Modifier.IDF else None
            for vector, params in sparse_vectors_config.items()
        }
        self._shards[name] = edge.EdgeShard.create(
            str(self.root / name), edge.EdgeConfig(vectors=vectors or None, sparse_vectors=sparse)
        )
        self._meta_path(name).write_text(json.dumps({"modifiers": modes, "metadata": {}}))

    def create_payload_index(self, name: str, field: str, field_schema: str) -> None:
        edge = _edge()
        schema = getattr(edge.PayloadSchemaType, PAYLOAD_SCHEMAS[field_schema])
        self._shard(name).update(edge.UpdateOperation.create_field_index(field, schema))

    def get_collection(self, name: str) -> Any:
        from qdrant_client import models

        meta = json.loads(self._meta_path(name).read_text())
        sparse = {
            vector: SimpleNamespace(modifier=models.Modifier.IDF if mode == "idf" else None)
            for vector, mode in meta["modifiers"].items()
        }
        return SimpleNamespace(
            config=SimpleNamespace(params=SimpleNamespace(sparse_vectors=sparse), metadata=meta["metadata"])
        )

    def update_collection(self, name: str, metadata: dict[str, Any]) -> None:
        meta = json.loads(self._meta_path(name).read_text())
        meta["metadata"].update(metadata)
        self._meta_path(name).write_text(json.dumps(meta))

    # -------------------------------------------------------------- points
    @staticmethod
    def _vector(vector: dict[str, Any]) -> dict[str, Any]:
        edge = _edge()
        out = {}
        for name, value in vector.items():
            if hasattr(value, "indices"):
                out[name] = edge.SparseVector(indices=list(value.indices), values=list(value.values))
            else:
                out[name] = list(value)
        return out

    @staticmethod
    def _filter(flt: Any) -> Any:
        """A `must` list of `FieldCondition(key, match=MatchAny|MatchValue)`, the only filters the sync uses."""
        edge = _edge()
        must = []
        for condition in flt.must:
            match = condition.match
            if hasattr(match, "any"):
                must.append(edge.FieldCondition(key=condition.key, match=edge.MatchAny(any=list(match.any))))
            else:
                must.append(edge.FieldCondition(key=condition.key, match=edge.MatchValue(value=match.value)))
        return edge.Filter(must=must)

    def upsert(self, name: str, points: list[Any], wait: bool = True) -> None:
        edge = _edge()
        converted = [
            edge.Point(id=int(p.id), vector=self._vector(p.vector), payload=p.payload) for p in points
        ]
        self._shard(name).update(edge.UpdateOperation.upsert_points(converted))

    def update_vectors(self, name: str, points: list[Any], wait: bool = True) -> None:
        edge = _edge()
        converted = [edge.PointVectors(id=int(p.id), vector=self._vector(p.vector)) for p in points]
        self._shard(name).update(edge.UpdateOperation.update_vectors(converted))

    def delete(self, name: str, points_selector: Any, wait: bool = True) -> None:
        edge = _edge()
        self._shard(name).update(
            edge.UpdateOperation.delete_points_by_filter(self._filter(points_selector.filter))
        )

    def scroll(
        self,
        name: str,
        limit: int = 10,
        offset: Any = None,
        with_payload: Any = True,
        with_vectors: Any = False,
    ) -> tuple[list[Any], Any]:
        edge = _edge()
        return self._shard(name).scroll(
            edge.ScrollRequest(
                offset=offset, limit=limit, with_payload=with_payload, with_vector=with_vectors
            )
        )

    def query_points(
        self,
        name: str,
        query: Any,
        using: str,
        limit: int,
        query_filter: Any = None,
        with_payload: bool = False,
        **_ignored: Any,
    ) -> Any:
        edge = _edge()
        sparse = edge.SparseVector(indices=list(query.indices), values=list(query.values))
        request = edge.QueryRequest(
            limit=limit,
            query=edge.Query.Nearest(sparse, using=using),
            filter=None if query_filter is None else self._filter(query_filter),
            with_payload=with_payload,
        )
        return SimpleNamespace(points=self._shard(name).query(request))

    def optimize(self, name: str) -> bool:
        """Run the shard's optimizers now (vacuums deleted points); whether any segment changed."""
        return bool(self._shard(name).optimize())

    def close(self) -> None:
        for shard in self._shards.values():
            shard.close()
        self._shards.clear()

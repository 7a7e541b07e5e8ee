"""The manifest of an index folder as typed records, and its one reader and writer (JSON, never pickle).

`manifest.json` is the commit point of an index: a writer replaces it atomically
(`layout.write_manifest`) after the generation it names is on disk, and every generation folder
holds a copy of the manifest that committed it (for `verify --repair`). This module owns the
file's fields and the format version; no other module reads the manifest's JSON by key.

Format versions (`FORMAT_VERSION` is written; every one in `FORMATS` is read, any other value
is refused with a repair hint):

- 1: an index written before segments: one generation folder (`path`) with bm25s score
  matrices; its `files` names are relative to that folder and its `models` name the FAISS files.
  Read as one legacy segment (`Manifest.segment_list`); opening it for search asks to rebuild.
- 2: segments, each a folder with its own `store.duckdb`; `files` names are relative to the
  index folder (`gen-000005/store.duckdb`), so they serve every generation.
- 3: small segments may store Parquet tables instead of a DuckDB file.
- 4: a write-ahead log beside the live generation, of puts only (`next_chunk_id` recorded).
- 5: the log may hold deletes and replacements: code that reads puts only must refuse it (it
  would take a delete record for a damaged tail and cut the log there). The memory writer appends
  only to a format-5 index (`LOG_DELETES_FORMAT`); a write into an older one commits first.

Fields of format 5 (the same in the generation's copy): see `Manifest`, `Segment`, `ModelRecord`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from hybridlab.config import IndexConfig

FORMAT_VERSION = 5  # written: segments + tombstones, small segments as Parquet, a write-ahead log beside
#: the manifest formats read (what each one adds: this module's docstring)
FORMATS = (1, 2, 3, 4, 5)
#: the first format whose log may hold deletes and replacements: a writer appends to no older log
LOG_DELETES_FORMAT = 5
#: the first format whose `files` names are relative to the index folder (format 1: to the generation's)
SEGMENTS_FORMAT = 2


class NotAManifest(ValueError):
    """JSON that is not a hybridlab manifest of a format in `FORMATS` (a wrong type, a missing field)."""


@dataclass(frozen=True)
class FileRecord:
    """Size and sha256 of one file the manifest names (checked on open and by `verify`)."""

    bytes: int
    sha256: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileRecord:
        return cls(int(data["bytes"]), str(data["sha256"]))

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "sha256": self.sha256}


@dataclass(frozen=True)
class SegmentModel:
    """One model's FAISS index inside a segment: its `file` (in the segment's folder) and `vectors`."""

    file: str
    vectors: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SegmentModel:
        return cls(str(data["file"]), int(data.get("vectors") or 0))

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "vectors": self.vectors}


@dataclass(frozen=True)
class Segment:
    """A segment, the unit a write adds and a merge replaces: `name` (its folder below the index),
    `documents` and `chunks` (live), `rows` (written; `chunks` plus the tombstoned ones), `deleted`
    (tombstoned doc ids: a segment's folder is never rewritten), its chunk id range, `vectors` (live,
    per model) and `models` (per model: FAISS file and vectors written).

    Not written to the manifest: `legacy` (the generation folder of a format-1 index, read as one
    segment), `folder` (the private `.tmp-PID` folder a segment is built in until its commit
    renames it to `name`) and `masked` (ids the write-ahead log hides, set by the reader)."""

    name: str
    documents: int = 0
    chunks: int = 0
    rows: int = 0
    deleted: tuple[str, ...] = ()
    first_chunk_id: int | None = None
    last_chunk_id: int | None = None
    vectors: Mapping[str, int] = field(default_factory=dict)
    models: Mapping[str, SegmentModel] = field(default_factory=dict)
    legacy: bool = False
    folder: str | None = None
    masked: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Segment:
        chunks = int(data.get("chunks") or 0)
        return cls(
            name=str(data["name"]),
            documents=int(data.get("documents") or 0),
            chunks=chunks,
            rows=int(data.get("rows", chunks) or 0),
            deleted=tuple(data.get("deleted") or ()),
            first_chunk_id=data.get("first_chunk_id"),
            last_chunk_id=data.get("last_chunk_id"),
            vectors={model: int(n) for model, n in (data.get("vectors") or {}).items()},
            models={
                model: SegmentModel.from_json(info) for model, info in (data.get("models") or {}).items()
            },
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "documents": self.documents,
            "chunks": self.chunks,
            "rows": self.rows,
            "deleted": list(self.deleted),
            "first_chunk_id": self.first_chunk_id,
            "last_chunk_id": self.last_chunk_id,
            "vectors": dict(self.vectors),
            "models": {model: info.to_json() for model, info in self.models.items()},
        }

    def committed(self) -> Segment:
        """The segment as the manifest records it (no private build folder, nothing masked)."""
        return dataclasses.replace(self, folder=None, masked=())


@dataclass(frozen=True)
class ModelRecord:
    """One embedding model of the generation (keyed in `Manifest.models` by its registry name, hub
    id or a model folder's portable name, never a path): `dim`, `vectors` (live), `file` (the FAISS
    file name in each segment), `index` (FAISS factory: Flat, HNSW32, …), `segments` (how many),
    `encoder` (the spec that made the vectors: `source`, `revision`, a folder's `location`, …; its
    keys are the encoder registry's, `encoders.registry.encoder_record`) and, when the generation
    has a corpus graph of it: `graph` (file), `graph_dir` (the folder holding it: the commit's),
    `graph_k`, `graph_build` (`built` or `updated`), `graph_reserve` (file of the next nearest
    neighbours) and `graph_reserve_k`."""

    dim: int
    vectors: int = 0
    file: str = ""
    index: str = "Flat"
    segments: int = 0
    encoder: Mapping[str, Any] | None = None
    graph: str | None = None
    graph_dir: str | None = None
    graph_k: int | None = None
    graph_build: str | None = None
    graph_reserve: str | None = None
    graph_reserve_k: int | None = None

    _GRAPH_FIELDS = ("graph", "graph_dir", "graph_k", "graph_build", "graph_reserve", "graph_reserve_k")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelRecord:
        return cls(
            dim=int(data["dim"]),
            vectors=int(data.get("vectors") or 0),
            file=str(data.get("file") or ""),
            index=str(data.get("index") or "Flat"),
            segments=int(data.get("segments") or 0),
            encoder=data.get("encoder") or None,
            **{name: data.get(name) for name in cls._GRAPH_FIELDS},
        )

    def to_json(self) -> dict[str, Any]:
        graph = {name: getattr(self, name) for name in self._GRAPH_FIELDS if getattr(self, name) is not None}
        encoder = {} if self.encoder is None else {"encoder": dict(self.encoder)}  # none in an older index
        return {
            "dim": self.dim,
            "vectors": self.vectors,
            "file": self.file,
            "index": self.index,
            "segments": self.segments,
            **encoder,
            **graph,
        }

    def segment_model(self) -> SegmentModel:
        """The model's FAISS file as a segment's (a format-1 index's one generation folder)."""
        return SegmentModel(self.file, self.vectors)


@dataclass(frozen=True)
class Counts:
    """Live documents and chunks of the generation."""

    documents: int = 0
    chunks: int = 0


@dataclass(frozen=True)
class Bm25Record:
    """The BM25 postings: `dir` (in each segment's folder), `rows` (live) and the BM25 `config`."""

    dir: str = "bm25"
    rows: int = 0
    config: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"dir": self.dir, "rows": self.rows, "config": dict(self.config)}


@dataclass(frozen=True)
class LastMerge:
    """The last merge: when (`at`, the `generation` that committed it), how many `segments` into
    how many `chunks`, in how many `seconds`, and why (`tiered policy`, `optimize`, …)."""

    at: str
    generation: int
    segments: int
    chunks: int
    seconds: float
    reason: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LastMerge:
        return cls(
            at=str(data.get("at") or ""),
            generation=int(data.get("generation") or 0),
            segments=int(data.get("segments") or 0),
            chunks=int(data.get("chunks") or 0),
            seconds=float(data.get("seconds") or 0.0),
            reason=str(data.get("reason") or ""),
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class FileSignaturesRecord:
    """Where the folder sources' file signatures are: `file` (`gen-000005/file-signatures.json`,
    below the index folder), the `reader` version that recorded them (others are ignored) and the
    files recorded per source."""

    file: str
    reader: int
    sources: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "reader": self.reader, "sources": dict(self.sources)}


@dataclass(frozen=True)
class Manifest:
    """One committed generation of an index.

    - `format`: the manifest format version (this module's docstring), `generation` and `path`:
      the live generation's number and folder (`gen-000007`, the last commit's folder);
    - `segments`: oldest first (None: a format-1 index, before segments; `segment_list` reads it
      as one legacy segment); `next_chunk_id`: the next chunk id a write assigns (None before
      format 4: the legacy store's meta table holds it);
    - `built_at`, `build_seconds`: when and how long the build took; `last_merge`;
    - `config`: the `IndexConfig` it was built with, as stored (`index_config` parses it, filling
      settings added since with the value it was built with);
    - `counts`; `store` (the DuckDB file name); `embedding_cache` (the cache it reads: its own
      `embeddings.duckdb`, or a shared one); `versions` (Python and the libraries that built it);
    - `files`: every file of the live segments, corpus graphs and file signatures, by path below
      the index folder (format 1: below the generation folder), with size and sha256; None in a
      manifest written before checksums (nothing is checked then);
    - `models`: per embedding model; `file_signatures` when folder sources were indexed; `bm25`.
    """

    format: int
    generation: int
    path: str
    built_at: str = ""
    build_seconds: float = 0.0
    config: Mapping[str, Any] = field(default_factory=dict)
    store: str = "store.duckdb"
    embedding_cache: str | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    next_chunk_id: int | None = None
    last_merge: LastMerge | None = None
    files: Mapping[str, FileRecord] | None = None
    counts: Counts = Counts()
    segments: tuple[Segment, ...] | None = None
    models: Mapping[str, ModelRecord] = field(default_factory=dict)
    bm25: Bm25Record = Bm25Record()
    file_signatures: FileSignaturesRecord | None = None
    #: late-interaction model -> its full spec (`hybridlab.encoders.late.LateSpec.to_json` plus `key`,
    #: the folder of its token vectors under `late/`)
    late: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @cached_property
    def index_config(self) -> IndexConfig:
        """The stored config, parsed (`IndexConfig.from_manifest`)."""
        return IndexConfig.from_manifest(self.config)

    @property
    def segment_list(self) -> tuple[Segment, ...]:
        """The segments, oldest first; a format-1 manifest's is one legacy segment, its generation folder."""
        if self.segments is None:
            return (Segment(name=self.path, legacy=True),)
        return self.segments

    @property
    def has_segments(self) -> bool:
        """Whether the index was written with segments (format 2 on); a format-1 one is rewritten by its first change."""
        return self.format >= SEGMENTS_FORMAT and self.segments is not None

    @property
    def folders(self) -> set[str]:
        """The generation folders it needs: its own (`path`) and its segments'."""
        return {self.path, *(segment.name for segment in self.segment_list)}

    @property
    def encoders(self) -> dict[str, Mapping[str, Any] | None]:
        """Model -> the encoder record that made its vectors (None: none recorded)."""
        return {model: info.encoder for model, info in self.models.items()}

    @property
    def dims(self) -> dict[str, int]:
        """Model -> vector dimension."""
        return {model: info.dim for model, info in self.models.items()}

    def file(self, name: str) -> FileRecord | None:
        """The size and checksum recorded for file `name` (None: not named, or no checksums)."""
        return (self.files or {}).get(name)

    def segment_models(self, segment: Segment) -> Mapping[str, SegmentModel]:
        """A segment's per-model FAISS files (a legacy segment's are the manifest's)."""
        if segment.legacy:
            return {model: info.segment_model() for model, info in self.models.items()}
        return segment.models

    def replace(self, **changes: Any) -> Manifest:
        """A copy with `changes` (`dataclasses.replace`)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        """The manifest a parsed `manifest.json` holds (any format in `FORMATS`); NotAManifest when it is none."""
        if not isinstance(data, dict) or data.get("format") not in FORMATS or "generation" not in data:
            raise NotAManifest(f"not a hybridlab manifest of a format in {FORMATS}")
        try:
            return cls._parse(data)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise NotAManifest(f"a malformed manifest field ({type(error).__name__}: {error})") from None

    @classmethod
    def _parse(cls, data: Mapping[str, Any]) -> Manifest:
        files = data.get("files")
        counts = data.get("counts") or {}
        bm25 = data.get("bm25") or {}
        merge = data.get("last_merge")
        signatures = data.get("file_signatures")
        segmented = data["format"] >= SEGMENTS_FORMAT and "segments" in data
        next_id = data.get("next_chunk_id")
        return cls(
            format=int(data["format"]),
            generation=int(data["generation"]),
            path=str(data["path"]),
            built_at=str(data.get("built_at") or ""),
            build_seconds=float(data.get("build_seconds") or 0.0),
            config=dict(data.get("config") or {}),
            store=str(data.get("store") or "store.duckdb"),
            embedding_cache=data.get("embedding_cache"),
            versions=dict(data.get("versions") or {}),
            next_chunk_id=None if next_id is None else int(next_id),
            last_merge=LastMerge.from_json(merge) if merge else None,
            files=None
            if files is None
            else {name: FileRecord.from_json(info) for name, info in files.items()},
            counts=Counts(int(counts.get("documents") or 0), int(counts.get("chunks") or 0)),
            segments=tuple(Segment.from_json(entry) for entry in data["segments"]) if segmented else None,
            models={model: ModelRecord.from_json(info) for model, info in (data.get("models") or {}).items()},
            bm25=Bm25Record(
                str(bm25.get("dir") or "bm25"), int(bm25.get("rows") or 0), dict(bm25.get("config") or {})
            ),
            file_signatures=FileSignaturesRecord(
                str(signatures["file"]),
                int(signatures.get("reader") or 0),
                dict(signatures.get("sources") or {}),
            )
            if signatures
            else None,
            late={name: dict(spec) for name, spec in (data.get("late") or {}).items()},
        )

    def to_json(self) -> dict[str, Any]:
        """The manifest as JSON data (optional fields left out when absent, as older code wrote them)."""
        data: dict[str, Any] = {
            "format": self.format,
            "generation": self.generation,
            "path": self.path,
            "built_at": self.built_at,
            "build_seconds": self.build_seconds,
            "config": dict(self.config),
            "store": self.store,
            "versions": dict(self.versions),
            "counts": dataclasses.asdict(self.counts),
            "models": {model: info.to_json() for model, info in self.models.items()},
            "bm25": self.bm25.to_json(),
        }
        optional = {
            "embedding_cache": self.embedding_cache,
            "next_chunk_id": self.next_chunk_id,
            "last_merge": None if self.last_merge is None else self.last_merge.to_json(),
            "files": None
            if self.files is None
            else {name: info.to_json() for name, info in self.files.items()},
            "segments": None if self.segments is None else [segment.to_json() for segment in self.segments],
            "file_signatures": None if self.file_signatures is None else self.file_signatures.to_json(),
            "late": {name: dict(spec) for name, spec in self.late.items()} or None,
        }
        data.update((key, value) for key, value in optional.items() if value is not None)
        return data


def loads(text: str) -> Manifest:
    """Parse a manifest file's text: json.JSONDecodeError when it is no JSON, NotAManifest when it is
    not a manifest of a format read."""
    return Manifest.from_json(json.loads(text))


def dumps(manifest: Manifest) -> str:
    """The manifest as written (JSON, indented, sorted keys)."""
    return json.dumps(manifest.to_json(), indent=2, sort_keys=True, default=str)

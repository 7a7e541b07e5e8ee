"""The token-vector store of one late-interaction model spec: per embedded text, its token vectors.
See docs/internals/index.md#token-vectors.

Content-addressed by the sha256 of the chunk's embedded text (`chunks.embed_sha256`), as the
embeddings cache is, so every write path (a build, a merge, a logged memory, a rechunk) finds the
vectors of a text it has seen and encodes only new texts. On disk, `late/<spec key>/` below the
index folder holds `spec.json` and immutable shards, each three plain `.npy` files:

- `<shard>.vectors.npy`: float16 (total tokens, dims), every text's token vectors one after another;
- `<shard>.offsets.npy`: int64 (n + 1,), text i's vectors are rows offsets[i]:offsets[i + 1];
- `<shard>.keys.npy`: uint8 (n, 32), the raw sha256 digests (not `S32`: numpy strips a fixed-width
  bytes value's trailing zero bytes), written last: a shard without its keys
  file is an interrupted write and is ignored (and removed by the next writer).

Writers hold the index's writer lock; readers in any process only read immutable files, so a
failed or interrupted write leaves every earlier vector readable. Vectors of texts no live chunk
holds any more stay until :meth:`TokenStore.compact` (run by `optimize` and when shards pile up).
Never pickled: `np.load(..., allow_pickle=False)`.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab.errors import CorruptIndexError

LATE_DIR = "late"
SPEC_FILE = "spec.json"
SHARD_PARTS = ("vectors", "offsets", "keys")
#: more shards than this and a writer folds them into one (each small write adds one)
MAX_SHARDS = 32


def store_folder(index_dir: str | os.PathLike, spec_key: str) -> Path:
    return Path(index_dir) / LATE_DIR / spec_key


def _digest(sha256_hex: str) -> bytes:
    return bytes.fromhex(sha256_hex)


@dataclass(frozen=True)
class _Shard:
    name: str
    keys: np.ndarray
    offsets: np.ndarray
    vectors: np.ndarray


def _write_npy(path: Path, array: np.ndarray) -> None:
    """Write `array` to `path` through a temporary file and an atomic rename, fsynced."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as file:
        np.save(file, array, allow_pickle=False)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class TokenStore:
    """Token vectors by embedded-text hash for one spec (a :class:`hybridlab.encoders.late.LateSpec`
    as JSON). Thread-safe; re-reads the folder when a writer has added or folded shards."""

    def __init__(self, folder: str | os.PathLike, spec: dict[str, Any] | None = None) -> None:
        self.folder = Path(folder)
        self.spec = spec
        self._lock = threading.Lock()
        self._stamp: list[str] | None = None
        self._where: dict[bytes, tuple[int, int, int]] = {}  # digest -> (shard, start, end)
        self._shards: list[_Shard] = []

    # ------------------------------------------------------------ reading
    def _listing(self) -> list[str]:
        if not self.folder.is_dir():
            return []
        names = os.listdir(self.folder)
        return sorted(n[: -len(".keys.npy")] for n in names if n.endswith(".keys.npy"))

    def _load(self, name: str) -> _Shard:
        parts = {}
        for part in SHARD_PARTS:
            path = self.folder / f"{name}.{part}.npy"
            try:
                parts[part] = np.load(path, mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as error:
                raise CorruptIndexError(
                    f"token vectors {path} cannot be read ({type(error).__name__}: {error}); "
                    f"`hybridlab verify --repair` re-encodes them"
                ) from None
        shard = _Shard(name, parts["keys"], parts["offsets"], parts["vectors"])
        if (
            shard.keys.ndim != 2
            or shard.keys.shape[1] != 32
            or len(shard.offsets) != len(shard.keys) + 1
            or int(shard.offsets[-1]) != len(shard.vectors)
        ):
            raise CorruptIndexError(f"token vectors {self.folder / name}: keys, offsets and vectors disagree")
        return shard

    def _refresh(self) -> None:
        """Re-read the shard list when it changed (one directory listing per call: a folder's mtime
        can miss two writes within one clock tick)."""
        names = self._listing()
        if names == self._stamp:
            return
        old = self._stamp or []
        grows = set(old) <= set(names)
        for _ in range(3):  # a writer may fold shards between the listing and the loads: list again
            try:
                new = [self._load(name) for name in names if not grows or name not in old]
                break
            except CorruptIndexError:
                if self._listing() == names:
                    raise
                names = self._listing()
                grows = set(old) <= set(names)
        else:  # pragma: no cover - three folds during one read
            new = [self._load(name) for name in names]
            grows = False
        shards = self._shards + new if grows else new
        where = self._where if grows else {}
        for index, shard in enumerate(shards[len(shards) - len(new) :], start=len(shards) - len(new)):
            offsets = shard.offsets.tolist()
            for i, key in enumerate(shard.keys):
                where[key.tobytes()] = (index, offsets[i], offsets[i + 1])
        self._shards, self._where, self._stamp = shards, where, names

    def get(self, hashes: Sequence[str]) -> list[np.ndarray | None]:
        """The token vectors (float32, (tokens, dims)) of each hash, None for a text not stored."""
        with self._lock:
            self._refresh()
            found: list[np.ndarray | None] = []
            for sha in hashes:
                at = self._where.get(_digest(sha))
                if at is None:
                    found.append(None)
                else:
                    shard, start, end = at
                    found.append(np.asarray(self._shards[shard].vectors[start:end], dtype=np.float32))
            return found

    def missing(self, hashes: Iterable[str]) -> list[str]:
        """The hashes (unique, in order) with no stored vectors."""
        with self._lock:
            self._refresh()
            return [sha for sha in dict.fromkeys(hashes) if _digest(sha) not in self._where]

    def stored(self) -> set[str]:
        """Every stored hash (hex)."""
        with self._lock:
            self._refresh()
            return {key.hex() for key in self._where}

    @property
    def shard_count(self) -> int:
        with self._lock:
            self._refresh()
            return len(self._shards)

    def nbytes(self) -> int:
        """Bytes of the stored token vectors (float16)."""
        with self._lock:
            self._refresh()
            return sum(int(shard.vectors.nbytes) for shard in self._shards)

    # ------------------------------------------------------------ writing (under the index's writer lock)
    def _write_spec(self) -> None:
        path = self.folder / SPEC_FILE
        if self.spec is not None and not path.exists():
            tmp = path.with_name(f".{SPEC_FILE}.tmp")
            tmp.write_text(json.dumps(self.spec, indent=2, sort_keys=True))
            os.replace(tmp, path)

    def add(self, hashes: Sequence[str], vectors: Sequence[np.ndarray]) -> int:
        """Store the token vectors of texts not stored yet, as one new shard; returns how many were new.
        Contract: nothing readers see changes until the keys file is renamed into place."""
        if len(hashes) != len(vectors):
            raise ValueError(f"{len(hashes)} hashes but {len(vectors)} token matrices")
        todo = set(self.missing(hashes))
        pairs = []
        for sha, matrix in zip(hashes, vectors):
            if sha in todo:
                todo.discard(sha)
                pairs.append((sha, matrix))
        if not pairs:
            return 0
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write_spec()
        self._write_shard(pairs)
        if len(self._listing()) > MAX_SHARDS:
            self.compact(None)
        return len(pairs)

    def _write_shard(self, pairs: Sequence[tuple[str, np.ndarray]]) -> str:
        name = f"shard-{uuid.uuid4().hex[:16]}"
        lengths = np.array([len(v) for _, v in pairs], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        dims = next((v.shape[1] for _, v in pairs if v.ndim == 2), 0)
        stacked = (
            np.concatenate([np.asarray(v, dtype=np.float16).reshape(-1, dims) for _, v in pairs])
            if int(offsets[-1])
            else np.zeros((0, dims), dtype=np.float16)
        )
        keys = np.frombuffer(b"".join(_digest(sha) for sha, _ in pairs), dtype=np.uint8).reshape(-1, 32)
        _write_npy(self.folder / f"{name}.vectors.npy", stacked)
        _write_npy(self.folder / f"{name}.offsets.npy", offsets)
        _write_npy(self.folder / f"{name}.keys.npy", keys)  # last: the shard exists from here on
        _fsync_dir(self.folder)
        return name

    def compact(self, live: set[str] | None) -> int:
        """Fold every shard into one, keeping only `live` hashes (None: all); removes interrupted
        writes' leftovers. Returns the number of texts kept."""
        self._remove_partial()
        names = self._listing()
        if not names:
            return 0
        with self._lock:
            self._refresh()
            keep = [
                (key.hex(), np.asarray(self._shards[s].vectors[a:b]))
                for key, (s, a, b) in self._where.items()
                if live is None or key.hex() in live
            ]
        if len(names) == 1 and len(keep) == len(self._where):
            return len(keep)
        if keep:
            self._write_shard(sorted(keep, key=lambda pair: pair[0]))
        for name in names:  # keys first: a shard is gone the moment its keys file is
            for part in ("keys", "offsets", "vectors"):
                (self.folder / f"{name}.{part}.npy").unlink(missing_ok=True)
        _fsync_dir(self.folder)
        return len(keep)

    def drop_unreadable(self) -> int:
        """Remove every shard that cannot be read (its texts are encoded again by the caller);
        returns how many were removed."""
        dropped = 0
        for name in self._listing():
            try:
                self._load(name)
            except CorruptIndexError:
                for part in SHARD_PARTS[::-1]:  # keys first
                    (self.folder / f"{name}.{part}.npy").unlink(missing_ok=True)
                dropped += 1
        self._stamp = None
        self._shards, self._where = [], {}
        return dropped

    def _remove_partial(self) -> None:
        """Remove files of shards without keys (an interrupted write) and temporary files."""
        if not self.folder.is_dir():
            return
        complete = set(self._listing())
        for entry in os.listdir(self.folder):
            if entry.startswith(".") or entry.endswith(".npy") and entry.rsplit(".", 2)[0] not in complete:
                (self.folder / entry).unlink(missing_ok=True)

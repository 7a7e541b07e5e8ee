"""The on-disk layout of an index folder, its manifest (the commit point) and its writer lock.
See docs/internals/index.md#layout."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from hybridlab.errors import CorruptIndexError, IndexLockedError, IndexNotFoundError, InvalidValueError
from hybridlab.filelock import exclusive_lock, lock_if_possible
from hybridlab.index.format.lru import LruCache
from hybridlab.index.format.manifest import FORMAT_VERSION, FileRecord, Manifest, NotAManifest, dumps, loads

MANIFEST = "manifest.json"
CACHE_FILE = "embeddings.duckdb"
LOCK_FILE = ".lock"
VERIFIED_FILE = ".verified.json"
#: files changed within this many ns of a clean hash are hashed again on the next open
SETTLED_NS = 2_000_000_000
STORE_FILE = "store.duckdb"
BM25_DIR = "bm25"
GENERATION = re.compile(r"^gen-(\d{6})$")


def model_slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model)


def dense_file(model: str) -> str:
    return f"dense-{model_slug(model)}.faiss"


def graph_file(model: str) -> str:
    return f"graph-{model_slug(model)}.npy"


def generation_name(number: int) -> str:
    return f"gen-{number:06d}"


WAL_PREFIX = "wal-"


def wal_path(index_dir: str | os.PathLike, generation: int) -> Path:
    """The write-ahead log that extends generation `generation` of `index_dir` (`hybridlab.index.format.wal`)."""
    return Path(index_dir) / f"{WAL_PREFIX}{int(generation):06d}.log"


def wal_generation(name: str) -> int | None:
    """The generation number of a log's file name (None: not a log)."""
    if not (name.startswith(WAL_PREFIX) and name.endswith(".log")):
        return None
    digits = name[len(WAL_PREFIX) : -len(".log")]
    return int(digits) if digits.isdigit() else None


def recorded_cache(index_dir: Path, manifest: Manifest) -> Path | None:
    """The index's own embeddings cache when it has one (also in a copied or moved index, whose
    manifest still names the original's), else the one the manifest names if it exists (the shared
    cache of the evaluation indexes); None when neither exists."""
    local = Path(index_dir) / CACHE_FILE
    if local.exists():
        return local
    named = manifest.embedding_cache
    return Path(named) if named and Path(named).exists() else None


def fsync_path(path: str | os.PathLike) -> None:
    """fsync one file or folder."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: fsyncs issued at once by `fsync_tree` (each waits on the disk with the GIL released, so the file
#: system commits them together: a small segment's ~15 files cost about one fsync, not fifteen)
FSYNC_THREADS = 16
_FSYNC_POOL: Any = None
_FSYNC_POOL_LOCK = threading.Lock()


def fsync_tree(path: Path) -> None:
    """Flush every file below `path` to disk, then the folders themselves (deepest first); the
    fsyncs of one level run concurrently. Returns once all of them have."""
    global _FSYNC_POOL
    files, folders = [], []
    for root, _dirs, names in os.walk(path):
        files += [os.path.join(root, name) for name in names]
        folders.append(root)
    with _FSYNC_POOL_LOCK:
        if _FSYNC_POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            _FSYNC_POOL = ThreadPoolExecutor(FSYNC_THREADS, thread_name_prefix="hybridlab-fsync")
    for level in (files, sorted(folders, key=lambda folder: -folder.count(os.sep))):
        if len(level) == 1:
            fsync_path(level[0])
        else:
            list(_FSYNC_POOL.map(fsync_path, level))  # re-raises the first failure


def file_sha256(path: Path) -> str:
    import hashlib

    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def generation_files(folder: Path, prefix: str = "") -> dict[str, FileRecord]:
    """`{prefix + relative path: size and sha256}` of every file of a generation folder (its
    manifest copy excluded)."""
    files = {}
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and path.name != MANIFEST:
            files[prefix + path.relative_to(folder).as_posix()] = FileRecord(
                path.stat().st_size, file_sha256(path)
            )
    return files


def file_base(index_dir: Path, manifest: Manifest) -> Path:
    """The folder the manifest's `files` names are relative to: the index folder (format 2, names
    like `gen-000003/store.duckdb`) or the generation folder (format 1)."""
    return Path(index_dir) if manifest.format >= 2 else Path(index_dir) / manifest.path


def read_generation_manifest(folder: Path, copies: LruCache | None = None) -> Manifest | None:
    """The manifest copy inside a generation folder (None when absent or unreadable). A copy is
    written once, so with `copies` (the writer's cache) one read before is reused while its inode,
    size and mtime are the same."""
    path = Path(folder) / MANIFEST
    try:
        info = os.stat(path)
        key = (str(path), info.st_ino, info.st_size, info.st_mtime_ns)
        known = copies.get(key) if copies is not None else None
        if known is not None:
            return known
        manifest = loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # NotAManifest and JSONDecodeError are ValueErrors
        return None
    if copies is not None:
        copies.put(key, manifest)
    return manifest


def file_problems(
    index_dir: Path, manifest: Manifest, hash_all: bool = False, trusted: frozenset[str] = frozenset()
) -> list[str]:
    """Files of the live generation that are missing, truncated or altered against the manifest's
    checksums. Sizes are always checked; sha256 of the FAISS and BM25 files (whose parsers must never
    see garbage) and, with `hash_all`, of every file (opening an index does: a garbled DuckDB page
    may otherwise only show in a later query, or never), except the `trusted` names (already hashed,
    unchanged since: see `open_problems`). Manifests without checksums pass."""
    base = file_base(index_dir, manifest)
    problems = []
    for name, expected in (manifest.files or {}).items():
        path = base / name
        if not path.is_file():
            problems.append(f"{path} is missing")
            continue
        size = path.stat().st_size
        if size != expected.bytes:
            problems.append(
                f"{path} has {size} bytes, the manifest says {expected.bytes} (truncated or altered)"
            )
        elif (
            name not in trusted
            and (hash_all or name.endswith(".faiss") or f"{BM25_DIR}/" in name)
            and file_sha256(path) != expected.sha256
        ):
            problems.append(f"{path} does not match its sha256 in the manifest (altered or corrupt)")
    return problems


def _file_identity(path: Path) -> list[int]:
    """What changes when a file is written, replaced, copied or has its mtime reset: size, inode,
    mtime and ctime (the kernel sets ctime; no user call can put it back)."""
    info = path.stat()
    return [info.st_size, info.st_ino, info.st_mtime_ns, info.st_ctime_ns]


def _read_verified(index_dir: Path, generation: str) -> dict[str, list[int]]:
    """The record of clean hashes; for format 2 (names include their segment folder, which is never
    rewritten) it serves every generation, for format 1 only the generation it was written for."""
    try:
        stamp = json.loads((Path(index_dir) / VERIFIED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(stamp, dict) or not isinstance(stamp.get("files"), dict):
        return {}
    if stamp.get("path") != generation and stamp.get("path") != "*":
        return {}
    return stamp["files"]


def open_problems(index_dir: Path, manifest: Manifest) -> list[str]:
    """`file_problems` with every file hashed, for opening an index: a file whose size, inode, mtime
    and ctime are those recorded when it last hashed clean (INDEX/.verified.json) is not hashed again,
    so reopening a large index costs a stat per file, not a read of every byte. Any write, copy or
    mtime reset re-hashes the file; only corruption below the file system (bit rot) needs
    `hybridlab verify`, which always hashes everything. The record is written best-effort (a
    read-only index folder is hashed on every open)."""
    index_dir = Path(index_dir)
    generation = file_base(index_dir, manifest)
    names = list(manifest.files or {})
    key = "*" if manifest.format >= 2 else manifest.path
    recorded = _read_verified(index_dir, key)
    identities = {}  # taken before hashing: a change during the hash shows as a new identity next time
    for name in names:
        try:
            identities[name] = _file_identity(generation / name)
        except OSError:
            pass
    trusted = frozenset(name for name, ident in identities.items() if recorded.get(name) == ident)
    problems = file_problems(index_dir, manifest, hash_all=True, trusted=trusted)
    if problems or not names or trusted == set(names):
        return problems
    try:
        # a write in the same clock tick as this record would not move ctime: trust settled files only
        settled_before = time.time_ns() - SETTLED_NS
        stamp = {
            "path": key,
            "files": {name: ident for name, ident in identities.items() if ident[3] < settled_before},
        }
        tmp = index_dir / f".{VERIFIED_FILE}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(stamp), encoding="utf-8")
        os.replace(tmp, index_dir / VERIFIED_FILE)
    except OSError:
        pass
    return problems


def repair_hint(index_dir: Path) -> str:
    return f"run `hybridlab verify --repair --index {index_dir}`"


def read_manifest(index_dir: Path) -> Manifest:
    """The manifest, checked: parseable, known format, its generation folder present."""
    path = Path(index_dir) / MANIFEST
    if not path.exists():
        if not Path(index_dir).exists():
            raise IndexNotFoundError(
                f"no index at {index_dir} (build one with `hybridlab index PATH --index {index_dir}`)"
            )
        if generations(index_dir):
            raise CorruptIndexError(
                f"{path} is missing but generation folders exist; {repair_hint(index_dir)}"
            )
        raise IndexNotFoundError(f"no index at {index_dir}: {MANIFEST} is missing")
    try:
        manifest = loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CorruptIndexError(f"{path} is corrupt ({error}); {repair_hint(index_dir)}") from None
    except NotAManifest as error:
        raise CorruptIndexError(
            f"{path} is not a hybridlab manifest of format {FORMAT_VERSION} ({error}); "
            f"{repair_hint(index_dir)}"
        ) from None
    for name in sorted(manifest.folders):
        if not (Path(index_dir) / name).is_dir():
            raise CorruptIndexError(
                f"{Path(index_dir) / name} named by {path} is missing; {repair_hint(index_dir)}"
            )
    return manifest


def write_manifest(index_dir: Path, manifest: Manifest, text: str | None = None) -> None:
    """Atomically replace the manifest: write aside, fsync, rename, fsync the folder (`text`: the
    manifest already serialised by `manifest.dumps`)."""
    index_dir = Path(index_dir)
    tmp = index_dir / f".{MANIFEST}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(dumps(manifest) if text is None else text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, index_dir / MANIFEST)
    fsync_path(index_dir)


def next_generation_number(index_dir: Path) -> int:
    numbers = [
        int(m.group(1)) for p in Path(index_dir).iterdir() if (m := GENERATION.match(p.name.split(".")[0]))
    ]
    return max(numbers, default=0) + 1


def generations(index_dir: Path) -> list[Path]:
    """Complete (renamed, not `.tmp-PID`) generation folders, oldest first."""
    found = [p for p in Path(index_dir).glob("gen-*") if p.is_dir() and GENERATION.match(p.name)]
    return sorted(found, key=lambda p: p.name)


def previous_generation(index_dir: Path, live: Path | None) -> Path | None:
    """The newest complete generation older than `live` (kept as a fallback for repair)."""
    if live is None:
        return None
    older = [p for p in generations(index_dir) if p.name < live.name]
    return older[-1] if older else None


def remove_stale(
    index_dir: Path, keep: Path | None, previous: Path | None = None, copies: LruCache | None = None
) -> list[str]:
    """Delete generation folders other than `keep` and `previous` and the segments their manifest
    copies name (crashed builds, older generations, merged-away segments). Folders are compared by
    name (all are children of `index_dir`); the removed ones are renamed aside at once and deleted
    by a background thread. While a reader is opening a generation (`reading`), retired folders,
    logs and graphs stay where they are: the next commit removes them. `copies`: the writer's cache
    of manifest copies read (`read_generation_manifest`)."""
    index_dir = Path(index_dir)
    commits = {p.name for p in (keep, previous) if p is not None}
    kept = set(commits)
    for folder in (keep, previous):
        if folder is not None:
            copy = read_generation_manifest(folder, copies)
            kept |= copy.folders if copy is not None else set()
    removed, trash = [], []
    with os.scandir(index_dir) as entries:
        names = [entry.name for entry in entries if entry.name.startswith("gen-")]
    with no_readers_opening(index_dir) as free:  # else a reader may be opening a retired one: they wait
        for name in names:
            path = index_dir / name
            if name in kept:
                if name not in commits and free:  # a segment only: the graphs of its own commit are stale
                    for stale in (
                        n for n in os.listdir(path) if n.startswith("graph-") and n.endswith(".npy")
                    ):
                        (path / stale).unlink(missing_ok=True)
                continue
            if not free and ".tmp-" not in name:
                continue
            aside = index_dir / f"{TRASH_PREFIX}{name}.{os.getpid()}-{time.monotonic_ns()}"
            try:
                os.rename(path, aside)
                trash.append(aside)
            except OSError:
                shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
        numbers = {int(match.group(1)) for name in commits if (match := GENERATION.match(name))}
        for name in os.listdir(index_dir) if free else ():
            number = wal_generation(name)
            if number is not None and number not in numbers:  # the log of a generation no longer kept
                (index_dir / name).unlink(missing_ok=True)
                removed.append(name)
    for pattern in (f".{MANIFEST}.tmp-*", f".{VERIFIED_FILE}.tmp-*"):
        for tmp in index_dir.glob(pattern):
            tmp.unlink(missing_ok=True)
    with _TRASH_LOCK:
        running = [thread for thread in _TRASH_THREADS if thread.is_alive()]
        _TRASH_THREADS[:] = running
    leftovers = [p for p in index_dir.glob(f"{TRASH_PREFIX}*") if p not in trash] if not running else []
    if trash or leftovers:  # leftovers: trash of a process that exited before deleting it
        thread = threading.Thread(target=_delete_trash, args=(trash + leftovers,), name="hybridlab-trash")
        thread.start()  # not a daemon: an exiting process finishes deleting first
        with _TRASH_LOCK:
            _TRASH_THREADS.append(thread)
    return removed


#: removed generation folders are renamed to `.trash-<name>.<pid>-<ns>` and deleted in the background
TRASH_PREFIX = ".trash-"
_TRASH_THREADS: list[threading.Thread] = []
_TRASH_LOCK = threading.Lock()


def _delete_trash(paths: list[Path]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def wait_for_trash() -> None:
    """Wait until the folders `remove_stale` set aside are deleted (tests, benchmarks of disk use)."""
    with _TRASH_LOCK:
        threads = list(_TRASH_THREADS)
    for thread in threads:
        thread.join()


#: seconds a writer waits for the index's writer lock (held by another writer) before giving up
LOCK_WAIT_SECONDS = 30.0


def lock_wait_seconds() -> float:
    """`LOCK_WAIT_SECONDS`, or env `HYBRIDLAB_LOCK_WAIT` (seconds >= 0)."""
    value = os.environ.get("HYBRIDLAB_LOCK_WAIT")
    if value is None:
        return LOCK_WAIT_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise InvalidValueError(f"HYBRIDLAB_LOCK_WAIT must be a number of seconds >= 0, got {value!r}")
    return seconds


class FairLock:
    """A first-come first-served lock with a timeout and an owner: the writers of one index in this
    process queue on it before the file lock, so none of them starves and a timeout can say which
    thread holds it."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._queue: collections.deque[object] = collections.deque()
        self.owner: tuple[int, str] | None = None  # (thread ident, thread name) of the holder
        self.since = 0.0

    def acquire(self, timeout: float | None) -> bool:
        ticket = object()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            self._queue.append(ticket)
            while self._queue[0] is not ticket or self.owner is not None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    self._queue.remove(ticket)
                    self._condition.notify_all()
                    return False
                self._condition.wait(remaining)
            self._queue.popleft()
            self.owner = (threading.get_ident(), threading.current_thread().name)
            self.since = time.monotonic()
            return True

    def release(self) -> None:
        with self._condition:
            self.owner = None
            self._condition.notify_all()


_PROCESS_LOCKS: dict[str, FairLock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()


def _process_command(pid: str) -> str:
    """The command line of process `pid` (best effort, for messages)."""
    try:
        raw = Path(f"/proc/{int(pid)}/cmdline").read_bytes()
    except (OSError, ValueError):
        return ""
    return " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)[:200]


@dataclass
class WriterLock:
    """The index's writer lock: writers of this process queue on an in-process first-come lock,
    then take an exclusive flock on INDEX/.lock (whose file records the holder's PID), waiting
    at most `timeout` seconds in all (None: `lock_wait_seconds()`; 0: not at all). IndexLockedError
    says who holds it: a thread of this process (named) or another process (PID and command)."""

    index_dir: Path
    timeout: float | None = None
    handle: Any = None
    _held: contextlib.ExitStack | None = None
    _local: FairLock | None = None

    def __enter__(self) -> Self:
        timeout = lock_wait_seconds() if self.timeout is None else self.timeout
        deadline = time.monotonic() + timeout
        with _PROCESS_LOCKS_GUARD:
            local = _PROCESS_LOCKS.setdefault(os.path.realpath(self.index_dir), FairLock())
        owner = local.owner
        if owner is not None and owner[0] == threading.get_ident():
            raise IndexLockedError(
                f"index {self.index_dir} is locked by PID {os.getpid()} (this process: this "
                f"thread, {owner[1]!r}, holds it already and cannot wait for itself)"
            )
        if not local.acquire(timeout):
            owner = local.owner
            holder = (
                f"thread {owner[1]!r}, for {time.monotonic() - local.since:.1f}s"
                if owner
                else "another thread"
            )
            raise IndexLockedError(
                f"index {self.index_dir} is locked by PID {os.getpid()} (this process: {holder} "
                f"is writing it; waited {timeout:.1f}s)"
            )
        path = Path(self.index_dir) / LOCK_FILE
        held = contextlib.ExitStack()
        held.callback(local.release)
        try:
            handle = held.enter_context(exclusive_lock(path, timeout=max(0.0, deadline - time.monotonic())))
        except BlockingIOError:
            held.close()
            holder = path.read_text(encoding="utf-8").strip() or "unknown"
            command = _process_command(holder)
            raise IndexLockedError(
                f"index {self.index_dir} is locked by PID {holder} (another process is writing it"
                f"{f': {command}' if command else ''}; waited {timeout:.1f}s); try again when it has finished"
            ) from None
        except BaseException:
            held.close()
            raise
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self.handle, self._held = handle, held
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.handle is not None:
            assert self._held is not None  # set together with the handle
            self.handle.seek(0)
            self.handle.truncate()
            self._held.close()
            self.handle = self._held = None


#: readers hold a shared flock on this file while they open a generation; a writer removes retired
#: generations only while it can take it exclusively (else they wait for the next commit)
READERS_FILE = ".readers"


@contextlib.contextmanager
def reading(index_dir: Path) -> Iterator[bool]:
    """Hold the index's files while a reader opens a generation: no retired generation folder,
    log or graph is removed meanwhile (a reader holds the files it opened; Linux keeps a removed
    open file readable). Yields False when the folder is read-only (nothing can be removed then)."""
    with lock_if_possible(Path(index_dir) / READERS_FILE, exclusive=False, timeout=None) as held:
        yield bool(held)


@contextlib.contextmanager
def no_readers_opening(index_dir: Path) -> Iterator[bool]:
    """Yields True while no reader is opening a generation (and none can start: the exclusive side
    of `reading`), False when one is: then retired files must stay."""
    with lock_if_possible(Path(index_dir) / READERS_FILE, exclusive=True, timeout=0) as held:
        yield held is not False

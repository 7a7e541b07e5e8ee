"""One helper for the exclusive `flock` locks of hybridlab: the index writer lock, the report-run
lock and the ONNX export lock.

`flock` is advisory and per open file: the lock goes away with the process, so a crashed holder
never leaves a stale lock behind (unlike a lock *file* whose existence is the lock).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["exclusive_lock"]


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike, *, blocking: bool = True) -> Iterator[IO[str]]:
    """Hold an exclusive flock on `path` (created with its folders) for the block; yields the open
    file (read/append), e.g. to record the holder's PID in it.

    `blocking=True` waits for the other holder; `blocking=False` raises BlockingIOError at once.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+", encoding="utf-8") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            yield handle
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

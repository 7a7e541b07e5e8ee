"""The `flock` locks of hybridlab: the index writer lock, the readers' hold on an index, the
report-run lock and the ONNX export lock.

`flock` is advisory and per open file: the lock goes away with the process, so a crashed holder
never leaves a stale lock behind (unlike a lock *file* whose existence is the lock). A wait is a
blocking `flock` (the kernel wakes the waiter when the holder lets go), bounded by a timeout: no
polling, so a waiter is never starved by a loop of short holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["exclusive_lock", "flock_waiting", "lock_if_possible"]


def flock_waiting(fd: int, operation: int, timeout: float | None) -> None:
    """`flock(fd, operation)`, blocking for at most `timeout` seconds (None: as long as it takes;
    0: not at all); BlockingIOError when the time is up.

    The blocking call runs in a helper thread on a duplicate of `fd` (same open file, so the lock it
    takes is `fd`'s); when the caller gives up first, the helper releases the lock as soon as it gets it."""
    if timeout is None:
        fcntl.flock(fd, operation)
        return
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        if timeout <= 0:
            raise
    helper_fd = os.dup(fd)
    acquired = threading.Event()
    decided = threading.Lock()
    state: dict[str, Any] = {"abandoned": False, "error": None}

    def wait() -> None:
        try:
            fcntl.flock(helper_fd, operation)
        except OSError as error:
            state["error"] = error
            acquired.set()
            os.close(helper_fd)
            return
        with decided:
            if state["abandoned"]:  # the caller gave up: let go at once
                fcntl.flock(helper_fd, fcntl.LOCK_UN)
            else:
                acquired.set()
        os.close(helper_fd)

    threading.Thread(target=wait, name="hybridlab-flock-wait", daemon=True).start()
    acquired.wait(timeout)
    with decided:
        if not acquired.is_set():
            state["abandoned"] = True
            raise BlockingIOError(f"lock not acquired within {timeout:.1f}s")
    if state["error"] is not None:
        raise state["error"]


@contextlib.contextmanager
def exclusive_lock(
    path: str | os.PathLike, *, blocking: bool = True, timeout: float | None = None
) -> Iterator[IO[str]]:
    """Hold an exclusive flock on `path` (created with its folders) for the block; yields the open
    file (read/append), e.g. to record the holder's PID in it.

    `blocking=True` waits for the other holder (at most `timeout` seconds when given);
    `blocking=False` raises BlockingIOError at once.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+", encoding="utf-8") as handle:
        flock_waiting(handle.fileno(), fcntl.LOCK_EX, timeout if blocking else 0)
        try:
            yield handle
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def lock_if_possible(
    path: str | os.PathLike, *, exclusive: bool, timeout: float | None
) -> Iterator[bool | None]:
    """Hold a flock on `path` for the block, waiting at most `timeout` seconds (0: not at all; None:
    as long as it takes). Yields True when held, False when another holder kept it past `timeout`,
    None when the file cannot be opened (e.g. in a read-only folder: nothing to lock there)."""
    try:
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError:
        yield None
        return
    with handle:
        try:
            flock_waiting(handle.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, timeout)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

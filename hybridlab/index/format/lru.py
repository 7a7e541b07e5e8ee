"""A small thread-safe LRU cache: the process-wide caches of the write path (`index.caches`) and the
readers' query vectors and filter masks (`search`) are each one of these, every operation under
one lock, so threads share them safely."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

from hybridlab.errors import InvalidValueError

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_MISSING = object()


class LruCache(Generic[K, V]):
    """About `size` entries, least recently used dropped first; every operation holds one lock.
    Values are computed outside the lock (two threads missing the same key both compute it; the
    values are equal, the second one stored wins)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise InvalidValueError(f"size must be >= 1, got {size}", field="size")
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            try:
                value = self._items[key]
            except KeyError:
                return default
            self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Store `value`; drops the least recently used entry when over `size`."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            if len(self._items) > self.size:
                self._items.popitem(last=False)

    def put_many(self, items: Iterable[tuple[K, V]]) -> None:
        """Store a batch, all of it even beyond `size` (the caller is about to use every entry);
        later single puts drop one old entry each."""
        with self._lock:
            for key, value in items:
                self._items[key] = value
                self._items.move_to_end(key)

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        """The cached value of `key`, else `compute()` stored under it."""
        value = self.get(key, _MISSING)  # type: ignore[arg-type]
        if value is _MISSING:
            value = compute()
            self.put(key, value)
        return value  # type: ignore[return-value]

    def missing(self, keys: Iterable[K]) -> list[K]:
        """The keys (in order, without repeats) that are not cached."""
        with self._lock:
            return [key for key in dict.fromkeys(keys) if key not in self._items]

    def pop(self, key: K) -> V | None:
        """Remove `key`; its value, or None."""
        with self._lock:
            return self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

"""A bounded cache of per-conversation (or per-owner) memories, each with a lock for its callers.

A server keeps one memory object per key (a conversation, an owner) so that each request does not
rebuild it, and serializes the operations on one object with that object's own lock, while other
keys' objects run in parallel. The cache holds at most ``size`` of them; the least recently used
goes first (``on_evict`` is told its key).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from .._fork import renew_in_child

T = TypeVar("T")


class LockedCache(Generic[T]):
    """``get(key, build)``: the object of ``key`` and its lock, built on first use and kept (LRU, ``size`` at most)."""

    def __init__(self, size: int, on_evict: Callable[[Any], object] | None = None) -> None:
        if size < 1:
            raise ValueError(f"a cache holds at least one object, got size {size}")
        self.size = size
        self.on_evict = on_evict
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, tuple[T, threading.Lock]] = OrderedDict()
        renew_in_child(self)

    def _after_fork(self) -> None:
        """In a forked child, a new lock and no object: one a request of the parent was changing may be half
        changed, and its lock held for ever (see ``_fork``); each is built again from the store on first use.
        """
        self._lock = threading.Lock()
        self._items = OrderedDict()

    def get(self, key: Hashable, build: Callable[[], T]) -> tuple[T, threading.Lock]:
        """The cached object of ``key`` and its lock; ``build()`` makes it when missing.

        ``build`` runs outside the cache's lock (it may read a store), so two threads may build the
        same key at once: the first stored is kept and both get it.
        """
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        built = (build(), threading.Lock())
        evicted = []
        with self._lock:
            item = self._items.setdefault(key, built)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                evicted.append(self._items.popitem(last=False)[0])
        if self.on_evict is not None:
            for gone in evicted:
                self.on_evict(gone)
        return item

    def peek(self, key: Hashable) -> tuple[T, threading.Lock] | None:
        """The cached object of ``key`` and its lock, or None (nothing is built, the order is kept)."""
        with self._lock:
            return self._items.get(key)

    def drop(self, key: Hashable) -> None:
        """Forget the object of ``key`` (the next :meth:`get` builds it again)."""
        with self._lock:
            self._items.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

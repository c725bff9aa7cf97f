"""What :class:`~fullrecall.integrations.langgraph_window.FullrecallWindow` keeps per LangGraph thread, bounded.

A long-running graph serves any number of threads; the window keeps, for each, a lock (one model call of a
thread at a time in this process) and the ids of the thread's messages its log is known to hold, so that a
state of a thousand messages costs no look-up per model call. Both live in an LRU of ``size`` threads: the
least recently used goes first, never one in use (its lock stays the one its callers share). What a thread
keeps is bounded by its state (``Thread.remember``), and it holds only while the log's ``mark`` is unchanged
(a forget or a deletion by any path changes it, see ``SyncConversationMemory.log_mark``).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Any

from .._fork import renew_in_child


class Thread:
    """One thread's lock and the ids its log was seen to hold (valid while the log's mark is ``mark``)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users = 0
        self.mark: Any = None
        self.logged: set[str] = set()

    def known(self, mark: Any) -> set[str]:
        """The ids known to be logged, if the log is still the one they were seen in (else none)."""
        if mark != self.mark:
            self.mark, self.logged = mark, set()
        return self.logged

    def remember(self, mark: Any, logged: set[str], state: set[str]) -> None:
        """Keep, under ``mark``, those ``logged`` ids the state still holds (no more than the state)."""
        self.mark, self.logged = mark, logged & state


class Threads:
    """An LRU of :class:`Thread` by key, at most ``size`` (more only while more are in use at once)."""

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"max_threads must be an integer >= 1, got {size!r}")
        self.size = size
        self._guard = threading.Lock()
        self._items: OrderedDict[Hashable, Thread] = OrderedDict()
        renew_in_child(self)

    def _after_fork(self) -> None:
        """New locks in a forked child, and no ids known: a run of the parent may have been changing them."""
        self._guard = threading.Lock()
        self._items = OrderedDict()

    @contextlib.contextmanager
    def hold(self, key: Hashable) -> Iterator[Thread]:
        """The thread of ``key``, locked for the caller (re-entrant), and kept while held."""
        with self._guard:
            thread = self._items.get(key) or Thread()
            self._items[key] = thread
            self._items.move_to_end(key)
            thread.users += 1
            self._evict()
        try:
            with thread.lock:
                yield thread
        finally:
            with self._guard:
                thread.users -= 1
                self._evict()

    def _evict(self) -> None:
        """Drop the least recently used threads not in use, down to ``size``."""
        idle = (key for key, thread in self._items.items() if thread.users == 0)
        for key in [k for _, k in zip(range(len(self._items) - self.size), idle)]:
            del self._items[key]

    def __len__(self) -> int:
        with self._guard:
            return len(self._items)

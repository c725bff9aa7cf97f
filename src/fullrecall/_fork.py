"""What a forked child makes anew before it runs anything else.

A process forked with ``os.fork`` (``multiprocessing``'s default on Linux, a pre-forking server) keeps
only the thread that forked. Whatever fullrecall's background threads (the memory's warming and store
round trips, the search's keyword query, the archive's indexer, the vector copies) were doing at that
moment is left as it was: a lock one of them held stays held for ever, a thread pool keeps the names of
threads that are not there (what is submitted to it never runs), and a cache one of them was changing may
be half changed. An object or module holding such things registers how it starts over, and every forked
child runs each of these before control returns to Python. Nothing here runs in the parent, or on Windows
(which does not fork).
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("fullrecall")


class Renewable(Protocol):
    def _after_fork(self) -> None:
        """Start over in a forked child: new locks, no threads of the parent's, nothing half changed."""


_objects: weakref.WeakSet[Any] = weakref.WeakSet()


def renew_in_child(obj: Renewable) -> None:
    """Call ``obj._after_fork()`` in every process forked while ``obj`` lives."""
    _objects.add(obj)


def after_fork_in_child(fn: Callable[[], None]) -> Callable[[], None]:
    """Run ``fn()`` (a module's renewal) in every forked child; returns ``fn``."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=fn)
    return fn


@after_fork_in_child
def _renew_objects() -> None:
    for obj in list(_objects):
        try:
            obj._after_fork()
        except Exception:  # noqa: BLE001 - one object's failure must not keep the others from starting over
            log.exception("could not renew %r in a forked child", obj)

"""What ``Store.forget`` returns, the same on every backend.

``forget`` deletes and then scrubs what the backend lets it scrub (SQLite: secure delete, an
FTS5 merge and a WAL checkpoint; PostgreSQL: ``VACUUM (ANALYZE)``; Redis: an AOF rewrite).
What it could not remove is said, never hidden: the result's ``"remaining"`` lists each
place that may still hold a copy, what is there and what removes it; it is empty when the
files and the server hold no trace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypedDict

COUNT_KEYS = ("messages", "summaries", "vectors", "state", "records", "sessions")


class Remaining(TypedDict):
    """A place that may still hold forgotten data after ``forget`` returned."""

    where: str  # the file, server structure or system (e.g. "/data/memory.db-wal")
    what: str  # what of the forgotten data may be there
    until: str  # what removes it, and when


def result(counts: dict[str, int], left: list[Remaining]) -> dict[str, Any]:
    """``forget``'s answer: every count of :data:`COUNT_KEYS` (0 when absent) and ``remaining``."""
    out: dict[str, Any] = {key: int(counts.get(key, 0)) for key in COUNT_KEYS}
    out["remaining"] = list(left)
    return out


def retry(attempt: Callable[[], bool], tries: int, pause: float) -> bool:
    """Call ``attempt`` until it returns True, at most ``tries`` times, ``pause`` seconds apart."""
    for n in range(tries):
        if attempt():
            return True
        if n + 1 < tries:
            time.sleep(pause)
    return False

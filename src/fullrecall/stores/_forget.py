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

COUNT_KEYS = ("messages", "summaries", "facts", "patterns", "vectors", "state", "records", "sessions")

# What the layers above keep as records, counted under their own names (the archive's summaries, long-term
# memory's facts and patterns); every other record (lists of conversations and sessions, the archive's
# bookkeeping, LangGraph store items, ...) is a "record". Long-term memory's change logs are sessions whose id
# starts with LOG_PREFIX: bookkeeping, so their entries are records too, neither messages nor sessions.
RECORD_KINDS = {"archive.summaries": "summaries", "facts": "facts", "procedures": "patterns"}
LOG_PREFIX = "_log."


def is_change_log(session_id: object) -> bool:
    """Whether ``session_id`` names one of long-term memory's change logs (bookkeeping, never a conversation)."""
    return isinstance(session_id, str) and session_id.startswith(LOG_PREFIX)


def counted_stats(store: Any, scope: Any) -> dict[str, Any]:
    """``store.stats(scope)`` with long-term memory's change logs counted as ``forget`` counts them: their entries
    as records, never as messages, and their sessions not as sessions (what the CLI and the service report).
    """
    stats = dict(store.stats(scope))
    logs = [s for s in store.sessions(scope) if is_change_log(s.session)]
    entries = sum(store.count(s) for s in logs)
    stats["message_count"] -= entries
    stats["session_count"] -= len(logs)
    stats["record_count"] += entries
    return stats


class Remaining(TypedDict):
    """A place that may still hold forgotten data after ``forget`` returned."""

    where: str  # the file, server structure or system (e.g. "/data/memory.db-wal")
    what: str  # what of the forgotten data may be there
    until: str  # what removes it, and when


def result(counts: dict[str, int], left: list[Remaining], *, namespaces: dict[str, int] | None = None,
           log_messages: int = 0, log_sessions: int = 0) -> dict[str, Any]:
    """``forget``'s answer: every count of :data:`COUNT_KEYS` (0 when absent) and ``remaining``.

    ``counts`` are the backend's raw counts: ``messages`` and ``summaries`` by message kind, ``records`` and
    ``sessions`` all of them; ``namespaces`` the deleted records per namespace, ``log_messages`` and
    ``log_sessions`` what of the messages and sessions were change logs. The answer names each kind as its
    user knows it (see :data:`RECORD_KINDS`).
    """
    out: dict[str, Any] = {key: int(counts.get(key, 0)) for key in COUNT_KEYS}
    for namespace, n in (namespaces or {}).items():
        if namespace in RECORD_KINDS:
            out[RECORD_KINDS[namespace]] += n
            out["records"] -= n
    out["messages"] -= log_messages
    out["records"] += log_messages
    out["sessions"] -= log_sessions
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

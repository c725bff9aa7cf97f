"""What the service writes again to keep it, on a store whose data expires.

Redis keeps a key ``ttl_seconds`` after its last write. Records the service writes once and then only reads (an API
key, a conversation's listing) would expire while in use: they are written again when :func:`due`.
"""

from __future__ import annotations

import time
from typing import Any

EVERY_S = 86_400.0  # written again at most this often (or every half of the time to live, if that is shorter)


def due(store: Any, written_at: float) -> bool:
    """Whether a record last written at ``written_at`` (Unix seconds) is to be written again to stay: never on a
    store whose data does not expire.
    """
    ttl = getattr(store, "ttl_seconds", None)
    if not ttl:
        return False
    return time.time() - written_at >= min(EVERY_S, ttl / 2)

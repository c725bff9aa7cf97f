"""When a remote model's request is worth trying again, and how long to wait before it (every HTTP client's rule)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

from .errors import InvalidInput

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})  # may pass on the next try; other 4xx do not


def checked(max_retries: Any, backoff: Any, max_backoff: Any) -> tuple[int, float, float]:
    """A client's retry settings, or InvalidInput naming the first that is none, when the client is made (the
    first request failed with a raw AssertionError or ValueError).
    """
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise InvalidInput(f"max_retries must be a whole number >= 0, got {max_retries!r}")
    for name, value in (("backoff", backoff), ("max_backoff", max_backoff)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise InvalidInput(f"{name} must be a number of seconds >= 0, got {value!r}")
    return max_retries, float(backoff), float(max_backoff)


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """The seconds a ``Retry-After`` header asks for: a number of seconds or an HTTP date (RFC 9110); None when
    there is none or it cannot be read (negative, NaN, neither a number nor a date).
    """
    if not value or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value.strip())
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:  # an HTTP date is GMT, whether it says so or not
            when = when.replace(tzinfo=UTC)
        return max(0.0, when.timestamp() - (time.time() if now is None else now))
    return seconds if seconds >= 0 and not math.isnan(seconds) else None


def redirect(headers: Mapping[str, str], status: int) -> str | None:
    """What an answer's redirect says (``", a redirect to <Location> (not followed)"``), or None when it is none:
    a client sends its key to its own ``base_url``'s host only.
    """
    if not 300 <= status < 400:
        return None
    return f", a redirect to {headers.get('location') or '(no Location)'} (not followed)"


def backoff_delay(attempt: int, base: float, cap: float, retry_after: float | None = None) -> float:
    """Exponential backoff (``base * 2**attempt``, capped), or the server's Retry-After (capped too) when it gave one."""
    if retry_after is not None and retry_after >= 0:
        return min(retry_after, cap)
    return min(cap, base * (2 ** attempt))

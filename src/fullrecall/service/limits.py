"""Rate limits: a token bucket each (``rate`` a second, bursts of ``burst``), per key or per client address."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

MAX_BUCKETS = 100_000  # buckets kept; past it the least recently used goes (a full one, most likely)


class RateLimiter:
    """``allow(key)`` is True (and spends a token) while the key has tokens; ``rate <= 0`` turns limiting off.

    At most ``max_buckets`` buckets are kept, the least recently used dropped first: keys a client chooses
    (addresses) cannot grow it without bound, and a dropped bucket is one that would have refilled.
    """

    def __init__(self, rate: float, burst: int | None = None, max_buckets: int = MAX_BUCKETS) -> None:
        self.rate = rate
        self.burst = float(burst if burst is not None else max(1, int(rate * 2)))
        self.max_buckets = max_buckets
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _tokens(self, key: str, now: float) -> float:
        tokens, last = self._buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - last) * self.rate)

    def allow(self, key: str) -> bool:
        if self.rate <= 0:
            return True
        now = time.monotonic()
        with self._lock:
            tokens = self._tokens(key, now)
            spent = tokens >= 1
            self._buckets[key] = (tokens - 1 if spent else tokens, now)
            self._buckets.move_to_end(key)
            while len(self._buckets) > self.max_buckets:
                self._buckets.popitem(last=False)
            return spent

    def blocked(self, key: str) -> bool:
        """Whether ``key`` has no token now (nothing is spent)."""
        if self.rate <= 0:
            return False
        with self._lock:
            return self._tokens(key, time.monotonic()) < 1

    def retry_after(self, key: str) -> float:
        if self.rate <= 0:
            return 0.0
        with self._lock:
            tokens = self._tokens(key, time.monotonic())
        return max(0.0, (1 - tokens) / self.rate)

    def __len__(self) -> int:
        return len(self._buckets)

"""Rate limits per key: a token bucket each (``rate`` requests a second, bursts of ``burst``)."""

from __future__ import annotations

import threading
import time


class RateLimiter:
    """``allow(key)`` is True while the key has tokens; ``rate <= 0`` turns limiting off."""

    def __init__(self, rate: float, burst: int | None = None) -> None:
        self.rate = rate
        self.burst = float(burst if burst is not None else max(1, int(rate * 2)))
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        if self.rate <= 0:
            return True
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens < 1:
                self._buckets[key] = (tokens, now)
                return False
            self._buckets[key] = (tokens - 1, now)
            return True

    def retry_after(self, key: str) -> float:
        with self._lock:
            tokens, _ = self._buckets.get(key, (self.burst, 0.0))
        return max(0.0, (1 - tokens) / self.rate) if self.rate > 0 else 0.0

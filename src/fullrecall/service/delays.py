"""The searchable delays the indexer measured: of the whole process, and of each tenant apart (what its own
``/v1/stats`` shows), bounded however many tenants come and go.

The process keeps its last :data:`KEPT` delays. Each tenant keeps its last :data:`KEPT_PER_TENANT`, and is
dropped once it has had none for :data:`IDLE_SECONDS` (its stats then say no sample, as a new tenant's do);
past :data:`MAX_TENANTS` tenants with samples, the one idle longest goes first. A tenant's figures depend
on its own activity alone (and the clock), never on another's, unless more than :data:`MAX_TENANTS` tenants
are active within the hour.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

KEPT = 10_000  # delays of the process kept
KEPT_PER_TENANT = 1_000  # delays of each tenant kept (a p95 of its last thousand groups)
IDLE_SECONDS = 3600.0  # a tenant without a new delay for this long is forgotten
MAX_TENANTS = 1_000  # tenants kept at most (each up to KEPT_PER_TENANT floats)


class Delays:
    """``add(tenant, seconds)``; ``of(tenant)`` (None: the process's) the delays kept, oldest first."""

    def __init__(self, *, idle_seconds: float = IDLE_SECONDS, max_tenants: int = MAX_TENANTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_seconds, self.max_tenants, self.clock = idle_seconds, max_tenants, clock
        self._all: deque[float] = deque(maxlen=KEPT)
        self._tenants: OrderedDict[str, tuple[deque[float], float]] = OrderedDict()  # idle longest first
        self._lock = threading.Lock()

    def add(self, tenant: str, seconds: float) -> None:
        now = self.clock()
        with self._lock:
            self._all.append(seconds)
            kept = self._tenants.pop(tenant, None)
            values = kept[0] if kept is not None else deque(maxlen=KEPT_PER_TENANT)
            values.append(seconds)
            self._tenants[tenant] = (values, now)
            self._prune(now)

    def of(self, tenant: str | None = None) -> list[float]:
        with self._lock:
            if tenant is None:
                return list(self._all)
            self._prune(self.clock())
            kept = self._tenants.get(tenant)
            return list(kept[0]) if kept is not None else []

    def tenants(self) -> int:
        """How many tenants have delays kept."""
        with self._lock:
            self._prune(self.clock())
            return len(self._tenants)

    def _prune(self, now: float) -> None:
        while self._tenants:
            _, (_, last) = next(iter(self._tenants.items()))
            if now - last <= self.idle_seconds and len(self._tenants) <= self.max_tenants:
                return
            self._tenants.popitem(last=False)

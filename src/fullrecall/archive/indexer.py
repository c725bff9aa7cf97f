"""A background worker that embeds archived messages off the writer's thread, in batches.

The writer has already made the text durable (keyword search finds it at once) and
noted the batch as waiting for vectors in the store, so a crash before the worker
gets to it loses nothing: the next archive of that conversation embeds it.

Handing a batch over costs the writer no system call: ``submit`` appends it to a deque
and returns. Waking a sleeping thread from inside a write (a futex wake) costs the writer
its CPU on a busy machine (the woken thread preempts it) and, once the worker runs, the
GIL; so while batches keep coming the worker looks for them every ``POLL_S`` seconds
instead, and only after ``idle_after`` seconds without work does it sleep until the next
``submit`` wakes it.

The worker also leaves the writer alone while it writes: it starts embedding once no batch
came in for ``delay`` seconds (writes coming back to back are embedded together, after them),
or once ``batch_size`` messages are queued, or once the oldest has waited ``max_delay``
seconds; ``flush`` and ``close`` start it at once. A batch's embedding therefore starts at most
``max_delay`` (plus one ``POLL_S``) after it was submitted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .._fork import renew_in_child

log = logging.getLogger("fullrecall.archive")

Job = tuple[str, list[Any]]  # (waiting-batch id, the messages to embed)

POLL_S = 0.01  # how often a worker with recent work looks for more
DELAY_S = 0.02  # how long writes must pause before the worker embeds what they queued
MAX_DELAY_S = 0.5  # the longest a queued batch waits for writes to pause
IDLE_AFTER_S = 10.0  # after this long without work, the worker sleeps until a submit wakes it


class BackgroundIndexer:
    """Runs ``index(jobs)`` on a daemon thread for everything submitted, up to ``batch_size`` messages a call.

    ``flush()`` returns once everything submitted so far has been handled; ``close()`` flushes and
    stops the thread. ``index`` must not raise (it records its own failures); if it does, the
    error is logged and the jobs stay waiting in the store.
    """

    def __init__(self, index: Callable[[list[Job]], None], *, batch_size: int = 256, delay: float = DELAY_S,
                 max_delay: float = MAX_DELAY_S, idle_after: float = IDLE_AFTER_S) -> None:
        self._index = index
        self.batch_size = batch_size
        self.delay = delay
        self.max_delay = max_delay
        self.idle_after = idle_after
        self._closing = False
        self._start()
        renew_in_child(self)

    def _start(self) -> None:
        self._jobs: deque[tuple[float, Job]] = deque()  # (when submitted, job)
        self._lock = threading.Lock()  # a submit racing close: queued before the stop, or refused
        self._submitted = 0  # jobs accepted (under _lock)
        self._queued = 0  # messages queued (under _lock)
        self._done = 0  # jobs handled (under _finished)
        self._flush_to = 0  # a flush waits for this many jobs: embed without waiting for a pause
        self._finished = threading.Condition()
        self._wake = threading.Event()  # flush, close, or a submit to a sleeping worker
        self._sleeping = False
        self._thread = threading.Thread(target=self._run, name="fullrecall-indexer", daemon=True)
        if not self._closing:
            self._thread.start()

    def _after_fork(self) -> None:
        """A forked child gets a worker of its own, with nothing queued: the batches queued in the parent are
        the parent's to embed (each is recorded as waiting in the store, so a catch-up embeds it if the parent
        never does).
        """
        self._start()

    @property
    def closed(self) -> bool:
        return self._closing or not self._thread.is_alive()

    def submit(self, job: Job) -> None:
        """Queue one batch (the caller has already recorded it as waiting); no system call unless the worker
        has been idle for ``idle_after`` seconds.
        """
        with self._lock:
            if self.closed:
                raise RuntimeError("the background indexer is closed")
            self._jobs.append((time.monotonic(), job))
            self._submitted += 1
            self._queued += len(job[1])
        if self._sleeping:
            self._wake.set()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted batch is embedded (or recorded as failed); False on timeout."""
        target = self._submitted
        with self._finished:
            if self._done >= target:
                return True
            self._flush_to = max(self._flush_to, target)
            self._wake.set()  # start now rather than at the worker's next look
            return self._finished.wait_for(lambda: self._done >= target, timeout)

    def close(self) -> None:
        """Flush, then stop the worker thread (a later ``submit`` raises: nothing is queued after the stop)."""
        with self._lock:
            self._closing = True
        self._wake.set()
        self._thread.join()

    def _ready(self) -> bool:
        """Whether to embed now: something is queued and writes paused, or it cannot wait any longer."""
        if not self._jobs:
            return False
        if self._closing or self._done < self._flush_to or self._queued >= self.batch_size:
            return True
        now = time.monotonic()
        return now - self._jobs[-1][0] >= self.delay or now - self._jobs[0][0] >= self.max_delay

    def _take(self) -> list[Job]:
        """The oldest queued jobs, up to one batch (at least one job when any is queued)."""
        jobs: list[Job] = []
        size = 0
        with self._lock:
            while self._jobs and (not jobs or size + len(self._jobs[0][1][1]) <= self.batch_size):
                job = self._jobs.popleft()[1]
                jobs.append(job)
                size += len(job[1])
            self._queued -= size
        return jobs

    def _run(self) -> None:
        last_work = time.monotonic()
        while True:
            jobs = self._take() if self._ready() else []
            if jobs:
                try:
                    self._index(jobs)
                except Exception:  # noqa: BLE001 - the batches stay recorded as waiting; the next catch-up embeds them
                    log.exception("background indexing failed; the messages stay waiting for embeddings")
                finally:
                    with self._finished:
                        self._done += len(jobs)
                        self._finished.notify_all()
                last_work = time.monotonic()
                continue
            if self._closing:  # read before the queue: nothing is queued once closing is set
                if not self._jobs:
                    return
                continue
            idle = not self._jobs and time.monotonic() - last_work >= self.idle_after
            self._wake.clear()
            self._sleeping = idle
            if (self._jobs and idle) or self._ready() or self._closing:  # came in before the clear (its wake was cleared)
                self._sleeping = False
                continue
            self._wake.wait(None if idle else min(POLL_S, self.delay))
            self._sleeping = False

"""A background worker that embeds archived messages off the writer's thread, in batches.

The writer has already made the text durable (keyword search finds it at once) and
noted the batch as waiting for vectors in the store, so a crash before the worker
gets to it loses nothing: the next archive of that conversation embeds it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("fullrecall.archive")

Job = tuple[str, list[Any]]  # (waiting-batch id, the messages to embed)


class BackgroundIndexer:
    """Runs ``index(jobs)`` on a daemon thread for everything submitted, up to ``batch_size`` messages a call.

    ``flush()`` returns once everything submitted so far has been handled; ``close()`` flushes and
    stops the thread. ``index`` must not raise (it records its own failures); if it does, the
    error is logged and the jobs stay waiting in the store.
    """

    def __init__(self, index: Callable[[list[Job]], None], *, batch_size: int = 256) -> None:
        self._index = index
        self.batch_size = batch_size
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()  # a submit racing close: queued before the stop mark, or refused
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="fullrecall-indexer", daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self._closing or not self._thread.is_alive()

    def submit(self, job: Job) -> None:
        """Queue one batch (the caller has already recorded it as waiting)."""
        with self._lock:
            if self.closed:
                raise RuntimeError("the background indexer is closed")
            self._queue.put(job)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted batch is embedded (or recorded as failed); False on timeout."""
        if timeout is None:
            self._queue.join()
            return True
        done = threading.Event()

        def wait() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        return done.wait(timeout)

    def close(self) -> None:
        """Flush, then stop the worker thread (a later ``submit`` raises: nothing is queued after the stop)."""
        with self._lock:
            stop = not self._closing and self._thread.is_alive()
            self._closing = True
            if stop:
                self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                self._queue.task_done()
                return
            jobs, size, stop = [first], len(first[1]), False
            while size < self.batch_size:  # take what else is waiting, up to one batch
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                jobs.append(job)
                size += len(job[1])
            try:
                self._index(jobs)
            except Exception:  # noqa: BLE001 - the batches stay recorded as waiting; the next catch-up embeds them
                log.exception("background indexing failed; the messages stay waiting for embeddings")
            finally:
                for _ in jobs:
                    self._queue.task_done()
            if stop:
                self._queue.task_done()
                return

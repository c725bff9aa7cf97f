"""Embedding after the write: committed messages are embedded in batches, off the request path.

A request returns once its messages are committed; :meth:`Indexer.submit` queues them, and
one background thread embeds whatever is queued in one batched call and stores the vectors
(keyword search finds a message at once; vector search once it is embedded). The thread takes
what is queued the moment it is free, at most ``batch`` messages at a time, so a message waits
for at most one batch ahead of it. The time from commit to stored vector is the *searchable
delay*, kept for ``/v1/stats`` and ``/metrics``. When more than ``backlog`` committed messages
wait to be embedded, :meth:`Indexer.submit` waits (up to ``backlog_wait`` seconds) until the
thread catches up: writers are slowed to the speed of embedding instead of letting the
searchable delay grow without bound (``backlog=0``: never wait).
A message whose embedding was lost (a crash between commit and embedding) is caught up
with by a later write to its conversation, in any process: a write compares the conversation's
counters of messages and vectors (one read, at most every ``CATCH_UP_S`` seconds a conversation), and
when vectors are missing, reads back from the newest message until it has found that many; a failed
batch is retried once. :meth:`close` drains the queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..stores.base import Scope, Store, StoredMessage
from .delays import Delays

log = logging.getLogger("fullrecall.service")

CATCH_UP_S = 30.0  # a conversation's counters of messages and vectors compared at most this often (a process)
CATCH_UP_PAGE = 256  # messages read at a time, from the newest back, looking for those without a vector


class Indexer:
    """One background thread that embeds committed messages in batches."""

    def __init__(self, store: Store, embedder: Any = None, *, batch: int = 8, backlog: int = 0,
                 backlog_wait: float = 30.0, io_threads: int = 4,
                 on_indexed: Callable[[list[float]], None] | None = None) -> None:
        from ..embeddings import load_embedder

        self.store = store
        if embedder is None or isinstance(embedder, str):
            self.embedder = load_embedder(embedder)
            if hasattr(self.embedder, "workers"):  # embed on one thread (ONNX: one intra-op thread), so the other
                self.embedder.workers = 1  # cores serve requests instead of waiting for a batch to finish
        else:
            self.embedder = embedder
        self.batch = batch
        self.backlog, self.backlog_wait = backlog, backlog_wait
        self.on_indexed = on_indexed
        self.delays = Delays()  # seconds from commit to stored vector, of the process and of each tenant
        self._queue: deque[tuple[Scope, list[StoredMessage], float]] = deque()
        self._queued = 0  # messages in the queue
        self._queued_by: Counter[str] = Counter()  # of each tenant
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._checked: dict[Scope, float] = {}  # when each conversation's counters were last compared here
        self._io = ThreadPoolExecutor(io_threads, thread_name_prefix="fullrecall-index-io")
        self._thread = threading.Thread(target=self._run, name="fullrecall-indexer", daemon=True)
        self._thread.start()

    # -- the request side -------------------------------------------------------------------
    def submit(self, scope: Scope, messages: list[StoredMessage], committed_at: float) -> None:
        """Queue committed messages; wait while more than ``backlog`` are queued (they are durable already)."""
        with self._cond:
            self._queue.append((scope, messages, committed_at))
            self._queued += len(messages)
            self._queued_by[scope.tenant] += len(messages)
            self._cond.notify_all()
            if self.backlog > 0 and self._queued > self.backlog:
                deadline = time.monotonic() + self.backlog_wait
                while self._queued > self.backlog and not self._closed and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)

    @property
    def pending(self) -> int:
        """Messages committed and queued, not embedded yet."""
        with self._cond:
            return self._queued

    def pending_of(self, tenant: str) -> int:
        """The messages of ``tenant`` committed and queued, not embedded yet (a tenant sees no other's)."""
        with self._cond:
            return self._queued_by[tenant]

    def searcher(self, scope: Scope, **options: Any):
        """A :class:`~fullrecall.search.SemanticSearch` over ``scope`` with the shared embedder."""
        from ..search import SemanticSearch

        return SemanticSearch(embedding_model=self.embedder, store=self.store, scope=scope, **options)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything queued so far is embedded; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = 30.0) -> None:
        """Embed what is queued, then stop the thread."""
        if not self.flush(timeout):
            log.warning("%d message(s) not embedded before shutdown; the next write to their conversation embeds them",
                        self.pending)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
        self._io.shutdown(wait=True)

    # -- the thread -------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed and not self._queue:
                    return
                work, taken = [], 0
                while self._queue and taken < self.batch:
                    item = self._queue.popleft()
                    work.append(item)
                    taken += len(item[1])
                    self._queued_by[item[0].tenant] -= len(item[1])
                self._queued -= taken
                self._queued_by = +self._queued_by  # no tenant kept at 0
                self._busy = True
                self._cond.notify_all()  # writers waiting on the backlog
            try:
                try:
                    self._embed(work)
                except Exception:  # noqa: BLE001 - once more (a store hiccup, a busy embedder)
                    time.sleep(0.5)
                    self._embed(work)
            except Exception as exc:  # noqa: BLE001 - the text is committed; keyword search finds it
                with self._cond:
                    for scope, _, _ in work:  # the next write checks again
                        self._checked.pop(scope, None)
                log.warning("could not embed %d message(s) (%s: %s); keyword search finds them, and the next write "
                            "to their conversation embeds them", taken, type(exc).__name__, exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _embed(self, work: list[tuple[Scope, list[StoredMessage], float]]) -> None:
        groups: dict[Scope, list[StoredMessage]] = {}
        committed: dict[Scope, float] = {}
        for scope, messages, at in work:
            groups.setdefault(scope, []).extend(messages)
            committed[scope] = min(at, committed.get(scope, at))

        now = time.monotonic()
        due = {scope for scope in groups if now - self._checked.get(scope, -CATCH_UP_S) >= CATCH_UP_S}

        def missing(scope: Scope) -> list[StoredMessage]:
            messages = groups[scope]
            lost = self._lost(scope, len(messages)) if scope in due else []  # what a crash (of any process) left
            ids = list(dict.fromkeys(m.id for m in lost + messages))
            have = self.store.get_vectors(scope, ids)
            lacking = [mid for mid in ids if mid not in have]
            # embedded as stored: a client's retry of a message queues a record of its own (made anew, the append
            # a no-op), which is not the stored message and would be taken for one forgotten meanwhile
            return self.store.get(scope, lacking) if lacking else []

        todo = dict(zip(groups, self._io.map(missing, groups)))  # round trips to the store side by side
        if len(self._checked) > 100_000:
            self._checked.clear()
        self._checked.update((scope, now) for scope in due)
        texts = [m.text for ms in todo.values() for m in ms]
        if texts:
            vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
            slices, start = {}, 0
            for scope, ms in todo.items():
                slices[scope] = (start, start + len(ms))
                start += len(ms)

            def store(scope: Scope) -> None:
                lo, hi = slices[scope]
                kept = self._still_stored(scope, todo[scope])
                if kept:
                    try:
                        self.store.set_vectors(scope, [todo[scope][i].id for i in kept], vectors[lo:hi][kept],
                                               self.embedder.name)
                    except ValueError as exc:  # the conversation holds another model's vectors (those of messages
                        # forgotten meanwhile are dropped by the store): the next write to it checks again. Any other failure (the store down) reaches
                        # _run, which retries and leaves the conversation for the next write to catch up with.
                        with self._cond:
                            self._checked.pop(scope, None)
                        log.info("vectors for %s not stored (%s: %s)", scope.session_id, type(exc).__name__, exc)

            list(self._io.map(store, todo))
        now = time.time()
        delays = [now - committed[s] for s in groups]
        for s, delay in zip(groups, delays):
            self.delays.add(s.tenant, delay)
        if self.on_indexed is not None:
            self.on_indexed(delays)

    def _lost(self, scope: Scope, queued: int) -> list[StoredMessage]:
        """The conversation's messages without a vector, when its counters say more are than the ``queued`` ones
        being embedded now: read from the newest back, ``CATCH_UP_PAGE`` at a time, until that many are found
        (those queued here or in another process count too: the newest are read first).
        """
        counts = self.store.stats(scope)
        missing = int(counts.get("message_count", 0)) - int(counts.get("vector_count", 0))
        if missing <= queued:
            return []
        wanted = missing
        oldest, end = int(counts.get("oldest_position", 0)), int(counts.get("newest_position", -1))
        found: list[StoredMessage] = []
        while wanted > len(found) and end >= oldest:
            rows = self.store.range(scope, max(oldest, end - CATCH_UP_PAGE + 1), end)
            have = self.store.get_vectors(scope, [m.id for m in rows]) if rows else {}
            found += [m for m in reversed(rows) if m.id not in have]
            end -= CATCH_UP_PAGE
        return found

    def _still_stored(self, scope: Scope, messages: list[StoredMessage]) -> list[int]:
        """The indexes of ``messages`` the store still holds as they were queued: another process may have forgotten
        the conversation meanwhile (their vectors would make a batch of new messages fail whole) and a client begun
        it again under the same ids (a forgotten message's vector would be stored under the new one's id).
        """
        held = {m.id: m for m in self.store.get(scope, [m.id for m in messages])}
        return [i for i, m in enumerate(messages) if (found := held.get(m.id)) is not None
                and (found.position, found.created_at, found.text) == (m.position, m.created_at, m.text)]

    def delay_percentiles(self, tenant: str | None = None) -> dict[str, float | None]:
        """p50 and p95 of the searchable delay, in milliseconds, over the last batches' groups (of ``tenant``'s
        conversations within the last hour, or of all: see :mod:`.delays`).
        """
        values = sorted(self.delays.of(tenant))
        if not values:
            return {"p50_ms": None, "p95_ms": None, "samples": 0}

        def pick(q: float) -> float:
            return values[min(len(values) - 1, int(q * len(values)))] * 1000

        return {"p50_ms": round(pick(0.5), 2), "p95_ms": round(pick(0.95), 2), "samples": len(values)}

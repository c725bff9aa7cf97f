"""Owner-checked, expiring, similarity-searchable long-term records (facts, patterns) on any store.

The :class:`~fullrecall.stores.base.Store` protocol keeps records by scope and namespace
but has no search over them and no expiry. :class:`RecordBook` adds both on top of the
protocol, identically on every backend:

* **ownership**: records are written under the owner's exact scope (tenant, user, agent),
  which is all a store's reads and deletes of that scope reach; each record also carries
  its owner in its data and a read keeps only exact matches (a second check, in case a
  record is ever written under a wider scope by other code).
* **expiry**: a record may carry ``expires_at`` (Unix seconds) in its data; reads skip
  expired records and delete them (purge on read).
* **similarity**: each record's vector is kept in its data (base64 float32, computed once,
  never recomputed) and searched by cosine in process. Long-term records are few per
  owner (hundreds to thousands), so a scan is fast.
* **caching, correct across processes**: the owner's records (and their decoded vectors) are
  kept in process, so a read costs one small round trip instead of reading and decoding them
  all. Every write also appends a one-line event to the namespace's change log, an
  append-only session of the owner (``_log.<namespace>``) whose positions the store assigns
  atomically. A read first asks the store for the log from the last event the cache reflects:
  if that event is still there and every later one is this book's own (already applied), the
  cache is current; otherwise (another process wrote, or the owner was forgotten) everything is
  read again. The cache holds at most ``cache_limit`` records (beyond that, reads go to the store).
* **updates that lose nothing**: :meth:`RecordBook.update` changes a record as read and writes it only if
  the store still holds it at the version read (a compare-and-set, part of the write itself); if another
  writer got in first, the record is read again and the change made again.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import math
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np

from .._fork import renew_in_child
from ..errors import InvalidInput, MemoryInputError, StateConflict
from ..stores import _validate as V
from ..stores._common import newest
from ..stores._forget import LOG_PREFIX
from ..stores.base import Record, Scope, Store, StoredMessage

_VEC = "_vec"
_OWNER = "_owner"
EXPIRES_AT = "expires_at"
CACHE_LIMIT = 10_000
_END = 2**62  # a position past any log's end
_MAX_VIEWS = 8  # selections :meth:`RecordBook.nearest` keeps
UPDATE_ATTEMPTS = 32  # lost races :meth:`RecordBook.update` takes before it gives up

Entry = tuple[Record, "np.ndarray | None"]
# (the cache before, the cache after, the record's id, its entry before or None, its entry after or None)
Follower = Callable[[Mapping[str, Entry], Mapping[str, Entry], str, "Entry | None", "Entry | None"], None]


def owner_scope(tenant: str, user_id: str | None, agent_id: str | None) -> Scope:
    """The exact scope of one owner: an unset user or agent is the default owner ``""``, never "any"."""
    return Scope(tenant=tenant, user_id=user_id or "", agent_id=agent_id or "", session_id=None)


def open_book(store: Store | str, namespace: str, *, tenant: str, user_id: str | None, agent_id: str | None,
              embedder: Any = None, clock: Callable[[], float] = time.time) -> tuple[Store, bool, RecordBook]:
    """(the store, whether it was opened here from a URL, the owner's book of ``namespace`` in it).

    An owner that shows nothing (:func:`~fullrecall.stores._validate.check_owner_id`) is refused, a
    MemoryInputError, before the store is opened.
    """
    from ..stores import open_store

    checked(V.check_owner_id, user_id, "'user_id'")
    checked(V.check_owner_id, agent_id, "'agent_id'")
    opened = open_store(store) if isinstance(store, str) else store
    book = RecordBook(opened, owner_scope(tenant, user_id, agent_id), namespace, embedder=embedder, clock=clock)
    return opened, isinstance(store, str), book


def checked(check: Callable[[Any, str], Any], value: Any, where: str) -> Any:
    """``check(value, where)``, a rule of :mod:`fullrecall.stores._validate`, its refusal a MemoryInputError."""
    try:
        return check(value, where)
    except InvalidInput as exc:
        raise MemoryInputError(str(exc)) from None


def check_unicode(value: str, where: str) -> str:
    """``value`` if it is valid Unicode (:func:`~fullrecall.stores._validate.check_unicode`), else
    MemoryInputError naming ``where``.
    """
    return cast(str, checked(V.check_unicode, value, where))


def _encode(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode("ascii")


def _decode(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=np.float32)


class RecordBook:
    """One namespace of one owner's records. ``embedder`` is loaded on first use when not given."""

    def __init__(
        self,
        store: Store,
        scope: Scope,
        namespace: str,
        *,
        embedder: Any = None,
        clock: Callable[[], float] = time.time,
        cache_limit: int = CACHE_LIMIT,
    ) -> None:
        self.store = store
        self.scope = scope
        self.namespace = namespace
        self._embedder = embedder
        self.clock = clock
        self.cache_limit = cache_limit
        self._log = replace(scope, session_id=LOG_PREFIX + namespace)
        self._cache: dict[str, Entry] | None = None  # id -> (record, vector), as stored
        self._mark: tuple[int, str] | None = None  # (position, id) of the last log event the cache reflects
        self._own: set[str] = set()  # ids of events this book appended after the mark (already applied)
        self._blocks = threading.local()  # per thread: the events of its :meth:`writes` block, not yet logged
        self._lock = threading.RLock()  # the cache is shared by the threads using this book
        self._stacked: tuple[list[np.ndarray], np.ndarray] | None = None  # the vectors :meth:`similar` last stacked
        self._soonest: tuple[dict[str, Entry], float] | None = None  # (a state of the cache, its soonest expiry)
        # :meth:`nearest`'s selections, by the predicate that made them
        self._views: dict[Callable[[Record], bool], tuple[dict[str, Entry], Sequence[Entry], np.ndarray]] = {}
        self._followers: list[Follower] = []  # told of each change this book applies to its cache
        renew_in_child(self)

    def _after_fork(self) -> None:
        """A forked child reads its cache again, under a new lock (see ``_fork``)."""
        self._lock = threading.RLock()
        self._cache = None

    @property
    def embedder(self) -> Any:
        if self._embedder is None or isinstance(self._embedder, str):
            from ..embeddings import load_embedder

            self._embedder = load_embedder(self._embedder)
        return self._embedder

    @property
    def _pending(self) -> list[StoredMessage] | None:
        """This thread's events of a :meth:`writes` block (another thread's writes are logged by that thread)."""
        return getattr(self._blocks, "events", None)

    @_pending.setter
    def _pending(self, events: list[StoredMessage] | None) -> None:
        self._blocks.events = events

    @property
    def _owner(self) -> list[str]:
        user, agent = self.scope.user_id or "", self.scope.agent_id or ""
        if not isinstance(user, str) or not isinstance(agent, str):
            raise ValueError("a record book belongs to one owner: ANY is not one (use owner_scope)")
        return [self.scope.tenant, user, agent]

    # -- writing -----------------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for texts, in one batched call."""
        return self.embedder.embed(list(texts))

    def put(self, record: Record, vector: np.ndarray | None = None, *, expected: int | None = None) -> Record:
        """Write (or replace) a record; ``vector`` (if any) is kept with it for :meth:`similar`. The record
        gets its new version. With ``expected``, only if the store holds it at that version (0: not at all),
        else :class:`~fullrecall.errors.StateConflict`, nothing written and the cache read again on next use.
        """
        record.namespace = self.namespace
        record.data = dict(record.data)
        record.data[_OWNER] = self._owner
        if vector is not None:
            record.data[_VEC] = _encode(vector)
        else:  # a record read back and written again keeps the vector it had
            vector = self.vector(record)
        try:
            record.version = self.store.put_record(self.scope, record, vector, expected=expected)
        except StateConflict:
            with self._lock:  # another writer got in first: the cache is behind the store, whatever the log says
                self._cache = None  # (that writer may not have logged its write yet)
            raise
        self._changed(record.id, (_copy(record), None if vector is None else np.asarray(vector, dtype=np.float32)))
        return record

    def update(self, record_id: str, change: Callable[[Record | None], tuple[Record, np.ndarray | None] | None],
               *, check: bool = True, attempts: int = UPDATE_ATTEMPTS) -> Record | None:
        """Read-modify-write one record without losing another writer's update (another handle's, another
        process's): ``change`` gets the record as held (a copy the caller may change, or None) and gives the
        record to write with its vector (None: the one it has), or None to write nothing. It is written only
        if nobody wrote that record in between (compare-and-set on its version); if somebody did, it is read
        again and ``change`` called again, so ``change`` must do nothing else. The written record, or None.

        Costs what a read of the cache (``check=False``: one the caller has just checked, no round trip) and
        a :meth:`put` cost; more only when another writer got in first. StateConflict after ``attempts``
        lost races.
        """
        for attempt in range(max(1, attempts)):
            entry = self._live(check or attempt > 0).get(record_id)
            held = _copy(entry[0]) if entry is not None else None
            made = change(held)
            if made is None:
                return None
            try:
                return self.put(*made, expected=held.version if held is not None else 0)
            except StateConflict:
                time.sleep(0.001 * random.random())  # let the winner finish (and log its write) before reading again
        raise StateConflict(f"record {record_id!r} kept changing under {attempts} attempts to update it", current=-1)

    def delete(self, record_id: str) -> bool:
        """Delete one of the owner's records; an id the owner does not hold deletes nothing (the store
        deletes within the owner's exact scope only).
        """
        gone = self.store.delete_record(self.scope, self.namespace, record_id)
        if gone:
            self._changed(record_id, None)
        return gone

    def erase(self, record_id: str) -> bool:
        """Delete one of the owner's records and every event of the change log that names it, so that
        nothing the book keeps names the id any more; an event that names nothing tells other processes'
        caches to read again. Whether the record was there.
        """
        gone = self.store.delete_record(self.scope, self.namespace, record_id)
        named = [e.id for e in self.store.range(self._log, 0, _END)
                 if e.text == record_id or e.data.get("record") == record_id]
        if named:
            self.store.delete(self._log, named)
        if gone or named:
            self._changed(record_id, None, named=False)
        return gone

    @contextlib.contextmanager
    def writes(self) -> Iterator[None]:
        """Log this thread's writes inside the block with one append at its end (one round trip, not one a write),
        committed with them where the store commits a batch at once (:meth:`Store.batch`: PostgreSQL's one
        transaction, one wait for the disk instead of one a write).
        """
        if self._pending is not None:  # nested: the outer block logs
            yield
            return
        self._pending = []
        try:
            with self.store.batch():
                try:
                    yield
                finally:
                    events, self._pending = self._pending, None
                    if events:
                        self.store.append(self._log, events)
        except BaseException:
            with self._lock:  # a batch undone leaves the store without writes the cache has applied
                self._cache = None
            raise
        finally:
            self._pending = None

    def _changed(self, record_id: str, entry: Entry | None, *, named: bool = True) -> None:
        """Log a write (after it landed: a reader that sees the event finds the record) and apply it here;
        the event names the record unless not ``named``.
        """
        now = time.time()
        event = StoredMessage(id=uuid.uuid4().hex, role="event", text=record_id if named else "",
                              data={"record": record_id} if named else {}, created_at=now, archived_at=now)
        if self._pending is not None:
            self._pending.append(event)
        else:
            self.store.append(self._log, [event])
        with self._lock:
            if self._cache is None:
                return
            self._own.add(event.id)
            old = self._cache
            cache = dict(old)  # a new dict: a reader may be iterating the old one
            replaced = cache.get(record_id)
            if entry is None:
                cache.pop(record_id, None)
            elif record_id in cache:
                cache[record_id] = entry
            else:  # in the store's order, (created_at, id): usually the newest, so it goes last as it is
                last = next(reversed(cache.items()), None)
                cache[record_id] = entry
                if last is not None and (last[1][0].created_at, last[0]) > (entry[0].created_at, record_id):
                    cache = dict(sorted(cache.items(), key=lambda kv: (kv[1][0].created_at, kv[0])))
            self._cache = cache
            for follow in self._followers:
                follow(old, cache, record_id, replaced, entry)
            memo = self._soonest
            if memo is not None and memo[0] is old and (replaced is None or _expiry(replaced[0]) > memo[1]):
                # the soonest expiry moves only by the new entry (the one it replaces did not set it): no scan
                self._soonest = (cache, min(memo[1], _expiry(entry[0]) if entry is not None else math.inf))

    def owned_id(self, *parts: str) -> str:
        """A stable record id for ``parts``, different for every owner."""
        return hashlib.sha256("\x00".join([*self._owner, self.namespace, *parts]).encode()).hexdigest()[:24]

    # -- reading -----------------------------------------------------------------------------
    def all(self) -> list[Record]:
        """The owner's live records (oldest first; copies the caller may change); expired ones are deleted."""
        return [_copy(r) for r, _ in self.entries()]

    def get(self, record_id: str) -> Record | None:
        return next((_copy(r) for r, _ in self.entries() if r.id == record_id), None)

    def follow(self, follower: Follower) -> None:
        """Call ``follower(old, new, record_id, replaced, entry)`` for each change this book applies to its
        cache (under its lock, in order): the cache ``old`` became ``new``, the record ``record_id`` (was
        ``replaced``, None if new) now ``entry`` (None: deleted). A cache read again from the store (another
        process wrote) is a new state no follower is told of: it starts again from :meth:`state`.
        """
        self._followers.append(follower)

    def state(self, *, check: bool = True) -> Mapping[str, Entry]:
        """The live entries by id (oldest first): the cached mapping itself, to read, never to change."""
        return self._live(check)

    def entries(self, *, check: bool = True) -> list[Entry]:
        """The owner's live records with their vectors, oldest first, as cached: read them, never change them.

        ``check=False`` trusts a cache the caller has just checked (no round trip).
        """
        return list(self._live(check).values())

    def _live(self, check: bool) -> dict[str, Entry]:
        """The live entries by id: the cached dict itself when none has expired (the usual case, nothing
        scanned: the soonest expiry is found once per state of the cache), else a copy without the expired
        ones, which are deleted.
        """
        now = self.clock()
        with self._lock:
            entries = self._cache if self._cache is not None and not check else self._entries()
            memo = self._soonest
        if memo is not None and memo[0] is entries:
            soonest = memo[1]
        else:
            soonest = min((_expiry(r) for r, _ in entries.values()), default=math.inf)
            self._soonest = (entries, soonest)
        if soonest > now:
            return entries
        expired = {r.id for r, _ in entries.values()
                   if r.data.get(EXPIRES_AT) is not None and float(r.data[EXPIRES_AT]) <= now}
        for record_id in expired:
            self.delete(record_id)
        return {i: e for i, e in entries.items() if i not in expired}

    def nearest(self, query: str | np.ndarray, k: int, *, keep: Callable[[Record], bool],
                check: bool = True) -> list[tuple[Record, float]]:
        """:meth:`similar` over the live records ``keep`` accepts: the selection and its stacked vectors are
        made once per state of the cache and reused until a record changes, so a search of unchanged records
        scans none of them in Python. They are kept by ``keep`` itself: pass a function defined once (a
        module-level one), not a new lambda a call, or nothing is reused.
        """
        live = self._live(check)
        with self._lock:
            memo = self._views.get(keep)
        chosen: Sequence[Entry]
        if memo is not None and memo[0] is live:
            chosen, matrix = memo[1], memo[2]
        else:
            vectors = [(r, v) for r, v in live.values() if v is not None and keep(r)]
            matrix = np.stack([v for _, v in vectors]) if vectors else np.zeros((0, 0), dtype=np.float32)
            chosen = vectors
            if live is self._cache:
                with self._lock:
                    if len(self._views) >= _MAX_VIEWS and keep not in self._views:
                        self._views.clear()  # a caller making a new predicate a call: keep the memo bounded
                    self._views[keep] = (live, chosen, matrix)
        return self._rank(query, chosen, matrix, k)

    def _entries(self) -> dict[str, Entry]:
        if self._cache is not None and self._fresh():
            return self._cache
        mark = self._last_event()  # before the records: a write that lands after it is seen next time
        entries: dict[str, Entry] = {}
        for r in self.store.get_records(self.scope, self.namespace):  # by (created_at, id)
            if r.data.get(_OWNER) == self._owner and r.id not in entries:
                entries[r.id] = (r, self.vector(r))
        cached = len(entries) <= self.cache_limit
        self._cache, self._mark, self._own = (entries if cached else None), mark, set()
        return entries

    def _fresh(self) -> bool:
        """Whether the cache is current: the log holds nothing after its mark but this book's own events."""
        start = self._mark[0] if self._mark is not None else 0
        events = self.store.range(self._log, start, _END)
        if self._mark is not None:
            if not events or (events[0].position, events[0].id) != self._mark:
                return False  # the log was forgotten (and perhaps written again): read everything
            events = events[1:]
        if any(e.id not in self._own for e in events):
            return False  # another writer's event
        pending = {e.id for e in self._pending or ()}
        if self._own - pending - {e.id for e in events}:
            return False  # an event of this book's is gone: the log was forgotten since (even with no mark yet)
        if events:
            last = events[-1]
            self._mark, self._own = (int(last.position or 0), last.id), set()
        return True

    def _last_event(self) -> tuple[int, str] | None:
        """The log's newest event, read alone (its position from the store's counters: deleted events leave
        gaps, so ``count - 1`` is no position to read from).
        """
        events = newest(self.store, self._log, 1)
        return (int(events[-1].position or 0), events[-1].id) if events else None

    @staticmethod
    def vector(record: Record) -> np.ndarray | None:
        encoded = record.data.get(_VEC)
        return _decode(encoded) if isinstance(encoded, str) else None

    def similar(self, query: str | np.ndarray, records: Sequence[Record] | Sequence[Entry],
                k: int, *, matrix: np.ndarray | None = None) -> list[tuple[Record, float]]:
        """The ``k`` records most similar to ``query`` by cosine, best first (records without a vector skipped).

        ``query`` is a text (embedded here) or its vector; ``records`` are records or
        :meth:`entries` (their vectors already decoded). ``matrix``: the caller's stack of the entries'
        vectors, in order (every entry has one), when it keeps one.
        """
        if matrix is not None:
            return self._rank(query, cast("Sequence[Entry]", records), matrix, k)
        with_vectors = [(r, v) for r, v in map(_entry, records) if v is not None]
        matrix = self._matrix([v for _, v in with_vectors]) if with_vectors else np.zeros((0, 0), dtype=np.float32)
        return self._rank(query, with_vectors, matrix, k)

    def _rank(self, query: str | np.ndarray, with_vectors: Sequence[Entry], matrix: np.ndarray,
              k: int) -> list[tuple[Record, float]]:
        """The ``k`` entries (rows of ``matrix``) most similar to ``query``, best first, with cosines."""
        if isinstance(query, str) and not query.strip():
            return []
        if not with_vectors or k <= 0:
            return []
        q = np.asarray(self.embedder.embed([query])[0] if isinstance(query, str) else query, dtype=np.float32)
        if matrix.shape[1] != q.shape[0]:
            raise ValueError(
                f"records in {self.namespace!r} hold {matrix.shape[1]}-dimensional vectors but the embedder "
                f"{getattr(self.embedder, 'name', '?')!r} makes {q.shape[0]}-dimensional ones: use the same model"
            )
        scores = matrix @ q
        order = np.argsort(-scores, kind="stable")[:k]
        return [(with_vectors[i][0], float(scores[i])) for i in order]

    def _matrix(self, vectors: list[np.ndarray]) -> np.ndarray:
        """The vectors stacked, reusing the last stack when they are the same arrays (cached records' vectors
        are never changed in place: a write replaces the entry), so a search of unchanged records stacks nothing.
        """
        last = self._stacked
        if last is not None and len(last[0]) == len(vectors) and all(a is b for a, b in zip(last[0], vectors)):
            return last[1]
        matrix = np.stack(vectors)
        self._stacked = (vectors, matrix)
        return matrix


def record_owner(record: Record) -> Scope | None:
    """The exact scope of the owner a record names in its data (see :func:`owner_scope`), or None."""
    owner = record.data.get(_OWNER)
    if isinstance(owner, list) and len(owner) == 3 and all(isinstance(part, str) for part in owner):
        return owner_scope(owner[0], owner[1], owner[2])
    return None


def change_logs(store: Store, owner: Scope, namespaces: Sequence[str]) -> tuple[int, int]:
    """(events, non-empty logs) the change logs of these namespaces hold for an owner: bookkeeping, not memory."""
    sizes = [store.count(replace(owner, session_id=LOG_PREFIX + ns)) for ns in namespaces]
    return sum(sizes), sum(1 for n in sizes if n)


def _expiry(record: Record) -> float:
    """When a record expires (Unix seconds), or infinity."""
    at = record.data.get(EXPIRES_AT)
    return math.inf if at is None else float(at)


def _copy(record: Record) -> Record:
    """A copy whose data a caller may add keys to or replace them in (the values inside are the cache's: what
    leaves the memory goes through :func:`public_data`).
    """
    return replace(record, data=dict(record.data))


def _entry(item: Record | Entry) -> Entry:
    return (item, RecordBook.vector(item)) if isinstance(item, Record) else item


def public_data(record: Record) -> dict[str, Any]:
    """A record's data without the bookkeeping keys (vector, owner), a copy whole: a caller that changes a
    pattern's ``tools_used`` changes nothing the memory keeps (it changed the plans, and then the store).
    """
    return {k: _copied(v) for k, v in record.data.items() if k not in (_VEC, _OWNER)}


def _copied(value: Any) -> Any:
    """A JSON value copied whole (its lists and objects new; twice as fast as ``copy.deepcopy``)."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value

"""The one interface every backend implements (SQLite, PostgreSQL, Redis).

Everything fullrecall persists goes through a :class:`Store`: archived messages
(verbatim), their embeddings, summaries, window state and long-term records.
Data is scoped by :class:`Scope` (tenant, user, agent, session). An unset user
or agent is the default owner ``""``, the same on reads and writes; "any user"
or "any agent" is the explicit :data:`ANY` (an administrator's read or
``forget``). Writes need a session; a read or ``forget`` without one spans the
owner's sessions, so a search can cover all sessions of one user.

Contract shared by every backend (checked by ``tests/stores/conformance.py``):

* ``append`` is atomic and idempotent on ``StoredMessage.id``: appending the
  same id again changes nothing and returns its existing position. What it
  returns (:class:`Appended`) also names, in ``held``, the ids the session held
  before the call, so a caller can tell its rerun from another writer's message.
  Messages whose ``position`` is ``None`` get the next free positions of their
  session, assigned atomically (two processes appending at once never collide).
* ``replace`` deletes messages and appends others (which may take the positions the deleted held) as one
  atomic write, on every backend: a crash leaves all of it or none of it.
* A write returns only once it is durable (committed); a crash after return
  loses nothing. Inside a ``batch()`` block, the thread's writes are durable when
  the block ends: PostgreSQL runs the block as one transaction (one commit to
  wait for, all or nothing); SQLite and Redis write each as it comes.
* ``put_state`` and ``put_record`` return the document's or record's new version (1, 2, ...); with
  ``expected`` they are a compare-and-set on it (``StateConflict``, nothing written, when another
  writer got in first).
* ``search_text`` ranks by a stemmed BM25-like score (higher is better) over
  ``StoredMessage.text``; ``search_vectors`` by cosine similarity (higher is better).
* ``forget`` really deletes (messages, vectors, summaries, state, records),
  scrubs what the backend allows (files, indexes, statistics, logs), and returns
  per-kind counts plus ``"remaining"``: where a copy may still be, what, and until
  when (empty when nothing remains; see :mod:`fullrecall.stores._forget`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, Final, NamedTuple, Protocol, runtime_checkable

import numpy as np

from ..errors import InvalidInput

DEFAULT_TENANT = "default"


class AnyOwner:
    """The type of :data:`ANY`: "every user" or "every agent" in a read or ``forget``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ANY"

    def __reduce__(self) -> str:  # unpickles to the one ANY (scopes cross process boundaries)
        return "ANY"


ANY: Final = AnyOwner()
"""``Scope(user_id=ANY)``: every user of the tenant; ``agent_id=ANY``: every agent. Never valid in a write."""


@dataclass(frozen=True)
class Scope:
    """Who a piece of memory belongs to.

    ``user_id`` and ``agent_id`` left unset (``None`` or ``""``) mean the default owner,
    in reads and writes alike; :data:`ANY` means every user (or agent) and is only
    accepted by reads and ``forget``. ``session_id`` unset in a read or ``forget`` means
    every session of the owner; writes need one.
    """

    tenant: str = DEFAULT_TENANT
    user_id: str | AnyOwner | None = None
    agent_id: str | AnyOwner | None = None
    session_id: str | None = None  # ANY is accepted too, and means the same as None

    def __post_init__(self) -> None:
        from ._validate import check_scope

        for name in ("user_id", "agent_id"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, "")
        if self.session_id is ANY:
            object.__setattr__(self, "session_id", None)
        check_scope(self)  # ids are identifiers: no NUL, no lone surrogate, bounded (InvalidInput)

    @classmethod
    def everyone(cls, tenant: str = DEFAULT_TENANT) -> Scope:
        """Every user, agent and session of ``tenant``: for an administrator's read or ``forget``."""
        return cls(tenant=tenant, user_id=ANY, agent_id=ANY)

    @property
    def session(self) -> str | None:
        """``session_id`` typed for a single-session use (``None`` when unset)."""
        return self.session_id if isinstance(self.session_id, str) else None

    def require_session(self) -> Scope:
        """This scope, if it names one owner and one session (what a write or a range read needs); else InvalidInput."""
        if self.user_id is ANY or self.agent_id is ANY:
            raise InvalidInput("this write needs one owner: ANY is only for reads and forget")
        if not self.session_id:
            raise InvalidInput("this write needs a session: Scope(session_id=...) is missing")
        return self

    def owner(self) -> tuple[str, str, str]:
        """(user_id, agent_id, session_id) of a one-session scope, as stored."""
        self.require_session()
        return (str(self.user_id), str(self.agent_id), str(self.session_id))


@dataclass
class StoredMessage:
    """One archived message, verbatim.

    ``data`` is the message exactly as the application gave it (its own shape);
    ``text`` is what search indexes (it may add the speaker and date); the
    application always gets ``data`` back, never ``text``.
    """

    id: str
    role: str
    text: str
    data: dict[str, Any]
    position: int | None = None
    kind: str = "message"  # "message" or "summary"
    created_at: float = field(default_factory=time.time)
    archived_at: float = field(default_factory=time.time)
    summary_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # Filled in on read: whose session the message belongs to, and its store-global key.
    session_id: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    key: str | None = None

    def size_bytes(self) -> int:
        """Bytes of text this message holds in the store (text + verbatim data)."""
        from ._validate import dumps

        return len(self.text.encode("utf-8")) + len(dumps(self.data).encode("utf-8"))


@dataclass(frozen=True)
class Filters:
    """Restrictions on a search. Times are Unix seconds on ``created_at``."""

    roles: tuple[str, ...] | None = None
    kinds: tuple[str, ...] | None = None
    since: float | None = None
    until: float | None = None
    exclude_ids: frozenset[str] | None = None

    def __post_init__(self) -> None:
        """Any iterable of strings becomes a tuple (a frozenset for ``exclude_ids``), any real time a float;
        one string, other types, an item that is no identifier (a NUL, which one backend dropped and another
        refused) and times that are not finite numbers raise InvalidInput, on every backend.
        """
        from ._validate import check_id

        for name in ("roles", "kinds", "exclude_ids"):
            value = getattr(self, name)
            if value is None:
                continue
            items = list(value) if isinstance(value, Iterable) and not isinstance(value, (str, bytes)) else None
            if items is None or not all(isinstance(v, str) for v in items):
                raise InvalidInput(f"filters {name!r} must be a list of strings, got {value!r}")
            for i, item in enumerate(items):
                check_id(item, f"filters {name!r}[{i}]")
            kind = frozenset if name == "exclude_ids" else tuple
            if not isinstance(value, kind):  # one given as its type is kept as it is
                object.__setattr__(self, name, kind(items))
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value)):
                raise InvalidInput(f"filters {name!r} must be Unix seconds (a finite number), got {value!r}")
            if value is not None:  # a numpy number too: SQLite would bind np.float32 or np.int64 as bytes
                object.__setattr__(self, name, float(value))


@dataclass
class Record:
    """A long-term memory record (a fact, a preference, a procedure).

    ``version`` is filled in on read: the record's version in its store (1 when first written, one up
    each write), for a later ``put_record(expected=...)``; a record not read from a store has 0.
    """

    id: str
    namespace: str  # e.g. "facts", "procedures"
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    version: int = 0


class Hit(NamedTuple):
    """One search result: the message id, its score, its store-global ``key``, and where it sits.

    Ids are unique within a session only; ``key`` is unique in the whole store (and
    never reused), so a search over many sessions tells its hits apart by ``key`` and
    fetches them with :meth:`Store.get_keys`.

    ``owner`` (``(user_id, agent_id, session_id)`` as stored) and ``position`` say where the
    message sits, so a caller can place a hit in its conversation without reading it. A
    backend that does not know them leaves them ``None``; when set, they are the message's own.
    """

    id: str
    score: float
    key: str
    owner: tuple[str, str, str] | None = None
    position: int | None = None


class Appended(list[int]):
    """What ``append`` and ``replace`` return: each message's position, in input order, and ``held``, the ids the
    session already held (nothing was written for them: a rerun of the same message, or another writer's under
    that id; an id repeated within the call is not held unless the session held it before).
    """

    __slots__ = ("held",)

    def __init__(self, positions: Iterable[int] = (), held: Iterable[str] = ()) -> None:
        super().__init__(positions)
        self.held = frozenset(held)


class KeptHits(list[Hit]):
    """A search's hits, from a store that has their messages at hand (kept in process for a small scope on SQLite
    and PostgreSQL, or read in the search's own round trip on PostgreSQL): a caller that needs a hit's message
    calls ``message(hit)`` (None: not at hand) instead of reading it. It is decoded on that call, not before, and
    nothing is made per hit until then; otherwise a plain list of hits.
    """

    __slots__ = ("message",)

    def __init__(self, hits: Iterable[Hit], message: Callable[[Hit], StoredMessage | None]) -> None:
        super().__init__(hits)
        self.message = message


@runtime_checkable
class Store(Protocol):
    """What fullrecall needs from a backend. See the module docstring for the contract."""

    url: str

    # -- archived messages -------------------------------------------------
    def append(self, scope: Scope, messages: Sequence[StoredMessage]) -> Appended:
        """Write messages durably; return their positions (in input order) and the ids already held."""
        ...

    def get(self, scope: Scope, ids: Iterable[str]) -> list[StoredMessage]:
        """Messages by id, in conversation order; unknown ids are skipped."""
        ...

    def get_copies(self, scope: Scope, ids: Iterable[str]) -> list[StoredMessage]:
        """The messages stored under an id derived from one of ``ids`` (``X@...`` for ``X`` one of them: a message
        a memory stored again), in conversation order, as ``get`` reads them; ``X`` itself is not among them.
        """
        ...

    def get_keys(self, scope: Scope, keys: Iterable[str]) -> list[StoredMessage]:
        """Messages by store-global key (from a :class:`Hit` or a read), within ``scope``; unknown skipped."""
        ...

    def range(self, scope: Scope, start: int, end: int) -> list[StoredMessage]:
        """Messages of one session with ``start <= position <= end``, in order."""
        ...

    def ranges(self, scope: Scope, spans: Sequence[tuple[int, int]]) -> list[list[StoredMessage]]:
        """For each ``(start, end)`` span, the session's messages with ``start <= position <= end`` in
        order (as ``range`` gives them), all read in one call (one round trip on a server).
        """
        ...

    def count(self, scope: Scope) -> int:
        """How many messages the scope holds."""
        ...

    def delete(self, scope: Scope, ids: Iterable[str]) -> int:
        """Delete messages (and their vectors) by id; return how many went."""
        ...

    def replace(self, scope: Scope, ids: Iterable[str], messages: Sequence[StoredMessage]) -> Appended:
        """Delete the session's messages ``ids`` (and their vectors) and append ``messages`` as ``append`` does
        (one may take a position a deleted message held), as one atomic write: a crash, or a refused message,
        leaves all of it or none of it. The messages' positions, in input order, as ``append`` returns them.
        """
        ...

    def sessions(self, scope: Scope) -> list[Scope]:
        """The sessions within ``scope`` that hold at least one message, one exact scope each (tenant, user,
        agent, session), ordered by (user, agent, session) as ``get`` orders them: an owner's conversations,
        or with :data:`ANY` every owner's.
        """
        ...

    # -- vectors -------------------------------------------------------------
    def set_vectors(self, scope: Scope, ids: Sequence[str], vectors: np.ndarray, model: str) -> None:
        """Store one float32 vector per message id, tagged with the embedding model; ValueError (nothing written)
        for another model's or dimension's vectors than the conversation holds.

        A vector whose message the conversation does not hold is dropped, the others written: the message was
        deleted or forgotten since its append (another writer, an administrator's forget, while it was being
        embedded) and its vector has nothing to attach to; it never brings back a forgotten conversation.
        """
        ...

    def get_vectors(self, scope: Scope, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors by id (ids without a vector are absent)."""
        ...

    def vector_model(self, scope: Scope) -> tuple[str, int] | None:
        """(model, dimension) of the vectors stored for this scope, or None."""
        ...

    # -- search ----------------------------------------------------------------
    def search_vectors(
        self, scope: Scope, vector: np.ndarray, k: int, filters: Filters | None = None
    ) -> list[Hit]:
        """Top-k (id, cosine similarity, key), best first; the hits may come with their messages (the list a
        :class:`KeptHits`), the ones :meth:`get_keys` reads.
        """
        ...

    def prepare_vector_search(
        self, scope: Scope, filters: Filters | None = None
    ) -> Callable[[np.ndarray, int], list[Hit]]:
        """``search_vectors`` of ``scope`` in two steps: what needs no vector now (a kept block checked against the
        store, or read), the search itself when the vector comes (``search(vector, k)``), so that a search can
        take the first step while it embeds its question. It finds everything written before it was prepared.
        """
        ...

    def search_text(
        self, scope: Scope, terms: Sequence[str], k: int, filters: Filters | None = None
    ) -> list[Hit]:
        """Top-k (id, score, key) for any of ``terms`` (plain words; the backend stems), best first; with messages
        as :meth:`search_vectors`' may come.
        """
        ...

    def warm(self, scope: Scope, *, kept_only: bool = False) -> None:
        """Read into this process what searches of ``scope`` keep there, or what was added to it since it was read
        (a store that keeps nothing does nothing), so that the next search does not wait for it: a hint, safe from
        any thread, changing no answer. ``kept_only``: only bring up to date what the process keeps of ``scope``
        already, reading nothing whole (after a write: a scope the cache let go of stays out of it).
        """
        ...

    # -- state and long-term records -----------------------------------------
    def put_state(self, scope: Scope, key: str, value: dict[str, Any], expected: int | None = None) -> int:
        """Save a JSON document (window state) under key; return its new version (1, 2, ...).

        With ``expected``, a compare-and-set: the write happens only if the stored version is
        ``expected`` (0: no document yet), else :class:`~fullrecall.errors.StateConflict` and
        nothing is written.
        """
        ...

    def get_state(self, scope: Scope, key: str) -> dict[str, Any] | None:
        """The document saved under key, or None."""
        ...

    def get_versioned_state(self, scope: Scope, key: str) -> tuple[dict[str, Any] | None, int]:
        """(document or None, its version: 0 when there is none), for a later ``put_state(expected=...)``."""
        ...

    def update_state(
        self, scope: Scope, key: str, change: Callable[[dict[str, Any] | None], dict[str, Any]], attempts: int = 32
    ) -> dict[str, Any]:
        """Read-modify-write that never loses a concurrent update: ``change(current)`` gives the new
        document, written only if nobody wrote in between (else read again and call ``change`` again).
        """
        ...

    def put_record(self, scope: Scope, record: Record, vector: np.ndarray | None = None,
                   expected: int | None = None) -> int:
        """Save a long-term record (replaced whole when its id is held) for the scope's owner; return its
        new version (1, 2, ...).

        With ``expected``, a compare-and-set: the write happens only if the stored version is ``expected``
        (0: no such record yet), else :class:`~fullrecall.errors.StateConflict` and nothing is written.
        """
        ...

    def get_records(self, scope: Scope, namespace: str) -> list[Record]:
        ...

    def get_record(self, scope: Scope, namespace: str, record_id: str) -> Record | None:
        """The record ``record_id`` of ``namespace`` that ``put_record(scope, ...)`` wrote, or None, in one lookup.

        A scope with a session reads that session's own record, else its owner's (one written without a session),
        as ``get_records`` shows them; one without a session reads the owner's. The scope names one owner
        (:data:`ANY` is refused: InvalidInput).
        """
        ...

    def delete_record(self, scope: Scope, namespace: str, record_id: str, expected: int | None = None) -> bool:
        """Delete one record by id; whether it went. With ``expected``, only if its stored version is
        ``expected`` (a record rewritten since it was read stays; False).
        """
        ...

    def batch(self) -> AbstractContextManager[None]:
        """A block whose writes (this thread's) are committed together where the backend can: on PostgreSQL
        one transaction, so one commit to wait for instead of one a write, and nothing of the block kept if
        it fails; reads in the block see its writes. Elsewhere each write lands as it comes. Blocks nest.
        ``forget`` is refused inside a block (InvalidInput, nothing deleted): it needs every earlier write committed.
        """
        ...

    # -- housekeeping ----------------------------------------------------------
    def forget(self, scope: Scope) -> dict[str, Any]:
        """Delete everything of the scope; return counts per kind and ``remaining``, a list of
        ``{"where", "what", "until"}`` for each place that may still hold a copy.

        The kinds, named as their user knows them (see ``fullrecall.stores._forget``): ``messages`` (of
        conversations), ``summaries`` (the archive's), ``facts`` and ``patterns`` (long-term memory's),
        ``vectors``, ``state``, ``records`` (every other record: lists, bookkeeping such as long-term
        memory's change logs, LangGraph store items) and ``sessions`` (conversations).
        """
        ...

    def stats(self, scope: Scope) -> dict[str, int]:
        """Sizes of the scope from its conversations' counters (cost: one row per conversation, not per message):
        ``message_count``, ``summary_count``, ``text_bytes``, ``index_bytes``, ``vector_count``, ``vector_bytes``,
        ``record_count``, ``session_count``, ``oldest_position`` and ``newest_position`` (-1 when empty).
        """
        ...

    def close(self) -> None:
        ...


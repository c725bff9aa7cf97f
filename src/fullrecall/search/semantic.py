"""``SemanticSearch``: hybrid (dense + BM25) search over messages kept verbatim in a store.

A search embeds the query (one thread, ~1-2 ms with the default ONNX int8
MiniLM), takes the best ``candidates`` by cosine and by BM25 from the store,
fuses them (see :mod:`fullrecall.search.fusion`), optionally reranks the best
with a cross-encoder, and returns the stored messages with every score.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from .._fork import after_fork_in_child
from ..errors import EMBEDDING_OUTAGE as OUTAGE
from ..errors import InvalidInput
from ..stores import _validate as V
from ..stores._common import filters_match
from ..stores._store import StoreBase
from ..stores.base import Filters, Hit, KeptHits, Scope, Store, StoredMessage
from .facets import DATE_BOOST, SPEAKER_BOOST, Facets, Signals, boost, query_facets, signals
from .fusion import (
    LEXICAL_WEIGHT,
    NEAR_WEIGHT,
    NEIGHBOUR_WEIGHT,
    Candidate,
    Key,
    Ranking,
    Spread,
    fuse,
    near_best,
    rrf,
    spread_lexical,
    spread_out,
)
from .packing import spans_around, uncovered
from .terms import index_text, query_terms

log = logging.getLogger("fullrecall.search")

T = TypeVar("T")

DEFAULT_TOP_K = 3
DEFAULT_MIN_SCORE = -2.0  # on cross-encoder logits
DEFAULT_SCOPE = Scope(session_id="default")
# keyword hits whose neighbourhoods a search with ``around`` reads while the question is embedded: its best hits
# and their context are then mostly read already (the bench's questions at 10,000 messages: 6 in 10 need no
# read after the embedding, at 56 messages read beside it, a hit's span and one more each side)
PREFETCH = 8
READ_AHEAD_SHARE = 0.5  # ... and only while less than this share of the last question's embedding time has passed


@dataclass
class SearchHit:
    """One result: the message as stored, and why it was found.

    ``scores`` holds ``dense`` (cosine, when the message was a dense candidate),
    ``lexical`` (its BM25), ``fused`` (0-1, see fusion) and ``rerank`` (the
    cross-encoder logit) when a reranker ran. ``score`` is ``rerank`` if present,
    else ``fused``.
    """

    id: str
    text: str
    metadata: dict[str, Any]
    score: float
    scores: dict[str, float]
    message: StoredMessage = field(repr=False)
    # with ``search(..., around=r)``: the stored messages within r positions of this one (itself included), in
    # order, read in the same call as the hit; None when they were not read
    context: list[StoredMessage] | None = field(default=None, repr=False, compare=False)

    @property
    def position(self) -> int | None:
        return self.message.position

    @property
    def session_id(self) -> str | None:
        return self.message.session_id


def _verbatim_text(m: StoredMessage) -> str:
    """The message's own words: ``data["text"]`` (plain texts), else its content's text blocks.

    Falls back to the indexed text only for a message with no text of its own.
    """
    data = m.data if isinstance(m.data, dict) else {}
    if isinstance(data.get("text"), str):
        return data["text"]
    content = data.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)]
        if parts:
            return "\n".join(parts)
    return m.text


class _OneBlasThread:
    """Run the in-process vector search on one BLAS thread.

    A 10k x 384 matrix-vector product is memory-bound: one thread is as fast as
    two on a quiet machine, and when another process keeps a core busy, two
    threads wait on each other (p95 measured at 16 ms instead of 1.4 ms). Uses
    threadpoolctl's controllers of the BLAS libraries when installed; otherwise changes nothing.

    Counted: the first search in sets one thread, the last one out gives back what it found, so that
    searches overlapping on several threads never leave the process on one BLAS thread (each restoring
    what the one before it had set). ``with _one_blas_thread():`` (the call returns the counter itself, a
    context manager: no generator made a search), about 3 us a search, where a ``threadpool_limits`` block
    costs 15-50.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._libs: list[Any] | None = None  # the BLAS libraries' controllers, found once
        self._inside = 0
        self._saved: list[int] = []

    def _after_fork(self) -> None:
        """In a forked child: a new lock, and the BLAS threads a search under way in the parent set to one given
        back (that search is not there to do it).
        """
        self._lock = threading.Lock()
        if self._inside and self._libs:
            for lib, n in zip(self._libs, self._saved):
                lib.set_num_threads(n)
        self._inside = 0

    def _controllers(self) -> list[Any]:
        if self._libs is None:
            try:
                from threadpoolctl import ThreadpoolController

                self._libs = list(ThreadpoolController().select(user_api="blas").lib_controllers)
            except Exception:  # noqa: BLE001 - not installed, or no BLAS it can drive
                self._libs = []
        return self._libs

    def __call__(self) -> _OneBlasThread:
        return self

    def __enter__(self) -> None:
        libs = self._libs if self._libs is not None else self._controllers()
        if not libs:
            return
        with self._lock:
            if self._inside == 0:
                self._saved = [lib.get_num_threads() for lib in libs]
                for lib in libs:
                    lib.set_num_threads(1)
            self._inside += 1

    def __exit__(self, *exc: object) -> None:
        libs = self._libs
        if not libs:
            return
        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                for lib, n in zip(libs, self._saved):
                    lib.set_num_threads(n)


_one_blas_thread = _OneBlasThread()


_WORKERS = 8  # two a search: its keyword query and the first step of its vector search
_pool: tuple[ThreadPoolExecutor, threading.Semaphore] | None = None
_pool_lock = threading.Lock()


@after_fork_in_child
def _renew() -> None:
    """New locks, and no search thread of the parent's (see ``_fork``)."""
    global _pool, _pool_lock
    _one_blas_thread._after_fork()
    _pool, _pool_lock = None, threading.Lock()


def _in_background(fn: Callable[..., T], *args: Any) -> Future[T] | None:
    """``fn(*args)`` on one of the threads a search runs its keyword query on while it embeds the question;
    None when they are all busy (many searches at once: the caller runs it itself rather than queue).
    """
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = (ThreadPoolExecutor(_WORKERS, thread_name_prefix="fullrecall-search"), threading.Semaphore(_WORKERS))
        pool, free = _pool
    if not free.acquire(blocking=False):
        return None

    def run() -> T:
        try:
            return fn(*args)
        finally:
            free.release()

    return pool.submit(run)


Carried = dict[str, tuple[Hit, Callable[[Hit], StoredMessage | None]]]
"""Hits that came with their messages, by store key, each with what decodes its message (None: not carried)."""


def _carried(hits: Sequence[Hit]) -> Carried:
    """The hits that came with their messages (a store that reads them with the search, or keeps them), by store key."""
    if isinstance(hits, KeptHits):
        message = hits.message
        return {h.key: (h, message) for h in hits}
    return {}


def _unread(keys: Sequence[str], found: dict[str | None, StoredMessage], carried: Carried) -> list[str]:
    """Those of ``keys`` whose messages are neither in ``found`` nor carried by a hit: the ones to read. Those a hit
    carries are decoded into ``found`` on the way.
    """
    todo = []
    for key in dict.fromkeys(keys):
        if key in found:
            continue
        got = carried.get(key)
        message = got[1](got[0]) if got is not None else None
        if message is None:
            todo.append(key)
        else:
            found[key] = message
    return todo


def _owner(m: StoredMessage) -> str:
    """The session a stored message belongs to, as one string (owner and session; unique in a tenant)."""
    return _owner_name(m.user_id or "", m.agent_id or "", m.session_id or "")


@functools.lru_cache(maxsize=4096)
def _owner_name(user: str, agent: str, session: str) -> str:
    return json.dumps([user, agent, session], ensure_ascii=False)


def _owner_scope(scope: Scope, owner: str) -> Scope:
    user, agent, session = json.loads(owner)
    return Scope(tenant=scope.tenant, user_id=user, agent_id=agent, session_id=session)


class _Places:
    """Where stored messages sit: store key -> (session, position), and back; bounded.

    A key names one message for good and a message never moves, so an entry is never
    wrong while its message exists; a deleted one is simply not found when fetched.
    Only places are kept here, never text: every hit is read from the store.
    """

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self._place: dict[str, tuple[str, int]] = {}
        self._key: dict[tuple[str, int], str] = {}

    def key_at(self, place: tuple[str, int]) -> str | None:
        return self._key.get(place)

    def drop(self, place: tuple[str, int]) -> None:
        """Forget what sits at ``place`` (its message was found gone)."""
        key = self._key.pop(place, None)
        if key is not None:
            self._place.pop(key, None)

    def learn(self, messages: Sequence[StoredMessage]) -> dict[str, tuple[str, int]]:
        """Remember where messages read from the store sit; return their places by key."""
        return self._note({m.key: (_owner(m), m.position) for m in messages
                           if m.position is not None and m.key is not None})

    def place_hits(self, hits: Sequence[Hit]) -> dict[str, tuple[str, int]]:
        """The places of the hits, by key: those the hits say (learnt), and of the others those known here."""
        said: dict[str, tuple[str, int]] = {}
        silent = False
        for h in hits:  # one pass (a search places about 100 hits, most from one session)
            owner, position = h.owner, h.position
            if owner is None or position is None:
                silent = True
            else:
                said[h.key] = (_owner_name(*owner), position)
        self._note(said)
        if silent:
            known = self._place
            said |= {h.key: place for h in hits if h.key not in said and (place := known.get(h.key)) is not None}
        return said

    def _note(self, places: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
        if len(self._place) + len(places) > self.limit:
            self._place.clear()
            self._key.clear()
        self._place.update(places)
        self._key.update(zip(places.values(), places.keys()))
        return places


@dataclass
class _Lexical:
    """The keyword side of a search (:meth:`SemanticSearch._lexical`)."""

    scores: dict[Key, float]  # BM25 by place
    keys: dict[Key, str]  # their store keys
    found: dict[str | None, StoredMessage]  # messages read on the way, by store key
    spread: Spread | None = None  # the scores spread to the neighbours (weighted fusion)
    facets: Facets | None = None  # the question's
    owner: str | None = None  # the session whose spans ``near`` holds the messages of, read ahead
    covered: list[tuple[int, int]] = field(default_factory=list)  # those spans
    near: dict[int | None, StoredMessage] = field(default_factory=dict)  # their messages by position
    carried: Carried = field(default_factory=dict)  # hits that came with their messages, by store key


class _Signals:
    """The facet signals of messages read for a search (:class:`~.facets.Signals`), by store key; bounded.

    A key names one message for good and a stored message never changes, so an entry is never
    wrong: a later search boosts a candidate it has seen before without reading it again. Neither
    text nor names are kept (the speaker as a hash); a deleted message is simply never a candidate.
    """

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self._known: dict[str, Signals] = {}

    def get(self, key: str | None) -> Signals | None:
        return self._known.get(key) if key is not None else None

    def learn(self, key: str, message: StoredMessage) -> Signals:
        if len(self._known) >= self.limit:
            self._known.clear()
        known = self._known[key] = signals(message, _verbatim_text(message))
        return known


class SemanticSearch:
    """Index, search and delete texts or archived messages; persistence is the store's.

    ``store`` is a :class:`~fullrecall.stores.base.Store`, a store URL, or None for
    an in-memory SQLite store. ``scope`` says whose messages these are; writes
    need its ``session_id`` (default ``Scope(session_id="default")``), searches
    may use a partial scope to span sessions.

    ``min_score`` applies to ``SearchHit.score``: the reranker's logit when a
    reranker is set (default -2.0), else the fused score in
    [0, 1], which the default -2.0 never filters (the fused score is relative
    to the best candidate of the query, not a calibrated relevance).
    ``fusion="rrf"`` (plain reciprocal rank fusion) is kept as the baseline.
    """

    def __init__(
        self,
        embedding_model: Any = None,
        reranker_model: Any = None,
        store: Store | str | None = None,
        scope: Scope | None = None,
        *,
        aws_region: str | None = None,
        embedding_dimensions: int | None = None,
        top_k: int = DEFAULT_TOP_K,
        min_score: float = DEFAULT_MIN_SCORE,
        candidates: int = 50,
        lexical_weight: float = LEXICAL_WEIGHT,
        neighbour_weight: float = NEIGHBOUR_WEIGHT,
        rerank_depth: int = 20,
        fusion: str = "weighted",
        speaker_boost: float = SPEAKER_BOOST,
        date_boost: float = DATE_BOOST,
        facet_depth: int = 30,
        near_weight: float = NEAR_WEIGHT,
    ) -> None:
        from ..embeddings import load_embedder, load_reranker

        self.embedder = load_embedder(embedding_model, aws_region=aws_region, embedding_dimensions=embedding_dimensions)
        self.reranker = load_reranker(reranker_model) if reranker_model is None or isinstance(reranker_model, str) else reranker_model
        self._owns_store = store is None or isinstance(store, str)
        if store is None or isinstance(store, str):
            from ..stores import open_store

            store = open_store(store or "sqlite:///:memory:")
        self.store: Store = store
        self.scope = scope or DEFAULT_SCOPE
        self.top_k = top_k
        self.min_score = min_score
        self.candidates = candidates
        self.lexical_weight = lexical_weight
        self.neighbour_weight = neighbour_weight
        self.rerank_depth = rerank_depth
        if fusion not in ("weighted", "rrf"):
            raise ValueError(f"fusion must be 'weighted' or 'rrf', not {fusion!r}")
        self.fusion = fusion
        self.speaker_boost = speaker_boost
        self.date_boost = date_boost
        self.facet_depth = facet_depth
        self.near_weight = near_weight
        self._checked_space = False
        self._embedding_s = 0.0  # how long the last question took to embed (read-ahead while one is: _lexical)
        prepare = getattr(type(store), "prepare_vector_search", None)  # a store that does some of it ahead
        self._prepares = prepare is not None and prepare is not StoreBase.prepare_vector_search
        self._places = _Places()
        self._signals = _Signals()

    # -- writing -------------------------------------------------------------------

    def add(
        self,
        texts: Sequence[str],
        ids: Sequence[str] | None = None,
        metadata: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[str]:
        """Store and index ``texts``; return their ids (new UUIDs unless given).

        Metadata keys with a meaning: ``speaker`` and ``date`` (a string) are put in
        front of the indexed text ("speaker (date): text"); ``role`` (default
        "user") and ``created_at`` (Unix seconds) are what filters see. The whole
        dict comes back as ``SearchHit.metadata``.
        """
        texts = list(texts)
        if ids is not None and len(ids) != len(texts):
            raise InvalidInput(f"{len(ids)} ids for {len(texts)} texts")
        if metadata is not None and len(metadata) != len(texts):
            raise InvalidInput(f"{len(metadata)} metadata entries for {len(texts)} texts")
        now = time.time()
        messages = []
        for i, text in enumerate(texts):
            V.check_text(text, f"message {i}: 'text'")
            meta = metadata[i] if metadata is not None else {}
            if not isinstance(meta, Mapping):
                raise InvalidInput(f"message {i}: 'metadata' must be a dict, got {type(meta).__name__}")
            meta = dict(meta)
            for key in ("speaker", "date"):
                if meta.get(key) is not None:
                    V.check_text(meta[key], f"message {i}: 'metadata.{key}'")
            messages.append(
                StoredMessage(
                    id=str(ids[i]) if ids is not None else uuid.uuid4().hex,
                    role=V.check_id(meta.get("role", "user"), f"message {i}: 'metadata.role'"),
                    text=index_text(text, speaker=meta.get("speaker"), date=meta.get("date")),
                    data={"text": text},
                    created_at=V.check_time(meta.get("created_at", now), f"message {i}: 'metadata.created_at'"),
                    archived_at=now,
                    metadata=meta,
                )
            )
        return self.index(messages)

    def index(
        self, messages: Sequence[StoredMessage], *, append: bool = True, vectors: np.ndarray | None = None
    ) -> list[str]:
        """Make already-built messages searchable; return their ids.

        ``append=True`` writes them to the store first (idempotent on id). Only
        messages without a stored vector are embedded, all in one batched call:
        a stored embedding is never recomputed. ``vectors`` (one row per message,
        made by this search's embedder) are the caller's embeddings of the messages:
        they are stored as given and nothing is embedded or looked up.
        """
        messages = list(messages)
        if not messages:
            return []
        if vectors is not None and len(vectors) != len(messages):
            raise InvalidInput(f"{len(vectors)} vectors for {len(messages)} messages")
        scope = self.scope.require_session()
        self._check_vector_space()
        if append:
            self.store.append(scope, messages)
        ids = [m.id for m in messages]
        if vectors is not None:
            first = {m.id: i for i, m in reversed(list(enumerate(messages)))}  # an id given twice: its first vector
            self.store.set_vectors(scope, list(first), np.asarray(vectors)[list(first.values())], self.embedder.name)
            return ids
        have = self.store.get_vectors(scope, ids)
        todo = [m for m in dict((m.id, m) for m in messages).values() if m.id not in have]
        if todo:
            vectors = self.embedder.embed([m.text for m in todo])
            self.store.set_vectors(scope, [m.id for m in todo], vectors, self.embedder.name)
        return ids

    def rescope(self, scope: Scope) -> None:
        """Search and index ``scope`` from now on (its vectors' model is checked again on the next use)."""
        self.scope = scope
        self._checked_space = False

    def delete(self, ids: Sequence[str]) -> int:
        """Remove messages, their vectors and their index entries; return how many went.

        The store deletes for real (SQLite merges its full-text segments and checkpoints the
        WAL, so the file keeps none of their words). Nothing of them is cached here: hits are
        placed by store-global keys, which are never reused, and always read from the store.
        """
        return self.store.delete(self.scope, list(ids))

    def _check_vector_space(self) -> None:
        """Refuse to mix vector spaces: a clear ValueError instead of meaningless cosines."""
        if self._checked_space:
            return
        stored = self.store.vector_model(self.scope)
        if stored is not None:
            model, dim = stored
            if dim != self.embedder.dimension:
                raise ValueError(
                    f"the store's index for this scope holds {dim}-dimensional vectors of {model!r}, but the "
                    f"embedder {self.embedder.name!r} makes {self.embedder.dimension}-dimensional ones: use the same "
                    "embedding model, or another store/scope"
                )
            if model != self.embedder.name:
                raise ValueError(
                    f"the store's index for this scope was built with {model!r}, not {self.embedder.name!r}: "
                    "vectors of different models must not be mixed"
                )
        self._checked_space = True

    # -- searching -----------------------------------------------------------------

    def _dense(self, scope: Scope, vector: np.ndarray, n: int, filters: Filters | None,
               prepared: Future[Callable[[np.ndarray, int], list[Hit]]] | None) -> list[Hit]:
        """The best ``n`` by cosine: from the search prepared while the question was embedded, if it was (a
        preparation that failed is done again here, where its error is the search's).
        """
        if prepared is not None:
            try:
                search = prepared.result()
            except Exception:  # noqa: BLE001 - the plain search below reports it
                search = None
            if search is not None:
                return search(vector, n)
        return self.store.search_vectors(scope, vector, n, filters)

    def embed_query(self, query: str) -> np.ndarray:
        embed = getattr(self.embedder, "embed_queries", None) or self.embedder.embed
        return embed([query])[0]

    def search(
        self,
        query: str,
        top_k: int | None = None,
        min_score: float | None = None,
        filters: Filters | None = None,
        *,
        spread: int = 0,
        around: int = 0,
        scope: Scope | None = None,
        vector: np.ndarray | None = None,
    ) -> list[SearchHit]:
        """The ``top_k`` best messages for ``query``, best first, with their scores.

        ``spread`` > 0 skips hits within that many positions of a better hit in
        the same session (use the context radius when the caller adds neighbours).
        ``around`` > 0 reads, with the hits, the messages within that many positions of each
        (one ``ranges`` read in place of reading the hits by key, when they sit in one session) into
        each hit's ``context``: a caller that shows a context radius needs no read of its own.
        ``vector`` is the query's embedding (:meth:`embed_query`) when the caller has it.
        """
        V.check_query("search", query, "top_k", top_k)
        V.check_filters("search", filters)
        if isinstance(around, bool) or not isinstance(around, int) or around < 0:
            raise InvalidInput(f"search: 'around' must be an integer >= 0, got {around!r}")
        if min_score is not None and (isinstance(min_score, bool) or not isinstance(min_score, (int, float))
                                      or math.isnan(min_score)):
            raise InvalidInput(f"search: 'min_score' must be a number or None, got {min_score!r}")
        if top_k is not None and top_k < 0:
            raise InvalidInput(f"search: 'top_k' must be an integer >= 0, got {top_k!r}")
        if isinstance(spread, bool) or not isinstance(spread, int) or spread < 0:
            raise InvalidInput(f"search: 'spread' must be an integer >= 0, got {spread!r}")
        if scope is not None and not isinstance(scope, Scope):
            raise InvalidInput(f"search: 'scope' must be a Scope or None, got {type(scope).__name__}")
        k = self.top_k if top_k is None else top_k
        threshold = self.min_score if min_score is None else min_score
        scope = scope or self.scope
        if k <= 0 or not query.strip():
            return []
        self._check_vector_space()
        n = max(self.candidates, k)
        keyword: Future[_Lexical] | None = None
        prepared: Future[Callable[[np.ndarray, int], list[Hit]]] | None = None
        embedded = threading.Event()
        if vector is None:  # the keyword side (the question's words and facets too) runs while it is embedded, and
            started = time.perf_counter()  # what the vector search needs before the vector (a kept block checked)
            keyword = _in_background(self._lexical, scope, query, n, filters, embedded, around,
                                     started + READ_AHEAD_SHARE * self._embedding_s)
            if self._prepares:
                prepared = _in_background(self.store.prepare_vector_search, scope, filters)
            try:
                vector = self.embed_query(query)
            except OUTAGE as exc:  # the embedding service down: the keyword side answers alone
                log.warning("search without vectors: the question could not be embedded (%s: %s)",
                            type(exc).__name__, exc)
            self._embedding_s = time.perf_counter() - started
        embedded.set()
        with _one_blas_thread():
            dense_hits = self._dense(scope, vector, n, filters, prepared) if vector is not None else []
        side = keyword.result() if keyword is not None else self._lexical(scope, query, n, filters, embedded)
        facets, found = side.facets, side.found  # found: store key -> message read for this query
        carried = side.carried | _carried(dense_hits)  # hits whose messages came with them: decoded when needed
        dense, keys = self._place(scope, dense_hits, found)
        if self.fusion == "rrf":
            ranked = rrf(dense, side.scores, keys | side.keys)
        else:  # the lexical hits' ids come with their spread
            ranked = fuse(dense, side.spread or {}, keys, lexical_weight=self.lexical_weight)
        if facets is not None:
            ranked = self._apply_facets(facets, ranked, scope, found, carried)
        if self.fusion == "weighted":
            ranked = near_best(ranked, weight=self.near_weight)
        depth = max(k, self.rerank_depth) if self.reranker is not None else k
        placeholders: set[int] = set()  # the neighbours resolved on the way (they had no id)

        def resolve(c: Candidate) -> bool:
            placeholders.add(id(c))
            return self._resolve(scope, c, filters, found)

        while True:
            chosen = spread_out(ranked, depth, spread, resolve=resolve)
            owners = {c.key[0] for c in chosen}
            spans = spans_around([c.key[1] for c in chosen], around) if around and len(owners) == 1 else []
            if spans:  # the hits and their neighbours, one read (a hit whose message is gone is not among them)
                owner = owners.pop()
                ahead = owner == side.owner  # what the keyword side read covers is not read again
                todo = uncovered(spans, side.covered) if ahead else spans
                read = [m for run in self.store.ranges(_owner_scope(scope, owner), todo) for m in run] if todo else []
                near = dict(side.near) if ahead else {}
                near.update((m.position, m) for m in read)
                found.update((m.key, m) for m in read)
            else:
                unread = _unread([c.id for c in chosen if c.id is not None], found, carried)
                found.update((m.key, m) for m in (self.store.get_keys(scope, unread) if unread else []))
            # a neighbour placed from the cache whose message is gone (forgotten, the session begun again):
            # forget that place and choose again, so it is read by position this time
            stale = [c for c in chosen if id(c) in placeholders and c.id not in found]
            if not stale:
                break
            for c in stale:
                self._places.drop(c.key)
                c.id = None
        hits = [self._hit(c, found[c.id]) for c in chosen if c.id in found]  # a neighbour may be gone by now
        if spans:
            held = sorted(q for q in near if q is not None)  # not range(): a radius may be far larger than the read
            for h in hits:
                p = int(h.message.position or 0)
                h.context = [near[q] for q in held if p - around <= q <= p + around]
        if self.reranker is not None and hits:
            logits = self.reranker.score(query, [h.message.text for h in hits])
            for h, s in zip(hits, logits):
                h.scores["rerank"] = float(s)
                h.score = float(s)
            hits.sort(key=lambda h: -h.score)
        return [h for h in hits if h.score >= threshold][:k]

    def _facets(self, query: str) -> Facets | None:
        """The question's facets (see :mod:`.facets`), or None when it has none or they are turned off."""
        if self.facet_depth <= 0 or not (self.speaker_boost or self.date_boost):
            return None
        return query_facets(query) or None

    def _lexical(self, scope: Scope, query: str, n: int, filters: Filters | None, embedded: threading.Event,
                 around: int = 0, read_ahead_until: float = 0.0) -> _Lexical:
        """The keyword side of a search, run beside the embedding: the keyword hits placed in their sessions and
        their scores spread to their neighbours (:func:`~.fusion.spread_lexical`), ready to fuse with the dense
        hits.

        For a question with facets, when the question is still being embedded, the messages of the query's best
        ``facet_depth`` hits this process has not met are read and their signals learned meanwhile: the facets
        then read only what the vector search adds. Likewise, for a search that reads its hits' context
        (``around``), the messages within ``around`` + 1 positions of the best ``PREFETCH`` keyword hits (one
        session's) are read: the hits chosen among them need no read after the embedding; only before
        ``read_ahead_until`` (a share of the last question's embedding time after the search began: a read begun
        later would outlast the embedding, as it did over FTS5's 100,000 messages). A keyword query that outlasted
        the embedding (a server's, over a large scope) reads nothing more: the search is waiting for it.
        """
        terms, facets = query_terms(query), self._facets(query)
        if not terms:
            return _Lexical({}, {}, {}, facets=facets)
        hits = self.store.search_text(scope, terms, n, filters)
        found: dict[str | None, StoredMessage] = {}
        carried = _carried(hits)
        if facets is not None and not embedded.is_set():
            known = self._signals
            unread = [h.key for h in hits[: self.facet_depth] if h.key is not None and known.get(h.key) is None]
            todo = _unread(unread, found, carried)
            found.update((m.key, m) for m in (self.store.get_keys(scope, todo) if todo else []))
            for key in unread:
                if key in found:
                    known.learn(key, found[key])
        scores, keys = self._place(scope, hits, found)
        spread = (spread_lexical(scores, neighbour_weight=self.neighbour_weight, ids=keys.values())
                  if self.fusion == "weighted" else None)
        side = _Lexical(scores, keys, found, spread, facets, carried=carried)
        owners = {place[0] for place in scores}
        if around and len(owners) == 1 and not embedded.is_set() and time.perf_counter() < read_ahead_until:
            side.owner = owners.pop()
            side.covered = spans_around([place[1] for place in list(scores)[:PREFETCH]], around + 1)
            for run in self.store.ranges(_owner_scope(scope, side.owner), side.covered):
                for m in run:
                    side.near[m.position] = m
                    found[m.key] = m
        return side

    def _place(self, scope: Scope, hits: list[Hit], found: dict[str | None, StoredMessage]
               ) -> tuple[dict[Key, float], dict[Key, str]]:
        """The hits' scores and store keys by place (session, position); a hit gone since its search is left
        out. A store whose hits do not say where they sit: one read places them (kept in ``found``).
        """
        places = self._places
        where = places.place_hits(hits)
        if len(where) < len(hits) and (unplaced := [h.key for h in hits if h.key not in where]):
            read = self.store.get_keys(scope, list(dict.fromkeys(unplaced)))
            where |= places.learn(read)
            found.update((m.key, m) for m in read)
        scores: dict[Key, float] = {}
        keys: dict[Key, str] = {}
        for hit in hits:
            place = where.get(hit.key)
            if place is not None:
                scores[place] = hit.score
                keys[place] = hit.key
        return scores, keys

    def _apply_facets(self, facets: Facets, ranked: Ranking, scope: Scope,
                      found: dict[str | None, StoredMessage], carried: Carried) -> Ranking:
        """Add the question's facet boosts (speaker, date: see :mod:`.facets`) to the best ``facet_depth``;
        candidates seen by an earlier search are boosted from their kept signals, the others are read,
        and what is read is left in ``found`` (by store key) for the hits.
        """
        head = [(row, key) for row in ranked.head(self.facet_depth) if (key := ranked.ids[row]) is not None]
        known = self._signals
        unread = _unread([key for _, key in head if known.get(key) is None], found, carried)
        if unread:
            found.update((m.key, m) for m in self.store.get_keys(scope, unread))
        rows, gains = [], []
        for row, key in head:
            got = known.get(key)
            if got is None:
                m = found.get(key)
                if m is None:
                    continue  # gone since the search
                got = known.learn(key, m)
            rows.append(row)
            gains.append(boost(facets, got, speaker_boost=self.speaker_boost, date_boost=self.date_boost))
        ranked.add(rows, gains)
        return ranked

    def messages_at(self, positions: Sequence[int], session_id: str | None = None) -> list[StoredMessage]:
        """Archived messages at these positions of one session of the owner (default: the scope's), in order.

        Positions with no message (deleted, or past the end) are skipped; runs of consecutive
        positions are read as one span each, all spans in one ``ranges`` call.
        """
        scope = replace(self.scope, session_id=session_id if session_id is not None else self.scope.session_id)
        runs = spans_around([p for p in positions if p >= 0], 0)
        return [m for run in (self.store.ranges(scope, runs) if runs else []) for m in run]

    def _resolve(self, scope: Scope, c: Candidate, filters: Filters | None,
                 found: dict[str | None, StoredMessage]) -> bool:
        """Find the neighbour that won a place; False if there is none, or it does not pass the filters.

        The messages read for it are left in ``found`` (by store key) for the hits.
        """
        cached = self._places.key_at(c.key)
        if cached is not None and filters is None:
            c.id = cached
            return True
        owner, pos = c.key
        around = self.store.range(_owner_scope(scope, owner), max(0, pos - 1), pos + 1)
        self._places.learn(around)  # the other side of the same keyword hit is often next
        found.update((m.key, m) for m in around)
        at = [m for m in around if m.position == pos]
        if not at:
            return False
        m = at[0]
        if filters is not None and not filters_match(filters, id=m.id, role=m.role, kind=m.kind, created_at=m.created_at):
            return False
        c.id = m.key
        return True

    @staticmethod
    def _hit(c: Candidate, m: StoredMessage) -> SearchHit:
        scores = {"lexical": c.lexical, "fused": c.fused}
        if c.dense is not None:
            scores["dense"] = c.dense
        if c.boost:
            scores["boost"] = c.boost
        return SearchHit(id=m.id, text=_verbatim_text(m), metadata=dict(m.metadata), score=c.fused, scores=scores, message=m)

    def close(self) -> None:
        if self._owns_store:  # a store the caller passed in is the caller's to close
            self.store.close()

    def __enter__(self) -> SemanticSearch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

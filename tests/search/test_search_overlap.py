"""The recall path's speed work, proven by behaviour on every backend: the keyword query runs while the
question is embedded, and a search places its hits from what the store returns (reading them only when
the backend does not say where they sit), with the same results either way.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from fullrecall.search import SemanticSearch, semantic
from fullrecall.stores import Scope, open_store

TEXTS = [f"Note {i}: the {w} sat by the {p} while we talked about {t}." for i, (w, p, t) in enumerate(
    (w, p, t) for w in ("heron", "otter", "badger") for p in ("river", "barn", "station") for t in ("rain", "trains"))]
QUESTIONS = ["Where was the otter?", "heron river rain", "What did we say about trains at the station?", "badger"]


class SpyStore:
    """A real store; tells when a keyword query starts, and can hide where hits sit (as a backend that
    does not know it would), counting the messages read by key.
    """

    def __init__(self, inner: Any, *, hide_places: bool = False) -> None:
        self.inner = inner
        self.hide_places = hide_places
        self.keyword_started = threading.Event()
        self.read_by_key = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def search_text(self, *args: Any, **kwargs: Any) -> Any:
        self.keyword_started.set()
        return self._hide(self.inner.search_text(*args, **kwargs))

    def search_vectors(self, *args: Any, **kwargs: Any) -> Any:
        return self._hide(self.inner.search_vectors(*args, **kwargs))

    def get_keys(self, scope: Scope, keys: Any) -> Any:
        read = self.inner.get_keys(scope, keys)
        self.read_by_key += len(read)
        return read

    def _hide(self, hits: list[Any]) -> list[Any]:
        return [h._replace(owner=None, position=None) for h in hits] if self.hide_places else hits


class WaitingEmbedder:
    """The real embedder, which embeds a question only once a keyword query has begun (or 5 s passed)."""

    def __init__(self, inner: Any, started: threading.Event) -> None:
        self.inner, self.started = inner, started
        self.name, self.dimension = inner.name, inner.dimension
        self.overlapped: list[bool] = []

    def embed(self, texts: Any) -> Any:
        if len(texts) == 1:  # a question (the archive's texts come in one batch of many)
            self.overlapped.append(self.started.wait(5))
            self.started.clear()
        return self.inner.embed(texts)


def _view(hits: list[Any]) -> list[tuple[str, int | None, dict[str, float]]]:
    return [(h.id, h.position, {k: round(v, 5) for k, v in h.scores.items()}) for h in hits]


def test_keyword_query_runs_while_the_question_is_embedded(store_url, default_embedder):
    spy = SpyStore(open_store(store_url))
    embedder = WaitingEmbedder(default_embedder, spy.keyword_started)
    search = SemanticSearch(embedder, store=spy, scope=Scope(user_id="overlap", session_id="s"))
    try:
        search.add(TEXTS)
        for q in QUESTIONS:
            assert search.search(q, top_k=3, spread=1)
        assert embedder.overlapped == [True] * len(QUESTIONS)
    finally:
        spy.inner.close()


def test_keyword_hits_are_placed_while_the_question_is_embedded(store_url, default_embedder):
    """The keyword side is ready to fuse when the embedding ends: its hits placed in their conversation (read by
    key where the backend does not say where they sit) on the thread that ran the keyword query."""

    class PlacingSpy(SpyStore):
        def __init__(self, inner: Any) -> None:
            super().__init__(inner, hide_places=True)
            self.placed = threading.Event()

        def get_keys(self, scope: Scope, keys: Any) -> Any:
            read = super().get_keys(scope, keys)
            if threading.current_thread() is not threading.main_thread():
                self.placed.set()
            return read

    spy = PlacingSpy(open_store(store_url))
    embedder = WaitingEmbedder(default_embedder, spy.placed)
    scope = Scope(user_id="placing", session_id="s")
    try:
        SemanticSearch(default_embedder, store=spy.inner, scope=scope).add(TEXTS)
        for q in QUESTIONS:  # each by a new search, which knows no place yet
            assert SemanticSearch(embedder, store=spy, scope=scope, facet_depth=0).search(q, top_k=3, spread=1)
        assert embedder.overlapped == [True] * len(QUESTIONS)
    finally:
        spy.inner.close()


def test_the_context_of_keyword_hits_is_read_while_the_question_is_embedded(store_url, default_embedder,
                                                                            monkeypatch):
    """A search that reads its hits' context reads the best keyword hits' neighbourhoods beside the embedding:
    hits found among them need no read after it, and come with the same context as a search that reads after.
    Only while the embedding is likely to go on (a share of the last question's embedding time): here any time,
    so that the read ahead never depends on this machine's speed; a share of 0 reads after."""
    monkeypatch.setattr(semantic, "READ_AHEAD_SHARE", float("inf"))

    class RangesSpy(SpyStore):
        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            self.read_ahead = threading.Event()
            self.reads_after: list[list[tuple[int, int]]] = []

        def ranges(self, scope: Scope, spans: Any) -> Any:
            if threading.current_thread() is threading.main_thread():
                self.reads_after.append(list(spans))
            else:
                self.read_ahead.set()
            return self.inner.ranges(scope, spans)

    spy = RangesSpy(open_store(store_url))
    embedder = WaitingEmbedder(default_embedder, spy.read_ahead)
    scope = Scope(user_id="ahead", session_id="s")
    try:
        search = SemanticSearch(embedder, store=spy, scope=scope)
        search.add(TEXTS)
        spy.read_ahead.set()  # the first question: no embedding time known yet, nothing is read ahead
        search.search("badger barn rain", top_k=1, around=1)
        assert spy.reads_after != []
        embedder.overlapped.clear()
        spy.reads_after.clear()
        hits = search.search("badger barn rain", top_k=1, around=1)
        assert embedder.overlapped == [True] and spy.reads_after == []
        assert "badger" in hits[0].text and "barn" in hits[0].text
        q = "badger barn rain"
        after = search.search(q, top_k=1, around=1, vector=search.embed_query(q))  # read after the embedding
        assert spy.reads_after != []
        assert _view(hits) == _view(after)
        assert [m.id for m in hits[0].context or []] == [m.id for m in after[0].context or []]
        assert len(hits[0].context or []) == 3
        monkeypatch.setattr(semantic, "READ_AHEAD_SHARE", 0.0)
        spy.reads_after.clear()
        spy.read_ahead.set()  # (nothing is read ahead: the embedding need not wait for it)
        late = search.search(q, top_k=1, around=1)
        assert spy.reads_after != [] and _view(late) == _view(hits)
    finally:
        spy.inner.close()


@pytest.mark.parametrize("spread", [0, 2])
def test_results_are_the_same_threaded_sequential_and_with_hits_read_to_be_placed(
    store_url, default_embedder, spread
):
    scope = Scope(user_id="same", session_id="s")
    store = open_store(store_url)
    try:
        placed, hidden = SpyStore(store), SpyStore(store, hide_places=True)
        SemanticSearch(default_embedder, store=store, scope=scope).add(TEXTS)
        with_places = SemanticSearch(default_embedder, store=placed, scope=scope)
        without = SemanticSearch(default_embedder, store=hidden, scope=scope)
        for q in QUESTIONS:
            threaded = with_places.search(q, top_k=4, spread=spread)
            sequential = with_places.search(q, top_k=4, spread=spread, vector=with_places.embed_query(q))
            read_to_place = without.search(q, top_k=4, spread=spread)
            assert _view(threaded) == _view(sequential) == _view(read_to_place)
            assert [h.text for h in threaded] == [h.text for h in read_to_place]
        # hits say where they sit: only the chosen are read; none where they come with their messages (a small
        # scope kept in process by PostgreSQL and SQLite)
        placed.read_by_key = hidden.read_by_key = 0
        fresh = [SemanticSearch(default_embedder, store=s, scope=scope) for s in (placed, hidden)]
        hits = [s.search("heron river rain", top_k=4, spread=spread) for s in fresh]
        assert _view(hits[0]) == _view(hits[1])
        chosen = len(hits[0]) if store_url.startswith("redis") else 0
        assert (placed.read_by_key, hidden.read_by_key) == (chosen, len(TEXTS))
    finally:
        store.close()


def test_a_failing_keyword_query_fails_the_search(store_url, default_embedder):
    class Broken(SpyStore):
        def search_text(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("keyword index down")

    store = open_store(store_url)
    try:
        search = SemanticSearch(default_embedder, store=Broken(store), scope=Scope(user_id="broken", session_id="s"))
        search.add(TEXTS[:3])
        with pytest.raises(RuntimeError, match="keyword index down"):
            search.search("heron", top_k=2)
    finally:
        store.close()


def test_a_search_runs_its_keyword_query_itself_when_every_worker_is_busy(default_embedder):
    from fullrecall.search import semantic

    release = threading.Event()
    busy = [semantic._in_background(release.wait, 30) for _ in range(semantic._WORKERS)]
    try:
        assert all(f is not None for f in busy) and semantic._in_background(release.wait, 30) is None
        with SemanticSearch(default_embedder) as search:
            search.add(TEXTS)
            hits = search.search("badger at the barn", top_k=2)  # does not wait for the busy workers
            assert hits and "badger" in hits[0].text
            assert _view(hits) == _view(search.search("badger at the barn", top_k=2,
                                                      vector=search.embed_query("badger at the barn")))
    finally:
        release.set()
    assert all(f.result(5) for f in busy if f is not None)
    assert semantic._in_background(lambda: 7) is not None  # the workers are free again


class PreparingStore:
    """A real store; tells when a search prepares its vector search (``prepare_vector_search``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.prepared = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def prepare_vector_search(self, *args: Any, **kwargs: Any) -> Any:
        self.prepared.set()
        return self.inner.prepare_vector_search(*args, **kwargs)


def test_the_vector_search_is_prepared_while_the_question_is_embedded_with_the_same_hits(store_url, default_embedder):
    """A store's first step of a vector search (PostgreSQL's and SQLite's kept block checked) is taken while the
    question is embedded; the hits are those of a search that runs it all after (a store without the step).
    """
    store = open_store(store_url)
    preparing = PreparingStore(store)
    embedder = WaitingEmbedder(default_embedder, preparing.prepared)
    scope = Scope(user_id="prepared", session_id="s")
    search = SemanticSearch(embedder, store=preparing, scope=scope)
    plain = SemanticSearch(default_embedder, store=SpyStore(store), scope=scope)  # no preparing step: all after
    try:
        search.add(TEXTS)
        for q in QUESTIONS:
            assert _view(search.search(q, top_k=3, spread=1)) == _view(plain.search(q, top_k=3, spread=1))
        assert embedder.overlapped == [True] * len(QUESTIONS)
        assert not plain._prepares and search._prepares
    finally:
        store.close()

"""Search hits that say where they sit: ``Hit.owner`` and ``Hit.position``.

Mixed into :class:`conformance.StoreConformance`, so it runs on SQLite, PostgreSQL and Redis. A backend may
leave the fields ``None`` (the caller then reads the message to place it); when it fills them they must be
the message's own. Every backend fills them (``_PLACED``); the test says so when a backend does not.
Hits may also come with their messages (:class:`KeptHits`: read in the search's own round trip, or kept in
process with the scope's vectors): then it is the message :meth:`Store.get_keys` reads. PostgreSQL's
hits all do, and SQLite's of a small scope (``_CARRYING``).
"""

from __future__ import annotations

import uuid

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fullrecall.stores import Scope, Store, StoredMessage, open_store
from fullrecall.stores.base import Hit, KeptHits

_PLACED = ("sqlite", "redis", "postgres")  # backends whose hits always carry their place
_CARRYING = ("postgres", "sqlite")  # backends whose hits come with their messages (but large ones)
_LARGE = 70_000  # characters of a message large enough to be read only when needed
DIM = 8


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def _message(i: int, position: int | None = None) -> StoredMessage:
    text = f"heron {'marsh ' * (i % 3)}note {i}" + (" nul\x00 byte" if i == 31 else "")  # NUL: stored escaped
    return StoredMessage(id=f"p{i}", role="user", text=text, data={"content": text}, position=position)


def _carrying(store_url: str) -> bool:
    """Whether the hits of the store at ``store_url`` all come with their messages (but large ones): SQLite's only for
    a scope it keeps in process (none with ``lexical_in_process=0``).
    """
    return store_url.startswith(_CARRYING) and "lexical_in_process=0" not in store_url


def _carried(hits: list[Hit], hit: Hit) -> StoredMessage | None:
    """The message ``hit`` came with, if it came with one."""
    if isinstance(hits, KeptHits):
        return hits.message(hit)
    return None


def _check_places(store: Store, scope: Scope, hits: list[Hit], expect: int, carrying: bool) -> None:
    """Every hit's place, when given, is its message's; on the backends that place hits, all are given."""
    assert len(hits) == expect
    read = {m.key: m for m in store.get_keys(scope, [h.key for h in hits])}
    for h in hits:
        m = read[h.key]
        assert h.id == m.id
        if (carried := _carried(hits, h)) is not None:
            assert carried == m
        elif len(m.text) < _LARGE:
            assert not carrying, f"{store.url}: hit {h.id} came without its message"
        if h.position is None and h.owner is None:
            assert not store.url.startswith(_PLACED), f"{store.url}: hit {h.id} does not say where it sits"
            continue
        assert (h.owner, h.position) == ((m.user_id or "", m.agent_id or "", m.session_id), m.position)


class PlacesConformance:
    def test_hits_carry_owner_and_position(self, store: Store, store_url: str, scope: Scope) -> None:
        other_session = Scope(user_id=scope.user_id, agent_id=scope.agent_id, session_id=scope.session_id + "-b")
        default_owner = Scope(session_id=scope.session_id)  # user and agent unset: the default owner ""
        for n, target in enumerate((scope, other_session, default_owner)):
            rows = [_message(i) for i in range(4)] + [_message(10 + n, position=20 + n)]  # a gap in positions
            store.append(target, rows)
            store.set_vectors(target, [m.id for m in rows], np.stack([_unit(i) for i in range(len(rows))]), "m")
        owner = Scope(user_id=scope.user_id, agent_id=scope.agent_id)  # both sessions of the owner
        _check_places(store, owner, store.search_vectors(owner, _unit(1), 10), 10, _carrying(store_url))
        _check_places(store, owner, store.search_text(owner, ["heron"], 10), 10, _carrying(store_url))
        _check_places(store, default_owner, store.search_text(default_owner, ["marsh"], 10), 2, _carrying(store_url))
        # messages and vectors added since the caches were built, by another connection
        later = open_store(store_url)
        try:
            later.append(scope, [_message(30), _message(31, position=40)])
            later.set_vectors(scope, ["p30", "p31"], np.stack([_unit(30), _unit(31)]), "m")
        finally:
            later.close()
        hits = store.search_vectors(scope, _unit(31), 7)
        assert hits[0].id == "p31"
        _check_places(store, scope, hits, 7, _carrying(store_url))
        _check_places(store, scope, store.search_text(scope, ["heron"], 20), 7, _carrying(store_url))

    def test_a_hit_comes_with_its_message_unless_it_is_large(self, store: Store, store_url: str, scope: Scope) -> None:
        big = StoredMessage(id="big", role="user", text="heron " + "x" * _LARGE, data={"content": "heron"})
        store.append(scope, [big, _message(1)])
        store.set_vectors(scope, ["big", "p1"], np.stack([_unit(0), _unit(1)]), "m")
        for hits in (store.search_text(scope, ["heron"], 5), store.search_vectors(scope, _unit(0), 5)):
            _check_places(store, scope, hits, 2, _carrying(store_url))
            if _carrying(store_url):
                assert {h.id: _carried(hits, h) is not None for h in hits} == {"big": False, "p1": True}

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(batches=st.lists(st.lists(st.booleans(), min_size=1, max_size=5), min_size=1, max_size=4))
    def test_hits_are_placed_after_any_sequence_of_appends_and_searches(
        self, store: Store, store_url: str, batches: list[list[bool]]
    ) -> None:
        """Appends (each message with or without an explicit position) between searches: every hit placed right."""
        sc = Scope(user_id="places", session_id=uuid.uuid4().hex)
        n = 0
        for batch in batches:
            rows = []
            for explicit in batch:  # an explicit position past every earlier one (the next free follows it)
                rows.append(_message(n, position=100 * (n + 1) if explicit else None))
                n += 1
            store.append(sc, rows)
            store.set_vectors(sc, [m.id for m in rows], np.stack([_unit(i) for i in range(n - len(rows), n)]), "m")
            _check_places(store, sc, store.search_vectors(sc, _unit(0), 50), n, _carrying(store_url))
            _check_places(store, sc, store.search_text(sc, ["heron"], 50), n, _carrying(store_url))

"""A scope's vectors loaded cold (a process's first search of it) answer exactly as the block the same process
grew search by search: the same hits, keys and places, in the same order, the same scores; and a block built from columns is the block
built from rows, equal vectors (ties) included.

(Equal vectors are left out of the first test: a block grown by additions holds a session's late rows after
the other sessions', a cold load next to the session's first ones, and ties are ordered by the row they
were picked from; see docs/memory.md.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from conformance_core import then_forget

from fullrecall.stores import Filters, Scope, StoredMessage, open_store
from fullrecall.stores._vectors import VectorBlock

DIM = 16


def _messages(session: int, n: int) -> list[StoredMessage]:
    return [StoredMessage(id=f"m{session}-{i}", role="user" if i % 2 else "assistant", text=f"message {i}",
                          data={"text": f"message {i}"}, created_at=1_000.0 + 100 * session + i, position=i)
            for i in range(n)]


def test_a_cold_load_answers_as_the_block_grown_search_by_search(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'v.db'}"
    rng = np.random.default_rng(7)
    grown = open_store(url)
    user = Scope(user_id="u", agent_id="a")  # every session of the user
    queries = rng.normal(size=(6, DIM)).astype(np.float32)
    for session in range(4):  # sessions added one at a time; the grown store searches between them
        scope = Scope(user_id="u", agent_id="a", session_id=f"s{session}")
        grown.append(scope, _messages(session, 30))
        vectors = rng.normal(size=(30, DIM)).astype(np.float32)
        grown.set_vectors(scope, [f"m{session}-{i}" for i in range(30)], vectors, "test-model")
        grown.search_vectors(user, queries[0], 5)
    first = Scope(user_id="u", agent_id="a", session_id="s0")  # more in a session searched before: rows added
    grown.append(first, [StoredMessage(id=f"late{i}", role="user", text="late", data={"text": "late"},
                                       created_at=2_000.0 + i, position=30 + i) for i in range(5)])
    grown.set_vectors(first, [f"late{i}" for i in range(5)], rng.normal(size=(5, DIM)).astype(np.float32), "test-model")
    cold = open_store(url)
    try:
        for q in [*queries, queries[0] * 0 + 1]:
            for k, filters in [(50, None), (7, Filters(roles=["user"])), (200, Filters(since=1_150.0))]:
                got, want = cold.search_vectors(user, q, k, filters), grown.search_vectors(user, q, k, filters)
                assert [h._replace(score=0.0) for h in got] == [h._replace(score=0.0) for h in want]
                # a cosine's last bits may differ: the two matrices hold the rows at other offsets
                assert np.allclose([h.score for h in got], [h.score for h in want], rtol=0, atol=1e-6)
                cold = open_store(url)  # every comparison against a fresh load
    finally:
        cold.close()
        grown.close()


def test_a_block_from_columns_is_the_block_from_rows() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(5, DIM)).astype(np.float32)
    vectors[3] = vectors[1]  # a tie
    owners = [("u", "a", "s0"), ("u", "a", "s1"), None, ("u", "a", "s0"), ("u", "a", "s1")]
    for as_given in (lambda v: v.tobytes(), lambda v: v, lambda v: memoryview(v.tobytes())):
        rows = [(f"m{i}", str(i + 1), as_given(vectors[i]), "user", "message", 1.0 + i, owners[i], i) for i in range(5)]
        built = VectorBlock.build(rows, DIM)
        columns = VectorBlock.of_columns(*zip(*rows), dim=DIM)
        assert (built.ids, built.keys, built.owners, built.positions) == (
            columns.ids, columns.keys, columns.owners, columns.positions)
        assert np.array_equal(built.matrix, columns.matrix) and np.array_equal(built.created, columns.created)
        assert list(built.roles) == list(columns.roles) and list(built.kinds) == list(columns.kinds)
        query = rng.normal(size=DIM).astype(np.float32)
        assert built.search(query, 3, None) == columns.search(query, 3, None)


def _counted_loads(store: Any) -> list[int]:
    """Where each of the store's vector loads from now on begins (``after``: 0 reads a block whole)."""
    loads: list[int] = []
    load = store._load_vectors

    def counted(*args: Any, **kwargs: Any) -> Any:
        loads.append(kwargs["after"])
        return load(*args, **kwargs)

    store._load_vectors = counted
    return loads


def test_a_warmed_scope_loads_nothing_on_its_first_search(tmp_path) -> None:
    """``warm`` loads the scope's vectors (on the keyword search's connection): the first search finds them cached."""
    store = open_store(f"sqlite:///{tmp_path / 'w.db'}")
    scope = Scope(user_id="u", agent_id="a", session_id="s0")
    store.append(scope, _messages(0, 30))
    store.set_vectors(scope, [f"m0-{i}" for i in range(30)], np.random.default_rng(3).normal(size=(30, DIM)).astype(np.float32), "m")
    loads = _counted_loads(store)
    try:
        store.warm(Scope(user_id="u", agent_id="a"))
        assert len(loads) == 1
        assert len(store.search_vectors(Scope(user_id="u", agent_id="a"), np.ones(DIM, np.float32), 5)) == 5
        assert len(loads) == 1
    finally:
        store.close()


def test_a_warm_brings_a_kept_block_up_to_date(tmp_path) -> None:
    """``warm`` of a scope whose block is kept reads what was added since (as the next search would): that search
    then loads nothing and finds the new rows.
    """
    store = open_store(f"sqlite:///{tmp_path / 'w.db'}")
    scope, user = Scope(user_id="u", agent_id="a", session_id="s0"), Scope(user_id="u", agent_id="a")
    rng = np.random.default_rng(5)
    store.append(scope, _messages(0, 30))
    store.set_vectors(scope, [f"m0-{i}" for i in range(30)], rng.normal(size=(30, DIM)).astype(np.float32), "m")
    loads = _counted_loads(store)
    try:
        store.search_vectors(user, np.ones(DIM, np.float32), 5)  # the block read whole, and kept
        store.append(scope, [StoredMessage(id="late", role="user", text="late", data={}, position=30)])
        late = rng.normal(size=(1, DIM)).astype(np.float32)
        store.set_vectors(scope, ["late"], late, "m")
        store.warm(user)
        assert len(loads) == 2 and loads[1] > 0  # the rows added since, not the whole block
        assert store.search_vectors(user, late[0], 1)[0].id == "late"
        assert len(loads) == 2
    finally:
        store.close()


def test_a_warm_of_what_is_kept_alone_reads_no_scope_whole(tmp_path) -> None:
    """``warm(kept_only=True)`` (the warm after a write) brings a kept block and keyword index up to date, and
    reads nothing of a scope the process does not keep (one the cache let go of stays out); answers are unchanged.
    """
    store = open_store(f"sqlite:///{tmp_path / 'k.db'}")
    kept, other = Scope(user_id="u", agent_id="a", session_id="s0"), Scope(user_id="v", agent_id="a", session_id="s0")
    rng = np.random.default_rng(6)
    for scope in (kept, other):
        store.append(scope, _messages(0, 30))
        store.set_vectors(scope, [f"m0-{i}" for i in range(30)], rng.normal(size=(30, DIM)).astype(np.float32), "m")
    loads = _counted_loads(store)
    try:
        u, v = Scope(user_id="u", agent_id="a"), Scope(user_id="v", agent_id="a")
        store.search_vectors(u, np.ones(DIM, np.float32), 5)  # u's block and word index kept, v's not
        store.search_text(u, ["text"], 5)
        assert store._lexicons is not None
        held = dict(store._lexicons._held)
        late = rng.normal(size=(1, DIM)).astype(np.float32)
        for scope in (kept, other):
            store.append(scope, [StoredMessage(id="late", role="user", text="a heron came", data={}, position=30)])
            store.set_vectors(scope, ["late"], late, "m")
        store.warm(v, kept_only=True)
        assert len(loads) == 1 and store._lexicons._held.keys() == held.keys()  # nothing of v read
        store.warm(u, kept_only=True)
        assert len(loads) == 2 and loads[1] > 0  # u's additions alone
        assert all(store._lexicons._held[sid][3] is not index[3] for sid, index in held.items())  # extended
        assert store.search_vectors(u, late[0], 1)[0].id == "late" and len(loads) == 2
        assert [h.id for h in store.search_text(u, ["heron"], 5)] == ["late"]
        assert store.search_vectors(v, late[0], 1)[0].id == "late"  # v's first search reads v, as it would have
        assert [h.id for h in store.search_text(v, ["heron"], 5)] == ["late"]
    finally:
        store.close()


def test_a_block_warmed_while_its_user_is_forgotten_is_not_kept(tmp_path) -> None:
    """A forget that comes while ``warm`` reads a scope's vectors: the block it read is not cached."""
    store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
    scope = Scope(user_id="u", agent_id="a", session_id="s0")
    store.append(scope, _messages(0, 5))
    store.set_vectors(scope, [f"m0-{i}" for i in range(5)], np.random.default_rng(4).normal(size=(5, DIM)).astype(np.float32), "m")
    store._load_vectors = then_forget(store._load_vectors, store, Scope(user_id="u", agent_id="a"))
    try:
        store.warm(Scope(user_id="u", agent_id="a"))
        assert not store._cache
        del store._load_vectors
        assert store.search_vectors(Scope(user_id="u", agent_id="a"), np.ones(DIM, np.float32), 5) == []
    finally:
        store.close()


def test_a_block_warmed_while_one_of_its_messages_is_deleted_is_not_kept(tmp_path) -> None:
    """A delete that comes while ``warm`` reads a scope's vectors (and messages): the block it read, which holds the
    deleted message, is not cached; the next search reads the scope as it is.
    """
    store = open_store(f"sqlite:///{tmp_path / 'd.db'}")
    scope, owner = Scope(user_id="u", agent_id="a", session_id="s0"), Scope(user_id="u", agent_id="a")
    store.append(scope, _messages(0, 5))
    store.set_vectors(scope, [f"m0-{i}" for i in range(5)], np.random.default_rng(4).normal(size=(5, DIM)).astype(np.float32), "m")
    load = store._load_vectors

    def then_delete(*args: Any, **kwargs: Any) -> Any:
        read = load(*args, **kwargs)
        store.delete(scope, ["m0-2"])
        return read

    store._load_vectors = then_delete
    try:
        store.warm(owner)
        assert not store._cache
        del store._load_vectors
        found = store.search_vectors(owner, np.ones(DIM, np.float32), 5)
        assert sorted(h.id for h in found) == ["m0-0", "m0-1", "m0-3", "m0-4"]
    finally:
        store.close()


def test_blocks_extended_from_one_block_each_keep_their_own_rows() -> None:
    """A block grows in the room past its rows; a second block extended from the same one, or from an older one,
    gets rows of its own: each block's matrix stays its own rows, normalised, however they were extended.
    """
    rng = np.random.default_rng(11)

    def block(tag: str, n: int) -> tuple[VectorBlock, np.ndarray]:
        vectors = rng.normal(size=(n, DIM)).astype(np.float32)
        return VectorBlock.of_columns([f"{tag}{i}" for i in range(n)], [f"{tag}{i}" for i in range(n)], list(vectors),
                                      ["user"] * n, ["message"] * n, [0.0] * n, [("u", "a", "s")] * n,
                                      list(range(n)), DIM), vectors / np.linalg.norm(vectors, axis=1)[:, None]

    base, rows = block("a", 40)
    first, x = block("x", 5)
    second, y = block("y", 7)
    grown = base.extend(first)  # in place, past base's rows
    branch = base.extend(second)  # base's room is taken past its rows: a room of its own
    more, z = block("z", 100)  # more than the room holds: moved
    further = grown.extend(more).extend(first)
    older = grown.extend(second)  # grown's rows no longer end the room
    want = {
        "base": (base, [rows]), "grown": (grown, [rows, x]), "branch": (branch, [rows, y]),
        "further": (further, [rows, x, z, x]), "older": (older, [rows, x, y]),
    }
    for name, (b, parts) in want.items():
        expected = np.concatenate(parts)
        assert b.matrix.shape == expected.shape and np.allclose(b.matrix, expected, atol=1e-6), name
        assert len(b.ids) == len(expected), name
        best = b.search(expected[-1], 1, None)[0]
        assert best.id == b.ids[-1] or np.allclose(expected[b.ids.index(best.id)], expected[-1]), name

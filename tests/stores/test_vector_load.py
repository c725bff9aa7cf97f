"""A scope's vectors loaded cold (a process's first search of it) answer exactly as the block the same process
grew search by search: the same hits, keys and places, in the same order, the same scores; and a block built from columns is the block
built from rows, equal vectors (ties) included.

(Equal vectors are left out of the first test: a block grown by additions holds a session's late rows after
the other sessions', a cold load next to the session's first ones, and ties are ordered by the row they
were picked from; see docs/memory.md.)
"""

from __future__ import annotations

import numpy as np

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

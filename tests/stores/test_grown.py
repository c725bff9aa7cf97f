"""Kept blocks and keyword indexes grow in place: extended from one another, they share their columns' storage,
and each still answers with its own rows alone, however the extensions branch (two extended from one block:
the second copies its rows), and the rows added are written once, not every row again.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fullrecall.stores._bm25 import LexicalIndex, Tokenizer, bm25_search
from fullrecall.stores._grown import Rows
from fullrecall.stores._vectors import VectorBlock

DIM = 4
WORDS = ["heron", "marsh", "tide", "reed", "otter"]

# each step: (which earlier version to extend, how many rows to add)
_STEPS = st.lists(st.tuples(st.integers(0, 100), st.integers(0, 4)), min_size=1, max_size=12)


@given(_STEPS)
def test_rows_extended_from_one_another_each_hold_their_own_items(steps: list[tuple[int, int]]) -> None:
    versions: list[tuple[Rows[int], list[int]]] = [(Rows([]), [])]
    for n, (pick, m) in enumerate(steps):
        rows, expected = versions[pick % len(versions)]
        more = list(range(100 * n, 100 * n + m))
        versions.append((rows + more, expected + more))
    for rows, expected in versions:
        assert rows == expected and list(rows) == expected and len(rows) == len(expected)
        assert [rows[i] for i in range(-len(expected), len(expected))] == expected * 2
        assert rows[1:3] == expected[1:3]


def _index_rows(start: int, m: int) -> list[tuple[str, str, str, str, float, str, int]]:
    return [(f"m{p}", str(p), "user" if p % 2 else "assistant", "message", float(p),
             f"{WORDS[p % 5]} {WORDS[p * 3 % 5]} {p}", p) for p in range(start, start + m)]


@given(_STEPS)
def test_indexes_extended_from_one_another_each_answer_as_built_at_once(steps: list[tuple[int, int]]) -> None:
    tokenize = Tokenizer()
    first = _index_rows(0, 5)
    versions = [(LexicalIndex.of_texts(first, tokenize, ("u", "a", "s")), first)]
    for n, (pick, m) in enumerate(steps):
        index, rows = versions[pick % len(versions)]
        more = _index_rows(100 * (n + 1), m)
        versions.append((index.extend(LexicalIndex.of_texts(more, tokenize)), rows + more))
    for index, rows in versions:
        whole = LexicalIndex.of_texts(rows, tokenize, ("u", "a", "s"))
        assert (index.ids, index.keys, index.positions) == (whole.ids, whole.keys, whole.positions)
        for got, want in [(index.roles, whole.roles), (index.kinds, whole.kinds), (index.created, whole.created),
                          (index.lengths, whole.lengths)]:
            assert got.tolist() == want.tolist()
        for query in ([["heron"]], [["otter"], ["tide"]], [["marsh", "reed"]]):
            assert bm25_search([index], query, 50, None) == bm25_search([whole], query, 50, None)


@given(_STEPS)
def test_blocks_extended_from_one_another_each_answer_as_built_at_once(steps: list[tuple[int, int]]) -> None:
    rng = np.random.default_rng(len(steps))

    def rows(start: int, m: int) -> list[tuple]:
        return [(f"v{p}", str(p), rng.normal(size=DIM).astype(np.float32), "user", "message", float(p),
                 ("u", "a", "s"), p) for p in range(start, start + m)]

    first = rows(0, 5)
    versions = [(VectorBlock.build(first, DIM), first)]
    for n, (pick, m) in enumerate(steps):
        block, held = versions[pick % len(versions)]
        more = rows(100 * (n + 1), m)
        versions.append((block.extend(VectorBlock.build(more, DIM)), held + more))
    query = rng.normal(size=DIM).astype(np.float32)
    for block, held in versions:
        whole = VectorBlock.build(held, DIM)
        assert (block.ids, block.keys, block.owners, block.positions) == (
            whole.ids, whole.keys, whole.owners, whole.positions)
        assert np.array_equal(block.matrix, whole.matrix) and block.created.tolist() == whole.created.tolist()
        assert block.roles.tolist() == whole.roles.tolist() and block.kinds.tolist() == whole.kinds.tolist()
        assert block.search(query, 50, None) == whole.search(query, 50, None)


def test_an_index_extended_row_by_row_writes_the_rows_it_adds_in_the_storage_it_shares() -> None:
    """The second and later extensions of a kept index write past its rows in place: the extended index's
    columns are the same storage as the one it was extended from (the first extension moves them to a room).
    """
    tokenize = Tokenizer()
    index = LexicalIndex.of_texts(_index_rows(0, 1000), tokenize, ("u", "a", "s"))
    grown = index.extend(LexicalIndex.of_texts(_index_rows(1000, 2), tokenize))
    later = grown.extend(LexicalIndex.of_texts(_index_rows(1002, 2), tokenize))
    for name in ("roles", "kinds", "created", "lengths"):
        assert getattr(later, name).base is getattr(grown, name).base is not None, name
    assert isinstance(later.ids, Rows) and isinstance(grown.ids, Rows) and later.ids.items is grown.ids.items
    assert len(grown.ids) == 1002 and len(later.ids) == 1004


def test_rows_and_rooms_extended_from_one_block_by_many_threads_at_once_each_hold_their_own() -> None:
    """Threads extending one block at once: one of them writes in place, the others copy; every result holds the
    block's rows followed by its own, whichever thread got there first.
    """
    import threading

    from fullrecall.stores._grown import Room

    results: dict[int, tuple[Rows[int], np.ndarray]] = {}
    start = threading.Barrier(8)

    def extend(t: int) -> None:
        start.wait()
        more = list(range(1000 * (t + 1), 1000 * (t + 1) + 5))
        results[t] = (base_rows + more, Room.extended(base_array, room, np.array(more, dtype=np.float64))[0])

    for _ in range(20):  # each round a block extended once (its storage has room past its rows), then by all
        base_rows = Rows(list(range(100))) + [100]
        base_array, room = Room.extended(np.arange(100, dtype=np.float64), None, np.arange(100, 101, dtype=np.float64))
        threads = [threading.Thread(target=extend, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for t, (rows, array) in results.items():
            expected = list(range(101)) + list(range(1000 * (t + 1), 1000 * (t + 1) + 5))
            assert rows == expected and array.tolist() == expected
        assert base_rows == list(range(101)) and base_array.tolist() == list(range(101))

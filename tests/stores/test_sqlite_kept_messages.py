"""SQLite keeps a small scope's messages with its vector block: a search's hits (vector and in-process keyword) come
as :class:`~fullrecall.stores.KeptHits`, whose ``message(hit)`` is the message the store reads by key, whatever
another handle writes meanwhile (appends, late and overwritten vectors, deletes); a message over 64 KB, or a scope
over ``lexical_in_process`` messages, is read by key instead; a delete or a forget drops what was kept.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fullrecall.stores import KeptHits, Scope, StoredMessage, open_store

DIM = 8
WORDS = ["heron", "marsh", "tide", "reed", "otter", "dune", "gull", "kelp"]
USER = Scope(user_id="u")


def _message(i: int, rng: random.Random) -> StoredMessage:
    text = " ".join(rng.choices(WORDS, k=4)) + f" {i}"
    return StoredMessage(id=f"m{i}", role=rng.choice(["user", "assistant"]), text=text, data={"text": text},
                         created_at=1_000.0 + i, metadata={"n": i} if i % 2 else {})


def _check(store: Any, hits: list[Any], *, uncarried: Collection[str] = frozenset()) -> None:
    """Each hit's kept message is the one read by key; those in ``uncarried`` (and no other) come without one."""
    assert isinstance(hits, KeptHits)
    read = {m.key: m for m in store.get_keys(USER, [h.key for h in hits])}
    assert set(read) == {h.key for h in hits}, "a hit whose message is gone"
    for h in hits:
        kept = hits.message(h)
        if h.id in uncarried:
            assert kept is None
        else:
            assert kept == read[h.key]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kept_messages_are_the_stored_ones_whatever_another_handle_writes(tmp_path: Path, seed: int) -> None:
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    url = f"sqlite:///{tmp_path / 'kept.db'}"
    searcher, writer = open_store(url), open_store(url)
    sessions = [Scope(user_id="u", session_id=s) for s in ("a", "b")]
    alive: dict[str, set[str]] = {s.session_id or "": set() for s in sessions}
    vectored: set[str] = set()  # ids are unique across the sessions here
    n = 0
    try:
        for _ in range(30):
            scope = rng.choice(sessions)
            op = rng.choice(["append", "append", "late", "overwrite", "delete"])
            ids = sorted(alive[scope.session_id or ""])
            if op == "append":
                batch = [_message(n + j, rng) for j in range(rng.randint(1, 4))]
                n += len(batch)
                writer.append(scope, batch)
                with_vectors = [m.id for m in batch if rng.random() < 0.7]  # the others' vectors come late
                if with_vectors:
                    writer.set_vectors(scope, with_vectors, nrng.standard_normal((len(with_vectors), DIM))
                                       .astype(np.float32), "m")
                    vectored.update(with_vectors)
                alive[scope.session_id or ""] |= {m.id for m in batch}
            elif op in ("late", "overwrite") and ids:
                picked = rng.sample(ids, min(2, len(ids)))
                writer.set_vectors(scope, picked, nrng.standard_normal((len(picked), DIM)).astype(np.float32), "m")
                vectored.update(picked)
            elif op == "delete" and ids:
                gone = rng.sample(ids, min(2, len(ids)))
                assert writer.delete(scope, gone) == len(gone)
                alive[scope.session_id or ""] -= set(gone)
            hits = searcher.search_vectors(USER, nrng.standard_normal(DIM).astype(np.float32), 50)
            words = searcher.search_text(USER, [rng.choice(WORDS)], 50)
            for found in (hits, words):  # a message without a vector yet is not in the block: read by key
                if found:
                    _check(searcher, found, uncarried={h.id for h in found} - vectored)
                    assert {h.id for h in found} <= set().union(*alive.values())
    finally:
        searcher.close()
        writer.close()


def test_a_message_too_large_to_keep_is_read_by_key(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'big.db'}")
    scope = Scope(user_id="u", session_id="a")
    big = "heron " * 12_000  # 72,000 characters
    store.append(scope, [StoredMessage(id="big", role="tool", text=big, data={"content": big})]
                 + [StoredMessage(id=f"m{i}", role="user", text=f"heron {i}", data={}) for i in range(4)])
    ids = ["big", "m0", "m1", "m2", "m3"]
    store.set_vectors(scope, ids, np.random.default_rng(3).standard_normal((5, DIM)).astype(np.float32), "m")
    try:
        for _ in range(2):  # the first search reads the block, the second scans the kept one
            hits = store.search_vectors(USER, np.ones(DIM, np.float32), 5)
            words = store.search_text(USER, ["heron"], 5)
            for found in (hits, words):
                assert sorted(h.id for h in found) == sorted(ids)
                _check(store, found, uncarried={"big"})
        [read] = store.get_keys(scope, [h.key for h in hits if h.id == "big"])
        assert read.text == big and read.data == {"content": big}
    finally:
        store.close()


def test_a_scope_over_the_in_process_limit_keeps_no_messages(tmp_path: Path) -> None:
    """Above ``lexical_in_process`` messages a scope's block keeps its vectors alone, and when a kept scope grows past
    it, its messages go: hits are plain, and what they find is the same.
    """
    path = tmp_path / "limit.db"
    scope = Scope(user_id="u", session_id="a")
    rng = random.Random(5)
    messages = [_message(i, rng) for i in range(12)]
    vectors = np.random.default_rng(5).standard_normal((12, DIM)).astype(np.float32)
    query = np.ones(DIM, np.float32)
    small, plain = open_store(f"sqlite:///{path}?lexical_in_process=8"), open_store(f"sqlite:///{path}?lexical_in_process=0")
    try:
        small.append(scope, messages[:6])
        small.set_vectors(scope, [m.id for m in messages[:6]], vectors[:6], "m")
        assert isinstance(small.search_vectors(USER, query, 5), KeptHits)  # 6 messages: kept
        small.append(scope, messages[6:])
        small.set_vectors(scope, [m.id for m in messages[6:]], vectors[6:], "m")
        grown = small.search_vectors(USER, query, 5)  # 12: the kept block grew past the limit
        assert not isinstance(grown, KeptHits)
        assert grown == plain.search_vectors(USER, query, 5)
        with open_store(f"sqlite:///{path}?lexical_in_process=8") as fresh:  # read whole at 12: never kept
            assert not isinstance(fresh.search_vectors(USER, query, 5), KeptHits)
    finally:
        small.close()
        plain.close()


@pytest.mark.parametrize("how", ["delete", "forget"])
def test_a_delete_or_forget_drops_the_kept_messages_of_its_sessions(tmp_path: Path, how: str) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'gone.db'}")
    rng = random.Random(9)
    try:
        for user in ("u", "v"):
            scope = Scope(user_id=user, session_id="a")
            store.append(scope, [_message(i, rng) for i in range(5)])
            store.set_vectors(scope, [f"m{i}" for i in range(5)],
                              np.random.default_rng(9).standard_normal((5, DIM)).astype(np.float32), "m")
            assert isinstance(store.search_vectors(Scope(user_id=user), np.ones(DIM, np.float32), 3), KeptHits)
        texts = lambda: {row[2] for kept in store._cache.values() for row in (kept.rows or {}).values()}  # noqa: E731
        gone = store.get(Scope(user_id="u", session_id="a"), ["m1"])[0].text
        assert gone in texts()
        if how == "delete":
            store.delete(Scope(user_id="u", session_id="a"), ["m1"])
        else:
            store.forget(Scope(user_id="u"))
        assert gone not in texts() and len(store._cache) == 1  # the other user's block stays
    finally:
        store.close()

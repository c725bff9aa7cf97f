"""PostgreSQL searches a small scope in process: its vectors kept as a block checked against the sessions'
counters, its words in per-session keyword indexes extended as rows are appended. Whatever another handle
writes (appends, late and overwritten vectors, deletes, replacements), a handle with kept blocks and indexes
answers as a handle that searches on the server (vectors) or builds everything afresh (words) does.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conformance_core import then_forget

from fullrecall.stores import Filters, Scope, StoredMessage, open_store
from fullrecall.stores.base import KeptHits

DIM = 8
WORDS = ["heron", "marsh", "tide", "reed", "otter", "dune", "gull", "kelp"]


def _url(service_urls: dict[str, Callable[[], str]]) -> str:
    url = service_urls["postgres"]()
    return f"{url}{'&' if '?' in url else '?'}schema=inproc{uuid.uuid4().hex[:8]}"


def _same_vector_answer(got: list[Any], want: list[Any]) -> bool:
    """The same hits in the same order, with the same cosines but for float arithmetic (numpy's float32 in
    process, pgvector's double on the server).
    """
    return [h.id for h in got] == [h.id for h in want] and [h.score for h in got] == pytest.approx(
        [h.score for h in want], abs=1e-5)


def _text_answer(hits: list[Any]) -> list[tuple[str, float]]:
    return [(h.id, round(h.score, 6)) for h in hits]


def _check_carried(store: Any, scope: Scope, hits: list[Any], but: str | None = None) -> None:
    """Each hit (but the one of id ``but``) comes with its message, the one the store reads by key."""
    read = {m.key: m for m in store.get_keys(scope, [h.key for h in hits])}
    for h in (h for h in hits if h.id != but):
        carried = _carried(hits, h)
        assert carried is not None, f"hit {h.id} came without its message"
        assert carried == read[h.key]


def _carried(hits: list[Any], hit: Any) -> Any:
    """The message ``hit`` came with (kept with its scope's block, or read with a server search), or None."""
    if isinstance(hits, KeptHits):
        return hits.message(hit)
    return None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kept_blocks_and_indexes_answer_as_the_server_and_a_fresh_build(
    service_urls: dict[str, Callable[[], str]], seed: int
) -> None:
    url = _url(service_urls)
    writer = open_store(url)
    kept = open_store(url)
    on_server = open_store(url + "&vector_cache_mb=0&lexical_in_process=0")
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    owner = Scope(user_id="u")
    sessions = [Scope(user_id="u", session_id=s) for s in ("a", "b")]
    stranger = Scope(user_id="v", session_id="a")  # another user's rows never reach u's answers
    held: dict[Scope, list[str]] = {s: [] for s in [*sessions, stranger]}
    unvectored: dict[Scope, list[str]] = {s: [] for s in held}
    n = 0
    try:
        for step in range(70):
            scope = rng.choice([*sessions, stranger])
            op = rng.random()
            if op < 0.4 or not held[scope]:  # append, vectors for some now, the others later
                batch = []
                for _ in range(rng.randint(1, 3)):
                    n += 1
                    text = " ".join(rng.choices(WORDS, k=rng.randint(1, 4)))
                    batch.append(StoredMessage(id=f"m{n}", role=rng.choice(["user", "assistant"]), text=text, data={"content": text}))
                writer.append(scope, batch)
                held[scope] += [m.id for m in batch]
                unvectored[scope] += [m.id for m in batch]
            elif op < 0.6 and unvectored[scope]:  # vectors, possibly for older messages than the newest
                ids = rng.sample(unvectored[scope], rng.randint(1, len(unvectored[scope])))
                writer.set_vectors(scope, ids, nrng.standard_normal((len(ids), DIM)).astype(np.float32), "m")
                unvectored[scope] = [i for i in unvectored[scope] if i not in ids]
            elif op < 0.7:  # a vector overwritten
                vectored = [i for i in held[scope] if i not in unvectored[scope]]
                if vectored:
                    writer.set_vectors(scope, [rng.choice(vectored)], nrng.standard_normal((1, DIM)).astype(np.float32),
                                       "m")
            elif op < 0.85:  # a message deleted
                gone = rng.choice(held[scope])
                writer.delete(scope, [gone])
                held[scope].remove(gone)
                unvectored[scope] = [i for i in unvectored[scope] if i != gone]
            else:  # a message replaced by a new one, at the end
                gone = rng.choice(held[scope])
                n += 1
                word = rng.choice(WORDS)
                writer.replace(scope, [gone], [StoredMessage(id=f"m{n}", role="user", text=word, data={"content": word})])
                held[scope] = [i for i in held[scope] if i != gone] + [f"m{n}"]
                unvectored[scope] = [i for i in unvectored[scope] if i != gone] + [f"m{n}"]
            query = nrng.standard_normal(DIM).astype(np.float32)
            filters = rng.choice([None, Filters(roles=("user",)), Filters(exclude_ids=frozenset(held[sessions[0]][:2]))])
            for target in (owner, rng.choice(sessions)):
                hits = kept.search_vectors(target, query, 5, filters)
                assert _same_vector_answer(hits, on_server.search_vectors(target, query, 5, filters)), \
                    f"step {step}: vectors of {target}"
                _check_carried(kept, target, hits)
                terms = rng.sample(WORDS, rng.randint(1, 2))
                fresh = open_store(url)
                try:
                    expected = _text_answer(fresh.search_text(target, terms, 5, filters))
                finally:
                    fresh.close()
                hits = kept.search_text(target, terms, 5, filters)
                assert _text_answer(hits) == expected, f"step {step}: words {terms} of {target}"
                _check_carried(kept, target, hits)
        assert kept._blocks.get(owner) is not None  # the kept path was taken, not only the server's
    finally:
        for store in (writer, kept, on_server):
            store.close()


def test_a_later_search_of_a_kept_scope_is_one_round_trip_and_no_server_scan(
    service_urls: dict[str, Callable[[], str]], pg_statements: list[str]
) -> None:
    """The first search of a small scope reads its vectors, with their messages (two statements: its sessions, the
    vectors); a later one scans them in process, and its one statement reads only the sessions' counters: the
    same hits, the same scores, computed by no server, carrying the messages kept. A keyword search of the same
    scope takes its hits' messages from there too: once its index is built, it reads the sessions' rows only.
    """
    store = open_store(_url(service_urls))
    rng = np.random.default_rng(5)
    scope = Scope(user_id="u", session_id="a")
    store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"text {i}", data={}) for i in range(40)])
    store.set_vectors(scope, [f"m{i}" for i in range(40)], rng.standard_normal((40, DIM)).astype(np.float32), "m")
    query = rng.standard_normal(DIM).astype(np.float32)
    statements = pg_statements
    statements.clear()
    try:
        first = store.search_vectors(Scope(user_id="u"), query, 7)
        assert len(statements) == 2 and not any("<=>" in s for s in statements)
        statements.clear()
        later = store.search_vectors(Scope(user_id="u"), query, 7)
        assert len(statements) == 1 and "<=>" not in statements[0] and "messages" not in statements[0]
        assert [(h.id, h.score) for h in later] == [(h.id, h.score) for h in first]
        _check_carried(store, scope, later)
        assert store.search_text(Scope(user_id="u"), ["text"], 5)  # builds the session's index
        statements.clear()
        words = store.search_text(Scope(user_id="u"), ["text"], 5)
        assert len(statements) == 1 and "messages" not in statements[0]
        assert len(words) == 5
        _check_carried(store, scope, words)
    finally:
        store.close()


def _two_users_searched(store: Any, rng: np.random.Generator) -> None:
    """Users u and v, each with 5 messages ("heron <user> <i>") and their vectors, each searched once: kept."""
    for user in ("u", "v"):
        scope = Scope(user_id=user, session_id="a")
        store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"heron {user} {i}", data={})
                             for i in range(5)])
        store.set_vectors(scope, [f"m{i}" for i in range(5)], rng.standard_normal((5, DIM)).astype(np.float32), "m")
        assert store.search_vectors(Scope(user_id=user), rng.standard_normal(DIM).astype(np.float32), 3)


def test_forget_leaves_nothing_of_the_scope_in_process(service_urls: dict[str, Callable[[], str]]) -> None:
    """What searches kept of a user (their vectors' block, their sessions' word indexes) goes with ``forget``."""
    store = open_store(_url(service_urls))
    rng = np.random.default_rng(7)
    try:
        _two_users_searched(store, rng)
        for user in ("u", "v"):
            assert store.search_text(Scope(user_id=user), ["heron"], 3)
        held = dict(store._lexicons._held)
        assert len(held) == 2 and store._blocks.get(Scope(user_id="u")) is not None
        store.forget(Scope(user_id="u"))
        assert store._blocks.get(Scope(user_id="u")) is None and store._blocks.get(Scope(user_id="v")) is not None
        assert len(store._lexicons._held) == 1
        assert store.search_text(Scope(user_id="u"), ["heron"], 3) == []
    finally:
        store.close()


def test_a_delete_drops_the_kept_blocks_of_its_sessions(service_urls: dict[str, Callable[[], str]]) -> None:
    """A deleted message's words are kept by no block (the next search reads its scope again); other users' stay."""
    store = open_store(_url(service_urls))
    rng = np.random.default_rng(8)
    try:
        _two_users_searched(store, rng)
        texts = lambda: {row["text"] for kept in store._blocks._held.values() for row in kept.rows.values()}  # noqa: E731
        assert "heron u 1" in texts()
        assert store.delete(Scope(user_id="u", session_id="a"), ["m1"]) == 1
        assert "heron u 1" not in texts() and "heron v 1" in texts()
        hits = store.search_vectors(Scope(user_id="u"), rng.standard_normal(DIM).astype(np.float32), 5)
        assert sorted(h.id for h in hits) == ["m0", "m2", "m3", "m4"]
        _check_carried(store, Scope(user_id="u", session_id="a"), hits)
    finally:
        store.close()


def test_a_message_too_large_to_carry_is_not_kept_and_is_read_by_key(
    service_urls: dict[str, Callable[[], str]]
) -> None:
    """A message over 64 KB is not kept with its scope's block: its hit comes without it (a plain hit, as a server
    search gives it), the others with theirs, and reading it by key gives it whole.
    """
    store = open_store(_url(service_urls))
    rng = np.random.default_rng(11)
    scope = Scope(user_id="u", session_id="a")
    big = "heron " * 12_000  # 72,000 characters
    store.append(scope, [StoredMessage(id="big", role="tool", text=big, data={"content": big})]
                 + [StoredMessage(id=f"m{i}", role="user", text=f"heron {i}", data={}) for i in range(4)])
    ids = ["big", "m0", "m1", "m2", "m3"]
    store.set_vectors(scope, ids, rng.standard_normal((5, DIM)).astype(np.float32), "m")
    query = rng.standard_normal(DIM).astype(np.float32)
    try:
        for _ in range(2):  # the first search reads the block, the second scans it
            hits = store.search_vectors(Scope(user_id="u"), query, 5)
            words = store.search_text(Scope(user_id="u"), ["heron"], 5)
            for found in (hits, words):
                assert sorted(h.id for h in found) == sorted(ids)
                assert [h.id for h in found if _carried(found, h) is None] == ["big"]
                _check_carried(store, scope, found, but="big")
        [read] = store.get_keys(scope, [h.key for h in hits if h.id == "big"])
        assert read.text == big and read.data == {"content": big}
        assert store._blocks.get(Scope(user_id="u")) is not None  # the kept path was taken
    finally:
        store.close()


def test_a_block_read_while_its_user_is_forgotten_is_not_kept(service_urls: dict[str, Callable[[], str]]) -> None:
    """A forget that comes while a search reads a scope's block (the read began before it, so the block holds what
    the forget deletes): the search answers from what it read, and the block is not kept in process.
    """
    store = open_store(_url(service_urls))
    rng = np.random.default_rng(13)
    scope = Scope(user_id="u", session_id="a")
    store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"heron {i}", data={}) for i in range(5)])
    store.set_vectors(scope, [f"m{i}" for i in range(5)], rng.standard_normal((5, DIM)).astype(np.float32), "m")
    store._read_vectors = then_forget(store._read_vectors, store, Scope(user_id="u"))
    try:
        assert len(store.search_vectors(Scope(user_id="u"), rng.standard_normal(DIM).astype(np.float32), 3)) == 3
        assert store._blocks.get(Scope(user_id="u")) is None
        del store._read_vectors  # the store's own again
        assert store.search_vectors(Scope(user_id="u"), rng.standard_normal(DIM).astype(np.float32), 3) == []
    finally:
        store.close()


def test_a_word_index_read_while_its_user_is_forgotten_is_not_kept(
    service_urls: dict[str, Callable[[], str]],
) -> None:
    """The same for a session's keyword index: rows read before a forget answer that search, and are not held."""
    store = open_store(_url(service_urls))
    scope = Scope(user_id="u", session_id="a")
    store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"heron {i}", data={}) for i in range(5)])
    lexicons = store._lexicons
    lexicons._build = then_forget(lexicons._build, store, Scope(user_id="u"))
    try:
        assert len(store.search_text(Scope(user_id="u"), ["heron"], 3)) == 3
        assert lexicons._held == {} and lexicons._rows == 0
        del lexicons._build
        assert store.search_text(Scope(user_id="u"), ["heron"], 3) == []
    finally:
        store.close()


def test_a_warmed_scope_is_searched_as_a_kept_one_from_the_first_search(
    service_urls: dict[str, Callable[[], str]], pg_statements: list[str]
) -> None:
    """``warm`` reads a small scope's block (with its messages) and its sessions' word indexes: the first vector
    search and the first keyword search are then one statement each, reading only the sessions' rows.
    """
    store = open_store(_url(service_urls))
    rng = np.random.default_rng(6)
    scope = Scope(user_id="u", session_id="a")
    store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"text {i}", data={}) for i in range(40)])
    store.set_vectors(scope, [f"m{i}" for i in range(40)], rng.standard_normal((40, DIM)).astype(np.float32), "m")
    try:
        store.warm(Scope(user_id="u"))
        pg_statements.clear()
        hits = store.search_vectors(Scope(user_id="u"), rng.standard_normal(DIM).astype(np.float32), 7)
        assert len(pg_statements) == 1 and "messages" not in pg_statements[0] and len(hits) == 7
        _check_carried(store, scope, hits)
        pg_statements.clear()
        words = store.search_text(Scope(user_id="u"), ["text"], 5)
        assert len(pg_statements) == 1 and "messages" not in pg_statements[0] and len(words) == 5
        _check_carried(store, scope, words)
    finally:
        store.close()


def test_a_warm_brings_a_kept_block_and_index_up_to_date(
    service_urls: dict[str, Callable[[], str]], pg_statements: list[str]
) -> None:
    """``warm`` of a scope kept in process reads what was added since (as the next search would): the next vector
    search and keyword search are then one statement each that reads no message, and find the new rows.
    """
    store = open_store(_url(service_urls))
    rng = np.random.default_rng(8)
    scope, user = Scope(user_id="u", session_id="a"), Scope(user_id="u")
    store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"text {i}", data={}) for i in range(40)])
    store.set_vectors(scope, [f"m{i}" for i in range(40)], rng.standard_normal((40, DIM)).astype(np.float32), "m")
    try:
        store.warm(user)
        store.append(scope, [StoredMessage(id="late", role="user", text="a heron came", data={})])
        late = rng.standard_normal((1, DIM)).astype(np.float32)
        store.set_vectors(scope, ["late"], late, "m")
        store.warm(user)
        pg_statements.clear()
        assert store.search_vectors(user, late[0], 1)[0].id == "late"
        assert len(pg_statements) == 1 and "messages" not in pg_statements[0]
        pg_statements.clear()
        assert [h.id for h in store.search_text(user, ["heron"], 5)] == ["late"]
        assert len(pg_statements) == 1 and "messages" not in pg_statements[0]
    finally:
        store.close()


def test_a_warm_of_what_is_kept_alone_reads_no_scope_whole(
    service_urls: dict[str, Callable[[], str]], pg_statements: list[str]
) -> None:
    """``warm(kept_only=True)`` (the warm after a write) brings a kept block and keyword index up to date, and reads
    no message or vector of a scope the process does not keep; answers are unchanged.
    """
    store = open_store(_url(service_urls))
    rng = np.random.default_rng(9)
    kept, other = Scope(user_id="u", session_id="a"), Scope(user_id="v", session_id="a")
    for scope in (kept, other):
        store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"text {i}", data={}) for i in range(40)])
        store.set_vectors(scope, [f"m{i}" for i in range(40)], rng.standard_normal((40, DIM)).astype(np.float32), "m")
    try:
        store.warm(Scope(user_id="u"))
        late = rng.standard_normal((1, DIM)).astype(np.float32)
        for scope in (kept, other):
            store.append(scope, [StoredMessage(id="late", role="user", text="a heron came", data={})])
            store.set_vectors(scope, ["late"], late, "m")
        pg_statements.clear()
        store.warm(Scope(user_id="v"), kept_only=True)
        assert pg_statements and not [q for q in pg_statements if "messages" in q or "vectors_" in q]
        store.warm(Scope(user_id="u"), kept_only=True)
        pg_statements.clear()
        assert store.search_vectors(Scope(user_id="u"), late[0], 1)[0].id == "late"
        assert [h.id for h in store.search_text(Scope(user_id="u"), ["heron"], 5)] == ["late"]
        assert len(pg_statements) == 2 and not [q for q in pg_statements if "messages" in q]
        assert store.search_vectors(Scope(user_id="v"), late[0], 1)[0].id == "late"
        assert [h.id for h in store.search_text(Scope(user_id="v"), ["heron"], 5)] == ["late"]
    finally:
        store.close()


def test_a_prepared_vector_search_of_a_kept_scope_makes_its_round_trip_before_the_vector(
    service_urls: dict[str, Callable[[], str]], pg_statements: list[str]
) -> None:
    """``prepare_vector_search`` of a scope kept in process checks its block (one statement) at once: the search
    that follows, when the vector comes, sends none. Inside a batch the search runs as ``search_vectors`` does.
    """
    store = open_store(_url(service_urls))
    rng = np.random.default_rng(10)
    scope, user = Scope(user_id="u", session_id="a"), Scope(user_id="u")
    store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"text {i}", data={}) for i in range(40)])
    vectors = rng.standard_normal((40, DIM)).astype(np.float32)
    store.set_vectors(scope, [f"m{i}" for i in range(40)], vectors, "m")
    try:
        store.search_vectors(user, vectors[0], 1)  # the block read whole, and kept
        pg_statements.clear()
        prepared = store.prepare_vector_search(user)
        assert len(pg_statements) == 1 and "messages" not in pg_statements[0]
        pg_statements.clear()
        hits = prepared(vectors[5], 3)
        assert not pg_statements and hits[0].id == "m5"
        _check_carried(store, scope, hits)
        with store.batch():
            store.append(scope, [StoredMessage(id="late", role="user", text="late", data={})])
            store.set_vectors(scope, ["late"], -vectors[5][None], "m")
            assert prepared(-vectors[5], 1)[0].id == "late"  # the batch's own write, as search_vectors sees it
    finally:
        store.close()


def test_a_small_scope_block_reads_its_own_messages_not_the_whole_table(
    service_urls: dict[str, Callable[[], str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a small scope's block (its vectors with their messages), whole or grown by a few vectors, finds
    its messages by index, whatever the other users hold: the plan PostgreSQL makes for the very statement the
    store sends scans no table whole. Each read is planned for its values (never prepared): the plan of a
    prepared statement, made for any values, read every message of the scope to find the few a block adds.
    """
    import psycopg

    server, schema = service_urls["postgres"](), f"plan{uuid.uuid4().hex[:8]}"
    store = open_store(f"{server}{'&' if '?' in server else '?'}schema={schema}")
    rng = np.random.default_rng(9)
    try:
        n = 400  # messages a user: 20 others, 8,000 messages
        for user in [f"other{i}" for i in range(20)] + ["u"]:
            scope = Scope(user_id=user, session_id="a")
            store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"heron {i}", data={}) for i in range(n)])
            store.set_vectors(scope, [f"m{i}" for i in range(n)], rng.standard_normal((n, DIM)).astype(np.float32), "m")
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"ANALYZE {schema}.messages")
            conn.execute(f"ANALYZE {schema}.vectors_{DIM}")
        sent: list[tuple[str, Any, Any]] = []
        execute = psycopg.Connection.execute

        def watched(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            if f"vectors_{DIM} v JOIN" in str(query):
                sent.append((query, params, kw.get("prepare")))
            return execute(self, query, params, **kw)

        monkeypatch.setattr(psycopg.Connection, "execute", watched)
        mine = Scope(user_id="u", session_id="a")
        for turn in range(8):  # read whole, then grown 7 times (more than psycopg's runs before it prepares)
            assert len(store.search_vectors(Scope(user_id="u"), rng.standard_normal(DIM).astype(np.float32), 3)) == 3
            store.append(mine, [StoredMessage(id=f"t{turn}", role="user", text="heron", data={})])
            store.set_vectors(mine, [f"t{turn}"], rng.standard_normal((1, DIM)).astype(np.float32), "m")
        monkeypatch.undo()
        assert len(sent) == 8, "the scope's block was not read whole, then grown, at each search"
        assert {prepare for _, _, prepare in sent} == {False}
        with psycopg.connect(server, autocommit=True) as conn:
            from pgvector.psycopg import register_vector

            register_vector(conn)
            for query, params, _ in sent:
                plan = conn.execute(f"EXPLAIN (FORMAT JSON) {query}", params).fetchone()
                assert plan is not None and "Seq Scan" not in str(plan[0]), plan
    finally:
        store.close()


def _messages_access(plan: Any) -> list[str]:
    """How each node of a JSON plan that reads the messages table reads it: its index condition (with a bitmap
    scan, its index scan's), '' for none.
    """
    found: list[str] = []
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        if isinstance(node, list):
            nodes.extend(node)
        elif isinstance(node, dict):
            if node.get("Relation Name") == "messages" and node.get("Node Type") != "ModifyTable":
                conds = [node.get("Index Cond", "")] + [k.get("Index Cond", "") for k in node.get("Plans") or []]
                found.append(" ".join(c for c in conds if c))
            nodes.extend(v for v in node.values() if isinstance(v, (list, dict)))
    return found


def test_writes_find_their_messages_by_id_in_any_plan(
    service_urls: dict[str, Callable[[], str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append and a vectors' write look up the ids they name in the session by index, in the plan PostgreSQL
    makes for any parameters too (the one a statement prepared after a few runs gets): that plan read every
    message of the session and joined them to the ids, so each write of a long conversation cost more.
    """
    import re

    import psycopg

    server, schema = service_urls["postgres"](), f"gen{uuid.uuid4().hex[:8]}"
    store = open_store(f"{server}{'&' if '?' in server else '?'}schema={schema}")
    rng = np.random.default_rng(10)
    scope = Scope(user_id="u", session_id="a")
    sent: dict[str, tuple[str, Any]] = {}
    execute = psycopg.Connection.execute

    def watched(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        for mark in ("WITH new AS", "WITH sess AS"):
            if str(query).startswith(mark):
                sent[mark] = (str(query), params)
        return execute(self, query, params, **kw)

    try:  # a long conversation: 2,000 messages
        store.append(scope, [StoredMessage(id=f"old{i}", role="user", text=f"heron {i}", data={}) for i in range(2000)])
        monkeypatch.setattr(psycopg.Connection, "execute", watched)
        store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"heron {i}", data={}) for i in range(2)])
        store.set_vectors(scope, ["m0", "m1"], rng.standard_normal((2, DIM)).astype(np.float32), "m")
        monkeypatch.undo()
        assert set(sent) == {"WITH new AS", "WITH sess AS"}
        with psycopg.connect(server) as conn:  # a transaction, rolled back
            from pgvector.psycopg import register_vector

            register_vector(conn)
            conn.execute("SET plan_cache_mode = force_generic_plan")
            for n, (query, params) in enumerate(sent.values()):
                pieces = re.split(r"%[sb]", query)  # psycopg's placeholders as PostgreSQL's $1, $2, ...
                conn.execute(f"PREPARE st{n} AS " + "".join(f"{p}${i}" for i, p in enumerate(pieces[:-1], 1))
                             + pieces[-1])
                types = conn.execute("SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = %s",
                                     [f"st{n}"]).fetchone()
                assert types is not None and len(types[0]) == len(params)
                plan = psycopg.ClientCursor(conn).execute(  # the values in the text: EXECUTE takes no parameters
                    f"EXPLAIN (FORMAT JSON) EXECUTE st{n}({', '.join(f'%s::{t}' for t in types[0])})", params).fetchone()
                assert plan is not None
                access = _messages_access(plan[0])
                assert access and all("(id = " in a for a in access), (query[:40], access)  # looked up by id
            conn.rollback()
    finally:
        store.close()


def test_a_search_beside_the_first_vectors_of_a_dimension_never_meets_a_table_not_yet_made(
    service_urls: dict[str, Callable[[], str]],
) -> None:
    """The first vectors of a dimension make its table in a transaction; the handle listed the dimension as one
    whose table exists before that transaction committed, so a search on another thread meanwhile failed with
    'relation "vectors_8" does not exist' (a service's context request beside its indexer's first write)."""
    import threading

    store = open_store(_url(service_urls) + "&vector_cache_mb=0")  # every search on the server
    scope = Scope(user_id="u", session_id="a")
    store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"heron {i}", data={}) for i in range(3)])
    listed, errors = store._dims, []

    def search() -> None:
        try:
            store.search_vectors(Scope(user_id="u"), np.ones(DIM, np.float32), 3)
        except Exception as exc:  # noqa: BLE001 - what the search met, reported below
            errors.append(exc)

    def listing_then_search(conn: Any) -> list[int]:
        dims = listed(conn)
        beside = threading.Thread(target=search)
        beside.start()
        beside.join()
        return dims

    store._dims = listing_then_search
    try:
        store.set_vectors(scope, ["m0", "m1", "m2"], np.eye(3, DIM, dtype=np.float32), "m")
        assert errors == []
        assert len(store.search_vectors(Scope(user_id="u"), np.ones(DIM, np.float32), 3)) == 3
    finally:
        store.close()

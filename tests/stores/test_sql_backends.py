"""SQLite and PostgreSQL specifics: URLs, schema versions, large scopes, unreachable servers."""

from __future__ import annotations

import multiprocessing
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import psycopg
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fullrecall.errors import StateConflict, StoreError
from fullrecall.stores import ANY, Filters, Record, Scope, StoredMessage, open_store
from fullrecall.stores._servers import free_port
from fullrecall.stores.sqlite import SCHEMA_VERSION, SQLiteStore, parse_url


def _msg(i: int, text: str) -> StoredMessage:
    return StoredMessage(id=f"m{i}", role="user", text=text, data={"i": i})


def test_sqlite_urls() -> None:
    assert parse_url("sqlite:///rel/x.db") == ("rel/x.db", {})
    assert parse_url("sqlite:////abs/x.db?synchronous=FULL") == ("/abs/x.db", {"synchronous": "FULL"})
    assert parse_url("sqlite:///:memory:")[0] == ":memory:"
    for bad in ("sqlite://host/x.db", "sqlite:///", "mysql:///x"):
        with pytest.raises(ValueError):
            parse_url(bad)
    with pytest.raises(ValueError, match="scheme"):
        open_store("mongodb://localhost/x")
    with pytest.raises(ValueError, match="unknown option.* synchronus"):  # misspelt: refused, as the keyword is
        open_store("sqlite:///:memory:?synchronus=FULL")
    open_store("sqlite:///:memory:?synchronous=FULL&busy_timeout=5&lexical_in_process=0").close()
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(":memory:", synchronous="SOMETIMES")


def test_sqlite_memory_store_and_pragmas(tmp_path) -> None:
    mem = open_store("sqlite:///:memory:")
    mem.append(Scope(session_id="s"), [_msg(0, "hi")])
    assert mem.count(Scope()) == 1
    store = open_store(f"sqlite:///{tmp_path}/full.db?synchronous=FULL")
    conn = store._conn()  # the pragmas that the durability notes promise
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    store.close()


def test_sqlite_refuses_a_newer_schema(tmp_path) -> None:
    path = tmp_path / "future.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer"):
        SQLiteStore(path)


def test_sqlite_missing_directory_is_a_store_error(tmp_path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        open_store(f"sqlite:///{tmp_path}/no/such/dir/x.db")


def _open_and_append(path: str, barrier: Any, results: Any, worker: int) -> None:
    barrier.wait()
    try:
        with SQLiteStore(path) as store:
            text = f"hello from {worker}"
            store.append(Scope(user_id="u", agent_id="a", session_id=f"s{worker}"), [StoredMessage("m0", "user", text, {"text": text})])
        results.put("ok")
    except Exception as exc:  # reported to the parent, which fails the test
        results.put(repr(exc))


def test_sqlite_processes_opening_one_new_file_together_all_open_it(tmp_path) -> None:
    # Switching a new file to WAL answers "database is locked" at once, without the busy
    # handler, while another process switches it: every opener must wait, not fail.
    ctx = multiprocessing.get_context("spawn")
    workers, rounds = 6, 4
    for round_ in range(rounds):
        path = str(tmp_path / f"new{round_}.db")
        barrier, results = ctx.Barrier(workers), ctx.Queue()
        procs = [ctx.Process(target=_open_and_append, args=(path, barrier, results, w)) for w in range(workers)]
        for proc in procs:
            proc.start()
        outcomes = [results.get(timeout=120) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
        assert outcomes == ["ok"] * workers
        with SQLiteStore(path) as store:
            assert [store.count(Scope(user_id="u", agent_id="a", session_id=f"s{w}")) for w in range(workers)] == [1] * workers


def test_sqlite_user_search_across_many_sessions(tmp_path) -> None:
    """Over 64 sessions the FTS query scopes by the user token; results must stay exact."""
    store = open_store(f"sqlite:///{tmp_path}/many.db")
    for s in range(70):
        store.append(Scope(user_id="u", session_id=f"s{s}"), [_msg(s, f"note {s} about kiwis")])
    store.append(Scope(user_id="other", session_id="s0"), [_msg(999, "kiwis elsewhere")])
    hits = store.search_text(Scope(user_id="u"), ["kiwi"], 100)
    assert len(hits) == 70 and "m999" not in {h.id for h in hits}
    assert len(store.search_text(Scope.everyone(), ["kiwi"], 100)) == 71
    assert store.search_text(Scope(), ["kiwi"], 100) == []  # the default owner has none
    store.close()


def _vector_store(url: str, schema: str, n: int, seed: int, options: str) -> tuple[Any, Scope, np.ndarray]:
    """A PostgreSQL store in a fresh schema with ``n`` messages of one session, each with a random 8-d vector."""
    sep = "&" if "?" in url else "?"
    store = open_store(f"{url}{sep}schema={schema}{uuid.uuid4().hex[:8]}&{options}")
    scope = Scope(user_id="u", session_id="s")
    vecs = np.random.default_rng(seed).normal(size=(n, 8)).astype(np.float32)
    store.append(scope, [_msg(i, f"text {i}") for i in range(n)])
    store.set_vectors(scope, [f"m{i}" for i in range(n)], vecs, "m")
    return store, scope, vecs


def test_postgres_large_scope_uses_hnsw_and_stays_correct(service_urls: dict[str, Callable[[], str]]) -> None:
    url = service_urls["postgres"]()
    store, scope, vecs = _vector_store(url, "hnsw", 300, 0, "exact_limit=50&hnsw_min_rows=100")
    index = "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)"
    assert store.wait_for_indexes(timeout=120)
    with psycopg.connect(url) as conn:  # writes alone build no index, however many vectors they bring
        assert conn.execute(index, (f"{store.schema}.vectors_8_hnsw",)).fetchone() is None
    assert store.search_vectors(scope, vecs[42], 5)[0][0] == "m42"  # exact, and it asks for the index
    assert store.wait_for_indexes(timeout=120)
    with psycopg.connect(url) as conn:
        assert conn.execute(index, (f"{store.schema}.vectors_8_hnsw",)).fetchone() == (True,)
    hits = store.search_vectors(scope, vecs[42], 5)  # 300 > exact_limit: the HNSW path
    assert hits[0][0] == "m42" and hits[0][1] == pytest.approx(1.0, abs=1e-4)
    keep = list(range(0, 300, 30))  # filters leave 10 rows: the index finds too few, exact fallback
    filtered = store.search_vectors(
        scope, vecs[42], 5, Filters(exclude_ids=frozenset(f"m{i}" for i in range(300) if i not in keep))
    )
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    best = sorted(keep, key=lambda i: -float(unit[i] @ unit[42]))[:5]
    assert [h.id for h in filtered] == [f"m{i}" for i in best]
    store.close()


def test_postgres_small_scopes_never_build_the_index(service_urls: dict[str, Callable[[], str]]) -> None:
    """A table of many small scopes (users among many) is searched exactly, and writers never pay for a graph."""
    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    store = open_store(f"{url}{sep}schema=small{uuid.uuid4().hex[:8]}&exact_limit=40&hnsw_min_rows=100")
    vecs = np.random.default_rng(2).normal(size=(10, 40, 8)).astype(np.float32)
    for u in range(10):
        scope = Scope(user_id=f"u{u}", session_id="s")
        store.append(scope, [_msg(i, f"text {i}") for i in range(40)])
        store.set_vectors(scope, [f"m{i}" for i in range(40)], vecs[u], "m")
    with store._tx() as conn:  # type: ignore[attr-defined]  # the planner's row count, as autovacuum keeps it
        conn.execute(f"ANALYZE {store.schema}.vectors_8")
    for u in range(10):
        assert store.search_vectors(Scope(user_id=f"u{u}"), vecs[u][7], 1)[0].id == "m7"
    assert store.wait_for_indexes(timeout=120)
    with psycopg.connect(url) as conn:  # 400 vectors, each scope (40, at exact_limit) a tenth of them: exact, no index
        assert conn.execute("SELECT count(*) FROM pg_index WHERE indexrelid = to_regclass(%s)",
                            (f"{store.schema}.vectors_8_hnsw",)).fetchone() == (0,)
    store.close()


def test_postgres_index_build_never_blocks_the_search(service_urls: dict[str, Callable[[], str]]) -> None:
    """The search that asks for the HNSW index returns at once, exactly; the index is built beside it."""
    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    store = open_store(f"{url}{sep}schema=bg{uuid.uuid4().hex[:8]}&exact_limit=10&hnsw_min_rows=100")
    scope = Scope(user_id="u", session_id="s")
    vecs = np.random.default_rng(1).normal(size=(200, 8)).astype(np.float32)
    store.append(scope, [_msg(i, f"text {i}") for i in range(200)])
    store.set_vectors(scope, [f"m{i}" for i in range(10)], vecs[:10], "m")  # creates vectors_8, too small to index
    index_exists = "SELECT count(*) FROM pg_index WHERE indexrelid = to_regclass(%s) AND indisvalid"
    with psycopg.connect(url) as blocker:  # holds off any index build on the table; inserts still go through
        blocker.execute(f"LOCK TABLE {store.schema}.vectors_8 IN SHARE UPDATE EXCLUSIVE MODE")
        writer = threading.Thread(target=store.set_vectors, args=(scope, [f"m{i}" for i in range(10, 200)],
                                                                  vecs[10:], "m"))
        writer.start()
        writer.join(20)
        assert not writer.is_alive()
        assert store.wait_for_indexes(timeout=0)  # the writes started no build
        searcher = threading.Thread(target=lambda: store.search_vectors(scope, vecs[150], 1))
        searcher.start()
        searcher.join(20)
        assert not searcher.is_alive()  # returned although the build it asked for is waiting
        assert store.search_vectors(scope, vecs[150], 1)[0].id == "m150"  # exact search serves meanwhile
        assert not store.wait_for_indexes(timeout=0.2)  # the build is still waiting for the lock
        with psycopg.connect(url) as conn:
            assert conn.execute(index_exists, (f"{store.schema}.vectors_8_hnsw",)).fetchone() == (0,)
    assert store.wait_for_indexes(timeout=120)
    with psycopg.connect(url) as conn:
        assert conn.execute(index_exists, (f"{store.schema}.vectors_8_hnsw",)).fetchone() == (1,)
    assert store.search_vectors(scope, vecs[150], 1)[0].id == "m150"
    store.close()


def test_postgres_connections_plan_no_parallel_workers(service_urls: dict[str, Callable[[], str]]) -> None:
    """Starting parallel workers costs more than a scoped search takes; stale statistics must not buy them."""
    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    store = open_store(f"{url}{sep}schema=par{uuid.uuid4().hex[:8]}&pool_min=2")
    with store._read() as a, store._read() as b:  # type: ignore[attr-defined]  # two pooled connections
        for conn in (a, b):
            assert conn.execute("SHOW max_parallel_workers_per_gather").fetchone() == {"max_parallel_workers_per_gather": "0"}
    store.close()


def test_postgres_bm25_statistics_follow_deletes(service_urls: dict[str, Callable[[], str]]) -> None:
    """After most messages are deleted, lexical scores are those of a store that only ever held the rest."""
    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    churned = open_store(f"{url}{sep}schema=churn{uuid.uuid4().hex[:8]}")
    fresh = open_store(f"{url}{sep}schema=fresh{uuid.uuid4().hex[:8]}")
    scope = Scope(user_id="u", session_id="s")
    rng = np.random.default_rng(5)
    words = ["otter", "heron", "badger", "lynx", "marten", "stoat", "vole", "shrew"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 9)))) for _ in range(120)]
    churned.append(scope, [_msg(i, t) for i, t in enumerate(texts)])
    assert churned.delete(scope, [f"m{i}" for i in range(100)]) == 100
    fresh.append(scope, [_msg(i, texts[i]) for i in range(100, 120)])
    for query in (["otter"], ["heron", "vole"], words):
        got, want = churned.search_text(scope, query, 20), fresh.search_text(scope, query, 20)
        assert [h.id for h in got] == [h.id for h in want]
        assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-6)
    churned.close()
    fresh.close()


def test_postgres_appends_keep_the_word_count_bm25_weighs_with(service_urls: dict[str, Callable[[], str]]) -> None:
    """Each session's word count (BM25's mean row length) equals a recount of its rows, whichever way an append
    went: the one-statement path (new ids), or the general one (a retry, explicit positions, repeated ids).
    """
    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    store = open_store(f"{url}{sep}schema=lex{uuid.uuid4().hex[:8]}")
    one, two = Scope(user_id="u", session_id="one"), Scope(user_id="u", session_id="two")
    odd = ["Ünïcödé wörds, and punctuation: e.g. [3]!", "nul\x00inside", "pad " * 16_400 + "zebra words past the indexed prefix", "", "the of and"]
    store.append(one, [_msg(i, t) for i, t in enumerate(odd)])  # a new session
    store.append(one, [_msg(i + 10, t.upper()) for i, t in enumerate(odd)])  # an existing one
    store.append(one, [_msg(3, "a retry"), _msg(20, "beside a retry")])  # m3 is held: the general path
    store.append(two, [StoredMessage(id="p", role="user", text="placed at nine", data={}, position=9)])
    store.append(two, [_msg(1, "repeated id"), _msg(1, "repeated id")])
    store.delete(one, ["m11"])
    recount = (f"SELECT s.session_id, s.lexemes, (SELECT coalesce(sum(length(m.tsv)), 0) FROM {store.schema}.messages m"
               f" WHERE m.sid = s.sid) AS words FROM {store.schema}.sessions s ORDER BY s.session_id")
    with psycopg.connect(url) as conn:
        rows = conn.execute(recount).fetchall()
    assert [r[0] for r in rows] == ["one", "two"]
    assert all(r[1] == r[2] and r[2] > 0 for r in rows), rows
    assert [m.position for m in store.range(one, 0, 99)] == [0, 1, 2, 3, 4, 5, 7, 8, 9, 10]
    assert [(m.id, m.position) for m in store.range(two, 0, 99)] == [("p", 9), ("m1", 10)]
    store.close()


def _postgres_with_one_message(service_urls: dict[str, Callable[[], str]], name: str) -> tuple[str, Any, Scope]:
    """(the server's URL, a store in a new schema named from ``name``, the scope of its one message "m0")."""
    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    store = open_store(f"{url}{sep}schema={name}{uuid.uuid4().hex[:8]}")
    scope = Scope(user_id="u", session_id="s")
    store.append(scope, [_msg(0, "first")])
    return url, store, scope


def _wait_for_a_lock_wait(url: str, where: str, params: tuple[Any, ...], failure: str) -> None:
    """Until a backend waits for a lock (``where``: more conditions on ``pg_stat_activity``), asked on a connection
    of its own in autocommit: within one transaction PostgreSQL answers every read of that view from the snapshot
    its first read took, and would never see the wait begin.
    """
    deadline = time.monotonic() + 20
    with psycopg.connect(url, autocommit=True) as watcher:
        while not watcher.execute(f"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'{where}",
                                  params).fetchone()[0]:
            assert time.monotonic() < deadline, failure
            time.sleep(0.01)


def test_postgres_an_append_racing_another_for_the_same_id_stores_it_once(
    service_urls: dict[str, Callable[[], str]],
) -> None:
    """A writer that stored an id after a one-statement append began (its snapshot could not see it) makes
    that append fail on the unique id; it is then made again the general way: the id's place is returned,
    nothing is stored twice and the session's counters and positions move once.
    """
    url, store, scope = _postgres_with_one_message(service_urls, "race")
    s = store.schema
    result: list[Any] = []
    with psycopg.connect(url) as other:  # another writer, mid-transaction, holding the session's row
        sid, pos = other.execute(f"SELECT sid, next_position FROM {s}.sessions WHERE session_id = 's' FOR UPDATE"
                                 ).fetchone()
        writer = threading.Thread(target=lambda: result.append(store.append(scope, [_msg(1, "second")])))
        writer.start()
        _wait_for_a_lock_wait(url, " AND query LIKE %s", (f"%{s}.sessions%",), "the append never waited for the session's row")
        other.execute(f"INSERT INTO {s}.messages (sid, position, id, role, kind, text, data, created_at, archived_at,"
                      " metadata) VALUES (%s, %s, 'm1', 'user', 'message', 'second', '{}', 0, 0, '{}')", (sid, pos))
        other.execute(f"UPDATE {s}.sessions SET next_position = next_position + 1, message_count = message_count + 1,"
                      " lexemes = lexemes + 1 WHERE sid = %s", (sid,))
        other.commit()
        writer.join(20)
        assert not writer.is_alive()
    assert result == [[pos]]
    assert store.append(scope, [_msg(2, "third")]) == [pos + 1]
    assert [(m.id, m.position) for m in store.range(scope, 0, 99)] == [("m0", 0), ("m1", 1), ("m2", 2)]
    assert store.count(scope) == 3
    store.close()


@pytest.mark.parametrize("write", ["append", "forget"])
def test_postgres_writes_take_the_messages_table_before_the_session_row(
    service_urls: dict[str, Callable[[], str]], write: str
) -> None:
    """The first vectors of a dimension create their table, whose foreign key locks the messages table, then
    lock the session's row. A write that locked the session's row first and the messages table second (an
    append at explicit places, a forget) could deadlock with it: each now takes the messages table first.
    """
    from dataclasses import replace

    url, store, scope = _postgres_with_one_message(service_urls, "order")
    s = store.schema
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(store.append(scope, [replace(_msg(1, "second"), position=1)]) if write == "append"
                          else store.forget(scope)["messages"])
        except Exception as exc:  # noqa: BLE001 - the test reads it
            result.append(exc)

    with psycopg.connect(url) as other:  # the first vectors of a dimension, mid-transaction
        other.execute(f"CREATE TABLE {s}.probe (rid BIGINT REFERENCES {s}.messages (rid))")
        writer = threading.Thread(target=run)
        writer.start()
        _wait_for_a_lock_wait(url, " AND datname = current_database()", (), "the write never waited for the messages table")
        other.execute("SET lock_timeout = '10s'")
        other.execute(f"SELECT sid FROM {s}.sessions WHERE session_id = 's' FOR UPDATE")  # then the session's row
        other.rollback()
        writer.join(20)
        assert not writer.is_alive()
    assert result == ([[1]] if write == "append" else [1])
    store.close()


def test_postgres_a_refused_compare_and_set_leaves_no_session(service_urls: dict[str, Callable[[], str]]) -> None:
    """A state write is one statement; one refused by its expected version creates nothing, not even the
    conversation's row, and one that may create the document does.
    """
    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    store = open_store(f"{url}{sep}schema=cas{uuid.uuid4().hex[:8]}")
    scope = Scope(user_id="u", session_id="s")
    rows = f"SELECT count(*) FROM {store.schema}.sessions"
    with pytest.raises(StateConflict) as refused:
        store.put_state(scope, "w", {"n": 1}, expected=2)
    assert refused.value.current == 0
    with psycopg.connect(url) as conn:
        assert conn.execute(rows).fetchone() == (0,)
    assert store.put_state(scope, "w", {"n": 1}, expected=0) == 1
    with pytest.raises(StateConflict) as refused:
        store.put_state(scope, "w", {"n": 2}, expected=0)
    assert refused.value.current == 1 and store.get_versioned_state(scope, "w") == ({"n": 1}, 1)
    assert store.put_state(scope, "w", {"n": 2}, expected=1) == 2
    assert store.put_state(Scope(user_id="u", session_id="t"), "w", {"n": 1}) == 1  # a new conversation, no expected
    with psycopg.connect(url) as conn:
        assert conn.execute(rows).fetchone() == (2,)
    store.close()


def test_postgres_a_batch_is_one_transaction(service_urls: dict[str, Callable[[], str]]) -> None:
    """A batch's writes are seen by others when it ends, all at once; a block that fails leaves none of them, and
    the handle goes on working (its other threads never waited for the block).
    """
    url = service_urls["postgres"]()
    schema = f"batch{uuid.uuid4().hex[:8]}"
    store, other = (open_store(f"{url}{'&' if '?' in url else '?'}schema={schema}") for _ in range(2))
    owner, log = Scope(user_id="u", agent_id="a"), Scope(user_id="u", agent_id="a", session_id="_log")
    seen: list[tuple[int, int]] = []

    def others_view() -> tuple[int, int]:
        return len(other.get_records(owner, "facts")), other.count(log)

    with store.batch():
        store.put_record(owner, Record(id="f1", namespace="facts", text="My city is Lyon"))
        store.append(log, [_msg(0, "f1")])
        seen.append(others_view())
        beside = threading.Thread(target=lambda: seen.append((len(store.get_records(owner, "facts")), 0)))
        beside.start()
        beside.join(10)
    assert seen == [(0, 0), (0, 0)] and others_view() == (1, 1)
    with pytest.raises(RuntimeError, match="midway"), store.batch():
        store.put_record(owner, Record(id="f2", namespace="facts", text="My city is Oslo"))
        store.append(log, [_msg(1, "f2")])
        raise RuntimeError("midway")
    assert others_view() == (1, 1) and [r.id for r in store.get_records(owner, "facts")] == ["f1"]
    with pytest.raises(ValueError), store.batch():  # a statement refused inside the block: the block undone
        store.put_record(owner, Record(id="f3", namespace="facts", text="My city is Rome"))
        store.append(log, [StoredMessage(id="elsewhere", role="user", text="taken", data={}, position=0)])
    assert others_view() == (1, 1) and store.append(log, [_msg(2, "f3")]) == [1]
    store.close()
    other.close()


def test_postgres_a_small_scope_vector_search_is_one_round_trip(
    service_urls: dict[str, Callable[[], str]], pg_statements: list[str],
) -> None:
    """The scope's conversations and its exact best ``k`` come in one statement, the same hits as a scan in
    process; a scope of another dimension than the query's is still refused, naming both.
    """
    url = service_urls["postgres"]()  # searched on the server (a small scope is otherwise searched in process)
    store = open_store(f"{url}{'&' if '?' in url else '?'}schema=one{uuid.uuid4().hex[:8]}&vector_cache_mb=0")
    rng = np.random.default_rng(3)
    vectors: dict[str, np.ndarray] = {}
    for user in ("u", "v"):
        for session in ("a", "b"):
            scope = Scope(user_id=user, session_id=session)
            store.append(scope, [_msg(i, f"text {i}") for i in range(30)])
            mat = rng.standard_normal((30, 8)).astype(np.float32)
            store.set_vectors(scope, [f"m{i}" for i in range(30)], mat, "m8")
            vectors.update({f"{user}/{session}/m{i}": mat[i] for i in range(30)} if user == "u" else {})
    other = Scope(user_id="w", session_id="a")
    store.append(other, [_msg(0, "wide")])
    store.set_vectors(other, ["m0"], np.ones((1, 16), np.float32), "m16")
    query = rng.standard_normal(8).astype(np.float32)
    cosine = {key: float(v @ query / np.linalg.norm(v) / np.linalg.norm(query)) for key, v in vectors.items()}
    best = sorted(cosine, key=lambda key: -cosine[key])[:7]
    pg_statements.clear()
    hits = store.search_vectors(Scope(user_id="u"), query, 7)
    assert len(pg_statements) == 1
    assert [f"{h.owner[2] if h.owner else ''}/{h.id}" for h in hits] == [key.split("/", 1)[1] for key in best]
    assert [round(h.score, 5) for h in hits] == [round(cosine[key], 5) for key in best]
    with pytest.raises(ValueError, match="16"):
        store.search_vectors(Scope(user_id="w"), query, 3)
    store.close()


def test_postgres_vectors_of_a_dimension_another_handle_created_are_read(
    service_urls: dict[str, Callable[[], str]],
) -> None:
    """get_vectors reads from dimensions cached per handle: one written by another handle is found (the list is
    read again), and a write refused by its checks creates no table for its dimension."""
    url = service_urls["postgres"]()
    schema = f"dims{uuid.uuid4().hex[:8]}"
    one, two = (open_store(f"{url}{'&' if '?' in url else '?'}schema={schema}") for _ in range(2))
    a, b = Scope(user_id="u", session_id="a"), Scope(user_id="u", session_id="b")
    for store, scope in ((one, a), (two, b)):
        store.append(scope, [_msg(i, f"text {i}") for i in range(2)])
    one.set_vectors(a, ["m0"], np.ones((1, 8), np.float32), "m8")
    assert list(one.get_vectors(Scope(user_id="u"), ["m0", "m1"])) == ["m0"]  # dimension 8 cached by one
    two.set_vectors(b, ["m0", "m1"], np.ones((2, 16), np.float32), "m16")  # a table one has not seen
    got = one.get_vectors(b, ["m0", "m1"])
    assert sorted(got) == ["m0", "m1"] and {len(v) for v in got.values()} == {16}
    with pytest.raises(ValueError, match="model"):
        one.set_vectors(a, ["m1"], np.ones((1, 4), np.float32), "m8")
    with one._read() as conn:  # type: ignore[attr-defined]
        assert conn.execute("SELECT to_regclass(%s) AS t", (f"{schema}.vectors_4",)).fetchone()["t"] is None
    one.close()
    two.close()


def test_postgres_bulk_load_builds_the_index_on_demand(service_urls: dict[str, Callable[[], str]]) -> None:
    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    store = open_store(f"{url}{sep}schema=bulk{uuid.uuid4().hex[:8]}&hnsw_min_rows=1000000")
    scope = Scope(session_id="s")
    store.append(scope, [_msg(i, "x") for i in range(20)])
    store.set_vectors(scope, [f"m{i}" for i in range(20)], np.eye(20, 4, dtype=np.float32) + 0.1, "m")
    index = f"{store.schema}.vectors_4_hnsw"
    with psycopg.connect(url, autocommit=True) as conn:
        exists = "SELECT count(*) FROM pg_index WHERE indexrelid = to_regclass(%s)"
        assert conn.execute(exists, (index,)).fetchone() == (0,)  # below hnsw_min_rows: no index yet
        assert store.build_indexes() == [4]
        assert conn.execute(exists, (index,)).fetchone() == (1,)
    store.close()


def test_postgres_pruned_lexical_search_ranks_like_every_row_ranked(
    service_urls: dict[str, Callable[[], str]],
) -> None:
    """With the column statistics in place, common words only score candidates (see _topk),
    yet the top k is what ranking every matching row gives."""
    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    schema = f"lex{uuid.uuid4().hex[:8]}"
    pruned = open_store(f"{url}{sep}schema={schema}&lexical_budget=0")
    everything = open_store(f"{url}{sep}schema={schema}&lexical_budget=1000000000")
    rng = np.random.default_rng(3)
    words = [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(60)]
    weights = 1.0 / np.arange(1, 61) ** 1.1
    texts = [" ".join(rng.choice(words, size=int(rng.integers(2, 12)), p=weights / weights.sum())) for _ in range(1500)]
    scope = Scope(user_id="u", session_id="s")
    pruned.append(scope, [_msg(i, t) for i, t in enumerate(texts)])
    pruned.build_indexes()  # ANALYZE: the statistics that tell common words from rare ones
    with pruned._tx() as conn:
        assert len(pruned._lexeme_stats(conn)[0]) >= 30  # the query words are known: pruning is on
    for _ in range(25):
        query = list(rng.choice(words[:30], size=3, replace=False))
        got, want = pruned.search_text(scope, query, 8), everything.search_text(scope, query, 8)
        assert len({h.key for h in got}) == len(got)  # each row once
        assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-4)
        tied = {round(h.score, 3) for h in want[-1:]}  # rows tied at the cut may swap places
        assert {h.id for h in got if round(h.score, 3) not in tied} == {h.id for h in want if round(h.score, 3) not in tied}
    pruned.close()
    everything.close()


def test_postgres_lexical_search_of_one_user_among_many_reads_the_same_rows_either_way(
    service_urls: dict[str, Callable[[], str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Common words list most of the table: a small scope's rows are then read first and tested, and
    the hits and scores are those the words' index gives, filters and pruning included."""
    from fullrecall.stores import postgres as P

    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    store = open_store(f"{url}{sep}schema=lexu{uuid.uuid4().hex[:8]}&lexical_budget=20")
    rng = np.random.default_rng(5)
    words = [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(60)]
    weights = 1.0 / np.arange(1, 61) ** 1.1
    for u in range(10):
        for sess in ("a", "b"):
            texts = [" ".join(rng.choice(words, size=int(rng.integers(2, 12)), p=weights / weights.sum()))
                     for _ in range(80)]
            store.append(Scope(user_id=f"u{u}", session_id=sess), [
                StoredMessage(id=f"m{i}", role="user" if i % 2 else "assistant", text=t, data={}, created_at=1000.0 + i)
                for i, t in enumerate(texts)])
    store.build_indexes()  # ANALYZE: the word statistics and the table's size
    user = Scope(user_id="u3")
    filters = [None, Filters(roles=("user",)), Filters(exclude_ids=frozenset(f"m{i}" for i in range(0, 80, 3)),
                                                        since=1010.0)]
    cases = [(list(rng.choice(words[:30], size=int(rng.integers(1, 4)), replace=False)), filters[j % 3])
             for j in range(30)]

    def run() -> list[list[tuple[str, Any, float]]]:
        store._shares = None  # type: ignore[attr-defined]
        return [[(h.id, h.owner, round(h.score, 6)) for h in store.search_text(user, q, 8, f)] for q, f in cases]

    monkeypatch.setattr(P, "_SCOPE_FIRST", float("inf"))  # the words' index, always
    by_index = run()
    monkeypatch.setattr(P, "_SCOPE_FIRST", 0.0)  # the scope's rows first, whenever a word is known to be common
    assert run() == by_index
    assert sum(map(len, by_index)) > 100
    store.close()


def test_postgres_unreachable_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="PostgreSQL"):
        open_store(f"postgresql://nobody@127.0.0.1:{free_port()}/x?connect_timeout=2")


def test_postgres_schema_name_is_validated(service_urls: dict[str, Callable[[], str]]) -> None:
    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    with pytest.raises(ValueError, match="schema"):
        open_store(f"{url}{sep}schema=x;drop")
    assert psycopg  # the driver is importable wherever this test runs


@pytest.mark.parametrize("fts_batch", [1, 3, 256])
def test_sqlite_batched_fts_indexing_stays_exact(tmp_path, fts_batch: int) -> None:
    """Rows reach FTS5 in batches; deletes before and after indexing must leave it consistent."""
    store = SQLiteStore(tmp_path / "fts.db", fts_batch=fts_batch, lexical_in_process=0)  # FTS5 is the subject
    scope = Scope(session_id="s")
    store.append(scope, [_msg(i, f"walrus {i}") for i in range(5)])
    assert store.delete(scope, ["m0", "m1"]) == 2  # possibly never indexed
    assert sorted(h.id for h in store.search_text(scope, ["walrus"], 10)) == ["m2", "m3", "m4"]
    store.delete(scope, ["m2"])  # indexed by now
    store.append(scope, [_msg(i, f"walrus {i}") for i in range(5, 9)])
    other = SQLiteStore(tmp_path / "fts.db", lexical_in_process=0)  # another connection indexes what this one wrote
    assert sorted(h.id for h in other.search_text(scope, ["walrus"], 10)) == ["m3", "m4", "m5", "m6", "m7", "m8"]
    conn = store._conn()
    conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
    assert conn.execute("SELECT last_rid FROM fts_state").fetchone()[0] == 9
    other.close()
    store.close()


def test_sqlite_forget_leaves_no_trace_in_the_file(tmp_path) -> None:
    store = SQLiteStore(tmp_path / "gone.db")
    secret, keep = Scope(user_id="u", session_id="secret"), Scope(user_id="v", session_id="keep")
    store.append(secret, [_msg(i, f"the code is quixoticmarmalade{i}") for i in range(50)])
    store.append(keep, [_msg(i, f"ordinary words {i}") for i in range(50)])
    store.search_text(secret, ["quixoticmarmalade1"], 5)  # make sure the text reached FTS5
    store.forget(Scope(user_id="u"))
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("gone.db"))
    assert b"quixoticmarmalade" not in raw and b"ordinary words" in raw
    assert store.search_text(keep, ["ordinary"], 100) and store.search_text(Scope(), ["quixoticmarmalade1"], 5) == []
    store.close()


def test_sqlite_text_search_of_a_large_scope_never_leaks_or_starves(tmp_path) -> None:
    """A scope holding most of the file is searched without its token, then filtered: still exact."""
    store = SQLiteStore(tmp_path / "share.db")
    mine, other = Scope(session_id="mine"), Scope(session_id="other")
    filler = " ".join(f"w{i}" for i in range(30))
    store.append(mine, [_msg(i, f"apple {filler}") for i in range(60)])  # low BM25: long texts
    store.append(other, [_msg(100 + i, "apple apple") for i in range(50)])  # better matches, other scope
    for k in (5, 10, 60):
        hits = store.search_text(mine, ["apple"], k)
        assert len(hits) == k and all(int(h.id[1:]) < 100 for h in hits)
    assert len(store.search_text(Scope(), ["apple"], 200)) == 110
    store.close()


def test_sqlite_words_in_most_rows_do_not_change_the_ranking(tmp_path) -> None:
    """A speaker's name in every row weighs nothing in BM25: the rare word decides, and the common one alone still finds."""
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}?lexical_in_process=0")  # FTS5's bm25() is the subject
    scope = Scope(session_id="s")
    texts = [f"Caroline (8 May): message number {i} about the weather" for i in range(99)]
    texts.insert(40, "Caroline (8 May): I signed up for a pottery class")
    store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=t, data={"t": t}) for i, t in enumerate(texts)])
    hits = store.search_text(scope, ["caroline", "pottery"], 5)
    assert hits[0][0] == "m40" and len(hits) == 1  # only the row with the weighable word matches
    assert len(store.search_text(scope, ["caroline"], 5)) == 5  # every word common: all kept
    store.close()


def test_sqlite_a_search_after_each_small_write_counts_no_word_again(tmp_path) -> None:
    """How common each word is (counting it reads its whole posting list) is counted again only once the
    file has grown by 1%; the ranking is the same as with fresh counts.
    """
    store = open_store(f"sqlite:///{tmp_path / 'c.db'}?lexical_in_process=0")  # FTS5's word counts are the subject
    scope = Scope(session_id="s")
    texts = [f"Caroline (8 May): message number {i} about the weather" for i in range(200)]
    texts.insert(40, "Caroline (8 May): I signed up for a pottery class")
    store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=t, data={"t": t}) for i, t in enumerate(texts)])
    store.search_text(scope, ["caroline", "pottery"], 5)  # the words counted
    counts: list[str] = []
    for n in range(3):  # an agent's loop: a turn recorded, then a search
        store.append(scope, [StoredMessage(id=f"new{n}", role="user", text=f"Caroline: pottery again {n}",
                                           data={"t": n})])
        conn = store._text_conn[1]  # type: ignore[attr-defined]
        conn.set_trace_callback(lambda sql: counts.append(sql) if "count(*)" in sql else None)
        hits = store.search_text(scope, ["caroline", "pottery"], 5)
        conn.set_trace_callback(None)
        assert "m40" in [h[0] for h in hits]
        fresh = open_store(f"sqlite:///{tmp_path / 'c.db'}?lexical_in_process=0")  # counts taken now
        assert [h[0] for h in fresh.search_text(scope, ["caroline", "pottery"], 5)] == [h[0] for h in hits]
        fresh.close()
    assert counts == [], "a word was counted again after a write of one message"
    store.append(scope, [StoredMessage(id=f"bulk{i}", role="user", text="Caroline: more weather", data={"t": i})
                         for i in range(70)])  # more than 64 rows: counted again
    conn = store._text_conn[1]  # type: ignore[attr-defined]
    conn.set_trace_callback(lambda sql: counts.append(sql) if "count(*)" in sql else None)
    store.search_text(scope, ["caroline", "pottery"], 5)
    conn.set_trace_callback(None)
    assert counts, "the counts are taken again once the file has grown"
    store.close()


def test_throwaway_postgres_applies_settings() -> None:
    """The bench's server gets its settings through ALTER SYSTEM and one restart."""
    from fullrecall.stores._servers import postgres_server

    with postgres_server({"work_mem": "7MB", "jit": "off"}) as url, psycopg.connect(url) as conn:
        assert conn.execute("SHOW work_mem").fetchone() == ("7MB",)
        assert conn.execute("SHOW jit").fetchone() == ("off",)
    with pytest.raises(ValueError, match="setting names"), postgres_server({"work_mem; DROP": "1"}):
        pass


def test_postgres_hits_say_where_they_are(service_urls: dict[str, Callable[[], str]]) -> None:
    """Both searches give each hit's owner and position, the same as reading it by key would."""
    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    store = open_store(f"{url}{sep}schema=place{uuid.uuid4().hex[:8]}")
    rng = np.random.default_rng(3)
    scopes = [Scope(user_id="u", agent_id=a, session_id=s) for a in ("", "helper") for s in ("one", "two")]
    for n, scope in enumerate(scopes):
        store.append(scope, [_msg(i, f"otter {n} note {i}" if i % 3 == 0 else f"heron {i}") for i in range(12)])
        store.set_vectors(scope, [f"m{i}" for i in range(12)], rng.normal(size=(12, 8)).astype(np.float32), "m")
    user = Scope(user_id="u", agent_id=None)
    every = Scope(user_id="u", agent_id=ANY)
    for scope in (scopes[1], user, every):
        for hits in (store.search_text(scope, ["otter"], 50), store.search_vectors(scope, rng.normal(size=8), 50)):
            assert hits
            read = {m.key: m for m in store.get_keys(scope, [h.key for h in hits])}
            assert len(read) == len(hits)
            for h in hits:
                m = read[h.key]
                assert h.owner == (m.user_id, m.agent_id, m.session_id) and h.position == m.position
    assert {h.owner for h in store.search_text(every, ["otter"], 50)} == {s.owner() for s in scopes}
    store.close()


def test_postgres_hnsw_serves_the_candidates_a_recall_asks_for(service_urls: dict[str, Callable[[], str]]) -> None:
    """k=50 on a big scope walks the HNSW graph (the index is scanned) and finds the near neighbours."""
    url = service_urls["postgres"]()
    store, scope, vecs = _vector_store(url, "walk", 3_000, 4, "exact_limit=100&hnsw_min_rows=1000000")
    assert store.build_indexes() == [8]  # type: ignore[attr-defined]
    scans = (
        "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE schemaname = %s AND indexrelname = %s"
    )

    def index_scans() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            return int(conn.execute(scans, (store.schema, "vectors_8_hnsw")).fetchone()[0])  # type: ignore[index]

    before = index_scans()
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    for q in (7, 1234, 2999):
        hits = store.search_vectors(scope, vecs[q], 50)
        assert len(hits) == 50 and hits[0].id == f"m{q}" and hits[0].position == q
        exact = {f"m{i}" for i in np.argsort(-(unit @ unit[q]))[:50]}
        assert len(exact & {h.id for h in hits}) >= 45  # approximate, yet close to exact
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    deadline = time.monotonic() + 15
    while index_scans() < before + 3 and time.monotonic() < deadline:  # statistics reach pg_stat within ~1 s
        time.sleep(0.2)
    assert index_scans() >= before + 3
    store.close()


def test_postgres_ranges_cost_does_not_grow_with_the_conversation(
    service_urls: dict[str, Callable[[], str]],
) -> None:
    """``ranges`` reads a few index pages per span, however many positions the conversations hold."""
    url = service_urls["postgres"]()
    sep = "&" if "?" in url else "?"
    store_url = f"{url}{sep}schema=spans{uuid.uuid4().hex[:8]}"
    loader = open_store(store_url)
    small, big = Scope(user_id="u", session_id="small"), Scope(user_id="u", session_id="big")
    for start in range(0, 30_000, 10_000):
        loader.append(big, [_msg(i, "x") for i in range(start, start + 10_000)])
    loader.append(small, [_msg(i, f"m {i}") for i in range(40)])
    loader.build_indexes()  # type: ignore[attr-defined]  # ANALYZE, as after any bulk load
    schema = loader.schema  # type: ignore[attr-defined]
    loader.close()  # a backend flushes its statistics when it exits

    def count() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT coalesce(sum(idx_blks_hit + idx_blks_read), 0) FROM pg_statio_user_indexes"
                " WHERE schemaname = %s AND relname = 'messages'", (schema,)
            ).fetchone()
        return int(row[0])  # type: ignore[index]

    def pages_read() -> int:
        """The count once the closed stores' backends have flushed their statistics (they do as they exit,
        some time after the close): the same twice, half a second apart.
        """
        last = count()
        for _ in range(20):
            time.sleep(0.5)
            now = count()
            if now == last:
                return now
            last = now
        return last

    before = pages_read()
    reader = open_store(store_url)
    for scope, end in ((small, 40), (big, 30_000)):
        spans = [(2, 4), (10, 12), (end // 2, end // 2 + 9), (end - 2, 10**12)]
        want = [list(range(lo, min(hi, end - 1) + 1)) for lo, hi in spans]
        for _ in range(5):
            assert [[m.position for m in r] for r in reader.ranges(scope, spans)] == want
    reader.close()
    per_call = (pages_read() - before) / 10
    assert per_call < 30  # a scan of the position index would read ~100 pages per span


_WORDS = ["walrus", "otter", "heron", "pike"]


@settings(max_examples=60, deadline=None)
@example(steps=[("append_at", 0, ["otter"], 10), ("search", 0, ["otter"], 0), ("append_at", 0, ["walrus"], 5),
                ("append", 0, ["heron"], 0), ("search", 0, ["walrus"], 0)])  # a gap filled, then appends
@given(steps=st.lists(
    st.tuples(st.sampled_from(["append", "append_at", "delete", "forget", "search"]), st.integers(0, 3),
              st.lists(st.sampled_from(_WORDS), min_size=1, max_size=3), st.integers(0, 40)),
    min_size=1, max_size=30,
))
def test_sqlite_in_process_keyword_search_finds_what_fts5_finds(tmp_path_factory, steps) -> None:
    """A small scope is searched by words in process, from an index cached per session and extended as rows are
    appended; whatever any writer did since (appends, appends at explicit positions, deletes, forgets), it matches
    exactly the rows FTS5 matches, read by another store object whose cache saw every state.
    """
    path = tmp_path_factory.mktemp("kw") / "k.db"
    writer = SQLiteStore(path)
    cached, fts = SQLiteStore(path), SQLiteStore(path, lexical_in_process=0)
    scopes = [Scope(user_id=f"u{n % 2}", session_id=f"s{n}") for n in range(4)]
    try:
        for n, (op, which, words, at) in enumerate(steps):
            scope = scopes[which]
            if op == "append":
                writer.append(scope, [_msg(100 + n * 3 + i, " ".join(words[i:] or words)) for i in range(3)])
            elif op == "append_at":
                taken = {m.position for m in writer.range(scope, 0, 10**6)}
                if at not in taken:
                    writer.append(scope, [StoredMessage(id=f"x{n}", role="user", text=" ".join(words), data={},
                                                        position=at)])
            elif op == "delete":
                present = [m.id for m in writer.range(scope, 0, 10**6)]
                writer.delete(scope, present[at % len(present):][:2] if present else [])
            elif op == "forget":
                writer.forget(scope)
            if op == "search" or n == len(steps) - 1:  # several writes may come between two searches
                for read in (scope, Scope(user_id=scope.user_id)):  # one session, and a user's sessions together
                    for term in [*_WORDS, "walrus-otter", "otter heron"]:  # words, and phrases of two
                        found = {(h.id, h.key) for h in cached.search_text(read, [term], 500)}
                        assert found == {(h.id, h.key) for h in fts.search_text(read, [term], 500)}, (n, read, term)
    finally:
        for store in (writer, cached, fts):
            store.close()


def test_sqlite_small_scope_keyword_search_ranks_as_fts5_does(tmp_path) -> None:
    """In one conversation (the file's statistics are the scope's), the in-process engine gives FTS5's own
    scores: Porter stems with short words unstemmed ("us"), a hyphenated term as a phrase, a repeated term twice.
    """
    texts = ["It means so much to us", "We used to ride", "a self portrait of me", "my self and a portrait",
             "dogs at the shelter", "the dog and us"] + [f"filler line {i} of plain talk" for i in range(70)]
    scope = Scope(session_id="s")
    fts = SQLiteStore(tmp_path / "r.db", lexical_in_process=0)
    fts.append(scope, [_msg(i, t) for i, t in enumerate(texts)])
    cached = SQLiteStore(tmp_path / "r.db")
    for terms in (["used"], ["us"], ["self-portrait"], ["dogs", "dog", "shelter"], ["plain", "us"], ["talk"]):
        mine = [(h.id, round(h.score, 9)) for h in cached.search_text(scope, terms, 10)]
        assert mine == [(h.id, round(h.score, 9)) for h in fts.search_text(scope, terms, 10)], terms
        assert mine or terms == ["talk"], terms
    assert [h.id for h in cached.search_text(scope, ["self-portrait"], 10)] == ["m2"]  # "self ... portrait" is not it
    fts.close()
    cached.close()


def _append_vectors(path: str, session: str, ids: list[str], forget: bool) -> None:
    store = SQLiteStore(path)
    scope = Scope(user_id="u", session_id=session)
    if forget:
        store.forget(scope)
    store.append(scope, [StoredMessage(id=i, role="user", text=f"walrus {i}", data={}) for i in ids])
    store.set_vectors(scope, ids, np.stack([np.eye(4, dtype=np.float32)[n % 4] for n in range(len(ids))]), "m")
    store.close()


def test_sqlite_vector_search_sees_every_commit_of_another_process(tmp_path) -> None:
    """A vector search reuses its scope's block without a version query while nothing was committed (SQLite's
    data_version): each commit of another process, an append or a forget then an append, is seen at once.
    """
    path = str(tmp_path / "v.db")
    reader = SQLiteStore(path)
    ctx = multiprocessing.get_context("spawn")
    query = np.eye(4, dtype=np.float32)[0]
    live: dict[str, set[str]] = {"s1": set(), "s2": set()}
    try:
        for n, (session, forget) in enumerate([("s1", False), ("s1", False), ("s2", False), ("s1", True)]):
            batch = [f"m{n}-{i}" for i in range(3)]
            worker = ctx.Process(target=_append_vectors, args=(path, session, batch, forget))
            worker.start()
            worker.join(60)
            assert worker.exitcode == 0
            live[session] = (set() if forget else live[session]) | set(batch)
            for name, ids in live.items():
                found = {h.id for h in reader.search_vectors(Scope(user_id="u", session_id=name), query, 100)}
                assert found == ids, (n, name)
            assert {h.id for h in reader.search_vectors(Scope(user_id="u"), query, 100)} == live["s1"] | live["s2"]
    finally:
        reader.close()


_TRICKY = ["Café", "cafe", "CAFÉ", "naïve", "my_notes", "l'été", "ΟΔΟΣ", "οδός", "the", "of", "news", "new", "skiing",
           "skies", "generously", "İstanbul", "REF-48213", "v2.3.1", "Straße", "déjà-vu", "emoji😀word", "ﬁle",
           "日本語", "x" * 70, "running", "runs", "Ünïcödé", "a", "42"]


def test_postgres_keyword_search_finds_what_sqlite_finds(service_urls: dict[str, Callable[[], str]], tmp_path) -> None:
    """Accents, underscores, apostrophes, stopwords, stems, scripts, ligatures: each word and phrase finds the same
    messages on PostgreSQL as on SQLite's FTS5 (PostgreSQL's english configuration kept "café" and "my_notes",
    dropped "the" and stemmed "news" apart from "new": one query found other messages by backend).
    """
    url = service_urls["postgres"]()
    pg = open_store(f"{url}{'&' if '?' in url else '?'}schema=same{uuid.uuid4().hex[:8]}")
    fts = open_store(f"sqlite:///{tmp_path / 'fts.db'}?lexical_in_process=0")
    rng = np.random.default_rng(11)
    texts = [" ".join(rng.choice(_TRICKY, size=int(rng.integers(1, 7)))) for _ in range(120)]
    scope = Scope(user_id="u", session_id="s")
    try:
        for store in (pg, fts):
            store.append(scope, [_msg(i, t) for i, t in enumerate(texts)])
        for term in [*_TRICKY, "cafe naive", "the news", "Ο ΔΟΣ", "running runs"]:
            found = {h.id for h in pg.search_text(scope, [term], 500)}
            assert found == {h.id for h in fts.search_text(scope, [term], 500)}, term
            assert found or " " in term, term  # every word is in some message
    finally:
        pg.close()
        fts.close()


_PIECES = st.sampled_from(["a", "é", "'", "\\", "日", "x" * 700, "é" * 1100, "😀" * 600])


@settings(max_examples=40, deadline=None)
@given(tokens=st.lists(st.lists(_PIECES, min_size=1, max_size=4).map("".join), max_size=40),
       repeat=st.integers(0, 17_000))
def test_postgres_reads_the_tsvector_written_as_meant(service_urls: dict[str, Callable[[], str]], tokens: list[str],
                                                      repeat: int) -> None:
    """Whatever the tokens (quotes, backslashes, lexemes past 2,047 bytes, a token repeated past 256 times and
    positions past 16,383), PostgreSQL reads the literal without error, holds each distinct token once and
    finds each by its tsquery; a phrase of two tokens side by side early in the text is found too."""
    from fullrecall.stores import _tsvector as T

    words = tokens + ["pad"] * repeat
    with psycopg.connect(service_urls["postgres"]()) as conn:
        vector = T.tsvector(words)
        assert conn.execute("SELECT length(%s::tsvector)", (vector,)).fetchone()[0] == len(set(words))
        for query in [*({(t,) for t in words}), *([tuple(tokens[:2])] if len(tokens) > 1 else [])]:
            assert conn.execute("SELECT %s::tsvector @@ %s::tsquery", (vector, T.tsquery(query))).fetchone()[0], query


def test_postgres_keyword_search_is_the_same_in_a_c_locale_database(service_urls: dict[str, Callable[[], str]]) -> None:
    """A database created with the C locale (where PostgreSQL's own parser lower-cases no accented capital) finds
    the same words: the store writes and asks for its lexemes itself."""
    url = service_urls["postgres"]()
    name = f"c{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'")
    parts = url.split("?", 1)
    c_url = parts[0].rsplit("/", 1)[0] + f"/{name}" + (f"?{parts[1]}" if len(parts) > 1 else "")
    store = open_store(c_url)
    try:
        scope = Scope(session_id="s")
        store.append(scope, [_msg(0, "ÉTÉ AU CAFÉ ÖSTERREICH"), _msg(1, "plain words")])
        for term in ("ete", "été", "café", "österreich", "OSTERREICH"):
            assert [h.id for h in store.search_text(scope, [term], 5)] == ["m0"], term
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_postgres_without_pystemmer_is_refused_with_what_to_install(
    service_urls: dict[str, Callable[[], str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without PyStemmer the store would index unstemmed words that its queries, and FTS5, stem: it is refused."""
    monkeypatch.setitem(sys.modules, "Stemmer", None)  # as if not installed: importing it fails
    with pytest.raises(StoreError, match=r"PyStemmer.*fullrecall\[postgres\]"):
        open_store(service_urls["postgres"]())


def test_sqlite_get_by_id_looks_each_id_up_instead_of_walking_the_conversation(tmp_path) -> None:
    """``get`` puts its rows in conversation order itself: an ORDER BY in the read made SQLite walk the session's
    positions (every message of the conversation) for each chunk of ids instead of looking each id up."""
    store = SQLiteStore(str(tmp_path / "ids.db"))
    scope = Scope(user_id="u", session_id="big")
    for start in range(0, 20_000, 5_000):
        store.append(scope, [_msg(i, "x") for i in range(start, start + 5_000)])
    steps = 0

    def step() -> int:
        nonlocal steps
        steps += 1
        return 0

    store._conn().set_progress_handler(step, 100)  # one call per 100 virtual machine instructions
    ids = [f"m{i}" for i in (19_999, 7, 12_345, 3)]
    assert [m.id for m in store.get(scope, ids)] == ["m3", "m7", "m12345", "m19999"]  # in conversation order
    store._conn().set_progress_handler(None, 0)
    store.close()
    assert steps < 100  # the walk of the 20,000 positions took 1,800

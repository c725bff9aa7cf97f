"""``forget`` leaves no trace the result does not name: each backend's files, statistics and logs.

The conformance suite checks what every backend answers; these tests look where each
backend keeps copies (SQLite's file and WAL, PostgreSQL's ``pg_stats``, Redis's AOF).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest
import redis

from fullrecall.stores import Scope, StoredMessage, open_store
from fullrecall.stores._servers import drop_namespace
from fullrecall.stores.sqlite import SQLiteStore

SECRET = "quixoticmarmalade"
GONE, KEPT = Scope(user_id="zoltan", session_id="secret"), Scope(user_id="vera", session_id="keep")

# Another process reads the file: a transaction that began before the forget, then (its
# connection still open) nothing, then it closes when told.
_READER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN")
print(conn.execute("SELECT count(*) FROM messages").fetchone()[0], flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
print("done", flush=True)
sys.stdin.readline()
conn.close()
"""


def _msgs(prefix: str, text: str, n: int) -> list[StoredMessage]:
    return [
        StoredMessage(id=f"{prefix}{i}", role="user", text=f"{text} {i}", data={"text": f"{text} {i}"})
        for i in range(n)
    ]


def _file_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name))


# -- SQLite ---------------------------------------------------------------------------------------


def test_sqlite_a_deleted_fact_pattern_or_summary_leaves_the_files_at_once(tmp_path: Path, default_embedder) -> None:
    """A record's delete (a fact, a pattern, the summaries a selective clear takes) left its words in the WAL and the
    file's old pages while the process ran: only message deletes checkpointed. Now every delete does."""
    from fullrecall import PersistentMemory, ProceduralMemory, SyncConversationMemory

    path = tmp_path / "m.db"
    memory = PersistentMemory(user_id="alice", store=f"sqlite:///{path}", embedder=default_embedder)
    try:
        fact = memory.remember("My favourite password is factsecret4711")
        memory.clear(ids=[fact.id])
        assert b"factsecret4711" not in _file_bytes(path)
        patterns = ProceduralMemory(memory.store, user_id="alice", embedder=default_embedder)
        pattern = patterns.store_pattern("deploy the pattsecret4711 service", ["build", "ship"], 0.9, 100.0)
        assert patterns.delete_pattern(pattern)
        assert b"pattsecret4711" not in _file_bytes(path)
        talk = SyncConversationMemory(memory.store, "c1", user_id="alice", embedding_model=default_embedder,
                                      preserve_recent_messages=2, max_history_turns=3)
        for i in range(10):
            talk.add({"role": "user", "content": f"msg {i}: the vault opens with sumsecret4711"} if i % 2 == 0 else
                     {"role": "assistant", "content": f"answer {i}: the weather"})
        assert memory.clear(roles=["user"])["summaries"] > 0
        assert b"sumsecret4711" not in _file_bytes(path)
        talk.close()
    finally:
        memory.close()


def test_sqlite_forget_with_a_reader_in_another_process(tmp_path: Path) -> None:
    """forget returns in bounded time while a reader pins the old pages, names the WAL as
    remaining, and the store's next write removes them though the reader's connection stays open."""
    path = tmp_path / "r.db"
    store = SQLiteStore(path)
    store.append(GONE, _msgs("s", f"the code is {SECRET}", 300))
    store.append(KEPT, _msgs("k", "ordinary words", 50))
    store.search_text(GONE, [f"{SECRET}1"], 5)  # the text reached FTS5 too
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert reader.stdout is not None and reader.stdin is not None
        assert reader.stdout.readline().strip() == "350"
        started = time.monotonic()
        result = store.forget(Scope(user_id="zoltan"))
        assert time.monotonic() - started < 5  # the reader never lets go meanwhile: bounded anyway
        assert result["messages"] == 300 and result["sessions"] == 1
        [left] = result["remaining"]
        assert f"{path}-wal" in left["where"] and str(path) in left["where"]
        assert store.search_text(GONE, [SECRET], 5) == [] and store.count(GONE) == 0

        reader.stdin.write("\n")
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == "done"  # its transaction ended, its connection is open
        for i in range(3):  # later writes
            store.append(KEPT, _msgs(f"later{i}-", "later words", 5))
        raw = _file_bytes(path)
        assert SECRET.encode() not in raw and b"ordinary words" in raw
        assert store.forget(Scope(user_id="nobody"))["remaining"] == []
    finally:
        if reader.stdin is not None:
            reader.stdin.close()
        reader.wait(timeout=10)
        store.close()


def test_sqlite_delete_leaves_no_word_in_the_file(tmp_path: Path) -> None:
    """Deleting messages (SemanticSearch.delete) drops their words from the FTS5 segments and the WAL."""
    path = tmp_path / "d.db"
    store = SQLiteStore(path)
    store.append(KEPT, _msgs("k", "ordinary words", 20) + _msgs("s", f"the code is {SECRET}", 5))
    store.set_vectors(KEPT, ["k0", "s0"], np.ones((2, 4), np.float32), "m")
    assert len(store.search_text(KEPT, [SECRET], 10)) == 5  # indexed
    assert store.delete(KEPT, [f"s{i}" for i in range(5)]) == 5
    raw = _file_bytes(path)
    assert SECRET.encode() not in raw and b"ordinary words" in raw
    assert store.search_text(KEPT, [SECRET], 5) == [] and store.count(KEPT) == 20
    store.close()


def test_semantic_search_delete_leaves_no_word_in_the_file(tmp_path: Path, default_embedder) -> None:
    from fullrecall.search import SemanticSearch

    path = tmp_path / "s.db"
    with SemanticSearch(default_embedder, store=SQLiteStore(path), scope=KEPT) as search:
        kept = search.add([f"ordinary words about the weather {i}" for i in range(10)])
        gone = search.add([f"the vault code is {SECRET}{i}" for i in range(3)])
        assert {h.id for h in search.search(f"{SECRET}1", top_k=3)} & set(gone)
        assert search.delete(gone) == 3
        assert not {h.id for h in search.search(f"{SECRET}1", top_k=13)} & set(gone)
        raw = _file_bytes(path)
        assert SECRET.encode() not in raw and b"ordinary words" in raw
        assert search.store.count(KEPT) == len(kept)
        search.store.close()


# -- PostgreSQL --------------------------------------------------------------------------------------


@pytest.fixture
def pg(service_urls: dict[str, Callable[[], str]]) -> Iterator[tuple[str, str]]:
    """(store URL with a schema of its own, plain server URL), the schema dropped afterwards."""
    base, name = service_urls["postgres"](), f"f{uuid.uuid4().hex[:10]}"
    yield f"{base}{'&' if '?' in base else '?'}schema={name}", name
    drop_namespace("postgres", base, name)


def _pg_stats(conn: psycopg.Connection, schema: str) -> str:
    rows = conn.execute(
        "SELECT tablename, attname, most_common_vals::text, most_common_elems::text FROM pg_stats"
        " WHERE schemaname = %s",
        [schema],
    ).fetchall()
    return repr(rows)


def test_postgres_statistics_forget_the_words_and_users(pg: tuple[str, str]) -> None:
    url, schema = pg
    store = open_store(url)
    for n in range(4):
        store.append(Scope(user_id="zoltan", session_id=f"z{n}"), _msgs("s", f"the code is {SECRET}", 20))
    for n in range(2):
        store.append(Scope(user_id=f"vera{n}", session_id="keep"), _msgs("k", "ordinary words", 20))
    with psycopg.connect(store._conninfo, autocommit=True) as conn:  # type: ignore[attr-defined]
        conn.execute(f"ANALYZE {schema}.messages, {schema}.sessions")
        before = _pg_stats(conn, schema)
        assert "quixot" in before and "zoltan" in before  # what would leak
        result = store.forget(Scope(user_id="zoltan"))
        after = _pg_stats(conn, schema)
    assert result["messages"] == 80 and result["sessions"] == 4
    assert "quixot" not in after and "zoltan" not in after and "ordinari" in after
    wheres = " ".join(e["where"] for e in result["remaining"])
    assert f"{schema}.messages" in wheres and "WAL" in wheres  # freed space and WAL: named, not hidden
    assert not any("dead tuples" in e["what"] for e in result["remaining"])
    store.close()


def _database_files(conn: psycopg.Connection) -> bytes:
    """Every file of the current database, as on disk after a checkpoint (needs a local superuser)."""
    try:
        conn.execute("CHECKPOINT")
        folder = Path(conn.execute("SHOW data_directory").fetchone()[0])
    except psycopg.Error as exc:
        pytest.skip(f"cannot read the server's files: {exc}")
    oid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
    if not (folder / "base" / str(oid)).is_dir():
        pytest.skip(f"the server's data directory {folder} is not on this machine")
    return b"".join(f.read_bytes() for f in (folder / "base" / str(oid)).iterdir() if f.is_file())


def test_postgres_forget_vacuum_full_leaves_no_row_in_the_files(pg: tuple[str, str]) -> None:
    """With forget_vacuum=full the tables and indexes are rewritten: their files keep no forgotten word."""
    url, _ = pg
    secret = f"zq{uuid.uuid4().hex[:12]}"  # letters and digits: stored as is in text and tsvector
    store = open_store(f"{url}&forget_vacuum=full")
    store.append(GONE, _msgs("s", f"the code is {secret}", 20))
    store.append(KEPT, _msgs("k", "ordinary words", 20))
    with psycopg.connect(store._conninfo, autocommit=True) as conn:  # type: ignore[attr-defined]
        assert secret.encode() in _database_files(conn)
        result = store.forget(Scope(user_id="zoltan"))
        assert secret.encode() not in _database_files(conn)
    assert result["messages"] == 20 and [e["where"] for e in result["remaining"]] == [
        "PostgreSQL WAL (pg_wal), and any WAL archive, replica and backup"
    ]
    assert store.count(KEPT) == 20 and len(store.search_text(KEPT, ["ordinary"], 50)) == 20
    store.close()
    with pytest.raises(ValueError, match="forget_vacuum"):
        open_store(f"{url}&forget_vacuum=sometimes")


def test_postgres_forget_names_rows_an_older_snapshot_still_sees(pg: tuple[str, str]) -> None:
    url, schema = pg
    store = open_store(url)
    store.append(GONE, _msgs("s", f"the code is {SECRET}", 10))
    with psycopg.connect(store._conninfo) as reader:  # type: ignore[attr-defined]
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        assert reader.execute(f"SELECT count(*) FROM {schema}.messages").fetchone() == (10,)
        started = time.monotonic()
        result = store.forget(Scope(user_id="zoltan"))
        assert time.monotonic() - started < 10
        assert reader.execute(f"SELECT count(*) FROM {schema}.messages").fetchone() == (10,)  # it still sees them
        reader.rollback()
    assert result["messages"] == 10
    assert "dead tuples" in result["remaining"][0]["what"] and "1 other transaction" in result["remaining"][0]["what"]
    store.close()


def test_postgres_forget_does_not_wait_long_for_a_table_lock(pg: tuple[str, str]) -> None:
    url, schema = pg
    store = open_store(url)
    store.append(GONE, _msgs("s", f"the code is {SECRET}", 10))
    with psycopg.connect(store._conninfo) as other:  # type: ignore[attr-defined]
        other.execute(f"LOCK TABLE {schema}.records IN SHARE UPDATE EXCLUSIVE MODE")  # as a VACUUM would
        started = time.monotonic()
        result = store.forget(Scope(user_id="zoltan"))
        assert time.monotonic() - started < 10
        other.rollback()
    assert result["messages"] == 10 and store.count(GONE) == 0
    assert "waited 2s for a lock" in result["remaining"][0]["what"]
    store.close()


# -- Redis ---------------------------------------------------------------------------------------------


@pytest.fixture
def redis_base(service_urls: dict[str, Callable[[], str]]) -> Iterator[tuple[str, str, redis.Redis]]:
    base, name = service_urls["redis"](), f"f{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(base)
    yield f"{base}?prefix={name}", name, client
    client.close()
    drop_namespace("redis", base, name)


def test_redis_forget_rewrites_the_aof(redis_base: tuple[str, str, redis.Redis]) -> None:
    url, _, raw = redis_base
    folder = Path(raw.config_get("dir")["dir"]) / raw.config_get("appenddirname")["appenddirname"]
    if not folder.is_dir():
        pytest.skip(f"the Redis server's AOF folder {folder} is not on this machine")
    store = open_store(url)
    store.append(GONE, _msgs("s", f"the code is {SECRET}", 10))
    store.append(KEPT, _msgs("k", "ordinary words", 10))
    time.sleep(1.2)  # appendfsync everysec: the writes are in the AOF files
    assert SECRET.encode() in b"".join(p.read_bytes() for p in folder.iterdir())
    result = store.forget(Scope(user_id="zoltan"))
    assert result["messages"] == 10 and result["remaining"] == []  # the rewrite finished within forget
    assert SECRET.encode() not in b"".join(p.read_bytes() for p in folder.iterdir())  # (the RDB base compresses)
    assert store.count(KEPT) == 10 and len(store.search_text(KEPT, ["ordinary"], 20)) == 10
    store.close()


def test_redis_forget_rewrites_the_rdb_snapshot_too(redis_base: tuple[str, str, redis.Redis]) -> None:
    """A server that takes RDB snapshots gets a fresh one: the old dump kept the forgotten keys."""
    url, _, raw = redis_base
    dump = Path(raw.config_get("dir")["dir"]) / raw.config_get("dbfilename")["dbfilename"]
    if not dump.parent.is_dir():
        pytest.skip(f"the Redis server's folder {dump.parent} is not on this machine")
    saved = raw.config_get("save")["save"], raw.config_get("rdbcompression")["rdbcompression"]
    raw.config_set("save", "3600 1")
    raw.config_set("rdbcompression", "no")  # so that the words can be found in the dump
    try:
        store = open_store(url)
        store.append(GONE, _msgs("s", f"the code is {SECRET}", 10))
        raw.save()
        assert SECRET.encode() in dump.read_bytes()
        result = store.forget(Scope(user_id="zoltan"))
        assert result["remaining"] == []
        assert SECRET.encode() not in dump.read_bytes()
        store.close()
    finally:
        raw.config_set("save", saved[0])
        raw.config_set("rdbcompression", saved[1])
        dump.unlink(missing_ok=True)

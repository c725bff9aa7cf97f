"""Stores written before the input rule: migrated so that lexical search indexes the same bounded prefix."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fullrecall.errors import StateConflict
from fullrecall.stores import Record, Scope, Store, StoredMessage, open_store
from fullrecall.stores import postgres as pg
from fullrecall.stores import sqlite as sq
from fullrecall.stores._validate import INDEXED_CHARS

EARLY, LATE = "earlyzebrafinch", "latequixoticmarmalade"
LONG = f"{EARLY} " + "filler " * (INDEXED_CHARS // 7) + LATE


def _msg(i: int, text: str) -> StoredMessage:
    return StoredMessage(id=f"m{i}", role="user", text=text, data={"i": i})


_OLD_COLUMNS = ("id", "position", "role", "kind", "text", "data", "created_at", "archived_at", "metadata")


def _old_rows(messages: list[StoredMessage]) -> list[tuple[object, ...]]:
    """Messages as the columns every schema version has (what an old version's append wrote)."""
    return [(m.id, n, m.role, m.kind, m.text, f'{{"i":{n}}}', 1.0, 1.0, "{}") for n, m in enumerate(messages)]


def _fresh_schema(service_urls: dict[str, Callable[[], str]]) -> str:
    """The test server's PostgreSQL URL with a schema of its own, whose keyword searches always rank in SQL (the
    stored words being what these tests check; a small scope is otherwise searched in process, from its texts).
    """
    url = service_urls["postgres"]()
    return f"{url}{'&' if '?' in url else '?'}schema=mig{uuid.uuid4().hex[:8]}&lexical_in_process=0"


def test_sqlite_v1_file_is_reindexed_and_deletes_leave_no_trace(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, scope = tmp_path / "old.db", Scope(session_id="s")
    old_messages = [_msg(0, LONG), _msg(1, "short one")]
    with monkeypatch.context() as old:  # a file as version 1 wrote it: whole texts in FTS5
        old.setattr(sq, "SCHEMA_VERSION", 1)
        old.setattr(sq, "_indexed", lambda column: column)
        store = sq.SQLiteStore(path, lexical_in_process=0)  # FTS5 serves every search: its index is the subject
        with store._write() as conn:
            sid = store._session_row(conn, scope)["sid"]
            conn.executemany(f"INSERT INTO messages (sid, {', '.join(_OLD_COLUMNS)}) VALUES ({sid}, ?, ?, ?, ?, ?, ?,"
                             " ?, ?, ?)", _old_rows(old_messages))
            conn.execute("UPDATE sessions SET next_position = 2")
        assert [h.id for h in store.search_text(scope, [LATE], 5)] == ["m0"]
        store.close()
    store = sq.SQLiteStore(path, lexical_in_process=0)  # migrates to the current version
    stats = store.stats(scope)  # the counters are filled from the rows
    assert stats["message_count"] == store.count(scope) == 2 and stats["newest_position"] == 1
    assert stats["text_bytes"] == sum(m.size_bytes() for m in store.get(scope, ["m0", "m1"]))
    assert stats["index_bytes"] == INDEXED_CHARS + len("short one")
    assert store.search_text(scope, [LATE], 5) == []
    assert [h.id for h in store.search_text(scope, [EARLY], 5)] == ["m0"]
    assert store.get(scope, ["m0"])[0].text == LONG
    store.forget(scope)
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("old.db"))
    assert LATE.encode() not in raw and EARLY.encode() not in raw  # FTS5 deleted exactly what it held
    store.close()


def test_postgres_v3_schema_migrates_to_prefix_index(
    service_urls: dict[str, Callable[[], str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _fresh_schema(service_urls)
    scope = Scope(session_id="s")
    with monkeypatch.context() as old:
        old.setattr(pg, "SCHEMA_VERSION", 3)
        store = open_store(url)
        with store._tx() as conn:
            s = store.schema
            sid = conn.execute(f"INSERT INTO {s}.sessions (tenant, user_id, agent_id, session_id, created_at,"
                               " next_position) VALUES ('default', '', '', 's', 1.0, 2) RETURNING sid").fetchone()["sid"]
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {s}.messages (sid, {', '.join(_OLD_COLUMNS)}) VALUES ({sid}, %s, %s, %s,"
                                " %s, %s, %s, %s, %s, %s)",
                                _old_rows([_msg(0, "an early word: " + EARLY), _msg(1, "plain")]))
        store.close()
    store = open_store(url)
    try:
        stats = store.stats(scope)  # migration 5 filled the counters from the rows
        assert stats["message_count"] == store.count(scope) == 2 and stats["summary_count"] == 0
        assert stats["text_bytes"] == sum(m.size_bytes() for m in store.get(scope, ["m0", "m1"]))
        assert [h.id for h in store.search_text(scope, [EARLY], 5)] == ["m0"]
        store.append(scope, [_msg(2, LONG)])  # 1 MB tsvector limit no longer in reach
        assert {h.id for h in store.search_text(scope, [EARLY], 5)} == {"m0", "m2"}
        assert store.search_text(scope, [LATE], 5) == []
    finally:
        store.close()


def test_postgres_v5_schema_is_reindexed_with_the_words_every_backend_finds(
    service_urls: dict[str, Callable[[], str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema written by version 5 (its ``tsv`` PostgreSQL's english words, accents kept, "the" dropped) is
    indexed again on open, row by row in batches: the words every backend finds, BM25's word counts recounted,
    and appends after it index their words as well."""
    url = _fresh_schema(service_urls)
    scope = Scope(session_id="s")
    texts = ["Rendez-vous au Café", "read the news", "nul\x00inside", "see my_notes", LONG]
    with monkeypatch.context() as old:
        old.setattr(pg, "SCHEMA_VERSION", 5)
        store = open_store(url)
        with store._tx() as conn:
            s = store.schema
            sid = conn.execute(f"INSERT INTO {s}.sessions (tenant, user_id, agent_id, session_id, created_at,"
                               " next_position, message_count) VALUES ('default', '', '', 's', 1.0, 5, 5)"
                               " RETURNING sid").fetchone()["sid"]
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {s}.messages (sid, {', '.join(_OLD_COLUMNS)}) VALUES ({sid}, %s, %s, %s,"
                                " %s, %s, %s, %s, %s, %s)",
                                [(*r[:4], pg._pg_text(str(r[4])), *r[5:]) for r in _old_rows(
                                    [_msg(i, t) for i, t in enumerate(texts)])])
            conn.execute(f"UPDATE {s}.sessions SET lexemes = (SELECT sum(length(tsv)) FROM {s}.messages)")
            # what version 5 found: its words kept the accent (this version's search reads columns added later)
            assert conn.execute(f"SELECT count(*) AS n FROM {s}.messages WHERE tsv @@ 'cafe'::tsquery").fetchone()["n"] == 0
        store.close()
    monkeypatch.setattr(pg, "_REINDEX_BATCH", 2)
    store = open_store(url)
    try:
        for term, found in [("cafe", ["m0"]), ("the", ["m1"]), ("new", ["m1"]), ("inside", ["m2"]), ("notes", ["m3"]),
                            (EARLY, ["m4"]), (LATE, [])]:
            assert [h.id for h in store.search_text(scope, [term], 5)] == found, term
        store.append(scope, [_msg(5, "another café")])
        assert {h.id for h in store.search_text(scope, ["cafe"], 5)} == {"m0", "m5"}
        with store._tx() as conn:
            row = conn.execute(f"SELECT s.lexemes, (SELECT sum(length(m.tsv)) FROM {s}.messages m) AS words,"
                               f" (SELECT count(*) FROM {s}.messages WHERE tsv::text LIKE '%%\ufdd0%%') AS marks"
                               f" FROM {s}.sessions s").fetchone()
        assert row["lexemes"] == row["words"] > 0 and row["marks"] == 0
    finally:
        store.close()


_OLD_RECORD = ("INSERT INTO {t} (tenant, user_id, agent_id, session_id, namespace, id, text, data, created_at,"
               " updated_at) VALUES ('default', 'ann', '', '', 'facts', 'r', 'likes tea', '{{}}', 1.0, 1.0)")


def _records_take_versions(store: Store) -> None:
    """A record written before records had versions is at version 1, and a compare-and-set goes from there."""
    owner = Scope(user_id="ann")
    [old] = store.get_records(owner, "facts")
    assert (old.text, old.version) == ("likes tea", 1)
    with pytest.raises(StateConflict):
        store.put_record(owner, Record(id="r", namespace="facts", text="likes green tea"), expected=0)
    assert store.put_record(owner, Record(id="r", namespace="facts", text="likes green tea"), expected=1) == 2
    assert [(r.text, r.version) for r in store.get_records(owner, "facts")] == [("likes green tea", 2)]


def test_sqlite_v3_records_take_versions(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "old.db"
    with monkeypatch.context() as old:
        old.setattr(sq, "SCHEMA_VERSION", 3)
        store = sq.SQLiteStore(path)
        with store._write() as conn:
            conn.execute(_OLD_RECORD.format(t="records"))
        store.close()
    store = sq.SQLiteStore(path)
    _records_take_versions(store)
    store.close()


def test_postgres_v5_records_take_versions(
    service_urls: dict[str, Callable[[], str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _fresh_schema(service_urls)
    with monkeypatch.context() as old:
        old.setattr(pg, "SCHEMA_VERSION", 5)
        store = open_store(url)
        with store._tx() as conn:
            conn.execute(_OLD_RECORD.format(t=f"{store.schema}.records"))
        store.close()
    store = open_store(url)
    try:
        _records_take_versions(store)
    finally:
        store.close()


@given(st.text(alphabet=st.sampled_from(["a", " ", "\x00", "\ufdd0", "é", "\n"]), max_size=30))
def test_postgres_text_escaping_round_trips(text: str) -> None:
    stored = pg._pg_text(text)
    assert "\x00" not in stored
    assert pg._py_text(stored) == text
    if "\x00" not in text and not text.startswith("\ufdd0"):
        assert stored == text  # the usual text is stored as it is


# sha256 of each migration as released: a store that ran one never runs it again, so it must never change
_RELEASED: dict[ModuleType, dict[int, str]] = {
    sq: {
        1: "4fb78170b86a7d8521b3eb3f307a52bd7c27f4b2b2ac9e62ceaf8531a5eb8ca4",
        2: "75f062bda13caaf1c1e3229ce5c149d00f550e3b666024b41989bb6cb452d3cd",
        3: "e9069df92d0248b0a4f080651c722610791b9d46a8a4083265acc1fc2505721a",
        4: "431e9c09980daf33c16f6b052a5f20196afb610efe41669880b657c05fa7790e",
    },
    pg: {
        1: "19df2b1c5eb390ec729286b567bd98a66cbed65fefc99334a1bc684bb4cc1606",
        2: "f6ede79156d73c7183eaa371ca7047fdfc29598c3e6412b8bccb01794bf2fd81",
        3: "88bc8536ed199c91bf098201da351b03f202edbe7d7587ac5ccb4053534b351d",
        4: "e5c8da6cc54de107c8cc7acac4476db979d9e2405d6db8244791b5555434b6fa",
        5: "5a03f6fcbc690e0a380d9524f1cf556c0ffbe56f0779b13408479c0861790d49",
        6: "acab9ac301053af0d7a5192f1b78193d90c066145ab346299fed4f212cedb320",
        7: "5f11ee993c456cdbcaf3857e6699a1ac64e7a842cc2e667d98cf75e0a7043778",
    },
}


@pytest.mark.parametrize("module", [sq, pg], ids=["sqlite", "postgres"])
def test_released_migrations_never_change(module: ModuleType) -> None:
    for version, digest in _RELEASED[module].items():
        assert hashlib.sha256(module.MIGRATIONS[version].encode()).hexdigest() == digest, f"migration {version} changed"

"""SQLite store: the embedded default, one file, safe for several processes.

Design, and why:

* **WAL + ``synchronous=NORMAL``** (default): readers never block the writer and a
  commit is one WAL append. A committed write survives a process crash (SIGKILL);
  after an OS crash or power loss the last few commits may roll back. Pass
  ``synchronous="FULL"`` (or ``?synchronous=FULL`` in the URL) to fsync on every
  commit and survive power loss too, at ~0.2 ms (SSD) to 10 ms (network disk) a commit.
* **One transaction per logical write**, started with ``BEGIN IMMEDIATE`` so that the
  session's next position is read and advanced under the write lock: two processes
  appending to one conversation never collide. ``busy_timeout`` makes the loser wait.
* **FTS5** (``porter unicode61``), contentless (the text lives only in ``messages``).
  FTS5 writes a new index segment per transaction (~150 µs, 5x the cost of the message
  itself), so appends only store the message and rows are indexed in batches: by the next
  ``search_text`` (any process), or inside an append once ``fts_batch`` rows are pending.
  ``fts_state.last_rid`` marks what is indexed; ``rid`` is AUTOINCREMENT so it only grows.
  Each FTS row also carries scope tokens (``s…`` session, ``u…`` user, ``t…`` tenant): a
  per-session search ANDs its token so FTS5 only walks small posting lists instead of
  ranking every match in the file.
* **Keyword search of a small scope** (at most ``lexical_in_process`` messages, default 20,000: one
  user's or one conversation's) is BM25 in process over an inverted index of the scope's rows,
  cached per session and extended as rows are appended (:mod:`._bm25`, as Redis does), with the
  scope's own statistics: FTS5's ``bm25()`` weighs each word by reading its posting list across the
  whole file, every user's rows, which grows with the file, and lets one user's words move another's
  ranking. ``lexical_in_process=0`` keeps every search on FTS5. Needs PyStemmer (the ``lexical``
  extra); without it FTS5 serves every search.
* **Vectors** are float32 BLOBs searched exactly with numpy. The normalised matrix of a
  scope is cached in process; each session row carries ``vec_version`` (any vector
  change) and ``vec_epoch`` (a deletion or overwrite), so every process notices other
  processes' writes with one small query, and pure additions are loaded incrementally.
* **Deletion is real**: ``secure_delete`` zeroes freed pages; ``forget`` and ``delete`` merge
  the FTS5 segments (dropping deleted terms) and checkpoint the WAL into the file and truncate
  it, so the file holds no trace. A reader whose transaction began before the deletion pins
  the old pages: the checkpoint waits for it a bounded time, then ``forget`` reports the WAL
  and the file under ``"remaining"`` and every later write of this store object retries the
  checkpoint (without waiting) until one succeeds.
* **Counters**: each session row keeps its message, summary and vector counts and text and
  index bytes, updated in the transaction of every write (a trigger for deletes), so ``count``
  and ``stats`` read one row per session.
* **Schema migrations** are numbered; ``schema_version`` records the applied one.

URL forms (SQLAlchemy's convention): ``sqlite:///relative/path.db``,
``sqlite:////absolute/path.db``, ``sqlite:///:memory:``; query options
``synchronous``, ``busy_timeout`` (ms), ``vector_cache_mb``, ``fts_batch``, ``lexical_in_process``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import numpy as np

from .._fork import renew_in_child
from ..errors import StoreError
from . import _bm25 as B
from . import _common as C
from . import _forget as F
from . import _scope_blocks as SB
from . import _validate as V
from . import _vectors as Vec
from ._sql import Dialect, SqlStore, records_table
from .base import ANY, Appended, Filters, Hit, KeptHits, Scope, StoredMessage

SCHEMA_VERSION = 4


def _indexed(column: str) -> str:
    """What FTS5 indexes of a text column: its first INDEXED_CHARS characters.

    SQLite's string functions stop at a NUL, so a text whose NUL comes before that many
    characters (``length`` counts up to the NUL) is given to FTS5 whole, which reads past it.
    """
    n = V.INDEXED_CHARS
    return f"CASE WHEN length({column}) > {n} THEN substr({column}, 1, {n}) ELSE {column} END"


MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE sessions (
        sid INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL,
        user_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        fts_scope TEXT NOT NULL,
        next_position INTEGER NOT NULL DEFAULT 0,
        vec_model TEXT,
        vec_dim INTEGER,
        vec_version INTEGER NOT NULL DEFAULT 0,
        vec_epoch INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        UNIQUE (tenant, user_id, agent_id, session_id)
    );
    CREATE INDEX sessions_by_user ON sessions (tenant, user_id);
    CREATE INDEX sessions_by_session ON sessions (tenant, session_id);

    CREATE TABLE messages (
        rid INTEGER PRIMARY KEY AUTOINCREMENT,
        sid INTEGER NOT NULL,
        id TEXT NOT NULL,
        position INTEGER NOT NULL,
        role TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        data TEXT NOT NULL,
        created_at REAL NOT NULL,
        archived_at REAL NOT NULL,
        summary_id TEXT,
        metadata TEXT NOT NULL,
        UNIQUE (sid, position),
        UNIQUE (sid, id)
    );

    CREATE TABLE vectors (
        vid INTEGER PRIMARY KEY,
        rid INTEGER NOT NULL UNIQUE,
        sid INTEGER NOT NULL,
        vec BLOB NOT NULL
    );
    CREATE INDEX vectors_by_session ON vectors (sid, vid);

    CREATE VIRTUAL TABLE messages_fts USING fts5 (text, scope, content='', tokenize='porter unicode61');

    -- Messages up to last_rid are in messages_fts; later ones are indexed in batches.
    CREATE TABLE fts_state (last_rid INTEGER NOT NULL);
    INSERT INTO fts_state (last_rid) VALUES (0);
    CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, text, scope)
        SELECT 'delete', old.rid, old.text, (SELECT fts_scope FROM sessions WHERE sid = old.sid)
        WHERE old.rid <= (SELECT last_rid FROM fts_state);
        DELETE FROM vectors WHERE rid = old.rid;
    END;

    CREATE TABLE state (
        sid INTEGER NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (sid, key)
    );

    """
    + records_table("records", "REAL", "BLOB")
    + """
    """,
    # Lexical search indexes the first INDEXED_CHARS characters of a text, as on every backend:
    # re-index the longer texts already indexed, and delete with the same prefix.
    2: f"""
    INSERT INTO messages_fts (messages_fts, rowid, text, scope)
    SELECT 'delete', m.rid, m.text, s.fts_scope FROM messages m JOIN sessions s ON s.sid = m.sid
    WHERE length(m.text) > {V.INDEXED_CHARS} AND m.rid <= (SELECT last_rid FROM fts_state);
    INSERT INTO messages_fts (rowid, text, scope)
    SELECT m.rid, {_indexed("m.text")}, s.fts_scope FROM messages m JOIN sessions s ON s.sid = m.sid
    WHERE length(m.text) > {V.INDEXED_CHARS} AND m.rid <= (SELECT last_rid FROM fts_state);
    DROP TRIGGER messages_fts_delete;
    CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, text, scope)
        SELECT 'delete', old.rid, {_indexed("old.text")}, (SELECT fts_scope FROM sessions WHERE sid = old.sid)
        WHERE old.rid <= (SELECT last_rid FROM fts_state);
        DELETE FROM vectors WHERE rid = old.rid;
    END;
    """,
    # Per-session counters (and state versions, for compare-and-set), kept by every write in its own transaction, so that count and stats of a
    # conversation read one row (O(1)) instead of scanning it; each message keeps its own sizes so a
    # delete takes away exactly what its append added.
    3: f"""
    ALTER TABLE messages ADD COLUMN nbytes INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE messages ADD COLUMN ibytes INTEGER NOT NULL DEFAULT 0;
    UPDATE messages SET nbytes = length(CAST(text AS BLOB)) + length(CAST(data AS BLOB)),
        ibytes = CASE WHEN length(text) > {V.INDEXED_CHARS} THEN length(CAST(substr(text, 1, {V.INDEXED_CHARS}) AS BLOB))
                 ELSE length(CAST(text AS BLOB)) END;
    ALTER TABLE sessions ADD COLUMN message_count INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN summary_count INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN text_bytes INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN index_bytes INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN vector_count INTEGER NOT NULL DEFAULT 0;
    UPDATE sessions SET
        message_count = (SELECT count(*) FROM messages m WHERE m.sid = sessions.sid),
        summary_count = (SELECT count(*) FROM messages m WHERE m.sid = sessions.sid AND m.kind = 'summary'),
        text_bytes = (SELECT coalesce(sum(nbytes), 0) FROM messages m WHERE m.sid = sessions.sid),
        index_bytes = (SELECT coalesce(sum(ibytes), 0) FROM messages m WHERE m.sid = sessions.sid),
        vector_count = (SELECT count(*) FROM vectors v WHERE v.sid = sessions.sid);
    ALTER TABLE state ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
    DROP TRIGGER messages_fts_delete;
    CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, text, scope)
        SELECT 'delete', old.rid, {_indexed("old.text")}, (SELECT fts_scope FROM sessions WHERE sid = old.sid)
        WHERE old.rid <= (SELECT last_rid FROM fts_state);
        UPDATE sessions SET message_count = message_count - 1, summary_count = summary_count - (old.kind = 'summary'),
            text_bytes = text_bytes - old.nbytes, index_bytes = index_bytes - old.ibytes,
            vector_count = vector_count - EXISTS (SELECT 1 FROM vectors WHERE rid = old.rid)
        WHERE sid = old.sid;
        DELETE FROM vectors WHERE rid = old.rid;
    END;
    """,
    # each long-term record's version (1, 2, ...: one up a write), for the compare-and-set of a read-modify-write
    4: """
    ALTER TABLE records ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
    """,
}

_SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
_FTS_BATCH = 256  # index pending rows inside an append once this many are waiting
_MAX_TOKEN_SESSIONS = 64  # above this many sessions, scope by user/tenant token + SQL filter
_CHUNK = 500  # ids per IN (...) list
_SCRUB_TRIES, _SCRUB_WAIT_MS, _SCRUB_PAUSE = 4, 200, 0.05  # forget's checkpoint: at most ~1 s for readers
SQL = Dialect("?", chunk=_CHUNK, vector=np.ndarray.tobytes)
# a message's columns, then (in _select_messages) its key, position and owner: the order of _common.stored_message
_MSG_COLS = "m.id, m.role, m.text, m.data, m.kind, m.created_at, m.archived_at, m.summary_id, m.metadata"
# A small scope's kept block keeps its messages too (a search's hits carry them: no read after the search), those of
# at most this many bytes; with the columns a block reads, the others its messages need
_CARRY_BYTES = 64 * 1024
_KEPT_BODY = (f", CASE WHEN m.nbytes <= {_CARRY_BYTES} THEN m.text END, CASE WHEN m.nbytes <= {_CARRY_BYTES}"
              " THEN m.data END, m.archived_at, m.summary_id, m.metadata")
_ROW_OVERHEAD = 300  # bytes a kept message costs beyond its strings (its tuple and numbers)


def parse_url(url: str) -> tuple[str, dict[str, str]]:
    """``sqlite:///x.db?synchronous=FULL`` -> ("x.db", {"synchronous": "FULL"})."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        raise ValueError(f"not a sqlite URL: {url!r} (expected sqlite:///path/to/file.db)")
    path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    if parts.netloc:
        raise ValueError(f"sqlite URL {url!r} has a host; use sqlite:///relative.db or sqlite:////absolute.db")
    if not path:
        raise ValueError(f"sqlite URL {url!r} names no file; use sqlite:///:memory: for a throwaway store")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))  # "?synchronus" is a misspelt option too
    unknown = sorted(options.keys() - _URL_OPTIONS)
    if unknown:  # a misspelt option is refused, as the same misspelt keyword is
        raise ValueError(f"sqlite URL {url!r}: unknown option(s) {', '.join(unknown)}; the options are "
                         f"{', '.join(sorted(_URL_OPTIONS))}")
    return path, options


# the sessions' columns a keyword search reads, and those its in-process indexes need besides
_TEXT_SESSION_COLS = "sid, fts_scope, next_position, user_id, agent_id, session_id"
_INDEXED_SESSION_COLS = ", message_count, vec_epoch, created_at, tenant"
_MAX_BUSY_MS = 2**31 - 1  # sqlite3_busy_timeout takes a C int
_URL_OPTIONS = frozenset({"synchronous", "busy_timeout", "vector_cache_mb", "fts_batch", "lexical_in_process"})


def _token(prefix: str, *parts: str) -> str:
    """A scope token FTS5 keeps whole: a letter and digits (porter leaves digits alone)."""
    h = hashlib.blake2b("\x1f".join(parts).encode("utf-8"), digest_size=8).digest()
    return f"{prefix}{int.from_bytes(h, 'big')}"


def _fts_query(terms: Sequence[str]) -> str | None:
    """OR of the terms, each quoted as an FTS5 string (a term like REF-48213 becomes a phrase)."""
    quoted = ['"' + t.replace('"', '""') + '"' for t in terms]
    return " OR ".join(quoted) if quoted else None


class SQLiteStore(SqlStore):
    """:class:`~fullrecall.stores.base.Store` on one SQLite file (see the module docstring)."""

    sql = SQL

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float = 30_000,
        vector_cache_mb: float = 1024,
        fts_batch: int = _FTS_BATCH,
        lexical_in_process: int = B.IN_PROCESS_ROWS,
        url: str | None = None,
    ) -> None:
        path = os.fspath(path)
        opts: dict[str, str] = {}
        if path[:7].lower() == "sqlite:":  # a scheme takes any case
            path, opts = parse_url(path)
            synchronous = opts.get("synchronous", synchronous)
        number = C.number_option
        busy_timeout = number("busy_timeout", opts.get("busy_timeout", busy_timeout), whole=False, least=0,
                              most=_MAX_BUSY_MS)
        vector_cache_mb = number("vector_cache_mb", opts.get("vector_cache_mb", vector_cache_mb), whole=False, least=0)
        fts_batch = number("fts_batch", opts.get("fts_batch", fts_batch), whole=True, least=1)
        lexical_in_process = number("lexical_in_process", opts.get("lexical_in_process", lexical_in_process),
                                    whole=True, least=0)
        synchronous = str(synchronous).upper()
        if synchronous not in _SYNC_MODES:
            raise ValueError(f"synchronous must be one of {_SYNC_MODES}, got {synchronous!r}")
        self.path = path
        self.url = url or ("sqlite:///" + path)
        self._synchronous = synchronous
        self._busy_ms = int(busy_timeout)
        self._cache_budget = int(vector_cache_mb * 2**20)
        self._fts_batch = fts_batch
        self._forgets = 0  # forgets and deletes so far: a block read before one is not cached (see warm)
        self._tokenize = B.Tokenizer()
        self._in_process_rows = int(lexical_in_process)
        self._in_process()
        self._conn_obj: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._closed = False
        self._scrub_pending = False  # deleted page images may still be in the WAL
        self._text_conn: tuple[int, sqlite3.Connection] | None = None  # (pid, the keyword search's reader)
        self._locks()
        self._connect()
        renew_in_child(self)

    def _locks(self) -> None:
        self._lock = threading.RLock()
        self._text_lock = threading.Lock()
        # One bulk read of rows at a time (a scope's vectors, a session's words for its keyword index): two
        # side by side, on two connections, hand the GIL back and forth on every row. A user's first question
        # loads both at once; taking turns made it 85 -> 61 ms (2,000 messages, 2 cores).
        self._bulk = threading.Lock()

    def _in_process(self) -> None:
        """What searches keep in process, made anew (at start, and in a forked child: see ``_fork``)."""
        self._cache: OrderedDict[tuple[int, ...], _Kept] = OrderedDict()  # sessions' sids -> their kept block
        # scope -> (the database's state when its block was last checked, the block's cache key): see _stamp
        self._checked: dict[Scope, tuple[tuple[int, int, int], tuple[int, ...]]] = {}
        self._df: dict[str, tuple[int, int]] = {}  # word -> (rows when counted, rows matching it)
        # None: FTS5 only (without a stemmer, in-process matching would be worse than FTS5's porter)
        self._lexicons = B.SessionIndexes(self._tokenize) if self._tokenize.stems and self._in_process_rows > 0 \
            else None

    def _after_fork(self) -> None:
        """A forked child opens its own connections (see ``_conn``) and starts with new locks and no cache."""
        self._locks()
        self._in_process()

    # -- connection & transactions ---------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            parent = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(parent):
                raise StoreError(f"cannot open SQLite store {self.path!r}: directory {parent!r} does not exist")
        try:
            conn = sqlite3.connect(
                self.path, timeout=self._busy_ms / 1000, isolation_level=None, check_same_thread=False
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            if self.path != ":memory:":
                self._enter_wal(conn)
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("PRAGMA secure_delete = ON")  # deleted text is overwritten, not left in free pages
            # Checkpoint every ~16 MiB of WAL instead of 4: fewer, larger checkpoints (+40% appends/s).
            conn.execute("PRAGMA wal_autocheckpoint = 4000")
            self._conn_obj, self._pid = conn, os.getpid()
            self._migrate(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite store {self.path!r}: {exc}") from exc
        return conn

    def _enter_wal(self, conn: sqlite3.Connection) -> None:
        """Switch to WAL, waiting out other processes opening the same new file.

        SQLite answers "database is locked" at once, without its busy handler, when
        another connection holds the file while it switches journal mode or recovers
        a WAL; so wait here, within the same busy timeout.
        """
        deadline = time.monotonic() + self._busy_ms / 1000
        delay = 0.001
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.05)

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"store {self.url} is closed")
        if self._conn_obj is not None and self._pid != os.getpid() and self.path == ":memory:":
            raise StoreError(f"store {self.url} lives in the memory of process {self._pid}, which forked this one: "
                             "what this process wrote would go to an empty store of its own and be lost with it; "
                             "share a file (sqlite:///path.db) or a server store between processes")
        if self._conn_obj is None or self._pid != os.getpid():
            # After a fork the inherited connection belongs to the parent: open our own
            # (never close the inherited one here, that would drop the parent's locks). Stamps (see _stamp)
            # are one connection's: none taken on the other is compared with the new one's.
            self._cache.clear()
            self._checked.clear()
            return self._connect()
        return self._conn_obj

    def _migrate(self, conn: sqlite3.Connection) -> None:
        with self._tx(conn, immediate=True):
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
            current = row[0] or 0
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path!r} has schema version {current}, newer than this fullrecall"
                    f" ({SCHEMA_VERSION}); upgrade fullrecall"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for stmt in _split_sql(MIGRATIONS[version]):
                    conn.execute(stmt)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))

    @contextlib.contextmanager
    def _tx(self, conn: sqlite3.Connection, immediate: bool) -> Iterator[sqlite3.Connection]:
        conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        try:
            yield conn
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One logical write = one transaction, holding the write lock from the start."""
        with self._lock:
            try:
                with self._tx(self._conn(), immediate=True) as conn:
                    yield conn
            except sqlite3.IntegrityError as exc:
                raise ValueError(f"write refused by a constraint: {exc}") from exc
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite write to {self.path!r} failed, nothing was written: {exc}") from exc
            except UnicodeEncodeError as exc:  # a lone surrogate in an argument the rule does not check
                raise V.not_unicode(exc) from exc
            if self._scrub_pending:  # a reader kept deleted pages in the WAL: try again, without waiting
                self._checkpoint(tries=1, wait_ms=0)

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for reads that take several statements."""
        with self._lock, self._snapshot(self._conn()) as conn:
            yield conn

    @contextlib.contextmanager
    def _snapshot(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """A read transaction on ``conn``, its errors as fullrecall's."""
        try:
            with self._tx(conn, immediate=False) as conn:
                yield conn
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite read from {self.path!r} failed: {exc}") from exc
        except UnicodeEncodeError as exc:
            raise V.not_unicode(exc) from exc

    @contextlib.contextmanager
    def _text_read(self) -> Iterator[sqlite3.Connection]:
        """A snapshot for the keyword search: on a read-only connection of its own (a file), so that it does not
        hold the lock the vector search (which a search runs at the same time, see ``SemanticSearch.search``)
        needs for its version check; in memory, the one connection.
        """
        if self.path == ":memory:":
            with self._read() as conn:
                yield conn
            return
        with self._text_lock:
            if self._text_conn is None or self._text_conn[0] != os.getpid():
                with self._lock:
                    self._conn()  # open (and migrated), or StoreError when closed
                    conn = sqlite3.connect(self.path, timeout=self._busy_ms / 1000, isolation_level=None,
                                           check_same_thread=False)
                conn.row_factory = sqlite3.Row
                conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
                conn.execute("PRAGMA query_only = ON")
                self._text_conn = (os.getpid(), conn)
            elif self._closed:
                raise StoreError(f"store {self.url} is closed")
            with self._snapshot(self._text_conn[1]) as conn:
                yield conn

    def close(self) -> None:
        with self._text_lock:
            if self._text_conn is not None and self._text_conn[0] == os.getpid():
                self._text_conn[1].close()
            self._text_conn = None
        with self._lock:
            if self._conn_obj is not None and self._pid == os.getpid():
                if self._scrub_pending and not self._closed:
                    self._checkpoint(tries=1, wait_ms=0)
                self._conn_obj.close()
            self._conn_obj = None
            self._forgets += 1  # a warm under way caches nothing in a closed store
            self._cache.clear()
            if self._lexicons is not None:
                self._lexicons.clear()
            self._closed = True

    def __repr__(self) -> str:
        return f"SQLiteStore({self.url!r})"

    # -- scopes ----------------------------------------------------------------

    def _sids(self, conn: sqlite3.Connection, scope: Scope) -> list[int]:
        where, params = SQL.scope_where(scope)
        return [r[0] for r in conn.execute(f"SELECT sid FROM sessions s WHERE {where} ORDER BY sid", params)]

    @staticmethod
    def _session_row(conn: sqlite3.Connection, scope: Scope) -> sqlite3.Row:
        """The session's row, created on first write (call inside a write transaction)."""
        scope.require_session()
        key = (scope.tenant, *scope.owner())
        find = "SELECT * FROM sessions WHERE tenant = ? AND user_id = ? AND agent_id = ? AND session_id = ?"
        row = conn.execute(find, key).fetchone()
        if row is None:
            fts_scope = " ".join((_token("s", *key), _token("u", scope.tenant, key[1]), _token("t", scope.tenant)))
            conn.execute(
                "INSERT INTO sessions (tenant, user_id, agent_id, session_id, fts_scope, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (*key, fts_scope, time.time()),
            )
            row = conn.execute(find, key).fetchone()
        return row

    # -- archived messages -------------------------------------------------------

    def _append(self, scope: Scope, messages: list[StoredMessage]) -> Appended:
        with self._write() as conn:
            return self._insert(conn, scope, messages)

    def _replace(self, scope: Scope, ids: list[str], messages: list[StoredMessage]) -> Appended:
        with self._write() as conn:  # one transaction: the deletion and the append land together or not at all
            deleted, sids = self._remove(conn, scope, ids)
            positions = self._insert(conn, scope, messages) if messages else Appended()
        if deleted:
            self._after_delete(sids)
        return positions

    def _insert(self, conn: sqlite3.Connection, scope: Scope, messages: list[StoredMessage]) -> Appended:
        """Append ``messages`` to the session of ``scope`` in the write transaction ``conn``; their positions."""
        sess = self._session_row(conn, scope)
        sid, next_pos = sess["sid"], sess["next_position"]
        known: dict[str, int] = {}
        ids = list(dict.fromkeys(m.id for m in messages))
        for cond, p in SQL.in_chunks("id", ids):
            known.update(
                conn.execute(f"SELECT id, position FROM messages WHERE sid = ? AND {cond}", (sid, *p)).fetchall()
            )
        positions, new, next_pos = C.assign_positions(messages, known, next_pos)
        new_rows = [
            (
                sid,
                r["id"],
                pos,
                r["role"],
                r["kind"],
                r["text"],
                r["data"],
                r["created_at"],
                r["archived_at"],
                r["summary_id"],
                r["metadata"],
                r["nbytes"],
                r["ibytes"],
            )
            for r, pos in ((C.message_row(m), pos) for m, pos in new)
        ]
        try:
            conn.executemany(
                "INSERT INTO messages (sid, id, position, role, kind, text, data, created_at, archived_at,"
                " summary_id, metadata, nbytes, ibytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                new_rows,
            )
        except sqlite3.IntegrityError as exc:
            raise C.position_taken(scope) from exc
        conn.execute(
            "UPDATE sessions SET next_position = ?, message_count = message_count + ?,"
            " summary_count = summary_count + ?, text_bytes = text_bytes + ?, index_bytes = index_bytes + ?"
            " WHERE sid = ?",
            (next_pos, len(new_rows), sum(r[4] == "summary" for r in new_rows), sum(r[11] for r in new_rows),
             sum(r[12] for r in new_rows), sid),
        )
        if new_rows:
            _index_pending(conn, min_pending=self._fts_batch)
        return positions

    def _select_messages(
        self, conn: sqlite3.Connection, where: str, params: Sequence[Any], ordered: bool = True, by_key: bool = False
    ) -> list[StoredMessage]:
        # By key, `+m.sid` keeps the planner from joining through the session's index (a scan of the whole
        # conversation): each key is one rowid lookup, then its session is checked against the scope.
        join = "s.sid = +m.sid" if by_key else "s.sid = m.sid"
        order = " ORDER BY m.sid, m.position" if ordered else ""
        sql = (
            f"SELECT {_MSG_COLS}, m.rid, m.position, s.session_id, s.user_id, s.agent_id"
            f" FROM messages m JOIN sessions s ON {join} WHERE {where}{order}"
        )
        read = conn.cursor()
        read.row_factory = None  # plain tuples, in stored_message's order
        return [C.stored_message(*r) for r in read.execute(sql, params)]

    def get_keys(self, scope: Scope, keys: Iterable[str]) -> list[StoredMessage]:
        rids = C.int_keys(keys)
        where, params = SQL.scope_where(scope)
        out: list[StoredMessage] = []
        with self._read() as conn:
            for cond, p in SQL.in_chunks("m.rid", rids):
                out += self._select_messages(conn, f"{where} AND {cond}", [*params, *p], ordered=False, by_key=True)
        return C.in_conversation_order(out)

    def delete(self, scope: Scope, ids: Iterable[str]) -> int:
        ids = C.read_ids(ids)
        with self._write() as conn:
            deleted, sids = self._remove(conn, scope, ids)
        if deleted:
            self._after_delete(sids)
        return deleted

    def _remove(self, conn: sqlite3.Connection, scope: Scope, ids: list[str]) -> tuple[int, list[int]]:
        """Delete the messages ``ids`` of ``scope`` in the write transaction ``conn``; how many went, and the scope's
        sessions (by sid).
        """
        where, params = SQL.scope_where(scope)
        deleted = 0
        sids = self._sids(conn, scope)
        for cond, p in SQL.in_chunks("id", ids):
            deleted += conn.execute(
                f"DELETE FROM messages WHERE {cond} AND sid IN (SELECT sid FROM sessions s WHERE {where})",
                [*p, *params],
            ).rowcount
        if deleted:
            self._bump_vectors(conn, sids, epoch=True)
            _merge_fts(conn)
        return deleted, sids

    def _after_delete(self, sids: Sequence[int]) -> None:
        """Once a deletion is committed: statistics read again, the sessions' kept blocks (with the messages they
        keep) dropped, the file scrubbed (a reader in the way: later writes retry).
        """
        with self._lock:
            self._df.clear()
            self._forgets += 1  # a warm that read the deleted messages keeps nothing
            self._drop_kept(sids)
            self._checkpoint(tries=1, wait_ms=0)

    def _after_record_delete(self) -> None:
        """The file scrubbed, as after a message's deletion: the WAL and the file's old page images still held the
        deleted fact's, pattern's or summary's words until some later checkpoint (a reader in the way: later
        writes retry).
        """
        with self._lock:
            self._checkpoint(tries=1, wait_ms=0)

    def _drop_kept(self, sids: Iterable[int]) -> None:
        """Forget the kept blocks of any of these sessions (under ``_lock``)."""
        gone = set(sids)
        for key in [k for k in self._cache if gone.intersection(k)]:
            del self._cache[key]

    # -- vectors -------------------------------------------------------------------

    @staticmethod
    def _bump_vectors(conn: sqlite3.Connection, sids: Sequence[int], epoch: bool) -> None:
        extra = ", vec_epoch = vec_epoch + 1" if epoch else ""
        for cond, p in SQL.in_chunks("sid", list(sids)):
            conn.execute(f"UPDATE sessions SET vec_version = vec_version + 1{extra} WHERE {cond}", p)

    def _set_vectors(self, scope: Scope, ids: list[str], mat: np.ndarray, model: str) -> None:
        dim = int(mat.shape[1])
        with self._write() as conn:
            sess, rids = self._vector_targets(conn, scope, ids, model, dim)
            if not rids:
                return
            overwrote = sum(
                conn.execute(f"DELETE FROM vectors WHERE {cond}", p).rowcount
                for cond, p in SQL.in_chunks("rid", list(rids.values()))
            )
            last = {i: n for n, i in enumerate(ids) if i in rids}  # an id given twice: its last vector, as an overwrite
            conn.executemany(
                "INSERT INTO vectors (rid, sid, vec) VALUES (?, ?, ?)",
                [(rids[i], sess["sid"], mat[n].tobytes()) for i, n in last.items()],
            )
            conn.execute(
                "UPDATE sessions SET vec_model = ?, vec_dim = ?, vector_count = vector_count + ? WHERE sid = ?",
                (model, dim, len(last) - overwrote, sess["sid"]),
            )
            self._bump_vectors(conn, [sess["sid"]], epoch=overwrote > 0 or len(set(ids)) < len(ids))

    def get_vectors(self, scope: Scope, ids: Sequence[str]) -> dict[str, np.ndarray]:
        ids = C.read_ids(ids)
        where, params = SQL.scope_where(scope)
        out: dict[str, np.ndarray] = {}
        with self._read() as conn:
            for cond, p in SQL.in_chunks("m.id", ids):
                for r in conn.execute(
                    "SELECT m.id, v.vec FROM vectors v JOIN messages m ON m.rid = v.rid"
                    f" JOIN sessions s ON s.sid = m.sid WHERE {where} AND {cond}",
                    [*params, *p],
                ):
                    out[r[0]] = np.frombuffer(r[1], dtype=np.float32).copy()
        return out

    def _vector_block(self, conn: sqlite3.Connection, sids: list[int]) -> _Kept | None:
        """The scope's normalised vectors (and a small scope's messages), from the cache when no process changed them."""
        described = self._block_versions(conn, sids)
        if described is None:
            return None
        versions, owners, dim, messages = described
        key = tuple(sids)
        cached = self._cache.get(key)
        if cached is not None:
            if cached.versions == versions:
                self._cache.move_to_end(key)
                return cached
            same_epochs = cached.versions.keys() == versions.keys() and all(
                cached.versions[s][1] == versions[s][1] for s in versions
            )
            if same_epochs and cached.block.matrix.shape[1] == dim:  # only additions since: load the new rows
                new = self._load_vectors(conn, owners, dim, versions, after=cached.max_vid,
                                         carry=cached.rows is not None)
                kept = cached.extended(new, self._in_process_rows)
                self._remember(key, kept)
                return kept
        kept = self._load_vectors(conn, owners, dim, versions, after=0, carry=messages <= self._in_process_rows)
        self._remember(key, kept)
        return kept

    def _block_versions(
        self, conn: sqlite3.Connection, sids: list[int]
    ) -> tuple[dict[int, tuple[int, Any]], dict[int, Vec.Owner], int, int] | None:
        """What a block of the sessions ``sids`` is checked against (sid -> (vector version, (epoch, identity))),
        their owners, the vectors' dimension and the sessions' messages; None when they hold no vectors.
        """
        # A session's sid is reused once forget deletes the newest session, and the new session's
        # counters start again from 0: its identity (owner, name, creation time) is part of the
        # version, so a block cached for a forgotten session never answers for its successor.
        state = {
            r[0]: (r[1], (r[2], tuple(r[5:])), r[3], r[4])
            for cond, p in SQL.in_chunks("sid", sids)
            for r in conn.execute(
                "SELECT sid, vec_version, vec_epoch, vec_dim, message_count, created_at, tenant, user_id, agent_id,"
                f" session_id FROM sessions WHERE {cond} AND vec_dim IS NOT NULL",
                p,
            )
        }
        if not state:
            return None
        dims = {d for _, _, d, _ in state.values()}
        if len(dims) > 1:
            raise ValueError(f"this scope mixes vectors of dimensions {sorted(dims)}; search one session at a time")
        owners = {sid: identity[2:] for sid, (_, (_, identity), _, _) in state.items()}  # (user, agent, session)
        versions = {sid: (v, e) for sid, (v, e, _, _) in state.items()}  # e: (epoch, identity)
        return versions, owners, dims.pop(), sum(n for _, _, _, n in state.values())

    def _load_vectors(
        self, conn: sqlite3.Connection, owners: dict[int, Vec.Owner], dim: int, versions: dict[int, tuple[int, Any]],
        after: int, carry: bool,
    ) -> _Kept:
        """The vectors of the sessions ``owners`` names (sid -> owner) stored after vector id ``after``, with their
        messages if ``carry`` (those over ``_CARRY_BYTES`` left out), as kept for the sessions' ``versions``.
        """
        found: list[tuple[Any, ...]] = []
        body = _KEPT_BODY if carry else ""
        for cond, p in SQL.in_chunks("v.sid", list(owners)):
            read = conn.cursor()
            read.row_factory = None  # plain tuples: a cold load reads every vector of the scope
            with self._bulk:
                found += read.execute(
                    f"SELECT v.vid, m.id, m.rid, v.vec, m.role, m.kind, m.created_at, m.sid, m.position{body}"
                    f" FROM vectors v JOIN messages m ON m.rid = v.rid WHERE {cond} AND v.vid > ?",
                    (*p, after),
                ).fetchall()
        rows: dict[str, tuple[Any, ...]] | None = {} if carry else None
        if not found:
            return _Kept(versions, after, Vec.VectorBlock.build([], dim), rows)
        # as columns: no tuple a row is made again (a cold load reads thousands)
        vids, ids, rids, vecs, roles, kinds, created, sids, positions, *more = zip(*found)
        keys = list(map(str, rids))
        block = Vec.VectorBlock.of_columns(ids, keys, vecs, roles, kinds, created,
                                           list(map(owners.__getitem__, sids)), positions, dim)
        if rows is not None:  # stored_message's columns, in its order; a message too large to keep has no text here
            texts, data, archived, summaries, metadata = more
            rows.update((k, row) for k, row in zip(keys, zip(ids, roles, texts, data, kinds, created, archived,
                                                             summaries, metadata)) if row[2] is not None)
        return _Kept(versions, max(vids), block, rows, SB.strings_nbytes(rows.values(), _ROW_OVERHEAD) if rows else 0)

    def _remember(self, key: tuple[int, ...], kept: _Kept) -> None:
        self._cache[key] = kept
        self._cache.move_to_end(key)
        total = sum(b.nbytes for b in self._cache.values())
        while total > self._cache_budget and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            total -= old.nbytes

    # -- search ----------------------------------------------------------------------

    def search_vectors(
        self, scope: Scope, vector: np.ndarray, k: int, filters: Filters | None = None
    ) -> list[Hit]:
        C.check_search("search_vectors", k, filters)  # before the block is read
        return self.prepare_vector_search(scope, filters)(vector, k)

    def prepare_vector_search(
        self, scope: Scope, filters: Filters | None = None
    ) -> Callable[[np.ndarray, int], list[Hit]]:
        """The scope's block brought up to date now (see :meth:`~.base.Store.prepare_vector_search`), searched when
        the vector comes.
        """
        kept = self._scope_block(scope)

        def search(vector: np.ndarray, k: int) -> list[Hit]:
            k = C.check_search("search_vectors", k, filters)
            query = Vec.as_query(vector)
            if kept is None:
                return []
            hits = kept.block.search(query, k, filters)
            return _carried(hits, kept.rows) if kept.rows else hits
        return search

    def _scope_block(self, scope: Scope) -> _Kept | None:
        """``scope``'s vector block as stored now: the cached one, brought up to date if a process wrote since."""
        with self._lock:
            conn = self._conn()
            stamp = self._stamp(conn)
            checked = self._checked.get(scope)
            cached = self._cache.get(checked[1]) if checked is not None and checked[0] == stamp else None
            if cached is not None:  # nothing written anywhere since this scope's block was checked
                self._cache.move_to_end(checked[1])  # type: ignore[index]
                kept: _Kept | None = cached
            else:
                with self._snapshot(conn):
                    sids = self._sids(conn, scope)
                    kept = self._vector_block(conn, sids)
                if len(self._checked) >= 4096:
                    self._checked.clear()
                self._checked[scope] = (stamp, tuple(sids))
        return kept

    def warm(self, scope: Scope, *, kept_only: bool = False) -> None:
        """Read ``scope``'s vector block and its sessions' word indexes into this process, or bring the kept ones
        up to date (see :meth:`~.base.Store.warm`; ``kept_only``: those alone). A block is read whole on the
        keyword search's connection, so that writers and searches of other scopes do not wait for it, and is not
        cached when a forget or a delete ran meanwhile. An in-memory store has nothing to read ahead.
        """
        if self.path == ":memory:":
            return
        with self._lock:
            forgets = self._forgets
        with self._text_read() as conn:
            sids = self._sids(conn, scope)
            with self._lock:
                cached = bool(sids) and tuple(sids) in self._cache
            if cached:  # brought up to date as a search would: the rows added since, read under the lock
                if (kept := self._scope_block(scope)) is not None:
                    kept.block.make_copy()
            elif not kept_only and (described := self._block_versions(conn, sids) if sids else None) is not None:
                versions, owners, dim, messages = described  # read whole without the lock, which writers take
                kept = self._load_vectors(conn, owners, dim, versions, after=0, carry=messages <= self._in_process_rows)
                kept.block.make_copy()
                with self._lock:
                    if self._forgets == forgets and tuple(sids) not in self._cache:
                        self._remember(tuple(sids), kept)
            if self._lexicons is not None:
                where, params = SQL.search_where(scope)
                sessions = conn.execute(
                    f"SELECT {_TEXT_SESSION_COLS}{_INDEXED_SESSION_COLS} FROM sessions s WHERE {where}", params
                ).fetchall()
                if sessions and self._indexed_in_process(sessions):
                    self._word_indexes(conn, [r for r in sessions if not kept_only or self._lexicons.holds(r["sid"])])

    def _stamp(self, conn: sqlite3.Connection) -> tuple[int, int, int]:
        """The database's state as this connection sees it: the same stamp twice means no connection, of this
        process or another, committed a change in between (SQLite's ``data_version`` counts the others'
        commits, ``total_changes`` this connection's own rows). Read outside a transaction, before the
        snapshot it vouches for: a commit in between only makes the next check look again.
        """
        try:
            version = conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite read from {self.path!r} failed: {exc}") from exc
        return id(conn), int(version), conn.total_changes

    def search_text(
        self, scope: Scope, terms: Sequence[str], k: int, filters: Filters | None = None
    ) -> list[Hit]:
        k = C.check_search("search_text", k, filters)
        words = C.split_terms(terms)
        if not words or k == 0:
            return []
        where, params = SQL.search_where(scope)
        columns = _TEXT_SESSION_COLS + (_INDEXED_SESSION_COLS if self._lexicons is not None else "")
        with self._text_read() as conn:  # one snapshot, unless messages wait for FTS: index them first
            sessions = conn.execute(f"SELECT {columns} FROM sessions s WHERE {where}", params).fetchall()
            if not sessions:
                return []
            hits = self._search_in_process(conn, sessions, words, k, filters) \
                if self._indexed_in_process(sessions) else None
            if hits is None and not _pending(conn):
                return self._search_text(conn, scope, sessions, words, k, filters)
        if hits is not None:
            return self._carrying(scope, hits)
        with self._write() as conn:
            _index_pending(conn, min_pending=1)
        with self._text_read() as conn:
            sessions = conn.execute(f"SELECT {columns} FROM sessions s WHERE {where}", params).fetchall()
            return self._search_text(conn, scope, sessions, words, k, filters) if sessions else []

    def _carrying(self, scope: Scope, hits: list[Hit]) -> list[Hit]:
        """An in-process keyword search's hits, with the messages the scope's block keeps (see ``_Kept``): the block
        last checked by a search of the scope (its kept messages stay true), or on the scope's first search
        brought in as the vector search would.
        """
        if not hits:
            return hits
        checked = self._checked.get(scope)
        kept = self._cache.get(checked[1]) if checked is not None else self._scope_block(scope)
        return _carried(hits, kept.rows) if kept is not None and kept.rows else hits

    def _indexed_in_process(self, sessions: Sequence[sqlite3.Row]) -> bool:
        """Whether the keyword search of these sessions runs in process (the scope is small enough)."""
        return self._lexicons is not None and sum(r["message_count"] for r in sessions) <= self._in_process_rows

    def _search_in_process(
        self, conn: sqlite3.Connection, sessions: Sequence[sqlite3.Row], words: Sequence[str], k: int,
        filters: Filters | None,
    ) -> list[Hit]:
        """BM25 over the scope's own messages, with the scope's own statistics (see :mod:`._bm25`)."""
        assert self._lexicons is not None
        phrases = [self._lexicons.tokenize(w) for w in words]
        return B.bm25_search(self._word_indexes(conn, sessions), phrases, k, filters)

    def _word_indexes(self, conn: sqlite3.Connection, sessions: Sequence[sqlite3.Row]) -> list[B.LexicalIndex]:
        """Each session's keyword index, as kept (extended by the rows appended since) or built."""
        lexicons = self._lexicons
        assert lexicons is not None

        def reader(sid: int) -> Any:
            def read(after: int) -> list[tuple[str, str, str, str, float, str, int]]:
                cursor = conn.cursor()
                cursor.row_factory = None  # plain tuples, in the shape the index reads (the key as text)
                with self._bulk:
                    return cursor.execute(
                        f"SELECT id, CAST(rid AS TEXT), role, kind, created_at, {_indexed('text')}, position"
                        " FROM messages WHERE sid = ? AND position >= ? ORDER BY position",
                        (sid, after),
                    ).fetchall()
            return read

        return [
            lexicons.index(
                r["sid"], (r["vec_epoch"], r["created_at"], r["tenant"], r["user_id"], r["agent_id"], r["session_id"]),
                r["next_position"], r["message_count"], (r["user_id"], r["agent_id"], r["session_id"]), reader(r["sid"]),
            )
            for r in sessions
        ]

    def _search_text(
        self, conn: sqlite3.Connection, scope: Scope, sessions: Sequence[sqlite3.Row], words: Sequence[str], k: int,
        filters: Filters | None,
    ) -> list[Hit]:
        where, params = SQL.search_where(scope)
        in_scope = f"m.sid IN (SELECT sid FROM sessions s WHERE {where})"
        conds, fparams = SQL.filters(filters)
        text_query = _fts_query(self._weighable(conn, words))
        owners = C.session_owners(sessions)
        # Scope tokens narrow FTS5's work when the scope is a small part of the file, and
        # cost an intersection with a huge posting list when it is most of it.
        share = sum(r["next_position"] for r in sessions) / max(1, _top_rid(conn))
        if filters is None and share >= 0.5:
            limit: int | None = int(2 * k / share) + 10  # over-fetch, then keep the scope's rows
            rows = self._fts(conn, f"text : ({text_query})", limit, in_scope, params, owners)
            if len(rows) >= k:
                return rows[:k]
        if len(sessions) <= _MAX_TOKEN_SESSIONS:
            token, exact = " OR ".join(r["fts_scope"].split()[0] for r in sessions), True
        else:  # many sessions: one user's or the tenant's token, sessions checked in SQL
            token = sessions[0]["fts_scope"].split()[1 if scope.user_id is not ANY else 2]
            exact = scope.agent_id is ANY and scope.session_id is None
        match = f"scope : ({token}) AND text : ({text_query})"
        # Without filters the scope token selects exactly the scope: FTS5 can stop at k.
        limit = k if filters is None and exact else None
        return self._fts(conn, match, limit, in_scope + conds, [*params, *fparams], owners, k)

    def _weighable(self, conn: sqlite3.Connection, words: Sequence[str]) -> Sequence[str]:
        """The words BM25 can weigh: FTS5 gives a word found in half the rows or more an IDF of
        1e-6, so such a word (a speaker's name in every message) changes no ranking, yet makes
        bm25() read the size of every row it matches. Dropping it keeps the ranking and the time
        small; if every word is that common, all stay. A count is kept until the file has grown by
        1% (at least 64 rows) since it was taken, and dropped by any delete: counting a common word
        reads its whole posting list (about 2 ms at 200,000 messages), which a search right after each
        write would otherwise pay for every word, while a word's share of the rows hardly moves.
        """
        rows = _top_rid(conn)
        if rows < 64:
            return words
        kept = []
        for word in words:
            cached = self._df.get(word)
            if cached is None or not cached[0] <= rows <= cached[0] + max(64, cached[0] // 100):
                df = conn.execute(
                    "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", [f"text : ({_fts_query([word])})"]
                ).fetchone()[0]
                cached = self._df[word] = (rows, df)
                if len(self._df) > 4096:
                    self._df.clear()
            if 2 * cached[1] < rows:
                kept.append(word)
        return kept or words

    @staticmethod
    def _fts(
        conn: sqlite3.Connection,
        match: str,
        limit: int | None,
        where: str,
        params: Sequence[Any],
        owners: dict[int, Vec.Owner],
        k: int | None = None,
    ) -> list[Hit]:
        """Best FTS5 matches (``limit`` of them before ``where`` applies, all if None), best first;
        ``owners`` (sid -> owner) places each hit.
        """
        inner = "SELECT rowid, bm25(messages_fts, 1.0, 0.0) AS score FROM messages_fts WHERE messages_fts MATCH ?"
        sql = (
            f"SELECT m.id, f.score, m.rid, m.sid, m.position FROM ({inner} ORDER BY score{' LIMIT ?' if limit else ''}) f"
            f" JOIN messages m ON m.rid = f.rowid WHERE {where} ORDER BY f.score, m.rid{' LIMIT ?' if k else ''}"
        )
        args = [match, *([limit] if limit else []), *params, *([k] if k else [])]
        try:
            rows = conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:  # should not happen: every term is quoted
            raise ValueError(f"search_text could not run FTS5 query {match!r}: {exc}") from exc
        return [Hit(r[0], -float(r[1]), str(r[2]), owners[r[3]], r[4]) for r in rows]

    # -- housekeeping -------------------------------------------------------------------

    def forget(self, scope: Scope) -> dict[str, Any]:
        self._outside_batch("forget")
        where, params = SQL.scope_where(scope)
        rwhere, rparams = SQL.record_where(scope, exact=True)
        counts: dict[str, int] = {}
        with self._write() as conn:
            sids = self._sids(conn, scope)
            sub = f"SELECT sid FROM sessions s WHERE {where}"
            for kind, label in (("message", "messages"), ("summary", "summaries")):
                counts[label] = conn.execute(
                    f"SELECT count(*) FROM messages WHERE kind = ? AND sid IN ({sub})", [kind, *params]
                ).fetchone()[0]
            counts["vectors"] = conn.execute(f"SELECT count(*) FROM vectors WHERE sid IN ({sub})", params).fetchone()[0]
            logs = f"{sub} AND substr(s.session_id, 1, {len(F.LOG_PREFIX)}) = ?"
            log_messages = conn.execute(f"SELECT count(*) FROM messages WHERE sid IN ({logs})",
                                        [*params, F.LOG_PREFIX]).fetchone()[0]
            log_sessions = conn.execute(f"SELECT count(*) FROM ({logs})", [*params, F.LOG_PREFIX]).fetchone()[0]
            namespaces = dict(conn.execute(
                f"SELECT r.namespace, count(*) FROM records r WHERE {rwhere} GROUP BY r.namespace", rparams).fetchall())
            conn.execute(f"DELETE FROM messages WHERE sid IN ({sub})", params)  # triggers drop FTS rows and vectors
            conn.execute(f"DELETE FROM vectors WHERE sid IN ({sub})", params)
            counts["state"] = conn.execute(f"DELETE FROM state WHERE sid IN ({sub})", params).rowcount
            counts["records"] = conn.execute(
                f"DELETE FROM records WHERE rowid IN (SELECT rowid FROM records r WHERE {rwhere})", rparams
            ).rowcount
            counts["sessions"] = conn.execute(f"DELETE FROM sessions WHERE sid IN ({sub})", params).rowcount
            if counts["messages"] or counts["summaries"]:
                _merge_fts(conn)
        with self._lock:
            self._forgets += 1
            self._drop_kept(sids)
            if self._lexicons is not None:
                self._lexicons.drop(sids)
            self._df.clear()
            clean = self._checkpoint(tries=_SCRUB_TRIES, wait_ms=_SCRUB_WAIT_MS)
        return F.result(counts, [] if clean else [self._wal_remaining()], namespaces=namespaces,
                        log_messages=log_messages, log_sessions=log_sessions)

    def _checkpoint(self, tries: int, wait_ms: int) -> bool:
        """Copy the WAL into the file and truncate it, so no old page image is left; False while
        another connection's read transaction pins them (waits at most ``tries * wait_ms``).
        """
        if self.path == ":memory:":
            return True
        conn = self._conn()
        conn.execute(f"PRAGMA busy_timeout = {int(wait_ms)}")
        try:
            done = F.retry(
                lambda: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0, tries, _SCRUB_PAUSE
            )
        except sqlite3.Error:
            done = False
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        self._scrub_pending = not done
        return done

    def _wal_remaining(self) -> F.Remaining:
        return F.Remaining(
            where=f"{self.path}-wal and {self.path}",
            what="old page images of the forgotten rows: another connection's transaction (a reader whose"
            " snapshot predates the forget, or a long write) kept the WAL from being checkpointed",
            until="that transaction ends and the WAL is checkpointed: this store retries after each of its"
            " later writes and on close; PRAGMA wal_checkpoint(TRUNCATE), or the last connection's close, also does",
        )

def _top_rid(conn: sqlite3.Connection) -> int:
    """The highest message rid ever assigned (AUTOINCREMENT keeps it), a cheap size estimate."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()
    return int(row[0]) if row else 0


def _pending(conn: sqlite3.Connection) -> int:
    """How many messages are not in the FTS index yet (0 when all are)."""
    return _top_rid(conn) - int(conn.execute("SELECT last_rid FROM fts_state").fetchone()[0])


def _index_pending(conn: sqlite3.Connection, min_pending: int) -> None:
    """Add not-yet-indexed messages to FTS5 in one statement; call inside a write transaction."""
    last, top = conn.execute("SELECT last_rid FROM fts_state").fetchone()[0], _top_rid(conn)
    if top - last < min_pending:
        return
    conn.execute(
        f"INSERT INTO messages_fts (rowid, text, scope) SELECT m.rid, {_indexed('m.text')}, s.fts_scope"
        " FROM messages m JOIN sessions s ON s.sid = m.sid WHERE m.rid > ? AND m.rid <= ?",
        (last, top),
    )
    conn.execute("UPDATE fts_state SET last_rid = ?", (top,))


def _merge_fts(conn: sqlite3.Connection) -> None:
    """Merge every FTS5 segment into one: deleted rows' terms (and their delete markers) are dropped,
    and secure_delete zeroes the freed pages. Costs ~0.15 s per 100,000 indexed messages.
    """
    conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")


def _split_sql(script: str) -> list[str]:
    """Statements of a migration script (triggers contain ';' so split on complete statements)."""
    out, buf = [], ""
    for line in script.strip().splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        raise ValueError(f"incomplete SQL in migration: {buf[:80]!r}")
    return out


@dataclass
class _Kept:
    """A scope's block as kept: what its sessions held when it was read (see ``_block_versions``), its highest vector
    id, and for a small scope its messages (row id -> ``stored_message``'s columns up to ``metadata``). A stored
    message never changes under its row id (ids are never reused, a replacement is a new row), and a search's hits
    are rows that exist when it is checked, so a kept message is the stored one for as long as its row is a hit.
    """

    versions: dict[int, tuple[int, Any]]
    max_vid: int
    block: Vec.VectorBlock
    rows: dict[str, tuple[Any, ...]] | None
    rows_nbytes: int = 0

    @property
    def nbytes(self) -> int:
        return self.block.nbytes + self.rows_nbytes

    def extended(self, new: _Kept, small: int) -> _Kept:
        """This block with ``new``'s rows (the vectors added since it was read, at ``new``'s versions); its messages
        only while it holds at most ``small`` rows (a scope that grew past that keeps its vectors alone).
        """
        block = self.block.extend(new.block)
        rows, nbytes = self.rows, self.rows_nbytes
        if rows is not None and new.rows is not None and len(block.ids) <= small:
            rows = {**rows, **new.rows}
            nbytes += new.rows_nbytes
        else:
            rows, nbytes = None, 0
        return _Kept(new.versions, max(self.max_vid, new.max_vid), block, rows, nbytes)


def _carried(hits: list[Hit], rows: dict[str, tuple[Any, ...]]) -> KeptHits:
    """``hits``, whose messages are those among ``rows`` (decoded when asked for: :class:`~.base.KeptHits`)."""
    return KeptHits(hits, partial(_message, rows))


def _message(rows: dict[str, tuple[Any, ...]], hit: Hit) -> StoredMessage | None:
    """``hit``'s message among ``rows``; None when it is not kept (too large) or the hit does not say where it sits."""
    owner, row = hit.owner, rows.get(hit.key)
    if owner is None or row is None:
        return None
    user, agent, session = owner
    id, role, text, data, kind, created_at, archived_at, summary_id, metadata = row
    return C.stored_message(id, role, text, data, kind, created_at, archived_at, summary_id, metadata, hit.key,
                            hit.position or 0, session, user, agent)

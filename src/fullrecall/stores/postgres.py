"""PostgreSQL store (psycopg 3 + psycopg_pool + pgvector): many stateless processes, one database.

Design, and why:

* Everything lives in one schema (``?schema=fullrecall`` by default), created and migrated
  automatically; ``schema_version`` records the applied migration, and migrations run
  under an advisory lock so several processes can start at once.
* **Positions** are assigned under a row lock on the session (a no-op upsert of its row,
  which also creates it), so concurrent appenders of one conversation take turns, and
  only they do. An append is 3 round trips and one commit.
* **Lexical search** is a stored ``tsvector`` with a GIN index, ranked in SQL by BM25 (binary term
  frequency), planned from the column's statistics so that a common word costs no more than a rare one
  (:mod:`._topk`). Its lexemes are the project's own tokens (:class:`._bm25.Tokenizer`: FTS5 unicode61's
  words, Porter stems), computed at write time and sent as a ``tsvector`` literal, and queries are
  ``tsquery`` literals of the same tokens (:mod:`._tsvector`): no text-search configuration or database
  locale changes the words, and every backend finds the same messages.
* **Vectors** go to one table per dimension (``vectors_384``: pgvector needs a fixed
  dimension to index), with an HNSW cosine index once a search needs one. The index serves
  scopes over ``exact_limit`` vectors (default 20,000) or holding most of the table, with
  ``hnsw.ef_search`` raised as the scope's share of the table shrinks; smaller scopes (one
  user or conversation among many) are searched exactly through the session index, and an
  approximate search that filters leave short of ``k`` rows falls back to an exact one.
  The index is built in a background thread on its own connection (``CREATE INDEX
  CONCURRENTLY``: writes go on, and neither a writer nor a searcher waits for it) the first
  time a search of such a scope meets a table of at least ``hnsw_min_rows`` vectors
  (default 5,000) without one; that search and those after it run exactly until it is
  built. A store of many small scopes never builds it, so its writers never pay for
  inserting into the graph (about 3 ms a vector write at 40,000 vectors, measured).
  :meth:`PostgresStore.build_indexes` builds it at once (bulk loads: building once is far
  faster than inserting into the graph); :meth:`PostgresStore.wait_for_indexes` waits for a
  build. The graph walk runs alone (``ORDER BY ... LIMIT ef``) and the scope and filters
  apply to its rows, so that the planner never trades it for a sort.
* **A small scope is searched in process** (:mod:`._scope_blocks`, :mod:`._bm25`), as SQLite searches one: its
  vectors kept as a block with their messages, read by the scope's first search and checked, at each later
  one, against the sessions' counters (a vector epoch moved by overwrites and deletes, the vectors held) in one
  statement; its words by BM25 over per-session indexes extended as rows are appended, their hits carrying the
  messages the scope's block keeps. ``vector_cache_mb=0`` and ``lexical_in_process=0`` keep every search on the server.
* **Vector and record writes** are one statement each in autocommit: ``set_vectors`` locks the
  session's row, checks the model and the ids, and writes the vectors and the counters only when the
  checks pass (else nothing is written and the checks say which error to raise); vectors travel in
  binary both ways; ``get_vectors`` reads every dimension's table in one statement, from a list of
  dimensions cached per store and read again only when the scope holds one it lacks.
* **An exact vector search without filters** takes the scope's best ``k`` from its vectors (the
  session index) before joining their messages by row id: joined first, the planner (at the default
  ``random_page_cost``) hashed the scope's vectors against a scan of every user's messages. A scope
  small enough to be searched exactly gets its sessions and that search in one statement.
* **Reads** run in autocommit (no ``BEGIN``/``COMMIT`` round trips); ``hnsw.ef_search`` is set
  on a pooled connection only when it changes. Hits carry their owner and position, and their messages
  (:class:`~.base.KeptHits`: both searches return their best ``k`` rows' columns, decoded when asked for), so
  that a caller reads none of them after the search.
* **forget** deletes, then runs ``VACUUM (ANALYZE)`` on the tables it deleted from: dead
  tuples are pruned and ``pg_stats`` no longer lists the forgotten words and user ids.
  PostgreSQL does not zero freed space, keeps GIN keys and WAL segments: ``remaining`` says so.
* Works on any PostgreSQL >= 14 with the ``vector`` extension (>= 0.5 for HNSW),
  managed services included; the extension is created if missing.

URL: ``postgresql://user:pass@host:5432/db?schema=fullrecall&pool_max=8`` (the
fullrecall options ``schema``, ``pool_min``, ``pool_max``, ``exact_limit``, ``ef_search``,
``hnsw_min_rows``, ``index_build_memory``, ``lexical_budget``, ``candidate_cap``, ``forget_vacuum``, ``vector_cache_mb``,
``lexical_in_process`` are removed
before the URL goes to libpq).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import threading
import time
import weakref
from collections import ChainMap, Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import numpy as np
import psycopg
from psycopg.conninfo import timeout_from_conninfo
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from .._fork import renew_in_child
from .._secrets import address, without_passwords
from ..errors import InvalidInput, StoreError
from . import _bm25 as B
from . import _common as C
from . import _forget as F
from . import _scope_blocks as SB
from . import _topk
from . import _tsvector as T
from . import _validate as V
from . import _vectors as Vec
from ._sql import Dialect, SqlStore, records_table
from .base import Appended, Filters, Hit, KeptHits, Scope, StoredMessage

Conn = psycopg.Connection[dict[str, Any]]
"""A connection of ours: rows come as dicts (``row_factory=dict_row``)."""

SCHEMA_VERSION = 8
_OWN_OPTIONS = (
    "schema", "pool_min", "pool_max", "exact_limit", "ef_search", "hnsw_min_rows", "index_build_memory",
    "lexical_budget", "candidate_cap", "forget_vacuum", "vector_cache_mb", "lexical_in_process",
)
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
log = logging.getLogger("fullrecall.stores.postgres")

_HNSW_MAX_DIM = 2000  # pgvector's limit for indexing the ``vector`` type
_EXACT_ALWAYS = 2_000  # scopes this small are searched exactly (a few ms)
_MAX_EF = 1_000
_HNSW_MIN_ROWS = 5_000  # a search that wants the index builds it once the table holds this many vectors
_LEXICAL_BUDGET = 2_000  # a word expected in more rows than this only scores candidates (see _topk)
_CANDIDATE_CAP = 20_000  # most rows one lexical search ranks (only a query of very common words reaches it)
# A lexical search reads its scope's rows first when the words' index would list this many times more rows
_SCOPE_FIRST = 3.0
# Cosine similarity with a vector parameter; pgvector's distance is NaN where a vector is zero: 0 there, as in-process
_COSINE = "1 - coalesce(nullif(v.embedding <=> %s, 'NaN'), 1)"
_STATS_TTL = 60.0  # seconds the column statistics are cached
# A scope's sessions holding vectors, with what a block kept in process is checked against (see _scope_blocks)
_BLOCK_SESSIONS = ("SELECT sid, vec_dim, vec_epoch, vector_count, user_id, agent_id, session_id FROM {s}.sessions s"
                   " WHERE {where} AND vec_dim IS NOT NULL")
_SCRUB_LOCK_WAIT = "2s"  # forget's VACUUM gives up on a table lock after this
# The columns an append writes (after sid and position), in the order of its arrays
_APPEND_COLS = ("id", "role", "kind", "text", "data", "created_at", "archived_at", "summary_id", "metadata", "nbytes",
                "ibytes", "tsv")
_APPEND_TYPES = ("text", "text", "text", "text", "text", "float8", "float8", "text", "text", "bigint", "bigint", "tsvector")
_APPEND_ARRAYS = ", ".join(f"%s::{t}[]" for t in _APPEND_TYPES)
_MSG_COLS = "m.id, m.role, m.text, m.data, m.kind, m.created_at, m.archived_at, m.summary_id, m.metadata"
# A search's hits carry their messages (KeptHits: no read of them after the search), those of at most this many
# bytes of text and data: a search of k hits among large tool outputs would otherwise fetch k of them whole
_CARRY_BYTES = 64 * 1024


def _carried_cols(*columns: str) -> str:
    """The message columns given, each NULL for a message over ``_CARRY_BYTES``."""
    return ", ".join(f"CASE WHEN m.nbytes <= {_CARRY_BYTES} THEN m.{c} END AS {c}" for c in columns)


_MSG_BODY = _carried_cols("role", "text", "data", "kind", "created_at", "archived_at", "summary_id", "metadata")
# A kept block's rows (see _scope_blocks): the columns it needs of every row, and a message's others (as _MSG_BODY)
_BLOCK_ROW = ("m.id, v.rid, v.embedding, v.sid, m.position, m.role, m.kind, m.created_at, "
              + _carried_cols("text", "data", "archived_at", "summary_id", "metadata"))
_KEPT_COLS = ("id", "rid", "position", "role", "text", "data", "kind", "created_at", "archived_at", "summary_id",
              "metadata")
# The same as NULLs, for a row of a UNION that is no message
_NO_MSG_BODY = ("NULL::text AS role, NULL::text AS text, NULL::text AS data, NULL::text AS kind, NULL::float8 AS created_at,"
                " NULL::float8 AS archived_at, NULL::text AS summary_id, NULL::text AS metadata")
# The text PostgreSQL's parser tokenised for the generated ``tsv`` of schema versions 1 to 5 (migrations 1 and 4):
# punctuation as spaces; from version 4 on, the first INDEXED_CHARS characters. Version 6 writes the words itself.
_PUNCT_SQL = r"regexp_replace(text, '[^\w\s]+', ' ', 'g')"
_INDEXED_SQL = rf"regexp_replace(left(text, {V.INDEXED_CHARS}), '[^\w\s]+', ' ', 'g')"
# PostgreSQL's text cannot hold NUL: a text holding one is stored escaped behind this mark (see _pg_text).
_MARK = "\ufdd0"
_ESCAPES = {"\x00": _MARK + " ", _MARK: _MARK + _MARK}
_UNESCAPE = re.compile(_MARK + "(.)", re.DOTALL)

MIGRATIONS: dict[int, str] = {
    1: f"""
    CREATE TABLE {{s}}.sessions (
        sid BIGSERIAL PRIMARY KEY,
        tenant TEXT NOT NULL,
        user_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        next_position BIGINT NOT NULL DEFAULT 0,
        vec_model TEXT,
        vec_dim INTEGER,
        created_at DOUBLE PRECISION NOT NULL,
        UNIQUE (tenant, user_id, agent_id, session_id)
    );
    CREATE INDEX sessions_by_user ON {{s}}.sessions (tenant, user_id);
    CREATE INDEX sessions_by_session ON {{s}}.sessions (tenant, session_id);
    CREATE TABLE {{s}}.messages (
        rid BIGSERIAL PRIMARY KEY,
        sid BIGINT NOT NULL REFERENCES {{s}}.sessions (sid) ON DELETE CASCADE,
        id TEXT NOT NULL,
        position BIGINT NOT NULL,
        role TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        data TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        archived_at DOUBLE PRECISION NOT NULL,
        summary_id TEXT,
        metadata TEXT NOT NULL,
        tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('english'::regconfig, {_PUNCT_SQL})) STORED,
        UNIQUE (sid, position),
        UNIQUE (sid, id)
    );
    CREATE INDEX messages_by_id ON {{s}}.messages (id);
    CREATE INDEX messages_tsv ON {{s}}.messages USING gin (tsv);
    CREATE TABLE {{s}}.vector_tables (dim INTEGER PRIMARY KEY);
    CREATE TABLE {{s}}.state (
        sid BIGINT NOT NULL REFERENCES {{s}}.sessions (sid) ON DELETE CASCADE,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (sid, key)
    );
    {records_table("{s}.records", "DOUBLE PRECISION", "vector")}
    """,
    # the words ever archived per conversation: BM25's mean row length without a scan
    2: """
    ALTER TABLE {s}.sessions ADD COLUMN lexemes BIGINT NOT NULL DEFAULT 0;
    UPDATE {s}.sessions s SET lexemes = (SELECT coalesce(sum(length(m.tsv)), 0) FROM {s}.messages m WHERE m.sid = s.sid);
    """,
    # the messages a conversation holds now (BM25's document count, kept exact under deletes), and
    # its word count recounted: until now deletes never lowered it
    3: """
    ALTER TABLE {s}.sessions ADD COLUMN message_count BIGINT NOT NULL DEFAULT 0;
    UPDATE {s}.sessions s SET
        message_count = (SELECT count(*) FROM {s}.messages m WHERE m.sid = s.sid),
        lexemes = (SELECT coalesce(sum(length(m.tsv)), 0) FROM {s}.messages m WHERE m.sid = s.sid);
    """,
    # index a bounded prefix: a tsvector holds 1 MB at most, and a message may hold 64 MiB of text
    4: f"""
    ALTER TABLE {{s}}.messages DROP COLUMN tsv;
    ALTER TABLE {{s}}.messages ADD COLUMN tsv TSVECTOR
        GENERATED ALWAYS AS (to_tsvector('english'::regconfig, {_INDEXED_SQL})) STORED;
    CREATE INDEX messages_tsv ON {{s}}.messages USING gin (tsv);
    UPDATE {{s}}.sessions s SET lexemes = (SELECT coalesce(sum(length(m.tsv)), 0) FROM {{s}}.messages m WHERE m.sid = s.sid);
    """,
    # state versions (compare-and-set), and per-session counters kept by every write in its transaction (count and stats read one row per
    # session); each message keeps its own sizes so a delete takes away exactly what its append added
    5: f"""
    ALTER TABLE {{s}}.state ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
    ALTER TABLE {{s}}.messages ADD COLUMN nbytes BIGINT NOT NULL DEFAULT 0, ADD COLUMN ibytes BIGINT NOT NULL DEFAULT 0;
    UPDATE {{s}}.messages SET nbytes = octet_length(text) + octet_length(data),
        ibytes = octet_length(left(text, {V.INDEXED_CHARS}));
    ALTER TABLE {{s}}.sessions ADD COLUMN summary_count BIGINT NOT NULL DEFAULT 0,
        ADD COLUMN text_bytes BIGINT NOT NULL DEFAULT 0, ADD COLUMN index_bytes BIGINT NOT NULL DEFAULT 0,
        ADD COLUMN vector_count BIGINT NOT NULL DEFAULT 0;
    UPDATE {{s}}.sessions s SET (message_count, summary_count, text_bytes, index_bytes) = (
        SELECT count(*), count(*) FILTER (WHERE m.kind = 'summary'), coalesce(sum(m.nbytes), 0),
               coalesce(sum(m.ibytes), 0) FROM {{s}}.messages m WHERE m.sid = s.sid);
    DO $$ DECLARE d integer; BEGIN
        FOR d IN SELECT dim FROM {{s}}.vector_tables LOOP
            EXECUTE format('UPDATE {{s}}.sessions s SET vector_count = vector_count'
                           ' + (SELECT count(*) FROM {{s}}.vectors_%s v WHERE v.sid = s.sid)', d);
        END LOOP;
    END $$;
    """,
    # each long-term record's version (1, 2, ...: one up a write), for the compare-and-set of a read-modify-write
    6: """
    ALTER TABLE {s}.records ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
    """,
    # the words every backend finds (FTS5 unicode61's, Porter stems): the column is written by each append from
    # here on, and every row's words are computed again in Python right after this (_reindex), its index then
    7: """
    ALTER TABLE {s}.messages ALTER COLUMN tsv DROP EXPRESSION;
    DROP INDEX {s}.messages_tsv;
    """,
    # moves when a session's vectors change other than by growing (an overwrite, a deleted message): a process
    # keeping a scope's vectors (see _scope_blocks) reads only what was added while it stands
    8: """
    ALTER TABLE {s}.sessions ADD COLUMN vec_epoch BIGINT NOT NULL DEFAULT 0;
    """,
}
_REINDEX_BATCH = 2_000  # messages read and rewritten at a time by _reindex


def _reindex(conn: psycopg.Connection[Any], s: str, tokenize: B.Tokenizer) -> None:
    """Migration 7, after its SQL: each message's ``tsv`` from its own words, in batches of ``_REINDEX_BATCH``
    (bounded memory, one transaction: the migration's), then the GIN index, the sessions' word counts and
    the column's statistics anew.
    """
    last = 0
    while True:  # an escaped text (see _pg_text) is at most twice as long: enough of it for the indexed prefix
        rows = conn.execute(f"SELECT rid, left(text, %s) FROM {s}.messages WHERE rid > %s ORDER BY rid LIMIT %s",
                            (2 * V.INDEXED_CHARS + 1, last, _REINDEX_BATCH)).fetchall()
        if not rows:
            break
        conn.execute(f"UPDATE {s}.messages m SET tsv = u.tsv FROM unnest(%s::bigint[], %s::tsvector[]) AS u(rid, tsv)"
                     " WHERE m.rid = u.rid",
                     ([r[0] for r in rows], [_tsv(tokenize, _py_text(r[1])) for r in rows]))
        last = rows[-1][0]
    conn.execute(f"""
    CREATE INDEX messages_tsv ON {s}.messages USING gin (tsv);
    UPDATE {s}.sessions s SET lexemes = (SELECT coalesce(sum(length(m.tsv)), 0) FROM {s}.messages m WHERE m.sid = s.sid);
    ANALYZE {s}.messages;
    """)


_AFTER_MIGRATION = {7: _reindex}  # Python run in a migration's transaction, after its SQL


def _tsv(tokenize: B.Tokenizer, text: str) -> str:
    """The ``tsvector`` literal of what lexical search indexes of ``text`` (its prefix, :func:`V.indexed_prefix`)."""
    return T.tsvector(tokenize(V.indexed_prefix(text)))


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """(libpq URL, fullrecall options) from a store URL."""
    return C.split_url(url, ("postgresql", "postgres"), _OWN_OPTIONS, scheme="postgresql")


def _whole(opts: dict[str, str], name: str, default: int, *, least: int) -> int:
    """The integer option ``name``: from the URL when given there, else the keyword's ``default``."""
    return int(C.number_option(name, opts.get(name, default), whole=True, least=least))


def _pool_sizes(least: int | str, most: int | str) -> tuple[int, int]:
    """(pool_min, pool_max) checked here, naming the option, rather than in the pool's own words."""
    lo = int(C.number_option("pool_min", least, whole=True, least=0))
    return lo, int(C.number_option("pool_max", most, whole=True, least=max(1, lo)))


def _connect_timeout(conninfo: str, keyword: Any) -> Any:
    """The ``connect_timeout`` of every connection: the URL's when it gives one (it wins, as every option does),
    else the keyword's. Any number libpq's integers hold is taken, as psycopg reads it (whole seconds, at least
    2; 0 or less: its default, 130 s); anything else is refused naming it, here rather than by psycopg on every
    connection attempt, each logged, until the pool gives up.
    """
    given = parse_qs(urlsplit(conninfo).query, keep_blank_values=True).get("connect_timeout", [keyword])
    return [C.number_option("connect_timeout", value, whole=False, least=-2**31, most=2**31 - 1)
            for value in given][-1]


def _to_numpy(value: Any) -> np.ndarray:
    """Pgvector returns numpy arrays or ``Vector`` objects depending on its version and the protocol."""
    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype=np.float32)


def _pg_text(text: str) -> str:
    """``text`` as PostgreSQL can store it: verbatim, unless it holds NUL (or starts with the mark).

    Then it is the mark followed by the text with NUL as mark + space and the mark doubled, so
    that the text reads back exactly and NUL still separates words for the tsvector.
    """
    if "\x00" not in text and not text.startswith(_MARK):
        return text
    return _MARK + re.sub(f"[\x00{_MARK}]", lambda m: _ESCAPES[m.group()], text)


def _py_text(stored: str) -> str:
    """The text :func:`_pg_text` stored."""
    if not stored.startswith(_MARK):
        return stored
    return _UNESCAPE.sub(lambda m: _MARK if m.group(1) == _MARK else "\x00", stored[1:])


class _NothingHeld(Exception):
    """Raised to undo a transaction that found nothing to write (never leaves the store)."""


class _Held(threading.local):
    conn: Conn | None = None
    records: bool = False  # its transaction holds the records' shared lock (see PostgresStore._record_write)


class PostgresStore(SqlStore):
    """:class:`~fullrecall.stores.base.Store` on PostgreSQL + pgvector (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        schema: str = "fullrecall",
        pool_min: int = 1,
        pool_max: int = 8,
        exact_limit: int = 20_000,
        ef_search: int = 64,
        hnsw_min_rows: int | None = None,
        index_build_memory: str = "1GB",
        lexical_budget: int = _LEXICAL_BUDGET,
        candidate_cap: int = _CANDIDATE_CAP,
        forget_vacuum: str = "plain",
        vector_cache_mb: float = 1024,
        lexical_in_process: int = B.IN_PROCESS_ROWS,
        connect_timeout: float = 10.0,
    ) -> None:
        conninfo, opts = split_url(url)
        self.url = url
        self.schema = opts.get("schema", schema).lower()
        if not _SCHEMA_NAME.match(self.schema):
            raise ValueError(f"schema name {self.schema!r} must match {_SCHEMA_NAME.pattern}")
        self.sql = Dialect("%s", schema=self.schema, text_in=_pg_text, text_out=_py_text, lock=" FOR UPDATE")
        self._conninfo = conninfo
        self._pool_sizes = _pool_sizes(opts.get("pool_min", pool_min), opts.get("pool_max", pool_max))
        self._exact_limit = _whole(opts, "exact_limit", exact_limit, least=0)
        self._ef_search = _whole(opts, "ef_search", ef_search, least=1)
        self._hnsw_min_rows = _whole(opts, "hnsw_min_rows", hnsw_min_rows or _HNSW_MIN_ROWS, least=0)
        self._timeout = _connect_timeout(conninfo, connect_timeout)
        self._wait = timeout_from_conninfo({"connect_timeout": str(self._timeout)})  # for a pooled connection
        # an HNSW build that fits in maintenance_work_mem is many times faster (1M x 384-d needs ~2-3 GB)
        self._index_build_memory = str(opts.get("index_build_memory", index_build_memory))
        if not re.fullmatch(r"\d+\s*(kB|MB|GB)", self._index_build_memory):
            raise ValueError(f"index_build_memory must look like '512MB' or '4GB', got {self._index_build_memory!r}")
        self._lexical_budget = _whole(opts, "lexical_budget", lexical_budget, least=0)
        self._candidate_cap = _whole(opts, "candidate_cap", candidate_cap, least=1)
        self._forget_vacuum = str(opts.get("forget_vacuum", forget_vacuum)).lower()
        if self._forget_vacuum not in ("plain", "full"):
            raise ValueError(f"forget_vacuum must be 'plain' or 'full', got {self._forget_vacuum!r}")
        # (when, lexeme -> share of rows, rows of the messages table)
        self._shares: tuple[float, dict[str, float], int] | None = None
        self._table_rows: dict[int, tuple[float, int]] = {}  # dim -> (when, rows in vectors_{dim})
        self._indexed: set[int] = set()  # dimensions whose HNSW index is known to be built
        self._known_dims: list[int] = []  # dimensions whose vector table exists (read again when one is missing)
        self._builds: dict[int, threading.Thread] = {}  # dim -> its background index build
        self._build_tried: dict[int, float] = {}  # dim -> when a search last asked for its index
        self._build_conns: set[Conn] = set()  # cancelled by close()
        self._conn_ef: weakref.WeakKeyDictionary[Conn, int] = weakref.WeakKeyDictionary()  # hnsw.ef_search set
        cache_mb = C.number_option("vector_cache_mb", opts.get("vector_cache_mb", vector_cache_mb), whole=False, least=0)
        self._cache_bytes = int(cache_mb * 2**20)
        self._in_process_rows = _whole(opts, "lexical_in_process", lexical_in_process, least=0)
        self._tokenize = B.Tokenizer()
        if not self._tokenize.stems:  # the index it writes would not be the one FTS5 and queries with stems read
            raise StoreError("the PostgreSQL store stems words with PyStemmer, which is not installed:"
                             " pip install 'fullrecall[postgres]'")
        self._in_process()
        self._lock = threading.Lock()
        self._held = _Held()  # per thread: the connection of its batch(), if any
        self._pool_obj: ConnectionPool[Conn] | None = None
        self._pid = os.getpid()
        self._closed = False
        self._setup()
        self._pool()
        renew_in_child(self)

    def _after_fork(self) -> None:
        """A forked child starts with a new lock and nothing kept in process; its first round trip opens its own
        pool (see ``_pool``).
        """
        self._lock = threading.Lock()
        self._in_process()

    def _in_process(self) -> None:
        """What a small scope's searches keep in process, made anew (at start, and in a forked child)."""
        # its vectors (see _scope_blocks), and when a scope was last found to be no small one
        self._blocks = SB.ScopeBlocks(self._cache_bytes) if self._cache_bytes > 0 else None
        self._on_server: dict[Scope, float] = {}
        # its words, an index a session (see _bm25), as SQLite's store keeps them
        self._lexicons = B.SessionIndexes(self._tokenize) if self._in_process_rows > 0 else None

    # -- connections -----------------------------------------------------------

    def _setup(self) -> None:
        """Create the extension and schema, and run pending migrations, once per process start."""
        s = self.schema
        try:
            with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=self._timeout) as conn:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext('fullrecall.migrate'))")
                    try:
                        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    except psycopg.errors.InsufficientPrivilege as exc:
                        raise StoreError(
                            "the pgvector extension is missing and this role may not create it: "
                            "run CREATE EXTENSION vector as a superuser"
                        ) from exc
                    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
                    conn.execute(f"CREATE TABLE IF NOT EXISTS {s}.schema_version (version INTEGER NOT NULL)")
                    current = conn.execute(f"SELECT coalesce(max(version), 0) FROM {s}.schema_version").fetchone()[0]
                    if current > SCHEMA_VERSION:
                        raise StoreError(
                            f"schema {s} has version {current}, newer than this fullrecall ({SCHEMA_VERSION}): upgrade"
                        )
                    for version in range(current + 1, SCHEMA_VERSION + 1):
                        conn.execute(MIGRATIONS[version].replace("{s}", s))
                        if version in _AFTER_MIGRATION:
                            _AFTER_MIGRATION[version](conn, s, self._tokenize)
                        conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES (%s)", (version,))
        except psycopg.Error as exc:  # unreachable, refused, or a URL libpq cannot read (its error quotes it)
            raise StoreError(f"cannot reach PostgreSQL at {self._safe_url()}: {self._shown(exc)}") from exc

    def _pool(self) -> ConnectionPool[Conn]:
        if self._closed:
            raise StoreError(f"store {self._safe_url()} is closed")
        if self._pool_obj is None or self._pid != os.getpid():
            from pgvector.psycopg import register_vector

            def configure(conn: Conn) -> None:
                register_vector(conn)
                # JIT compiles a query the planner thinks costly in ~50-100 ms; ours take a few ms. Parallel
                # workers cost 5-10 ms to start, and statistics a little behind a busy table make the planner
                # want them for one user's 2,000 rows (12 ms instead of 2.7 ms, measured)
                conn.execute("SET jit = off")
                conn.execute("SET max_parallel_workers_per_gather = 0")

            lo, hi = self._pool_sizes
            self._pool_obj = ConnectionPool(
                self._conninfo,
                min_size=lo,
                max_size=hi,
                configure=configure,
                open=True,
                kwargs={"autocommit": True, "row_factory": dict_row, "connect_timeout": self._timeout},
                timeout=self._wait,
                name=f"fullrecall-{self.schema}",
            )
            self._pid = os.getpid()
        return self._pool_obj

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Conn]:
        """One transaction (inside a :meth:`batch`, a savepoint of it); driver errors become StoreError
        (unreachable) or ValueError (refused input).
        """
        with self._read() as conn, conn.transaction():
            yield conn

    @contextlib.contextmanager
    def _read(self) -> Iterator[Conn]:
        """A connection for reads in autocommit, errors mapped as :meth:`_tx` does: each statement sees its
        own snapshot, and a read of one statement saves the BEGIN and COMMIT round trips. Inside this
        thread's :meth:`batch`, its connection (in its transaction).
        """
        held = self._held.conn
        with self._mapped_errors(), (contextlib.nullcontext(held) if held is not None
                                     else self._pool().connection()) as conn:
            yield conn

    @contextlib.contextmanager
    def _batched(self) -> Iterator[None]:
        """This thread's statements in a :meth:`batch` run in one transaction: one commit (each commit waits for
        the disk), and nothing of the block is kept if it fails. Nested blocks belong to the outermost.
        """
        if self._held.conn is not None:
            yield
            return
        with self._mapped_errors(), self._pool().connection() as conn, conn.transaction():
            self._held.conn, self._held.records = conn, False
            try:
                yield
            finally:
                self._held.conn = None

    @contextlib.contextmanager
    def _mapped_errors(self) -> Iterator[None]:
        """Driver errors as fullrecall's: StoreError (unreachable, refused) or ValueError (refused input)."""
        try:
            yield
        except psycopg.errors.IntegrityError as exc:
            raise ValueError(f"write refused by a constraint: {exc}") from exc
        except psycopg.DataError as exc:  # input the rule of _validate let through; never expected
            raise InvalidInput(f"PostgreSQL refused a value, nothing was written: {exc}") from exc
        except UnicodeEncodeError as exc:  # a lone surrogate in an argument the rule does not check
            raise V.not_unicode(exc) from exc
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise StoreError(f"PostgreSQL at {self._safe_url()} failed, nothing was written: {self._shown(exc)}") from exc
        except psycopg.Error as exc:  # anything else the server refused (a damaged schema): never a raw driver error
            raise StoreError(f"PostgreSQL at {self._safe_url()} refused the statement, nothing was written: {self._shown(exc)}"
                             ) from exc

    _write = _tx  # rows are locked where writers must take turns
    _write_one = _read  # one statement in autocommit is its own transaction: no BEGIN and COMMIT round trips

    @contextlib.contextmanager
    def _record_write(self) -> Iterator[Conn]:
        """A record's write; in a :meth:`batch`, its transaction first takes the records' lock that writers share
        and a forget holds alone. A batch writes its records, then logs them in a session (long-term memory's
        change log), holding them; a forget deletes records and sessions: without the lock, each could wait
        for the other's rows (a deadlock). With it, the batch waits for the forget before it holds any row.
        """
        with self._write_one() as conn:
            if self._held.conn is conn and not self._held.records:
                conn.execute("SELECT pg_advisory_xact_lock_shared(hashtext(%s))", (f"fullrecall.{self.schema}.records",))
                self._held.records = True
            yield conn

    def _shown(self, exc: BaseException) -> str:
        """A driver's error as shown: the URL's password masked wherever the error quotes it."""
        return without_passwords(str(exc), self._conninfo)

    def _safe_url(self) -> str:
        return address(self._conninfo)

    def close(self) -> None:
        """Close the pool and drop what searches kept in process; a background index build still running is
        cancelled (the next one redoes it).
        """
        with self._lock:
            if self._blocks is not None:
                self._blocks.clear()
            if self._lexicons is not None:
                self._lexicons.clear()
            for conn in list(self._build_conns):
                with contextlib.suppress(psycopg.Error):
                    conn.cancel()
            if self._pool_obj is not None and self._pid == os.getpid():
                self._pool_obj.close()
            self._pool_obj = None
            self._closed = True

    def __repr__(self) -> str:
        return f"PostgresStore({self._safe_url()!r}, schema={self.schema!r})"

    # -- sessions ----------------------------------------------------------------

    def _session_row(self, conn: Conn, scope: Scope) -> dict[str, Any]:
        """(sid, next_position) of the session, created if new; its row stays locked until commit.

        The no-op upsert takes the row lock in the same round trip, so appenders of one
        conversation take turns and nobody else waits. The messages table's write lock is taken
        first, in the same round trip: every write takes the two in that order (a one-statement
        append locks the tables it names before any row, and the first vectors of a dimension create
        their table, whose foreign key locks messages, before the session's row), so no two wait
        on each other.
        """
        with conn.pipeline():
            conn.execute(f"LOCK TABLE {self.schema}.messages IN ROW EXCLUSIVE MODE")
            cursor = conn.execute(
                f"INSERT INTO {self.schema}.sessions AS t (tenant, user_id, agent_id, session_id, created_at)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant, user_id, agent_id, session_id)"
                " DO UPDATE SET next_position = t.next_position RETURNING sid, next_position",
                (scope.tenant, *scope.owner(), time.time()),
            )
        row = cursor.fetchone()
        assert row is not None  # an upsert with RETURNING always yields its row
        return row

    # -- archived messages ---------------------------------------------------------

    def _append(self, scope: Scope, messages: list[StoredMessage]) -> Appended:
        if len({m.id for m in messages}) == len(messages) and all(m.position is None for m in messages):
            start = self._append_new(scope, messages)
            if start is not None:  # none of the ids was held
                return Appended(range(start, start + len(messages)))
        return self._append_any(scope, messages)

    def _replace(self, scope: Scope, ids: list[str], messages: list[StoredMessage]) -> Appended:
        with self.batch():  # one transaction: the deletion and the append commit together or not at all
            self.delete(scope, ids)
            return self._append_any(scope, messages) if messages else Appended()

    def _append_new(self, scope: Scope, messages: list[StoredMessage]) -> int | None:
        """The usual append (ids new to the session, positions from its counter) in one statement, in autocommit:
        the session's upsert takes its row lock and moves its counters, the messages follow it. The position of
        the first message, or None when the session already holds one of the ids (nothing written then).
        """
        s = self.schema
        arrays, sizes = _message_arrays(messages, self._tokenize)
        n = len(messages)
        owner = (scope.tenant, *scope.owner())
        with self._write_one() as conn:
            try:
                row = conn.execute(
                    f"WITH new AS (SELECT * FROM unnest({_APPEND_ARRAYS})"
                    f" WITH ORDINALITY AS u({', '.join(_APPEND_COLS)}, ord)),"
                    f" held AS (SELECT 1 FROM {s}.sessions h, new, LATERAL (SELECT 1 FROM {s}.messages m"
                    " WHERE m.sid = h.sid AND m.id = new.id LIMIT 1) m"  # each id looked up: see _set_vectors
                    " WHERE h.tenant = %s AND h.user_id = %s AND h.agent_id = %s AND h.session_id = %s LIMIT 1),"
                    f" sess AS (INSERT INTO {s}.sessions AS t (tenant, user_id, agent_id, session_id, created_at,"
                    " next_position, message_count, summary_count, text_bytes, index_bytes, lexemes)"
                    " SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
                    " (SELECT coalesce(sum(length(tsv)), 0) FROM new)"
                    " WHERE NOT EXISTS (SELECT 1 FROM held)"
                    " ON CONFLICT (tenant, user_id, agent_id, session_id) DO UPDATE SET"
                    " next_position = t.next_position + excluded.next_position,"
                    " message_count = t.message_count + excluded.message_count,"
                    " summary_count = t.summary_count + excluded.summary_count,"
                    " text_bytes = t.text_bytes + excluded.text_bytes, index_bytes = t.index_bytes + excluded.index_bytes,"
                    " lexemes = t.lexemes + excluded.lexemes"
                    # none past the last position: no row, and _append_any refuses the batch naming its message
                    f" WHERE t.next_position + excluded.next_position <= {V.MAX_POSITION + 1}"
                    " RETURNING sid, next_position - %s AS start),"
                    f" ins AS (INSERT INTO {s}.messages (sid, position, {', '.join(_APPEND_COLS)})"
                    f" SELECT sess.sid, sess.start + new.ord - 1, {', '.join('new.' + c for c in _APPEND_COLS)}"
                    " FROM sess, new)"
                    " SELECT start FROM sess",
                    (*arrays, *owner, *owner, time.time(), n, n, *sizes, n),
                ).fetchone()
            except psycopg.errors.UniqueViolation:  # another writer stored one of the ids since its snapshot
                return None
        return None if row is None else int(row["start"])

    def _append_any(self, scope: Scope, messages: list[StoredMessage]) -> Appended:
        """Any append: ids the session holds keep their positions, explicit positions are taken as given."""
        s = self.schema
        with self._tx() as conn:  # 3 round trips: lock the session, look up ids, insert
            sess = self._session_row(conn, scope)
            known = {
                r["id"]: r["position"]
                for r in conn.execute(
                    f"SELECT id, position FROM {s}.messages WHERE sid = %s AND id = ANY(%s)",
                    (sess["sid"], list({m.id for m in messages})),
                )
            }
            positions, new, next_pos = C.assign_positions(messages, known, sess["next_position"])
            if not new:
                return positions
            arrays, sizes = _message_arrays([m for m, _ in new], self._tokenize)
            try:
                conn.execute(
                    f"WITH ins AS (INSERT INTO {s}.messages (sid, position, {', '.join(_APPEND_COLS)})"
                    f" SELECT %s, * FROM unnest(%s::bigint[], {_APPEND_ARRAYS})"
                    " RETURNING length(tsv) AS n)"
                    f" UPDATE {s}.sessions SET next_position = %s, message_count = message_count + %s,"
                    " summary_count = summary_count + %s, text_bytes = text_bytes + %s, index_bytes = index_bytes + %s,"
                    " lexemes = lexemes + (SELECT coalesce(sum(n), 0) FROM ins) WHERE sid = %s",
                    (sess["sid"], [p for _, p in new], *arrays, next_pos, len(new), *sizes, sess["sid"]),
                )
            except psycopg.errors.UniqueViolation as exc:
                raise C.position_taken(scope) from exc
        return positions

    def _select_messages(self, conn: Conn, where: str, params: Sequence[Any], ordered: bool = True
                         ) -> list[StoredMessage]:
        s = self.schema
        order = " ORDER BY m.sid, m.position" if ordered else ""
        rows = conn.execute(
            f"SELECT {_MSG_COLS}, m.rid, m.position, s.session_id, s.user_id, s.agent_id"
            f" FROM {s}.messages m JOIN {s}.sessions s ON s.sid = m.sid WHERE {where}{order}",
            params,
        )
        return [_message(r, (r["user_id"], r["agent_id"], r["session_id"])) for r in rows]

    # -- state documents ------------------------------------------------------------

    def put_state(self, scope: Scope, key: str, value: dict[str, Any], expected: int | None = None) -> int:
        """One statement in autocommit, the session's row held so that writers of its state take turns.

        Without ``expected``, or with 0, the session is made if new and the document upserted (with 0, an
        existing document is a conflict); with a version, the session must exist and the document is updated
        only if it is at that version when its row is locked. A refused write leaves nothing, not even a session.
        """
        doc = C.state_json(key, value)
        C.check_version(key, expected)  # compared with the stored one in the statement
        s = self.schema
        owner, now = (scope.tenant, *scope.owner()), time.time()  # owner(): InvalidInput without one session
        with self._write_one() as conn:
            row = conn.execute(
                f"WITH made AS (INSERT INTO {s}.sessions AS t (tenant, user_id, agent_id, session_id, created_at)"
                " SELECT %s, %s, %s, %s, %s WHERE coalesce(%s::bigint, 0) = 0"
                " ON CONFLICT (tenant, user_id, agent_id, session_id)"
                " DO UPDATE SET next_position = t.next_position RETURNING sid),"
                f" held AS (SELECT sid FROM {s}.sessions WHERE tenant = %s AND user_id = %s AND agent_id = %s"
                " AND session_id = %s AND %s::bigint > 0 FOR UPDATE),"
                f" put AS (INSERT INTO {s}.state AS d (sid, key, value, updated_at, version)"
                " SELECT sid, %s, %s, %s, 1 FROM made"
                " ON CONFLICT (sid, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at,"
                " version = d.version + 1 WHERE %s::bigint IS NULL RETURNING version),"
                f" moved AS (UPDATE {s}.state AS d SET value = %s, updated_at = %s, version = d.version + 1"
                " FROM held WHERE d.sid = held.sid AND d.key = %s AND d.version = %s::bigint RETURNING d.version)"
                " SELECT coalesce((SELECT version FROM put), (SELECT version FROM moved)) AS version",
                (*owner, now, expected, *owner, expected, key, doc, now, expected, doc, now, key, expected),
            ).fetchone()
        if row is not None and row["version"] is not None:
            return int(row["version"])
        current = self.get_versioned_state(scope, key)[1]  # read after the refusal: what the store holds now
        raise C.state_conflict(key, expected, current)

    def delete(self, scope: Scope, ids: Iterable[str]) -> int:
        where, params = self.sql.scope_where(scope)
        s = self.schema
        with self._tx() as conn:  # vectors go with their message (ON DELETE CASCADE)
            # the statement's snapshot still sees the deleted rows' vectors: count them per session
            vecs = " UNION ALL ".join(
                f"SELECT v.sid FROM {s}.vectors_{d} v JOIN del ON del.rid = v.rid" for d in self._dims(conn)
            ) or "SELECT NULL::bigint AS sid WHERE false"
            row = conn.execute(  # the session's counters (and BM25's statistics) go down in the same statement
                f"WITH del AS (DELETE FROM {s}.messages WHERE id = ANY(%s)"
                f" AND sid IN (SELECT sid FROM {s}.sessions s WHERE {where})"
                " RETURNING sid, rid, kind, nbytes, ibytes, length(tsv) AS n),"
                f" vec AS (SELECT sid, count(*) AS c FROM ({vecs}) x GROUP BY sid),"
                " per AS (SELECT sid, count(*) AS c, count(*) FILTER (WHERE kind = 'summary') AS summaries,"
                " coalesce(sum(nbytes), 0) AS nbytes, coalesce(sum(ibytes), 0) AS ibytes, coalesce(sum(n), 0) AS n"
                " FROM del GROUP BY sid),"
                f" upd AS (UPDATE {s}.sessions t SET message_count = t.message_count - per.c,"
                " summary_count = t.summary_count - per.summaries, text_bytes = t.text_bytes - per.nbytes,"
                " index_bytes = t.index_bytes - per.ibytes, lexemes = t.lexemes - per.n, vec_epoch = t.vec_epoch + 1,"
                " vector_count = t.vector_count - coalesce((SELECT c FROM vec WHERE vec.sid = per.sid), 0)"
                " FROM per WHERE t.sid = per.sid RETURNING 1)"
                " SELECT coalesce(sum(c), 0)::bigint AS deleted, array_agg(sid) AS sids FROM per",
                [C.read_ids(ids), *params],
            ).fetchone()
        if row["sids"] and self._blocks is not None:  # what searches kept of those sessions holds the deleted
            self._blocks.drop_sessions(row["sids"])
        return int(row["deleted"])

    # -- vectors ---------------------------------------------------------------------

    def _vector_table(self, conn: Conn, dim: int) -> str:
        """``vectors_{dim}``, created the first time a dimension is seen (its HNSW index comes later)."""
        s, table = self.schema, f"vectors_{dim}"
        exists = conn.execute(f"SELECT 1 FROM {s}.vector_tables WHERE dim = %s", (dim,)).fetchone()
        if exists is None:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"fullrecall.{s}.vectors",))
            # read again once the lock is held: a table another writer made meanwhile is not touched (CREATE INDEX
            # IF NOT EXISTS share-locks it all the same, until commit: a forget's delete then waited for this writer,
            # while it waited for the forget's lock of its session, a deadlock)
            exists = conn.execute(f"SELECT 1 FROM {s}.vector_tables WHERE dim = %s", (dim,)).fetchone()
        if exists is None:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {s}.{table} ("
                f" rid BIGINT PRIMARY KEY REFERENCES {s}.messages (rid) ON DELETE CASCADE,"
                f" sid BIGINT NOT NULL, embedding vector({dim}) NOT NULL)"
            )
            conn.execute(f"CREATE INDEX IF NOT EXISTS {table}_by_session ON {s}.{table} (sid)")
            conn.execute(f"INSERT INTO {s}.vector_tables (dim) VALUES (%s) ON CONFLICT DO NOTHING", (dim,))
        return f"{s}.{table}"

    def build_indexes(self) -> list[int]:
        """After a bulk load: build the missing HNSW indexes now, whatever the table sizes, and
        refresh the statistics lexical search plans with; return the indexed dimensions.
        """
        with self._tx() as conn:
            dims = self._dims(conn)
            conn.execute(f"ANALYZE {self.schema}.messages")
        self._shares = None
        self.wait_for_indexes()
        return [d for d in dims if self._build_index(d, min_rows=0)]

    def wait_for_indexes(self, timeout: float | None = None) -> bool:
        """Wait for background index builds to finish; True if none is running any more."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in list(self._builds.values()):
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._builds.values())

    def _schedule_index(self, dim: int, scope_size: int) -> None:
        """A search of ``scope_size`` vectors wants ``vectors_{dim}``'s HNSW index, which is missing: build
        it in the background (if the table, counted there, holds ``hnsw_min_rows`` vectors and the scope
        would use the index), at most once a ``_STATS_TTL`` while none is running. The search goes on
        exactly; it never waits for the build.
        """
        if dim in self._indexed or dim > _HNSW_MAX_DIM:
            return
        with self._lock:
            running = self._builds.get(dim)
            now = time.monotonic()
            if (running is not None and running.is_alive()) or self._closed or (
                now - self._build_tried.get(dim, -_STATS_TTL) < _STATS_TTL
            ):
                return
            self._build_tried[dim] = now
            thread = threading.Thread(target=self._build_quietly, args=(dim, scope_size), name=f"fullrecall-hnsw-{dim}",
                                      daemon=True)
            self._builds[dim] = thread
            thread.start()

    def _build_quietly(self, dim: int, scope_size: int) -> None:
        try:
            self._build_index(dim, self._hnsw_min_rows, wanted_by=scope_size)
        except Exception as exc:  # noqa: BLE001 - a background build: exact search serves until the next try
            if not self._closed:
                log.warning("building the HNSW index of %s.vectors_%d failed (%s); searches stay exact until a "
                            "later search retries", self.schema, dim, exc)

    def _build_index(self, dim: int, min_rows: int, wanted_by: int | None = None) -> bool:
        """Create ``vectors_{dim}``'s HNSW index once it holds ``min_rows`` (and, given ``wanted_by``, a
        scope of that size would use it: over ``exact_limit``, or half the table); True if it exists now.
        """
        if dim in self._indexed:
            return True
        if dim > _HNSW_MAX_DIM:
            return False
        s, table = self.schema, f"vectors_{dim}"
        lock = f"fullrecall.{s}.{table}.hnsw"
        try:
            with self._pool().connection() as conn:
                if self._index_state(conn, table) == "valid":
                    self._indexed.add(dim)
                    return True
                # a scope within exact_limit uses the index while it is at least half the table
                too_many = 2 * wanted_by + 1 if wanted_by is not None and wanted_by <= self._exact_limit else 0
                n = conn.execute(
                    f"SELECT count(*) AS n FROM (SELECT 1 FROM {s}.{table} LIMIT %s) x",
                    (max(min_rows, 1, too_many),),
                ).fetchone()["n"]
            if n < min_rows or n >= too_many > 0:
                return False
            # Its own connection (autocommit: CONCURRENTLY cannot run in a transaction), so a build of
            # minutes holds no pooled connection; close() cancels it.
            with psycopg.connect(self._conninfo, autocommit=True, row_factory=dict_row,
                                 connect_timeout=self._timeout) as conn:
                self._build_conns.add(conn)
                try:
                    if not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s)) AS ok", (lock,)).fetchone()["ok"]:
                        return False  # another process is building it
                    if self._index_state(conn, table) == "invalid":  # an interrupted build leaves one behind
                        conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {s}.{table}_hnsw")
                    # Session settings of a connection used for this build alone, closed right after.
                    conn.execute(f"SET maintenance_work_mem = '{self._index_build_memory}'")
                    conn.execute("SET jit = off")
                    conn.execute(
                        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {table}_hnsw ON {s}.{table}"
                        " USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
                    )
                    conn.execute(f"ANALYZE {s}.{table}")  # fresh row estimates for the planner
                finally:
                    self._build_conns.discard(conn)
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"PostgreSQL at {self._safe_url()} failed while building an index: {self._shown(exc)}") from exc
        self._indexed.add(dim)
        return True

    def _index_state(self, conn: Conn, table: str) -> str | None:
        row = conn.execute(
            "SELECT i.indisvalid AS ok FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
            (f"{self.schema}.{table}_hnsw",),
        ).fetchone()
        return None if row is None else ("valid" if row["ok"] else "invalid")

    def _dims(self, conn: Conn) -> list[int]:
        dims = [r["dim"] for r in conn.execute(f"SELECT dim FROM {self.schema}.vector_tables ORDER BY dim")]
        self._known_dims = dims  # tables are never dropped (but with the schema): a list read is never stale, only short
        return dims

    def _set_vectors(self, scope: Scope, ids: list[str], mat: np.ndarray, model: str) -> None:
        """One statement, one round trip: the session's row is locked, the model checked, and only when it
        passes are the vectors of the messages the session holds written and its counters moved (else
        nothing is, and the ValueError says why). Ids it does not hold are dropped (see :meth:`Store.set_vectors`).
        """
        dim = int(mat.shape[1])
        s = self.schema
        if dim not in self._known_dims:  # its table may not exist yet: made (once), kept only if the checks pass
            try:
                with self._tx() as conn:
                    # the table first: its foreign key locks the messages table, which an append (one statement)
                    # locks before its session's row, so the session's row is locked second here too (no deadlock)
                    self._vector_table(conn, dim)
                    if not self._vector_targets(conn, scope, ids, model, dim)[1]:
                        raise _NothingHeld
            except _NothingHeld:  # the session holds none of the messages: no vector to write, no table made for none
                return
            with self._read() as conn:  # once committed: a search on another thread takes the list as tables that exist
                self._dims(conn)
        last = {i: n for n, i in enumerate(ids)}  # an id given twice: its last vector (as upserts in turn would)
        where, params = self.sql.scope_where(scope)
        with self._read() as conn:  # autocommit: one statement is one transaction
            row = conn.execute(
                f"WITH sess AS (SELECT sid, vec_model, vec_dim FROM {s}.sessions s WHERE {where} LIMIT 1 FOR UPDATE),"
                " given AS (SELECT * FROM unnest(%s::text[], %b::vector[]) AS g(id, embedding)),"  # %b: sent as floats
                # each id looked up by the session's unique index (a LATERAL with LIMIT is never joined otherwise):
                # a join may be planned as a read of every message of the session, and is, in the plan made for any
                # parameters that a statement prepared after a few runs gets (a write then cost O(conversation))
                f" target AS (SELECT m.id, m.rid, m.sid, g.embedding FROM given g, sess, LATERAL (SELECT m.id, m.rid,"
                f" m.sid FROM {s}.messages m WHERE m.sid = sess.sid AND m.id = g.id LIMIT 1) m),"
                " checked AS (SELECT count(*) = 1 AND bool_and("
                " vec_model IS NULL OR (vec_model = %s AND vec_dim = %s)) AS ok FROM sess),"
                f" ins AS (INSERT INTO {s}.vectors_{dim} (rid, sid, embedding) SELECT rid, sid, embedding FROM target"
                " WHERE (SELECT ok FROM checked) ON CONFLICT (rid) DO UPDATE SET embedding = EXCLUDED.embedding"
                " RETURNING xmax = 0 AS added),"  # xmax 0: a new row (an updated one carries this transaction's id)
                f" upd AS (UPDATE {s}.sessions t SET vec_model = %s, vec_dim = %s, vector_count = t.vector_count"
                " + (SELECT count(*) FILTER (WHERE added) FROM ins),"
                " vec_epoch = t.vec_epoch + (SELECT count(*) FILTER (WHERE NOT added) FROM ins) FROM sess WHERE t.sid = sess.sid"
                " AND (SELECT ok FROM checked) AND EXISTS (SELECT 1 FROM target) RETURNING 1)"
                " SELECT (SELECT ok FROM checked) AS ok, (SELECT count(*) FROM upd) AS updated,"
                " (SELECT count(*) FROM sess) AS sessions, (SELECT vec_model FROM sess) AS vec_model,"
                " (SELECT vec_dim FROM sess) AS vec_dim",
                [*params, list(last), [mat[n] for n in last.values()], model, dim, model, dim],
            ).fetchone()
        assert row is not None  # a SELECT of scalars always yields its row
        if row["sessions"] and not row["ok"]:
            raise Vec.model_mismatch((row["vec_model"], row["vec_dim"]), model, dim)

    def get_vectors(self, scope: Scope, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """One round trip: every known dimension's table read in one statement, which also says whether the
        scope holds vectors of a dimension this instance has not seen yet (then the list is read again).
        """
        ids = C.read_ids(ids)
        where, params = self.sql.scope_where(scope)
        s = self.schema
        out: dict[str, np.ndarray] = {}
        with self._read() as conn:
            for _ in range(2):
                dims = list(self._known_dims)
                parts = [
                    f"SELECT m.id, v.embedding::vector AS embedding, NULL::integer AS unknown"
                    f" FROM {s}.vectors_{dim} v JOIN {s}.messages m ON m.rid = v.rid JOIN {s}.sessions s ON s.sid = m.sid"
                    f" WHERE {where} AND m.id = ANY(%s)"
                    for dim in dims
                ]
                parts.append(f"(SELECT NULL AS id, NULL::vector AS embedding, s.vec_dim AS unknown FROM {s}.sessions s"
                             f" WHERE {where} AND s.vec_dim IS NOT NULL AND s.vec_dim <> ALL(%s) LIMIT 1)")
                rows = conn.execute(" UNION ALL ".join(parts),  # binary: vectors come as floats, not text to parse
                                    [*[p for _ in dims for p in (*params, list(ids))], *params, dims],
                                    binary=True).fetchall()
                if not any(r["unknown"] is not None for r in rows):
                    break
                self._dims(conn)  # another process wrote vectors of a new dimension: read the list, then again
            out.update((r["id"], _to_numpy(r["embedding"])) for r in rows if r["unknown"] is None)
        return out

    # -- search ------------------------------------------------------------------------

    def search_vectors(
        self, scope: Scope, vector: np.ndarray, k: int, filters: Filters | None = None
    ) -> list[Hit]:
        k = C.check_search("search_vectors", k, filters)
        query = Vec.as_query(vector)
        s = self.schema
        where, params = self.sql.scope_where(scope)
        fsql, fparams = self.sql.filters(filters)
        with self._read() as conn:
            if self._blocks is not None and k > 0 and self._held.conn is None:  # not inside a batch: its writes may
                found = self._search_kept(conn, scope, query, k, filters)  # be rolled back
                if found is not None:
                    return found
            if not fsql and k > 0 and query.shape[0] in self._known_dims:
                sessions, hits = self._sessions_and_best(conn, scope, query, k)
            else:
                sessions, hits = conn.execute(
                    f"SELECT sid, vec_dim, next_position, user_id, agent_id, session_id FROM {s}.sessions s"
                    f" WHERE {where} AND vec_dim IS NOT NULL",
                    params,
                ).fetchall(), None
            dims = {r["vec_dim"] for r in sessions}
            if not sessions or k == 0:
                return []
            if not dims <= set(self._known_dims):  # their tables exist: the next search of them is one round trip
                self._known_dims = sorted({*self._known_dims, *dims})
            if len(dims) > 1:
                raise ValueError(f"this scope mixes vectors of dimensions {sorted(dims)}; search one session at a time")
            dim = dims.pop()
            if query.shape[0] != dim:
                raise Vec.dim_mismatch(dim, query.shape[0])
            owners = C.session_owners(sessions)
            table = f"{s}.vectors_{dim}"
            sids = list(owners)
            size = sum(r["next_position"] for r in sessions)  # messages ever appended: at least the vectors
            ef = self._hnsw_ef(conn, dim, size, k)
            if ef is None and hits is not None:  # searched exactly with the scope's sessions: the answer
                return _hits(hits, owners)
            if ef:
                # The graph walk alone, the scope and filters applied to the ``ef`` rows it returns (all that
                # pgvector's HNSW scan gives): a filter inside it would make the planner expect few rows to
                # pass, and so sort the whole table rather than walk the index.
                self._set_ef(conn, ef)
                # The limits are written in the statement: psycopg prepares a statement run five times, and a
                # generic plan, taking a parameter's LIMIT for a tenth of the rows, may sort the whole table.
                rows = conn.execute(
                    f"SELECT m.id, m.rid, m.sid, m.position, 1 - coalesce(nullif(x.d, 'NaN'), 1) AS score, {_MSG_BODY}"
                    " FROM (SELECT v.rid, v.sid,"
                    f" v.embedding <=> %s AS d FROM {table} v ORDER BY v.embedding <=> %s LIMIT {int(ef)}) x"
                    f" JOIN {s}.messages m ON m.rid = x.rid WHERE x.sid = ANY(%s){fsql} ORDER BY x.d, m.rid"
                    f" LIMIT {int(k)}",
                    [query, query, sids, *fparams],
                ).fetchall()
                if len(rows) == k:
                    return _hits(rows, owners)
            # Exact: ordering by the score expression never uses the approximate index.
            if not fsql:  # the scope's best k first (its session index), then their k messages by row id: joined
                # before the limit, the planner may hash the scope's vectors against a scan of everyone's messages
                return _hits(conn.execute(
                    f"SELECT m.id, m.rid, m.sid, m.position, x.score, {_MSG_BODY} FROM (SELECT v.rid, {_COSINE}"
                    f" AS score FROM {table} v WHERE v.sid = ANY(%s) ORDER BY score DESC, v.rid LIMIT %s) x"
                    f" JOIN {s}.messages m ON m.rid = x.rid ORDER BY x.score DESC, m.rid",
                    [query, sids, k],
                ).fetchall(), owners)
            rows = conn.execute(
                f"SELECT m.id, m.rid, m.sid, m.position, {_COSINE} AS score, {_MSG_BODY} FROM {table} v"
                f" JOIN {s}.messages m ON m.rid = v.rid WHERE v.sid = ANY(%s){fsql} ORDER BY score DESC, m.rid LIMIT %s",
                [query, sids, *fparams, k],
            ).fetchall()
        return _hits(rows, owners)

    def prepare_vector_search(
        self, scope: Scope, filters: Filters | None = None
    ) -> Callable[[np.ndarray, int], list[Hit]]:
        """A small scope's kept block checked against the sessions' counters now (the round trip a search of it
        costs; see :meth:`~.base.Store.prepare_vector_search`), searched in process when the vector comes; any
        other scope is searched on the server then, as :meth:`search_vectors` does.
        """
        kept = None
        if self._blocks is not None and self._held.conn is None:  # not inside a batch: its writes may be rolled back
            with self._read() as conn:
                kept = self._kept_block(conn, scope)

        def search(vector: np.ndarray, k: int) -> list[Hit]:
            k = C.check_search("search_vectors", k, filters)
            found = _kept_hits(kept, Vec.as_query(vector), k, filters) if self._held.conn is None else None
            return self.search_vectors(scope, vector, k, filters) if found is None else found
        return search

    def _search_kept(
        self, conn: Conn, scope: Scope, query: np.ndarray, k: int, filters: Filters | None
    ) -> list[Hit] | None:
        """The best ``k`` of a small scope's vectors, searched in process (see :mod:`._scope_blocks`); None for a
        scope searched on the server (too large, of several dimensions, of another dimension than the query).

        A kept block is checked against the sessions' counters (one round trip) and its hits carry the messages
        it keeps; the first search of a scope, or one that finds its block outgrown in other ways than by added
        vectors, reads the block (whole) before searching it.
        """
        return _kept_hits(self._kept_block(conn, scope), query, k, filters)

    def _kept_block(self, conn: Conn, scope: Scope) -> SB.ScopeBlock | None:
        """A small scope's block as stored now: the kept one checked (and grown by the vectors added since), or
        read whole; None for a scope the server searches.
        """
        assert self._blocks is not None
        read_after = self._blocks.forgets  # a forget from here on: what this search reads is not kept
        kept = self._blocks.get(scope)
        if kept is None:
            return self._read_block(conn, scope, read_after)
        where, params = self.sql.scope_where(scope)
        sessions = conn.execute(_BLOCK_SESSIONS.format(s=self.schema, where=where), params).fetchall()
        if _versions(sessions) != kept.versions:
            kept = self._grown(conn, scope, kept, sessions, read_after) or self._read_block(conn, scope, read_after)
        return kept

    def _carrying(self, conn: Conn, hits: list[Hit], kept: SB.Rows) -> list[Hit]:
        """``hits`` (found in process) with their messages, as every search's hits come: those ``kept`` holds,
        the others read in one round trip.
        """
        keys = [h.key for h in hits if h.key is not None and h.key not in kept]
        if not keys:
            return _carried(hits, kept)
        rows = conn.execute(
            f"SELECT m.id, m.rid, m.sid, m.position, {_MSG_BODY} FROM {self.schema}.messages m WHERE m.rid = ANY(%s)",
            [C.int_keys(keys)],
        ).fetchall()
        read: dict[str, Mapping[str, Any]] = {str(r["rid"]): r for r in rows}
        return _carried(hits, ChainMap(read, cast("dict[str, Mapping[str, Any]]", kept)))

    def _grown(self, conn: Conn, scope: Scope, kept: SB.ScopeBlock, sessions: list[dict[str, Any]], read_after: int
               ) -> SB.ScopeBlock | None:
        """``kept`` with the vectors its sessions gained since it was read (``sessions``: their rows now), or None
        when they changed otherwise (or the scope is no longer small); kept in its place unless a forget came
        since ``read_after`` (see :class:`~._scope_blocks.ScopeBlocks`).
        """
        assert self._blocks is not None
        versions, dim = _versions(sessions), int(kept.block.matrix.shape[1])
        if ({r["vec_dim"] for r in sessions} == {dim} and kept.grown_by(versions)
                and sum(n for _, n in versions.values()) <= self._exact_limit):
            owners = C.session_owners(sessions)
            new, max_rid, counts, rows = self._read_vectors(conn, owners, dim, kept.max_rid)
            if all(kept.versions.get(sid, (0, 0))[1] + counts.get(sid, 0) == n for sid, (_, n) in versions.items()):
                grown = kept.extended(versions, max_rid, new, rows)
                self._blocks.put(scope, grown, read_after)
                return grown
        return None

    def _read_block(self, conn: Conn, scope: Scope, read_after: int) -> SB.ScopeBlock | None:
        """A small scope's vectors, read whole into a block, kept unless a forget came since ``read_after``; None
        (and nothing kept) for a scope without vectors, of several dimensions, or too large: the server searches it
        (a scope too large is not asked again for ``_STATS_TTL``).
        """
        assert self._blocks is not None
        self._blocks.drop(scope)
        now = time.monotonic()
        if now - self._on_server.get(scope, -math.inf) < _STATS_TTL:
            return None
        where, params = self.sql.scope_where(scope)
        for _ in range(3):  # a writer between the two reads: the counts do not add up, read again
            sessions = conn.execute(_BLOCK_SESSIONS.format(s=self.schema, where=where), params).fetchall()
            versions = _versions(sessions)
            dims = {r["vec_dim"] for r in sessions}
            if sum(n for _, n in versions.values()) > self._exact_limit:
                if len(self._on_server) >= 4096:
                    self._on_server.clear()
                self._on_server[scope] = now
                return None
            if len(dims) != 1 or not any(n for _, n in versions.values()):
                return None
            owners = C.session_owners(sessions)
            block, max_rid, counts, rows = self._read_vectors(conn, owners, dims.pop(), 0)
            if all(counts.get(sid, 0) == n for sid, (_, n) in versions.items()):
                kept = SB.ScopeBlock.of(versions, max_rid, block, rows)
                self._blocks.put(scope, kept, read_after)
                return kept
        return None

    def _read_vectors(self, conn: Conn, owners: dict[int, tuple[str, str, str]], dim: int, after: int
                      ) -> tuple[Vec.VectorBlock, int, Counter[int], dict[str, dict[str, Any]]]:
        """The vectors of the sessions ``owners`` names past row id ``after``, in row id order: as a block, with the
        highest row id among them, how many each session has, and their messages (those not too large to carry).
        """
        rows = conn.execute(
            f"SELECT {_BLOCK_ROW} FROM {self.schema}.vectors_{dim} v JOIN {self.schema}.messages m ON m.rid = v.rid"
            # both tables narrowed to the sessions and the row ids, so that the messages are read by index, never the
            # whole table, and planned for these values each time (never prepared): a plan made for any values
            # reads every message of the scope to find the few a grown block adds. Put in row id order here (the
            # server sorting the wide rows took as long as reading them).
            " WHERE v.sid = ANY(%s) AND m.sid = ANY(%s) AND v.rid > %s AND m.rid > %s",
            [list(owners), list(owners), after, after], binary=True,  # vectors as floats, not text to parse
            prepare=False,
        ).fetchall()
        rows.sort(key=lambda r: r["rid"])
        block = Vec.VectorBlock.of_columns(
            [r["id"] for r in rows], [str(r["rid"]) for r in rows], [_to_numpy(r["embedding"]) for r in rows],
            [r["role"] for r in rows], [r["kind"] for r in rows], [r["created_at"] for r in rows],
            [owners[r["sid"]] for r in rows], [r["position"] for r in rows], dim,
        ) if rows else Vec.VectorBlock.build([], dim)
        kept = {str(r["rid"]): {c: r[c] for c in _KEPT_COLS} for r in rows if r["text"] is not None}
        return block, (rows[-1]["rid"] if rows else after), Counter(r["sid"] for r in rows), kept

    def _sessions_and_best(
        self, conn: Conn, scope: Scope, query: np.ndarray, k: int
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """(the scope's sessions holding vectors, its best ``k`` by an exact search) in one round trip, the
        search made only when the scope is small enough that :meth:`_hnsw_ef` will want it exact (else None).
        """
        s, dim = self.schema, int(query.shape[0])
        where, params = self.sql.scope_where(scope)
        cached = self._table_rows.get(dim)
        rows = cached[1] if cached is not None and time.monotonic() - cached[0] <= _STATS_TTL else 0
        always = min(_EXACT_ALWAYS, self._exact_limit)
        # exact below ``always``; up to exact_limit while under half the table (see _hnsw_ef)
        below = math.inf if dim > _HNSW_MAX_DIM else max(always, min(self._exact_limit + 1, rows / 2))
        found = conn.execute(
            f"WITH sess AS (SELECT sid, vec_dim, next_position, user_id, agent_id, session_id FROM {s}.sessions s"
            f" WHERE {where} AND vec_dim IS NOT NULL),"
            f" best AS (SELECT v.rid, {_COSINE.replace('%s', '%b')} AS score FROM {s}.vectors_{dim} v"  # %b: floats
            " WHERE v.sid = ANY(ARRAY(SELECT sid FROM sess WHERE vec_dim = %s))"
            " AND (SELECT sum(next_position) FROM sess) < %s::float8 ORDER BY score DESC, v.rid LIMIT %s)"
            " SELECT NULL AS id, NULL::bigint AS rid, sid, next_position AS position, NULL::float8 AS score, vec_dim,"
            f" user_id, agent_id, session_id, {_NO_MSG_BODY} FROM sess UNION ALL SELECT m.id, m.rid, m.sid, m.position,"
            f" best.score, NULL, NULL, NULL, NULL, {_MSG_BODY} FROM best JOIN {s}.messages m ON m.rid = best.rid",
            [*params, query, dim, below, k],
        ).fetchall()
        sessions = [{**r, "next_position": r["position"]} for r in found if r["id"] is None]
        size = sum(r["next_position"] for r in sessions)
        if size >= below or {r["vec_dim"] for r in sessions} != {dim}:
            return sessions, None
        return sessions, sorted((r for r in found if r["id"] is not None), key=lambda r: (-r["score"], r["rid"]))

    def _set_ef(self, conn: Conn, ef: int) -> None:
        """``hnsw.ef_search`` for this connection's searches: set (for its session) only when it changes, so
        that a recall does not pay a round trip for it, nor a transaction for ``SET LOCAL``.
        """
        if self._conn_ef.get(conn) != ef:
            conn.execute(f"SET hnsw.ef_search = {int(ef)}")
            self._conn_ef[conn] = ef

    def _hnsw_ef(self, conn: Conn, dim: int, scope_size: int, k: int) -> int | None:
        """``hnsw.ef_search`` for an approximate search of this scope, or None to search exactly.

        The index walks the whole table and the scope filter applies after it, so it pays when
        the scope is big (over ``exact_limit``) or most of the table; ef grows as the scope's
        share shrinks, so that about 2k of the candidates belong to the scope. A scope that
        would use the index while the table has none asks for it to be built (see
        :meth:`_schedule_index`) and is searched exactly meanwhile.
        """
        if scope_size < min(_EXACT_ALWAYS, self._exact_limit) or dim > _HNSW_MAX_DIM:
            return None
        cached = self._table_rows.get(dim)
        if cached is None or time.monotonic() - cached[0] > _STATS_TTL:
            n = conn.execute(
                "SELECT greatest(reltuples, 1)::bigint AS n FROM pg_class WHERE oid = to_regclass(%s)",
                (f"{self.schema}.vectors_{dim}",),
            ).fetchone()["n"]
            cached = self._table_rows[dim] = (time.monotonic(), int(n))
        rows = max(cached[1], scope_size)
        if scope_size <= self._exact_limit and scope_size < rows / 2:
            return None
        if dim not in self._indexed:
            if self._index_state(conn, f"vectors_{dim}") != "valid":
                if rows >= self._hnsw_min_rows:
                    self._schedule_index(dim, scope_size)
                return None
            self._indexed.add(dim)
        return int(min(_MAX_EF, max(self._ef_search, k, 2 * k * rows / scope_size)))

    def search_text(
        self, scope: Scope, terms: Sequence[str], k: int, filters: Filters | None = None
    ) -> list[Hit]:
        """BM25 (binary term frequency) in SQL, with MaxScore pruning so that a common word
        costs no more than a rare one (see :mod:`._topk`).
        """
        k = C.check_search("search_text", k, filters)
        phrases = [p for p in map(self._tokenize, C.split_terms(terms)) if p]
        if not phrases or k == 0:
            return []
        with self._read() as conn:
            sessions = self._text_sessions(conn, scope)
            if not sessions:
                return []
            if self._indexed_in_process(sessions):
                kept = self._blocks.get(scope) if self._blocks is not None else None
                return self._carrying(conn, self._search_in_process(conn, sessions, phrases, k, filters),
                                      kept.rows if kept is not None else {})
            shares, table_rows = self._lexeme_stats(conn)
            queries = _word_queries(shares, phrases)
            n = max(1, sum(r["message_count"] for r in sessions))
            mean_length = max(1.0, sum(r["lexemes"] for r in sessions) / n)
            return _Lexical(self, conn, C.session_owners(sessions), n, mean_length, table_rows, queries,
                            filters).top(k)

    def _text_sessions(self, conn: Conn, scope: Scope) -> list[dict[str, Any]]:
        """The sessions a keyword search of ``scope`` reads."""
        where, params = self.sql.search_where(scope)
        return conn.execute(
            "SELECT sid, message_count, lexemes, next_position, vec_epoch, created_at, user_id, agent_id, session_id"
            f" FROM {self.schema}.sessions s WHERE {where}",
            params,
        ).fetchall()

    def _indexed_in_process(self, sessions: Sequence[dict[str, Any]]) -> bool:
        """Whether the keyword search of these sessions runs in process (not inside a batch: it may be rolled back)."""
        return (self._lexicons is not None and self._held.conn is None
                and sum(r["message_count"] for r in sessions) <= self._in_process_rows)

    def warm(self, scope: Scope, *, kept_only: bool = False) -> None:
        """Read a small ``scope``'s vector block (with its messages) and its sessions' word indexes into this
        process, or bring the kept ones up to date (see :meth:`~.base.Store.warm`; ``kept_only``: those alone), on
        a pooled connection of its own; a scope the server searches costs its check alone.
        """
        if self._held.conn is not None:  # inside a batch: its writes may be rolled back
            return
        with self._read() as conn:
            if self._blocks is not None and (not kept_only or self._blocks.get(scope) is not None):
                kept = self._kept_block(conn, scope)
                if kept is not None:
                    kept.block.make_copy()
            sessions, lexicons = self._text_sessions(conn, scope), self._lexicons
            if sessions and lexicons is not None and self._indexed_in_process(sessions):
                self._word_indexes(conn, [r for r in sessions if not kept_only or lexicons.holds(r["sid"])])

    def _search_in_process(self, conn: Conn, sessions: Sequence[dict[str, Any]], phrases: Sequence[Sequence[str]],
                           k: int, filters: Filters | None) -> list[Hit]:
        """BM25 over the scope's own messages, with the scope's own statistics, as the SQLite and Redis stores search
        a small scope (see :mod:`._bm25`): each session's index is kept, and extended by the rows appended since.
        Rows are read up to the position the session's row gave, so that an index never holds more than its
        counters say (a row appended meanwhile is read by the next search).
        """
        return B.bm25_search(self._word_indexes(conn, sessions), phrases, k, filters)

    def _word_indexes(self, conn: Conn, sessions: Sequence[dict[str, Any]]) -> list[B.LexicalIndex]:
        """Each session's keyword index, as kept (extended by the rows appended since) or built."""
        assert self._lexicons is not None
        s = self.schema

        def reader(sid: int, below: int) -> Any:
            def read(after: int) -> list[tuple[str, str, str, str, float, str, int]]:
                rows = conn.cursor(row_factory=tuple_row).execute(
                    f"SELECT id, rid::text, role, kind, created_at, left(text, %s), position FROM {s}.messages"
                    " WHERE sid = %s AND position >= %s AND position < %s ORDER BY position",
                    (2 * V.INDEXED_CHARS + 1, sid, after, below),  # an escaped text (_pg_text) is at most twice as long
                ).fetchall()
                return [(*r[:5], V.indexed_prefix(_py_text(r[5])), r[6]) for r in rows]
            return read

        return [
            self._lexicons.index(r["sid"], (r["vec_epoch"], r["created_at"]), r["next_position"], r["message_count"],
                                 (r["user_id"], r["agent_id"], r["session_id"]), reader(r["sid"], r["next_position"]))
            for r in sessions
        ]

    def _lexeme_stats(self, conn: Conn) -> tuple[dict[str, float], int]:
        """The frequent words of the ``tsv`` column and the share of rows holding each, from
        PostgreSQL's own statistics (ANALYZE, kept fresh by autovacuum), and the table's row
        count the planner uses; cached for a minute.
        """
        cached = self._shares
        if cached is not None and time.monotonic() - cached[0] < _STATS_TTL:
            return cached[1], cached[2]
        row = conn.execute(
            "SELECT st.most_common_elems::text::text[] AS elems, st.most_common_elem_freqs AS freqs,"
            " greatest(c.reltuples, 0)::bigint AS n FROM pg_class c LEFT JOIN pg_stats st ON st.schemaname = %s"
            " AND st.tablename = 'messages' AND st.attname = 'tsv' WHERE c.oid = to_regclass(%s)",
            (self.schema, f"{self.schema}.messages"),
        ).fetchone()
        shares = dict(zip(row["elems"], row["freqs"])) if row and row["elems"] else {}
        rows = int(row["n"]) if row else 0
        self._shares = (time.monotonic(), shares, rows)
        return shares, rows

    # -- housekeeping ---------------------------------------------------------------------------

    def forget(self, scope: Scope) -> dict[str, Any]:
        self._outside_batch("forget")
        where, params = self.sql.scope_where(scope)
        rwhere, rparams = self.sql.record_where(scope, exact=True)
        s = self.schema
        with self._tx() as conn:
            # The locks in the order writers take them: the records' lock that batches of record writes share
            # (see _record_write: a batch holding records and waiting for its change log's session waited for
            # the forget while the forget waited for its records, a deadlock), the messages table's write lock
            # (see _session_row), the records, then the sessions (appenders take the same row lock): what is
            # counted is what is deleted, and an append that waits for the lock lands after the forget, in a
            # session started anew.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"fullrecall.{s}.records",))
            conn.execute(f"LOCK TABLE {s}.messages IN ROW EXCLUSIVE MODE")
            namespaces = Counter(r["namespace"] for r in conn.execute(
                f"DELETE FROM {s}.records r WHERE {rwhere} RETURNING r.namespace", rparams))
            sids = [r["sid"] for r in conn.execute(
                f"SELECT sid FROM {s}.sessions s WHERE {where} ORDER BY sid FOR UPDATE", params)]
            kinds = {
                r["kind"]: r["n"]
                for r in conn.execute(
                    f"SELECT kind, count(*) AS n FROM {s}.messages WHERE sid = ANY(%s) GROUP BY kind", (sids,)
                )
            }
            dims = self._dims(conn)
            vectors = sum(
                conn.execute(f"SELECT count(*) AS n FROM {s}.vectors_{d} WHERE sid = ANY(%s)", (sids,)).fetchone()["n"]
                for d in dims
            )
            state = conn.execute(f"SELECT count(*) AS n FROM {s}.state WHERE sid = ANY(%s)", (sids,)).fetchone()["n"]
            logs = [r["sid"] for r in conn.execute(  # long-term memory's change logs
                f"SELECT sid FROM {s}.sessions WHERE sid = ANY(%s) AND substr(session_id, 1, %s) = %s",
                (sids, len(F.LOG_PREFIX), F.LOG_PREFIX))]
            log_messages = conn.execute(f"SELECT count(*) AS n FROM {s}.messages WHERE sid = ANY(%s)",
                                        (logs,)).fetchone()["n"]
            # Sessions cascade to messages (and so vectors) and state.
            sessions = conn.execute(f"DELETE FROM {s}.sessions WHERE sid = ANY(%s)", (sids,)).rowcount
            records = sum(namespaces.values())
            xid = conn.execute("SELECT txid_current() AS x").fetchone()["x"]
        counts = {
            "messages": kinds.get("message", 0),
            "summaries": kinds.get("summary", 0),
            "vectors": vectors,
            "state": state,
            "records": records,
            "sessions": sessions,
        }
        self._shares = None  # word statistics of the forgotten rows: read them again
        if self._lexicons is not None:  # nothing of the forgotten rows kept in this process either
            self._lexicons.drop(sids)
        if self._blocks is not None:
            self._blocks.drop_sessions(sids)
        tables = [f"{s}.{t}" for t in ("messages", "sessions", "state", "records")]
        vector_tables = [f"{s}.vectors_{d}" for d in dims]
        return F.result(counts, self._scrub(tables, vector_tables, xid) if any(counts.values()) else [],
                        namespaces=namespaces, log_messages=log_messages, log_sessions=len(logs))

    def _scrub(self, tables: list[str], vector_tables: list[str], xid: int) -> list[F.Remaining]:
        """VACUUM (ANALYZE) the tables that held forgotten rows: dead tuples are pruned and index
        entries removed, and ``pg_stats`` forgets their words and ids. The vector tables skip index
        cleanup: pgvector repairs the HNSW graph around every dead entry, minutes for a few thousand
        (autovacuum does it in the background). With ``forget_vacuum=full``, VACUUM FULL rewrites
        all of them and their indexes into new files. What PostgreSQL cannot remove is returned
        as ``remaining`` entries.
        """
        names, full = ", ".join(tables + vector_tables), self._forget_vacuum == "full"
        if full or not vector_tables:
            statements = [f"VACUUM ({'FULL, ' if full else ''}ANALYZE) {names}"]
        else:
            statements = [f"VACUUM (ANALYZE) {', '.join(tables)}"]
            statements.append(f"VACUUM (ANALYZE, INDEX_CLEANUP OFF) {', '.join(vector_tables)}")
        left = [
            F.Remaining(
                where="PostgreSQL WAL (pg_wal), and any WAL archive, replica and backup",
                what="the forgotten rows as written, and page images holding them",
                until="the server recycles the WAL segments after later checkpoints; archives and backups"
                " keep them until their retention ends",
            )
        ]
        if not full:
            left.insert(
                0,
                F.Remaining(
                    where=f"PostgreSQL data files of {names} (heap, TOAST, indexes)",
                    what="bytes of the forgotten rows in space VACUUM freed but does not overwrite; their"
                    " entries, vectors included, in the HNSW indexes (forget skips their cleanup) and in the"
                    " others if VACUUM skipped index cleanup (it does when they fill under 2% of the pages);"
                    f" their words as keys of the GIN index {self.schema}.messages_tsv",
                    until="new rows reuse the space and autovacuum cleans the indexes; VACUUM FULL (the store"
                    " option forget_vacuum=full) rewrites the files under an exclusive lock, in time"
                    " proportional to the tables and their indexes",
                ),
            )
        why = ""
        try:
            with self._pool().connection() as conn:  # autocommit: VACUUM cannot run in a transaction
                # A transaction whose snapshot predates the forget still sees the rows: VACUUM keeps them.
                readers = conn.execute(
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend' AND backend_xmin IS NOT NULL"
                    " AND age(backend_xmin) >= age(mod(%s, 4294967296)::text::xid)",
                    [xid],
                ).fetchone()["n"]
                if readers:
                    why = f"{readers} other transaction(s) began before the forget and may still read them"
                conn.execute(f"SET lock_timeout = '{_SCRUB_LOCK_WAIT}'")
                try:
                    for statement in statements:
                        conn.execute(statement)
                    if full:  # ANALYZE replaced their statistics; the old rows (forgotten words) are dead tuples
                        left += self._scrub_statistics(conn)
                finally:
                    conn.execute("RESET lock_timeout")
        except psycopg.errors.LockNotAvailable:  # another VACUUM, an index build (FULL: any open transaction)
            why = f"VACUUM waited {_SCRUB_LOCK_WAIT} for a lock another session holds on them"
        except (psycopg.Error, PoolTimeout) as exc:  # the rows are deleted: say what is left, do not raise
            why = f"VACUUM failed: {exc}"
        if why:
            left.insert(
                0,
                F.Remaining(
                    where=names,
                    what=f"the forgotten rows, whole, as dead tuples ({why}); pg_stats may still list their words",
                    until=f"autovacuum, or VACUUM (ANALYZE) {names} once that is over (forget again does it)",
                ),
            )
        return left

    @staticmethod
    def _scrub_statistics(conn: Conn) -> list[F.Remaining]:
        """Rewrite ``pg_statistic``, where an earlier ANALYZE kept the forgotten rows' most common words as
        values; only a superuser may, so anyone else is told where they are left.
        """
        if conn.execute("SELECT rolsuper AS su FROM pg_roles WHERE rolname = current_user").fetchone()["su"]:
            conn.execute("VACUUM FULL pg_catalog.pg_statistic")
            return []
        return [F.Remaining(
            where="pg_catalog.pg_statistic of this database",
            what="the forgotten rows' most common words and values, as statistics an earlier ANALYZE kept"
            " (dead tuples since forget's ANALYZE)",
            until="autovacuum of pg_statistic and new statistics reuse the space; VACUUM FULL"
            " pg_catalog.pg_statistic by a superuser rewrites it",
        )]


def _message_arrays(
    messages: Sequence[StoredMessage], tokenize: B.Tokenizer
) -> tuple[list[list[Any]], tuple[int, int, int]]:
    """An append's column arrays (in ``_APPEND_COLS`` order, the words of each text's indexed prefix as a
    ``tsvector`` literal) and what it adds to the session's counters: (summaries, text bytes, indexed bytes).
    """
    rows = [C.message_row(m) for m in messages]
    for r in rows:
        r["tsv"] = _tsv(tokenize, r["text"])
        r["text"] = _pg_text(r["text"])
    sizes = (sum(r["kind"] == "summary" for r in rows), sum(r["nbytes"] for r in rows),
             sum(r["ibytes"] for r in rows))
    return [[r[c] for r in rows] for c in _APPEND_COLS], sizes


def _word_queries(shares: dict[str, float], phrases: Sequence[Sequence[str]]) -> list[tuple[str, float | None]]:
    """(tsquery text, share of rows holding it or None if not among the frequent words ``shares``) per
    distinct query of ``phrases``, each the tokens of one search term.
    """
    out: dict[str, float | None] = {}
    for tokens in phrases:
        q = T.tsquery(tokens)
        if q not in out:
            known = [shares.get(T.lexeme(t)) for t in tokens]
            out[q] = None if None in known else min(known)  # type: ignore[type-var]
    return list(out.items())


def _versions(sessions: Iterable[dict[str, Any]]) -> SB.Versions:
    """Each session row's (vector epoch, vectors held) by its sid (see :mod:`._scope_blocks`)."""
    return {r["sid"]: (int(r["vec_epoch"]), int(r["vector_count"])) for r in sessions}


def _kept_hits(kept: SB.ScopeBlock | None, query: np.ndarray, k: int, filters: Filters | None) -> list[Hit] | None:
    """The best ``k`` of a kept block, carrying the messages it keeps; None without one, or for a query of another
    dimension (the server searches then).
    """
    if kept is None or kept.block.matrix.shape[1] != query.shape[0]:
        return None
    return _carried(kept.block.search(query, k, filters), kept.rows)


def _carried(hits: list[Hit], rows: SB.Rows) -> KeptHits:
    """``hits``, whose messages are those among ``rows`` (by row id, each holding ``id``, ``rid``, ``position`` and
    ``_MSG_BODY``): decoded when asked for (:class:`~.base.KeptHits`); a hit whose message is gone or too large has
    none.
    """
    return KeptHits(hits, partial(_kept_message, rows))


def _kept_message(rows: SB.Rows, hit: Hit) -> StoredMessage | None:
    owner, row = hit.owner, rows.get(hit.key)
    if owner is None or row is None or row.get("role") is None:
        return None
    return _message(row, owner)


def _hits(rows: Iterable[dict[str, Any]], owners: dict[int, tuple[str, str, str]]) -> KeptHits:
    """Hits of rows holding ``id``, ``rid``, ``sid``, ``position`` and ``score``, each with its place, and with its
    message when the row holds its columns (``_MSG_BODY``): decoded only if the caller asks (:class:`~.base.KeptHits`).
    """
    rows = list(rows)
    hits = [Hit(r["id"], float(r["score"]), str(r["rid"]), owners[r["sid"]], int(r["position"])) for r in rows]
    return _carried(hits, {h.key: r for h, r in zip(hits, rows)})


def _message(row: Mapping[str, Any], owner: tuple[str, str, str]) -> StoredMessage:
    """The message of a row holding its columns (``_MSG_COLS``, ``rid``, ``position``), owned by ``owner``."""
    return C.message_from_row({**row, "text": _py_text(row["text"])}, row["position"], owner[2], user_id=owner[0],
                              agent_id=owner[1], key=str(row["rid"]))


class _Lexical:
    """One lexical search: the candidate queries of :mod:`._topk`'s plan, run in SQL."""

    def __init__(
        self,
        store: PostgresStore,
        conn: Conn,
        owners: dict[int, tuple[str, str, str]],
        n: int,
        mean_length: float,
        table_rows: int,
        queries: list[tuple[str, float | None]],
        filters: Filters | None,
    ) -> None:
        self.store, self.conn, self.n, self.mean_length = store, conn, n, mean_length
        self.table_rows = table_rows
        self.owners, self.sids = owners, list(owners)
        self.rows: dict[int, dict[str, Any]] = {}  # rid -> the row ranked, its message's columns included
        self.queries = [q for q, _ in queries]
        self.share = {i: f for i, (_, f) in enumerate(queries) if f is not None}
        est = [None if f is None else f * n for _, f in queries]
        self.rare, common = _topk.split_rare(est, store._lexical_budget)
        self.common_idf = {i: _topk.idf(self.share[i] * n, n) for i in common}  # rare: counted in SQL
        self.fsql, self.fparams = store.sql.filters(filters)

    def top(self, k: int) -> list[Hit]:
        hits = _topk.top_k(
            k,
            self.rare,
            self.common_idf,
            self.share,
            self.n,
            self.store._lexical_budget,
            self.store._candidate_cap,
            lambda sets, capped, exclude: self._ranked(sets, k, capped, exclude),
        )
        rows = {str(rid): self.rows[rid] for _, rid, _ in hits}
        return _carried([Hit(i, s, str(rid), self.owners[self.rows[rid]["sid"]], int(self.rows[rid]["position"]))
                         for i, rid, s in hits], rows)

    def _tsquery(self, sets: list[tuple[int, ...]]) -> str:
        return " | ".join("(" + " & ".join(f"({self.queries[i]})" for i in s) + ")" for s in sets)

    def _ranked(
        self, sets: list[tuple[int, ...]], k: int, capped: bool, exclude: list[tuple[int, ...]]
    ) -> list[tuple[str, int, float]]:
        """Top ``k`` (id, rid, score) among rows matching an AND of ``sets`` and none of ``exclude``.

        A rare word's document frequency is counted here, among candidates that hold every
        row holding it; a common word's comes from the column statistics.
        """
        s, nq, n = self.store.schema, len(self.queries), self.n
        # float8 throughout: numeric arithmetic would cost more than fetching the rows
        hit_cols = ", ".join(f"(m.tsv @@ %s::tsquery)::int::float8 AS h{i}" for i in range(nq))
        weight_cols = ", ".join(
            f"{self.common_idf[i]!r}::float8 AS w{i}" if i in self.common_idf else f"ln(1 + ({n} - sum(h{i}) + 0.5) / (sum(h{i}) + 0.5)) AS w{i}"
            for i in range(nq)
        )
        weights = " + ".join(f"h{i} * w{i}" for i in range(nq))
        k1, b = _topk.K1, _topk.B
        norm = f"{k1 + 1!r} / (1 + {k1!r} * (1 - {b!r} + {b!r} * c.dl / {self.mean_length!r}::float8))"
        excluded = " AND NOT m.tsv @@ %s::tsquery" if exclude else ""
        # The rows the words' index would list, by the statistics (a rare word: few). Many more than the
        # scope holds (common words, one user among many): read the scope's rows and test each, rather
        # than the index's long lists of everyone's rows (measured: 3 ms instead of 6-10 ms for one user's
        # 2,600 messages among 52,000); the same rows and scores either way.
        listed = sum(min(self.share.get(i, 0.0) for i in group) for group in sets) * self.table_rows
        if listed > _SCOPE_FIRST * self.n:
            rows_of = f"(SELECT * FROM {s}.messages WHERE sid = ANY(%s) OFFSET 0) m WHERE m.tsv @@ %s::tsquery"
            found: list[Any] = [self.sids, self._tsquery(sets)]
        else:
            rows_of = f"{s}.messages m WHERE m.tsv @@ %s::tsquery AND m.sid = ANY(%s)"
            found = [self._tsquery(sets), self.sids]
        sql = (
            f"WITH c AS MATERIALIZED (SELECT m.rid, m.id, m.sid, m.position, length(m.tsv)::float8 AS dl, {hit_cols}"
            f" FROM {rows_of}{excluded}{self.fsql}{' LIMIT %s' if capped else ''}),"
            f" st AS (SELECT count(*) AS candidates, {weight_cols} FROM c)"  # one row, always
            f" SELECT t.*, {_MSG_BODY} FROM (SELECT c.id, c.rid, c.sid, c.position, ({weights}) * {norm} AS score"
            f" FROM c, st ORDER BY score DESC, c.rid LIMIT %s) t JOIN {s}.messages m ON m.rid = t.rid"
            " ORDER BY t.score DESC, t.rid"  # the best k's messages: the caller reads none of them after
        )
        args: list[Any] = [*self.queries, *found]
        if exclude:
            args.append(self._tsquery(exclude))
        args += self.fparams
        if capped:
            args.append(self.store._candidate_cap)
        rows = self.conn.execute(sql, [*args, k]).fetchall()
        self.rows.update((r["rid"], r) for r in rows)
        return [(r["id"], r["rid"], float(r["score"])) for r in rows]

"""The SQL core that SQLite and PostgreSQL share: a small :class:`Dialect` and the :class:`SqlStore` base.

The two backends run the same statements for reads by id or key, ranges, counts, stats, state
documents, long-term records and the checks before vectors are written; what differs is spelled by
the dialect (placeholders, the schema prefix, list and span membership, the upsert, how text and
vectors are passed, row locks). Each backend keeps what is genuinely its own: appends, deletes and
vector writes, search (FTS5 against tsvector with BM25 planning, vectors in memory against pgvector
HNSW), forget and its migrations. SQLite also keeps its own ``get_keys``, whose query is tuned to
its planner (one rowid lookup a key).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _common as C
from . import _forget as F
from . import _vectors as Vec
from ._store import StoreBase
from .base import Filters, Record, Scope, StoredMessage


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Dialect:
    """How one SQL engine spells what the shared statements need."""

    ph: str  # the placeholder: "?" (sqlite3) or "%s" (psycopg)
    schema: str = ""  # tables live in this schema ("" = the connection's default)
    chunk: int = 0  # most values one membership test takes (0: any number, passed as one array)
    text_in: Callable[[str], str] = _same  # message/record text as stored (PostgreSQL cannot store NUL)
    text_out: Callable[[str], str] = _same  # ... and back
    vector: Callable[[np.ndarray], Any] = _same  # a record's vector as a statement parameter
    lock: str = ""  # appended to a SELECT whose rows the transaction must hold (a write transaction holds all)

    def t(self, table: str) -> str:
        """The table's name as statements write it."""
        return f"{self.schema}.{table}" if self.schema else table

    def in_(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column`` is one of ``values``: an array parameter, or a list of placeholders."""
        if not values:
            return "1 = 0", []
        if not self.chunk:
            return f"{column} = ANY({self.ph})", [list(values)]
        return f"{column} IN ({', '.join([self.ph] * len(values))})", list(values)

    def chunks(self, values: Sequence[Any]) -> Iterator[Sequence[Any]]:
        """``values`` in pieces that one membership test takes (none when there are no values)."""
        size = self.chunk or max(1, len(values))
        for i in range(0, len(values), size):
            yield values[i : i + size]

    def in_chunks(self, column: str, values: Sequence[Any]) -> Iterator[tuple[str, list[Any]]]:
        """:meth:`in_` over ``values`` in the pieces one statement takes (nothing when there are none)."""
        for chunk in self.chunks(values):
            yield self.in_(column, chunk)

    def spans(self, column: str, spans: Sequence[tuple[int, int]]) -> Iterator[tuple[str, list[Any]]]:
        """Conditions that ``column`` lies in one of the inclusive ``spans``: one OR of them all where
        the engine reads an OR of ranges as that many index range scans (PostgreSQL's bitmap OR; a semi
        join against the spans as arrays would scan the whole conversation), or one a distinct span
        (SQLite: an OR of spans would defeat its index).
        """
        distinct = list(dict.fromkeys(spans))
        if distinct and not self.chunk:
            yield (
                "(" + " OR ".join(f"{column} BETWEEN {self.ph} AND {self.ph}" for _ in distinct) + ")",
                [bound for span in distinct for bound in span],
            )
            return
        for lo, hi in distinct:
            yield f"{column} BETWEEN {self.ph} AND {self.ph}", [lo, hi]

    def upsert(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
        """Insert a row, or replace the non-key columns of the row with the same ``key``."""
        update = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)
        return (
            f"INSERT INTO {self.t(table)} ({', '.join(columns)}) VALUES ({', '.join([self.ph] * len(columns))})"
            f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {update}"
        )

    def scope_where(self, scope: Scope, alias: str = "s") -> tuple[str, list[Any]]:
        """Condition on the sessions table for a scope: unset user/agent is the stored '' (ANY: no condition)."""
        conds, params = [f"{alias}.tenant = {self.ph}"], [scope.tenant]
        for col, value in C.scope_fields(scope).items():
            if col != "tenant" and value is not None:
                conds.append(f"{alias}.{col} = {self.ph}")
                params.append(value)
        return " AND ".join(conds), params

    def search_where(self, scope: Scope, alias: str = "s") -> tuple[str, list[Any]]:
        """:meth:`scope_where` for a search: across sessions (no ``session_id``), long-term memory's change logs
        are left out (bookkeeping, never the owner's messages, nor part of their words' statistics).
        """
        where, params = self.scope_where(scope, alias)
        if scope.session is None:
            where += f" AND substr({alias}.session_id, 1, {len(F.LOG_PREFIX)}) <> {self.ph}"
            params.append(F.LOG_PREFIX)
        return where, params

    def record_where(self, scope: Scope, exact: bool = False, alias: str = "r") -> tuple[str, list[Any]]:
        """Records of a scope's owner (user and agent exactly, unless ANY).

        A record stored without a session applies to every session of its owner; with
        ``exact`` (forget, stats) a session scope matches only its own records.
        """
        conds, params = [f"{alias}.tenant = {self.ph}"], [scope.tenant]
        for col, value in C.scope_fields(scope).items():
            if col == "tenant" or value is None:
                continue
            if col == "session_id" and not exact:
                conds.append(f"{alias}.{col} IN ({self.ph}, '')")
            else:
                conds.append(f"{alias}.{col} = {self.ph}")
            params.append(value)
        return " AND ".join(conds), params

    def filters(self, f: Filters | None, alias: str = "m") -> tuple[str, list[Any]]:
        """`` AND ...`` conditions for search filters (empty when there are none)."""
        if f is None:
            return "", []
        conds: list[str] = []
        params: list[Any] = []
        for column, values in (("role", f.roles), ("kind", f.kinds)):
            if values is not None:
                sql, p = self.in_(f"{alias}.{column}", list(values))
                conds.append(sql)
                params += p
        if f.since is not None:
            conds.append(f"{alias}.created_at >= {self.ph}")
            params.append(f.since)
        if f.until is not None:
            conds.append(f"{alias}.created_at <= {self.ph}")
            params.append(f.until)
        if f.exclude_ids:
            sql, p = self.in_(f"{alias}.id", sorted(f.exclude_ids))
            conds.append(f"NOT ({sql})")
            params += p
        return "".join(f" AND {c}" for c in conds), params


def records_table(name: str, real: str, vector: str) -> str:
    """The ``records`` table of both backends' first migration, in the dialect's types.

    Part of a migration that has run on existing stores: what it returns must never change.
    """
    return f"""CREATE TABLE {name} (
        tenant TEXT NOT NULL,
        user_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        namespace TEXT NOT NULL,
        id TEXT NOT NULL,
        text TEXT NOT NULL,
        data TEXT NOT NULL,
        created_at {real} NOT NULL,
        updated_at {real} NOT NULL,
        vec {vector},
        PRIMARY KEY (tenant, user_id, agent_id, session_id, namespace, id)
    );"""


_RECORD_COLUMNS = ("tenant", "user_id", "agent_id", "session_id", "namespace", "id", "text", "data", "created_at",
                   "updated_at", "vec")
_RECORD_KEY = ("tenant", "user_id", "agent_id", "session_id", "namespace", "id")


class SqlStore(StoreBase):
    """What the SQL backends share, written once against :attr:`sql` and four hooks.

    Hooks: ``_read``/``_write`` (a transaction's connection; rows readable by column name; ``_write_one``
    for a write of one statement, ``_write`` unless the backend runs one statement as its own transaction),
    ``_session_row`` (the session's ``sid`` and ``next_position``, created if new, held for the
    transaction) and ``_select_messages`` (messages of joined ``m``/``s`` rows matching a condition, by session
    and position unless ``ordered`` is false).
    """

    sql: Dialect

    def _read(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _write_one(self) -> AbstractContextManager[Any]:
        """A connection for a write of one statement (the backend may run it as its own transaction)."""
        return self._write()

    def _record_write(self) -> AbstractContextManager[Any]:
        """A connection for a write of one long-term record (see :meth:`_write_one`)."""
        return self._write_one()

    def _session_row(self, conn: Any, scope: Scope) -> Any:
        raise NotImplementedError

    def _select_messages(self, conn: Any, where: str, params: Sequence[Any], ordered: bool = True
                         ) -> list[StoredMessage]:
        raise NotImplementedError

    def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """The rows of one read statement, in its own transaction."""
        with self._read() as conn:
            return list(conn.execute(sql, params).fetchall())

    # -- messages by id or key, counts ----------------------------------------------------

    def _select_in(self, scope: Scope, column: str, values: Sequence[Any]) -> list[StoredMessage]:
        where, params = self.sql.scope_where(scope)
        out: list[StoredMessage] = []
        with self._read() as conn:
            # Unordered: the rows are put in conversation order here. SQLite would otherwise satisfy an
            # ORDER BY by walking the session's positions (the whole conversation) for every chunk of
            # values, instead of looking each one up in the (sid, id) index.
            for cond, p in self.sql.in_chunks(column, values):
                out += self._select_messages(conn, f"{where} AND {cond}", [*params, *p], ordered=False)
        return C.in_conversation_order(out)

    def get(self, scope: Scope, ids: Iterable[str]) -> list[StoredMessage]:
        return self._select_in(scope, "m.id", C.read_ids(ids))

    def get_keys(self, scope: Scope, keys: Iterable[str]) -> list[StoredMessage]:
        return self._select_in(scope, "m.rid", C.int_keys(keys))

    def _get_copies(self, scope: Scope, ids: list[str]) -> list[StoredMessage]:
        # The scope's ids holding an '@' (an index scan of ids, no message read), matched in Python: a LIKE or
        # a range of ids would read an id's '%' or '_' as a pattern, or depend on PostgreSQL's collation.
        where, params = self.sql.scope_where(scope)
        rows = self._fetch(f"SELECT m.rid, m.id FROM {self.sql.t('messages')} m JOIN {self.sql.t('sessions')} s"
                           f" ON s.sid = m.sid WHERE {where} AND m.id LIKE {self.sql.ph}", [*params, "%@%"])
        wanted = set(ids)
        return self.get_keys(scope, [str(r["rid"]) for r in rows if C.derived_from(r["id"], wanted)])

    def ranges(self, scope: Scope, spans: Sequence[tuple[int, int]]) -> list[list[StoredMessage]]:
        scope.require_session()
        spans = C.check_spans(spans)
        where, params = self.sql.scope_where(scope)
        if not self.sql.chunk:  # one statement (PostgreSQL): the session's row id as a constant, so that each
            # span is one range scan of (sid, position), never a scan of every session's positions
            where = f"{where} AND m.sid = (SELECT s.sid FROM {self.sql.t('sessions')} s WHERE {where})"
            params = [*params, *params]
        found: dict[int, StoredMessage] = {}
        with self._read() as conn:  # one snapshot for every span (one statement where arrays are passed)
            for within, p in self.sql.spans("m.position", spans):
                for m in self._select_messages(conn, f"{where} AND {within}", [*params, *p]):
                    found[m.position or 0] = m
        return C.split_spans(list(found.values()), spans)

    def count(self, scope: Scope) -> int:
        where, params = self.sql.scope_where(scope)  # the sessions' counters: one row each, whatever their size
        rows = self._fetch(f"SELECT coalesce(sum(message_count), 0) AS n FROM {self.sql.t('sessions')} s WHERE {where}",
                           params)
        return int(rows[0]["n"])

    def sessions(self, scope: Scope) -> list[Scope]:
        where, params = self.sql.scope_where(scope)  # the sessions' counters: one row each, whatever their size
        rows = self._fetch(f"SELECT user_id, agent_id, session_id FROM {self.sql.t('sessions')} s"
                           f" WHERE {where} AND s.message_count > 0", params)
        return C.session_scopes(scope.tenant, [(r["user_id"], r["agent_id"], r["session_id"]) for r in rows])

    def vector_model(self, scope: Scope) -> tuple[str, int] | None:
        where, params = self.sql.scope_where(scope)
        models = self._fetch(
            f"SELECT DISTINCT vec_model, vec_dim FROM {self.sql.t('sessions')} s"
            f" WHERE {where} AND vec_model IS NOT NULL",
            params,
        )
        if len(models) > 1:
            found = [(m["vec_model"], int(m["vec_dim"])) for m in models]
            raise ValueError(f"this scope mixes vectors of several models: {found}")
        return (models[0]["vec_model"], int(models[0]["vec_dim"])) if models else None

    def stats(self, scope: Scope) -> dict[str, int]:
        """The scope's sizes from its sessions' counters (one row per session, whatever their size)."""
        where, params = self.sql.scope_where(scope)
        rwhere, rparams = self.sql.record_where(scope, exact=True)
        messages = self.sql.t("messages")
        with self._read() as conn:
            row = conn.execute(
                "SELECT count(*) AS sessions, coalesce(sum(message_count), 0) AS m, coalesce(sum(summary_count), 0) AS"
                " sm, coalesce(sum(text_bytes), 0) AS tb, coalesce(sum(index_bytes), 0) AS ib,"
                " coalesce(sum(vector_count), 0) AS v, coalesce(sum(vector_count * coalesce(vec_dim, 0) * 4), 0) AS vb,"
                f" min((SELECT min(position) FROM {messages} m WHERE m.sid = s.sid)) AS oldest,"
                f" max((SELECT max(position) FROM {messages} m WHERE m.sid = s.sid)) AS newest"
                f" FROM {self.sql.t('sessions')} s WHERE {where}",
                params,
            ).fetchone()
            records = conn.execute(
                f"SELECT count(*) AS n FROM {self.sql.t('records')} r WHERE {rwhere}", rparams
            ).fetchone()["n"]
        return C.stats_dict(row["m"], row["sm"], row["tb"], row["ib"], row["v"], row["vb"], sessions=row["sessions"],
                            records=records, oldest=row["oldest"], newest=row["newest"])

    def _vector_targets(
        self, conn: Any, scope: Scope, ids: list[str], model: str, dim: int
    ) -> tuple[Any, dict[str, int]]:
        """The session's row (held until commit) and the row id of each of ``ids`` it holds, for vectors of
        ``model``: (None, {}) when there is no session. Ids it does not hold are left out (deleted or forgotten
        since they were appended: their vectors have nothing to attach to, see :meth:`Store.set_vectors`).

        ValueError when the session holds another model's vectors.
        """
        where, params = self.sql.scope_where(scope)
        sess = conn.execute(f"SELECT * FROM {self.sql.t('sessions')} s WHERE {where}{self.sql.lock}", params).fetchone()
        if sess is None:
            return None, {}
        if sess["vec_model"] is not None and (sess["vec_model"], sess["vec_dim"]) != (model, dim):
            raise Vec.model_mismatch((sess["vec_model"], sess["vec_dim"]), model, dim)
        rids: dict[str, int] = {}
        for cond, p in self.sql.in_chunks("id", list(dict.fromkeys(ids))):
            rids.update(
                (r["id"], r["rid"])
                for r in conn.execute(
                    f"SELECT id, rid FROM {self.sql.t('messages')} WHERE sid = {self.sql.ph} AND {cond}",
                    [sess["sid"], *p],
                )
            )
        return sess, rids

    # -- state documents --------------------------------------------------------------------

    def put_state(self, scope: Scope, key: str, value: dict[str, Any], expected: int | None = None) -> int:
        doc = C.state_json(key, value)
        ph = self.sql.ph
        with self._write() as conn:  # the session's row is held: writers of its state take turns
            sid = self._session_row(conn, scope)["sid"]
            row = conn.execute(
                f"SELECT version FROM {self.sql.t('state')} WHERE sid = {ph} AND key = {ph}", (sid, key)
            ).fetchone()
            version = int(row["version"]) if row else 0
            C.check_expected(key, expected, version)
            conn.execute(
                self.sql.upsert("state", ("sid", "key", "value", "updated_at", "version"), ("sid", "key")),
                (sid, key, doc, time.time(), version + 1),
            )
        return version + 1

    def _get_versioned_state(self, scope: Scope, key: str) -> tuple[dict[str, Any] | None, int]:
        scope.require_session()
        where, params = self.sql.scope_where(scope)
        rows = self._fetch(
            f"SELECT t.value, t.version FROM {self.sql.t('state')} t JOIN {self.sql.t('sessions')} s"
            f" ON s.sid = t.sid WHERE {where} AND t.key = {self.sql.ph}",
            [*params, key],
        )
        return (C.json_loads(rows[0]["value"]), int(rows[0]["version"])) if rows else (None, 0)

    # -- long-term records --------------------------------------------------------------------

    def _put_record(
        self, scope: Scope, owner: tuple[str, str, str, str], record: Record, data: str, vector: np.ndarray | None,
        expected: int | None,
    ) -> int:
        # one statement whatever ``expected`` is, its new version returned: an upsert (a new row is at 1, a
        # held one goes one up), an insert of a row not held (0), or an update of the row at that version
        ph, t = self.sql.ph, self.sql.t("records")
        key = " AND ".join(f"{c} = {ph}" for c in _RECORD_KEY)
        values = [*owner, record.namespace, record.id, self.sql.text_in(record.text), data, record.created_at,
                  record.updated_at, self.sql.vector(vector) if vector is not None else None]
        changed = [c for c in _RECORD_COLUMNS if c not in _RECORD_KEY]
        if expected:
            params = [*values[len(_RECORD_KEY):], *values[:len(_RECORD_KEY)], expected]
            statement = (f"UPDATE {t} SET {', '.join(f'{c} = {ph}' for c in changed)}, version = version + 1"
                         f" WHERE {key} AND version = {ph}")
        else:
            replace = f"UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in changed)}, version = r.version + 1"
            params = values
            statement = (f"INSERT INTO {t} AS r ({', '.join(_RECORD_COLUMNS)}, version)"
                         f" VALUES ({', '.join([ph] * len(values))}, 1) ON CONFLICT ({', '.join(_RECORD_KEY)})"
                         f" DO {'NOTHING' if expected == 0 else replace}")
        with self._record_write() as conn:
            rows = conn.execute(f"{statement} RETURNING version", params).fetchall()  # all: SQLite ends it there
            if rows:
                return int(rows[0]["version"])
            held = conn.execute(f"SELECT version FROM {t} WHERE {key}", values[:len(_RECORD_KEY)]).fetchone()
        raise C.state_conflict(record.id, expected, int(held["version"]) if held else 0, what="record")

    def _get_records(self, scope: Scope, namespace: str) -> list[Record]:
        where, params = self.sql.record_where(scope)
        rows = self._fetch(
            f"SELECT id, namespace, text, data, created_at, updated_at, version FROM {self.sql.t('records')} r"
            f" WHERE {where} AND namespace = {self.sql.ph} ORDER BY created_at, id",
            [*params, namespace],
        )
        return [C.record_from_row({**dict(r), "text": self.sql.text_out(r["text"])}) for r in rows]

    def _get_record(self, owner: tuple[str, str, str, str], namespace: str, record_id: str) -> Record | None:
        ph = self.sql.ph  # the primary key, at most two rows: the session's own sorts before its owner's ("")
        rows = self._fetch(
            f"SELECT id, namespace, text, data, created_at, updated_at, version FROM {self.sql.t('records')}"
            f" WHERE tenant = {ph} AND user_id = {ph} AND agent_id = {ph} AND session_id IN ({ph}, '')"
            f" AND namespace = {ph} AND id = {ph} ORDER BY session_id DESC LIMIT 1",
            [*owner, namespace, record_id],
        )
        return C.record_from_row({**dict(rows[0]), "text": self.sql.text_out(rows[0]["text"])}) if rows else None

    def _delete_record(self, scope: Scope, namespace: str, record_id: str, expected: int | None) -> bool:
        where, params = self.sql.record_where(scope)
        ph = self.sql.ph
        version = "" if expected is None else f" AND version = {ph}"
        with self._record_write() as conn:
            n = conn.execute(
                f"DELETE FROM {self.sql.t('records')} AS r WHERE {where} AND namespace = {ph} AND id = {ph}{version}",
                [*params, namespace, record_id, *([] if expected is None else [expected])],
            ).rowcount
        if n > 0:
            self._after_record_delete()
        return bool(n > 0)

    def _after_record_delete(self) -> None:
        """Once a record's deletion is committed: what the backend does so that its words leave the files too."""

"""Redis store: per-conversation keys, atomic, expiring, really deleted.

Key layout (``P`` is the prefix, ``fullrecall`` by default, ``fullrecall:tenant:{t}`` for a
tenant other than ``default``; user/agent/session values are %-quoted, ``*`` means none)::

    P:user:{u}[:agent:{a}]:session:{s}:meta    hash  scope, next position, version, born, serial, vector model, ttl
    ...:session:{s}:msgs                       hash  message id -> message JSON (verbatim data; its serial first)
    ...:session:{s}:order                      zset  message id scored by position
    ...:session:{s}:vecs                       hash  message id -> float32 bytes
    ...:session:{s}:state                      hash  key -> JSON document, key NUL "v" -> its version
    ...:session:{s}:added                      list  'm'/'v' + id of each addition since the last deletion
    P:user:{u}:records:{namespace}             hash  long-term records of the user (JSON, ending in its version)
    P:user:{u}:record-namespaces, P:user:{u}:sessions, P:users, P:sessions:{s}   index sets

* **Every key has a TTL** (default 210 days; ``ttl_seconds=`` per store,
  :meth:`RedisStore.set_ttl` per session), refreshed on every write to the session. Index
  sets only ever get their TTL extended, and members whose session expired are dropped
  when met. Expired data is gone from the server, not hidden.
* **Writes are Lua scripts**, so each is atomic: positions come from the session's counter
  (``HINCRBY``-style, inside the script) and a retried append with the same ids is a no-op.
  Each message stored is numbered by the session's ``serial`` counter, which its store-global
  key carries: a key is never reused, not by a message added again under a deleted one's id.
* **Search runs in process**: numpy cosine over the session's vectors and Okapi BM25 over
  its texts (stemmed with PyStemmer when installed), cached per session. When the session's
  ``version`` moves (any process's write), only the additions logged in ``added`` since the
  cache was built are loaded; a deletion or overwrite moves its ``epoch`` and the cache is rebuilt.
* **Counters**: the meta hash keeps the session's summary count, text and index bytes, updated
  by the write scripts, so ``stats`` costs a few O(1) commands per session. Servers with a query
  engine with vector search (RediSearch >= 2.4, Redis 8) are detected (``search_module``)
  but not used yet; older RediSearch (Debian's ``redis-redisearch`` is 1.2) has no vectors.
* **Durability** is the server's: run it with ``appendonly yes``; ``appendfsync everysec``
  may lose the last second of acknowledged writes if the *server's machine* crashes,
  ``appendfsync always`` loses nothing at a higher cost. A client crash loses nothing acknowledged.
* **forget** UNLINKs the keys, then has the server rewrite its AOF (and its RDB snapshot when
  it takes them), waiting up to 2 s each; what is still on disk is returned under
  ``remaining``. Each session's meta records its creation (``born``, server time), which
  qualifies its version in every process's cache: a conversation forgotten and begun again
  under the same keys is never answered from a cache of the old one.
* Redis >= 7.0 (``EXPIRE ... NX|GT``), single node or a primary; Redis Cluster is not
  supported (scripts touch index keys in other hash slots).

URL: ``redis://[:password@]host:6379/0?prefix=fullrecall&ttl_seconds=18144000``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, cast
from urllib.parse import parse_qs, parse_qsl, quote, urlsplit

import numpy as np
import redis as redis_lib

from .._fork import renew_in_child
from .._secrets import address, without_passwords
from ..errors import InvalidInput, StoreError
from . import _bm25 as B
from . import _common as C
from . import _forget as F
from . import _validate as V
from . import _vectors as Vec
from ._store import StoreBase
from .base import DEFAULT_TENANT, Appended, Filters, Hit, Record, Scope, StoredMessage

DEFAULT_TTL_SECONDS = 210 * 24 * 3600
_OWN_OPTIONS = ("prefix", "ttl_seconds", "ttl_days", "cache_sessions")  # the others (socket_timeout, ...) are redis-py's
_MAX_TTL_SECONDS = 2**53 - 1  # exact in a script's Lua number, and far below EXPIRE's limit (2**63 ms)
_FAMILIES = ("meta", "msgs", "order", "vecs", "state", "added")
_SCAN_ABOVE = 20_000  # sessions with more messages are read for search in pages
_SCAN_PAGE = 2_000
_NONE = "*"  # a missing user/agent in a key (quote() never yields a bare "*")
_KEY_SEP = "#"  # a store-global message key: session base # birth # "n" serial # message id (quote() escapes "#")
_SCRUB_WAIT, _SCRUB_POLLS = 2.0, 100  # forget waits this long (s) for each AOF rewrite / RDB save it starts
_PERSISTING = ("aof_rewrite_in_progress", "aof_rewrite_scheduled", "rdb_bgsave_in_progress")

# The Lua scripts, one a file in ``lua/`` (package data); the write scripts run after ``_prelude.lua``,
# which documents the KEYS and ARGV they share.
_WRITE_SCRIPTS = ("append", "set_vectors", "delete", "put_state", "set_ttl", "recount")
_OWN_SCRIPTS = ("ranges", "additions", "forget_session", "put_record", "delete_record")  # standalone: their KEYS differ


@functools.cache
def _lua_sources() -> dict[str, str]:
    """Each script's Lua source by name, read once from the package."""
    folder = resources.files("fullrecall.stores") / "lua"
    prelude = (folder / "_prelude.lua").read_text(encoding="utf-8")
    return {
        name: (prelude if name in _WRITE_SCRIPTS else "") + (folder / f"{name}.lua").read_text(encoding="utf-8")
        for name in _WRITE_SCRIPTS + _OWN_SCRIPTS
    }


def _q(value: str | None) -> str:
    return _NONE if value is None or value == "" else quote(value, safe="")


@dataclass
class _Session:
    base: str
    meta: dict[str, str]

    @property
    def session_id(self) -> str:
        return self.meta["session_id"]

    def key(self, family: str) -> str:
        return f"{self.base}:{family}"


_Attrs = tuple[str, str, float, int | None, str]  # a message's (role, kind, created_at, position, key)


@dataclass
class _Cached:
    """A session's search structures as of ``version``; ``epoch`` (birth/deletions) says whether the
    additions logged after the first ``logged`` entries can be loaded on top of them.
    """

    epoch: str
    version: str
    logged: int
    lexical: B.LexicalIndex
    vectors: Vec.VectorBlock | None
    attrs: dict[str, _Attrs]  # id -> (role, kind, created_at, position, key), for vectors


def split_url(url: str) -> tuple[str, dict[str, str]]:
    return C.split_url(url, ("redis", "rediss"), _OWN_OPTIONS)


def _ttl(opts: dict[str, Any]) -> int | None:
    """The ``ttl_seconds`` or ``ttl_days`` given (in seconds), in the URL or as a keyword: one set of options, the
    same checks; None when neither is given. Both is refused, as one would silently win.
    """
    if "ttl_seconds" in opts and "ttl_days" in opts:
        raise ValueError("store options ttl_days and ttl_seconds both given: give one")
    if "ttl_days" in opts:
        days = C.number_option("ttl_days", opts["ttl_days"], whole=False, least=0, most=_MAX_TTL_SECONDS // 86400)
        if days * 86400 < 1:  # a key's TTL is whole seconds
            raise ValueError(f"store option ttl_days must be at least a second (1/86400), got {opts['ttl_days']!r}")
        return round(days * 86400)
    if "ttl_seconds" in opts:
        return int(C.number_option("ttl_seconds", opts["ttl_seconds"], whole=True, least=1, most=_MAX_TTL_SECONDS))
    return None


def _socket_timeout(conn_url: str, keyword: Any) -> None:
    """Refuse a ``socket_timeout`` (redis-py's: the URL's wins over the keyword) that is no number of seconds a
    socket can wait, naming it, rather than redis-py's or the socket's words on the first command; the keyword's
    None (no timeout) is redis-py's to take.
    """
    for value in parse_qs(urlsplit(conn_url).query, keep_blank_values=True).get("socket_timeout", [keyword]):
        if value is not None:
            C.number_option("socket_timeout", value, whole=False, least=0.001, most=2**31 - 1)


def _check_client_options(conn_url: str) -> None:
    """Refuse, naming it, a query option neither ours nor redis-py's (a misspelt ``prefx``): redis-py hands every
    option to its connection, which raises TypeError on the first command.
    """
    parts = urlsplit(conn_url)
    connection = redis_lib.connection.SSLConnection if parts.scheme == "rediss" else redis_lib.connection.Connection
    taken = _keywords(connection) | _keywords(redis_lib.connection.ConnectionPool)
    unknown = sorted({k for k, _ in parse_qsl(parts.query, keep_blank_values=True)} - taken)
    if unknown:
        raise ValueError(f"redis URL: unknown option(s) {', '.join(unknown)}; the options are "
                         f"{', '.join(_OWN_OPTIONS)} and redis-py's connection keywords (socket_timeout, db, ...)")


@functools.cache
def _keywords(cls: type) -> frozenset[str]:
    """The keywords ``cls`` and the classes it builds on take when made."""
    inits = (k.__dict__["__init__"] for k in cls.__mro__ if "__init__" in k.__dict__)
    return frozenset(p.name for init in inits for p in inspect.signature(init).parameters.values()
                     if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self")


def _check_ttl(seconds: int, name: str) -> int:
    """``seconds`` if it is a whole number of seconds Redis can expire keys after; else InvalidInput."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 < seconds <= _MAX_TTL_SECONDS:
        raise InvalidInput(f"{name} must be an int from 1 to {_MAX_TTL_SECONDS} (every key expires), got {seconds!r}")
    return seconds


class RedisStore(StoreBase):
    """:class:`~fullrecall.stores.base.Store` on Redis (see the module docstring)."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "fullrecall",
        ttl_seconds: int | None = None,
        ttl_days: float | None = None,
        socket_timeout: float | None = 10.0,
        cache_sessions: int = 10_000,
    ) -> None:
        conn_url, opts = split_url(url)
        _check_client_options(conn_url)
        _socket_timeout(conn_url, socket_timeout)
        keywords = {k: v for k, v in (("ttl_seconds", ttl_seconds), ("ttl_days", ttl_days)) if v is not None}
        ttl_seconds = _ttl({**keywords, **opts}) or DEFAULT_TTL_SECONDS  # the URL's win, as every option's
        self.url = url
        self.prefix = opts.get("prefix", prefix)
        self.ttl_seconds = ttl_seconds
        self._r = redis_lib.Redis.from_url(conn_url, socket_timeout=socket_timeout, socket_connect_timeout=5)
        self._scripts = {name: self._r.register_script(src) for name, src in _lua_sources().items()}
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._cache_sessions = int(C.number_option(
            "cache_sessions", opts.get("cache_sessions", cache_sessions), whole=True, least=0))
        self._lock = threading.Lock()
        self._forgets = 0  # forgets so far: what a search read before one is not cached
        self._tokenize = B.Tokenizer()
        self._closed = False
        with self._errors("connect to"):
            self._r.ping()
        self.search_module = self._detect_search_module()
        renew_in_child(self)

    def _after_fork(self) -> None:
        """A forked child starts with a new lock and no cache (redis-py opens the child's own connections)."""
        self._lock = threading.Lock()
        self._cache = OrderedDict()

    def _detect_search_module(self) -> bool:
        """Whether the server has a query engine with vector search (RediSearch >= 2.4); not used yet."""
        try:
            modules = self._r.module_list()
        except redis_lib.RedisError:  # MODULE may be disabled or renamed on managed services
            return False
        for m in modules:
            fields = {(k.decode() if isinstance(k, bytes) else k): v for k, v in m.items()}
            name = fields.get("name", b"")
            name = name.decode() if isinstance(name, bytes) else str(name)
            if name.lower() == "search" and int(fields.get("ver", 0)) >= 20400:
                return True
        return False

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        if self._closed:
            raise StoreError(f"store {self._safe_url()} is closed")
        try:
            yield
        except redis_lib.exceptions.ResponseError as exc:
            raise _script_error(exc) from exc
        except UnicodeEncodeError as exc:  # a lone surrogate in an argument the rule does not check
            raise V.not_unicode(exc) from exc
        except redis_lib.RedisError as exc:
            raise StoreError(
                f"could not {action} Redis at {self._safe_url()}; nothing was acknowledged: "
                f"{without_passwords(str(exc), self.url)}"
            ) from exc

    def _safe_url(self) -> str:
        return address(self.url)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            self._forgets += 1  # a read under way caches nothing in a closed store
            self._cache.clear()
        self._r.close()

    def __repr__(self) -> str:
        return f"RedisStore({self._safe_url()!r}, prefix={self.prefix!r})"

    # -- keys and sessions --------------------------------------------------------

    def _p(self, scope: Scope) -> str:
        return self.prefix if scope.tenant == DEFAULT_TENANT else f"{self.prefix}:tenant:{quote(scope.tenant, safe='')}"

    def _base(self, scope: Scope) -> str:
        user, agent, session = scope.owner()
        agent_seg = f":agent:{_q(agent)}" if agent else ""
        return f"{self._p(scope)}:user:{_q(user)}{agent_seg}:session:{quote(session, safe='')}"

    def _run(self, name: str, scope: Scope, args: Sequence[Any]) -> Any:
        """Run a write script on the session of ``scope`` (keys and scope args filled in)."""
        user, agent, session = scope.owner()
        p, base = self._p(scope), self._base(scope)
        keys = [f"{base}:{f}" for f in _FAMILIES[:5]] + [
            f"{p}:user:{_q(user)}:sessions",
            f"{p}:users",
            f"{p}:sessions:{quote(session, safe='')}",
            f"{base}:added",
        ]
        argv = [self.ttl_seconds, base, _q(user), scope.tenant, user, agent, session, *args]
        with self._errors("write to"):
            return self._scripts[name](keys=keys, args=argv)

    def _sessions(self, scope: Scope) -> list[_Session]:
        """Live sessions matching a (partial) scope, from the index sets; expired members are dropped."""
        p = self._p(scope)
        with self._errors("read from"):
            if scope.session is not None:
                index_keys = [f"{p}:sessions:{quote(scope.session, safe='')}"]
            elif isinstance(scope.user_id, str):
                index_keys = [f"{p}:user:{_q(scope.user_id)}:sessions"]
            else:
                index_keys = [f"{p}:user:{u}:sessions" for u in self._members(f"{p}:users")]
            pipe = self._r.pipeline(transaction=False)
            for k in index_keys:
                pipe.smembers(k)
            candidates = sorted(
                {(k, m.decode()) for k, ms in zip(index_keys, pipe.execute()) for m in ms}, key=lambda x: x[1]
            )
            pipe = self._r.pipeline(transaction=False)
            for _, base in candidates:
                pipe.hgetall(f"{base}:meta")
            metas = pipe.execute()
            out, stale = [], self._r.pipeline(transaction=False)
            for (index_key, base), raw in zip(candidates, metas):
                if not raw:
                    stale.srem(index_key, base)
                    continue
                meta = {k.decode(): v.decode() for k, v in raw.items()}
                if all(
                    want is None or meta.get(field) == want
                    for field, want in C.scope_fields(scope).items()
                    if field != "tenant"
                ):
                    out.append(_Session(base, meta))
            if len(stale):
                stale.execute()
        return out

    # -- archived messages ------------------------------------------------------------

    def _append(self, scope: Scope, messages: list[StoredMessage]) -> Appended:
        return self._replace(scope, [], messages)

    def _replace(self, scope: Scope, ids: list[str], messages: list[StoredMessage]) -> Appended:
        args: list[Any] = [len(ids), *ids, len(messages)]  # one script: the deletion and the append, atomically
        for m in messages:
            row = C.message_row(m)
            args += [m.id, "" if m.position is None else m.position, json.dumps(row, ensure_ascii=False),
                     int(m.kind == "summary"), row["nbytes"], row["ibytes"]]
        try:
            positions, held = self._run("append", scope, args)
        except _ScriptError as exc:
            if exc.kind == "past":  # the script's message number counts from 1
                raise C.no_position_left(messages, int(exc.detail) - 1) from None
            if exc.kind != "position":
                raise
            raise C.position_taken(scope) from None
        return Appended([int(p) for p in positions], [messages[int(i) - 1].id for i in held])

    def _read_messages(self, session: _Session, ids: list[str]) -> list[StoredMessage]:
        pipe = self._r.pipeline(transaction=False)
        pipe.hmget(session.key("msgs"), ids)
        pipe.zmscore(session.key("order"), ids)
        bodies, positions = pipe.execute()
        meta = session.meta
        return [
            C.message_from_row(doc, int(pos), session.session_id, user_id=meta.get("user_id", ""),
                               agent_id=meta.get("agent_id", ""), key=_key(session, doc))
            for i, body, pos in zip(ids, bodies, positions)
            if body is not None and pos is not None
            for doc in (json.loads(body),)
        ]

    def get(self, scope: Scope, ids: Iterable[str]) -> list[StoredMessage]:
        ids = C.read_ids(ids)
        if not ids:
            return []
        out: list[StoredMessage] = []
        with self._errors("read from"):
            for session in self._sessions(scope):
                out += self._read_messages(session, ids)
        return C.in_conversation_order(out)

    def get_keys(self, scope: Scope, keys: Iterable[str]) -> list[StoredMessage]:
        wanted: dict[tuple[str, str], list[str]] = {}
        asked = set()
        for k in keys:
            parts = k.split(_KEY_SEP, 3) if isinstance(k, str) else []
            if len(parts) == 4:
                wanted.setdefault((parts[0], parts[1]), []).append(parts[3])
                asked.add(k)
        if not wanted:
            return []
        out: list[StoredMessage] = []
        with self._errors("read from"):
            for session in self._sessions(scope):  # only sessions of the scope, as they are now, are read
                ids = wanted.get((session.base, session.meta.get("born", "")))
                if ids:  # the message held under the id now, if it is the one the key names (not one added again)
                    out += [m for m in self._read_messages(session, list(dict.fromkeys(ids))) if m.key in asked]
        return C.in_conversation_order(out)

    def _get_copies(self, scope: Scope, ids: list[str]) -> list[StoredMessage]:
        # Each session's ids holding an '@' (ZSCAN of its order: ids and positions, no message read), matched in
        # Python: a glob of the id would read its '*', '?', '[' or '\\' as a pattern.
        wanted: set[str] = set(ids)
        out: list[StoredMessage] = []
        with self._errors("read from"):
            for session in self._sessions(scope):
                held = self._r.zscan_iter(session.key("order"), match="*@*", count=_SCAN_PAGE)
                copies = [i for i in (k.decode() for k, _ in held) if C.derived_from(i, wanted)]
                if copies:
                    out += self._read_messages(session, copies)
        return C.in_conversation_order(out)

    def ranges(self, scope: Scope, spans: Sequence[tuple[int, int]]) -> list[list[StoredMessage]]:
        scope.require_session()
        spans = C.check_spans(spans)
        if not spans:
            return []
        user, agent, session_id = scope.owner()  # one conversation: its keys are known, one script reads it
        session = _Session(self._base(scope), {"user_id": user, "agent_id": agent, "session_id": session_id})
        with self._errors("read from"):
            reply = self._scripts["ranges"](keys=[session.key("order"), session.key("msgs"), session.key("meta")],
                                            args=[p for span in spans for p in span])
        if not reply:
            return [[] for _ in spans]
        session.meta["born"] = reply[0].decode()
        found = [
            C.message_from_row(doc, int(pos), session_id, user_id=user, agent_id=agent,
                               key=_key(session, doc))
            for i, pos, body in zip(reply[1::3], reply[2::3], reply[3::3])
            for doc in (json.loads(body),)
        ]
        return C.split_spans(found, spans)

    def count(self, scope: Scope) -> int:
        sessions = self._sessions(scope)
        with self._errors("read from"):
            pipe = self._r.pipeline(transaction=False)
            for s in sessions:
                pipe.zcard(s.key("order"))
            return int(sum(pipe.execute())) if sessions else 0

    def sessions(self, scope: Scope) -> list[Scope]:
        sessions = self._sessions(scope)
        with self._errors("read from"):
            pipe = self._r.pipeline(transaction=False)
            for s in sessions:
                pipe.zcard(s.key("order"))
            sizes = pipe.execute() if sessions else []
        return C.session_scopes(scope.tenant, [(s.meta.get("user_id", ""), s.meta.get("agent_id", ""), s.session_id)
                                               for s, n in zip(sessions, sizes) if n])

    def delete(self, scope: Scope, ids: Iterable[str]) -> int:
        ids = C.read_ids(ids)
        if not ids:
            return 0
        total = 0
        for s in self._sessions(scope):
            total += int(self._run("delete", _scope_of(s, scope.tenant), ids))
        return total

    # -- vectors ---------------------------------------------------------------------------

    def _set_vectors(self, scope: Scope, ids: list[str], mat: np.ndarray, model: str) -> None:
        args: list[Any] = [model, int(mat.shape[1]), len(ids)]
        for i, row in zip(ids, mat):
            args += [i, row.tobytes()]
        try:
            self._run("set_vectors", scope, args)
        except _ScriptError as exc:
            if exc.kind == "model":
                stored = json.loads(exc.detail)
                raise Vec.model_mismatch((stored[0], int(stored[1])), model, int(mat.shape[1])) from None
            raise

    def get_vectors(self, scope: Scope, ids: Sequence[str]) -> dict[str, np.ndarray]:
        ids = C.read_ids(ids)
        out: dict[str, np.ndarray] = {}
        if not ids:
            return out
        with self._errors("read from"):
            for s in self._sessions(scope):
                for i, blob in zip(ids, cast("list[bytes | None]", self._r.hmget(s.key("vecs"), ids))):
                    if blob is not None:
                        out[i] = np.frombuffer(blob, dtype=np.float32).copy()
        return out

    def vector_model(self, scope: Scope) -> tuple[str, int] | None:
        models = {(s.meta["vec_model"], int(s.meta["vec_dim"])) for s in self._sessions(scope) if "vec_model" in s.meta}
        if len(models) > 1:
            raise ValueError(f"this scope mixes vectors of several models: {sorted(models)}")
        return models.pop() if models else None

    # -- search (in process) --------------------------------------------------------------------

    def _cached(self, session: _Session) -> _Cached:
        """The session's search structures: as cached while its version stands, the additions loaded on
        top when only additions happened since (any process's appends and new vectors), rebuilt after a
        deletion or an overwrite (the session's epoch moved).

        A conversation forgotten and begun again under the same keys counts from 0 again: the epoch
        is qualified by the server time its meta was created (``born``), so a process never answers
        from the forgotten conversation's cache. What was read while a forget ran answers the search that read it
        and is not cached.
        """
        born = session.meta.get("born", "")
        epoch = f"{born}/{session.meta.get('epoch', '0')}"
        with self._lock:
            hit = self._cache.get(session.base)
            forgets = self._forgets
        if hit is not None and hit.epoch == epoch:
            if hit.version == session.meta.get("version", "0"):
                entry: _Cached | None = hit
            else:
                entry = self._load_additions(session, hit)
            if entry is not None:
                return self._remember(session, entry, forgets)
        return self._remember(session, self._rebuild(session, born), forgets)

    def _remember(self, session: _Session, entry: _Cached, forgets: int) -> _Cached:
        with self._lock:
            if self._forgets != forgets:
                return entry
            self._cache[session.base] = entry
            self._cache.move_to_end(session.base)
            while len(self._cache) > self._cache_sessions:
                self._cache.popitem(last=False)
        return entry

    def _rebuild(self, session: _Session, born: str) -> _Cached:
        with self._errors("read from"):
            bodies, vecs, order, version, epoch, logged = self._snapshot(session)
        rows = [json.loads(b) for b in bodies.values()]
        positions = {i.decode(): int(p) for i, p in order}
        attrs = {r["id"]: (r["role"], r["kind"], r["created_at"], positions.get(r["id"]), _key(session, r)) for r in rows}
        lexical = B.LexicalIndex.build([self._lexical_row(session, r, attrs[r["id"]][3]) for r in rows],
                                       owner=_owner(session))
        vec_rows = [(i, blob) for i, blob in ((k.decode(), v) for k, v in vecs.items()) if i in attrs]
        return _Cached(f"{born}/{epoch}", version, logged, lexical, self._vector_block(session, vec_rows, attrs, None),
                       attrs)

    def _load_additions(self, session: _Session, hit: _Cached) -> _Cached | None:
        """``hit`` with what the session's log added since; None when a deletion intervened (rebuild)."""
        keys = [session.key("meta"), session.key("msgs"), session.key("vecs"), session.key("added"), session.key("order")]
        with self._errors("read from"):
            reply = self._scripts["additions"](keys=keys, args=[hit.logged])
        version, born, epoch, entries = reply[0].decode(), reply[1].decode(), reply[2].decode(), reply[3:]
        if hit.epoch != f"{born}/{epoch}":  # deleted from, or forgotten and begun again, since
            return None
        attrs = dict(hit.attrs)
        rows, vec_rows = [], []
        for entry, payload, position in zip(entries[::3], entries[1::3], entries[2::3]):
            if payload is None:
                continue
            if entry[:1] == b"m":
                row = json.loads(payload)
                place = None if position is None else int(position)
                attrs[row["id"]] = (row["role"], row["kind"], row["created_at"], place, _key(session, row))
                rows.append(self._lexical_row(session, row, place))
            else:
                vec_rows.append((entry[1:].decode(), payload))
        lexical = hit.lexical.extend(B.LexicalIndex.build(rows, owner=_owner(session))) if rows else hit.lexical
        block = self._vector_block(session, vec_rows, attrs, hit.vectors)
        return _Cached(hit.epoch, version, hit.logged + len(entries) // 3, lexical, block, attrs)

    def _lexical_row(self, session: _Session, r: dict[str, Any], position: int | None) -> B.LexicalRow:
        return (r["id"], _key(session, r), r["role"], r["kind"], r["created_at"],
                self._tokenize(V.indexed_prefix(r["text"])), position)

    @staticmethod
    def _vector_block(
        session: _Session, vec_rows: list[tuple[str, bytes]], attrs: dict[str, _Attrs],
        block: Vec.VectorBlock | None,
    ) -> Vec.VectorBlock | None:
        """``block`` (None: none yet) with ``vec_rows`` (id, float32 bytes) added."""
        owner = _owner(session)
        rows = [(i, key, blob, role, kind, created, owner, position)
                for i, blob in vec_rows if i in attrs for role, kind, created, position, key in (attrs[i],)]
        if not rows:
            return block
        new = Vec.VectorBlock.build(rows, len(rows[0][2]) // 4)
        return new if block is None else block.extend(new)

    def _snapshot(
        self, session: _Session
    ) -> tuple[dict[bytes, bytes], dict[bytes, bytes], list[tuple[bytes, float]], str, str, int]:
        """(messages, vectors, (id, position) pairs, version, epoch, log length) of one session, as of one moment.

        A small session comes in one MULTI. A large one would be one reply of gigabytes (a
        million messages time out the socket), so it is read in HSCAN pages and accepted
        when the version did not move meanwhile (every write moves it).
        """
        msgs, vecs, meta, added = session.key("msgs"), session.key("vecs"), session.key("meta"), session.key("added")
        order = session.key("order")

        def marks() -> tuple[str, str, int]:
            pipe = self._r.pipeline(transaction=True)
            pipe.hget(meta, "version")
            pipe.hget(meta, "epoch")
            pipe.llen(added)
            version, epoch, logged = pipe.execute()
            return (version or b"0").decode(), (epoch or b"0").decode(), int(logged)

        if int(session.meta.get("next") or 0) > _SCAN_ABOVE:
            for _ in range(5):
                before = marks()
                bodies = dict(self._r.hscan_iter(msgs, count=_SCAN_PAGE))
                vectors = dict(self._r.hscan_iter(vecs, count=_SCAN_PAGE))
                places = list(self._r.zscan_iter(order, count=_SCAN_PAGE))
                if marks() == before:
                    return bodies, vectors, places, *before
        pipe = self._r.pipeline(transaction=True)  # small, or writers kept moving it
        pipe.hgetall(msgs)
        pipe.hgetall(vecs)
        pipe.zrange(order, 0, -1, withscores=True)
        pipe.hget(meta, "version")
        pipe.hget(meta, "epoch")
        pipe.llen(added)
        bodies, vectors, places, version, epoch, logged = pipe.execute()
        return bodies, vectors, places, (version or b"0").decode(), (epoch or b"0").decode(), int(logged)

    def search_vectors(
        self, scope: Scope, vector: np.ndarray, k: int, filters: Filters | None = None
    ) -> list[Hit]:
        k = C.check_search("search_vectors", k, filters)
        query = Vec.as_query(vector)
        sessions = [s for s in self._sessions(scope) if s.meta.get("vec_dim")]
        dims = {int(s.meta["vec_dim"]) for s in sessions}
        if len(dims) > 1:
            raise ValueError(f"this scope mixes vectors of dimensions {sorted(dims)}; search one session at a time")
        if dims and query.shape[0] != next(iter(dims)):
            raise Vec.dim_mismatch(next(iter(dims)), query.shape[0])
        hits: list[Hit] = []
        for s in sessions:
            block = self._cached(s).vectors
            if block is not None:
                hits += block.search(query, k, filters)
        return sorted(hits, key=lambda h: (-h.score, h.key))[:k]

    def search_text(
        self, scope: Scope, terms: Sequence[str], k: int, filters: Filters | None = None
    ) -> list[Hit]:
        k = C.check_search("search_text", k, filters)
        phrases = [p for p in (self._tokenize(term) for term in C.split_terms(terms)) if p]
        if not phrases or k == 0:
            return []
        indexes = [self._cached(s).lexical for s in self._text_sessions(scope)]
        return B.bm25_search(indexes, phrases, k, filters)

    def _text_sessions(self, scope: Scope) -> list[_Session]:
        """The sessions a keyword search of ``scope`` reads: across sessions, memory's change logs left out."""
        return [s for s in self._sessions(scope) if scope.session is not None or not F.is_change_log(s.session_id)]

    def warm(self, scope: Scope, *, kept_only: bool = False) -> None:
        """Read ``scope``'s sessions' search structures (vectors and word index, one per conversation) into this
        process, or bring the kept ones up to date (see :meth:`~.base.Store.warm`; ``kept_only``: those alone).
        """
        for s in self._text_sessions(scope):
            if kept_only:
                with self._lock:
                    if s.base not in self._cache:
                        continue
            vectors = self._cached(s).vectors
            if vectors is not None:
                vectors.make_copy()

    # -- state and long-term records ---------------------------------------------------------------

    def put_state(self, scope: Scope, key: str, value: dict[str, Any], expected: int | None = None) -> int:
        doc = C.state_json(key, value)
        C.check_expected(key, expected, expected or 0)  # the argument's type; the version is checked in the script
        try:
            return int(self._run("put_state", scope, [key, doc, "" if expected is None else expected]))
        except _ScriptError as exc:
            if exc.kind != "conflict":
                raise
            C.check_expected(key, expected, int(exc.detail))
            raise

    def _get_versioned_state(self, scope: Scope, key: str) -> tuple[dict[str, Any] | None, int]:
        scope.require_session()
        with self._errors("read from"):
            for s in self._sessions(scope):
                doc, version = cast("list[bytes | None]", self._r.hmget(s.key("state"), [key, f"{key}\x00v"]))
                if doc is not None:
                    return C.json_loads(doc), int(version or 1)
        return None, 0

    def set_ttl(self, scope: Scope, seconds: int) -> None:
        """Give one session its own TTL (seconds), applied now and on every later write."""
        self._run("set_ttl", scope, [_check_ttl(seconds, "seconds")])

    def _records_key(self, scope: Scope, user_seg: str, namespace: str) -> str:
        return f"{self._p(scope)}:user:{user_seg}:records:{quote(namespace, safe='')}"

    def _put_record(
        self, scope: Scope, owner: tuple[str, str, str, str], record: Record, data: str, vector: np.ndarray | None,
        expected: int | None,
    ) -> int:
        _, user, agent, session = owner
        doc = {
            "id": record.id,
            "namespace": record.namespace,
            "text": record.text,
            "data": data,
            "created_at": record.created_at,
            "updated_at": record.updated_at,
            "agent_id": agent,
            "session_id": session,
            "vector": vector.tolist() if vector is not None else None,
        }
        p, u = self._p(scope), _q(user)
        keys = [self._records_key(scope, u, record.namespace), f"{p}:user:{u}:record-namespaces", f"{p}:users"]
        args = [json.dumps([agent, session, record.id]), json.dumps(doc, ensure_ascii=False),
                "" if expected is None else expected, record.namespace, u, self.ttl_seconds]
        try:
            with self._errors("write to"):
                return int(self._scripts["put_record"](keys=keys, args=args))
        except _ScriptError as exc:
            if exc.kind != "conflict":
                raise
            raise C.state_conflict(record.id, expected, int(exc.detail), what="record") from None

    def _members(self, key: str) -> list[str]:
        """The members of the set at ``key``, decoded (the client returns bytes: no decode_responses)."""
        return [m.decode() for m in cast("set[bytes]", self._r.smembers(key))]

    def _record_fields(self, scope: Scope, namespace: str | None, exact: bool) -> list[tuple[str, str, dict[str, Any]]]:
        """(hash key, field, record doc) visible to ``scope`` (or, with ``exact``, owned by it)."""
        p = self._p(scope)
        if isinstance(scope.user_id, str):
            users = [_q(scope.user_id)]
        else:
            users = self._members(f"{p}:users")
        out = []
        for u in users:
            namespaces = (
                [namespace]
                if namespace is not None
                else self._members(f"{p}:user:{u}:record-namespaces")
            )
            for ns in namespaces:
                key = f"{p}:user:{u}:records:{quote(ns, safe='')}"
                for field, raw in cast("dict[bytes, bytes]", self._r.hgetall(key)).items():
                    doc = json.loads(raw)
                    agent, session = C.scope_fields(scope)["agent_id"], scope.session
                    if (agent is None or doc["agent_id"] == agent) and (
                        session is None or doc["session_id"] == session or (not exact and doc["session_id"] == "")
                    ):
                        out.append((key, field.decode(), doc))
        return out

    def _get_records(self, scope: Scope, namespace: str) -> list[Record]:
        with self._errors("read from"):
            docs = [d for _, _, d in self._record_fields(scope, namespace, exact=False)]
        docs.sort(key=lambda d: (d["created_at"], d["id"]))
        return [C.record_from_row(d) for d in docs]

    def _get_record(self, owner: tuple[str, str, str, str], namespace: str, record_id: str) -> Record | None:
        tenant, user, agent, session = owner
        fields = [json.dumps([agent, s, record_id]) for s in dict.fromkeys((session, ""))]  # its own, its owner's
        with self._errors("read from"):
            found = self._r.hmget(self._records_key(Scope(tenant=tenant), _q(user), namespace), fields)
        raw = next((f for f in cast("list[bytes | None]", found) if f is not None), None)
        return C.record_from_row(json.loads(raw)) if raw is not None else None

    def _delete_record(self, scope: Scope, namespace: str, record_id: str, expected: int | None) -> bool:
        with self._errors("write to"):
            hits = [(k, f) for k, f, d in self._record_fields(scope, namespace, exact=False) if d["id"] == record_id]
            if expected is not None:
                return sum(int(self._scripts["delete_record"](keys=[k], args=[f, expected])) for k, f in hits) > 0
            return sum(self._r.hdel(k, f) for k, f in hits) > 0

    # -- housekeeping ------------------------------------------------------------------------------

    def forget(self, scope: Scope) -> dict[str, Any]:
        self._outside_batch("forget")
        sessions = self._sessions(scope)
        counts = {"messages": 0, "summaries": 0, "vectors": 0, "state": 0, "records": 0, "sessions": len(sessions)}
        logs = [s for s in sessions if F.is_change_log(s.session_id)]  # long-term memory's change logs
        log_messages, namespaces = 0, Counter[str]()
        p = self._p(scope)  # a records key is {p}:user:{u}:records:{ns}; the prefix may itself hold ":user:"
        with self._errors("delete from"):
            try:
                for s in sessions:
                    for name, n in self._forget_session(p, s).items():
                        counts[name] += n
                        log_messages += n if name == "messages" and s in logs else 0
            finally:
                with self._lock:  # nothing of them kept, nor kept later by a search that read them before this
                    self._forgets += 1
                    for s in sessions:
                        self._cache.pop(s.base, None)
            fields = self._record_fields(scope, None, exact=True)
            for key, field, doc in fields:
                gone = self._r.hdel(key, field)
                counts["records"] += gone
                namespaces[doc["namespace"]] += gone
            users = {_q(s.meta["user_id"]) for s in sessions} | {
                k[len(f"{p}:user:"):].split(":", 1)[0] for k, _, _ in fields
            }
            self._drop_empty_users(p, users)
        return F.result(counts, self._scrub() if any(counts.values()) else [], namespaces=dict(namespaces),
                        log_messages=log_messages, log_sessions=len(logs))

    def _forget_session(self, p: str, s: _Session) -> dict[str, int]:
        """Count one session's keys and delete them in one script, so what is counted is what is deleted."""
        keys = [s.key(f) for f in _FAMILIES] + [
            f"{p}:user:{_q(s.meta['user_id'])}:sessions",
            f"{p}:sessions:{quote(s.session_id, safe='')}",
        ]
        n_vecs, n_state, *bodies = self._scripts["forget_session"](keys=keys, args=[s.base])
        summaries = sum(json.loads(body)["kind"] == "summary" for body in bodies)
        return {"messages": len(bodies) - summaries, "summaries": summaries, "vectors": n_vecs, "state": n_state}

    def _scrub(self) -> list[F.Remaining]:
        """Rewrite the server's AOF (and RDB snapshot, if it takes them) so that its files hold no
        forgotten key; wait for that a bounded time. What is left is returned as ``remaining``.
        """
        try:
            return self._persist_again()
        except redis_lib.RedisError:  # INFO disabled (managed services), or the server went away
            return [
                F.Remaining(
                    where="the Redis server's AOF and RDB files, and its replicas'",
                    what="the forgotten keys as they were written",
                    until="the server's next AOF rewrite (BGREWRITEAOF) and snapshot (BGSAVE)",
                )
            ]

    def _persist_again(self) -> list[F.Remaining]:
        info = self._r.info("persistence")
        try:
            schedule: str | None = self._r.config_get("save").get("save", "")
        except redis_lib.RedisError:  # CONFIG disabled: whether it takes snapshots is unknown
            schedule = None
        # ((INFO counter of started jobs, value to reach), what starts it, where, command)
        jobs: list[tuple[tuple[str, int], Callable[[], object], str, str]] = []
        if info.get("aof_enabled"):
            target = int(info.get("aof_rewrites", 0)) + 1 + int(info.get("aof_rewrite_in_progress", 0))
            jobs.append((("aof_rewrites", target), self._r.bgrewriteaof, "AOF (appendonlydir)", "BGREWRITEAOF"))
        if schedule:
            target = int(info.get("rdb_saves", 0)) + 1 + int(info.get("rdb_bgsave_in_progress", 0))
            jobs.append((("rdb_saves", target), lambda: self._r.bgsave(schedule=True), "RDB snapshot", "BGSAVE"))
        left = []
        if schedule is None:
            left.append(
                F.Remaining(
                    where="the Redis server's RDB snapshot, if it takes them",
                    what="the forgotten keys, as of the last snapshot",
                    until="the server's next snapshot (BGSAVE)",
                )
            )
        for (counter, target), start, where, command in jobs:
            try:
                start()
                started = True
            except redis_lib.RedisError:  # the command is disabled: the server's own schedule will do it
                started = False

            def done(counter: str = counter, target: int = target) -> bool:  # started, and none running
                now = self._r.info("persistence")
                return int(now.get(counter, 0)) >= target and not any(now.get(f) for f in _PERSISTING)

            if not (started and F.retry(done, _SCRUB_POLLS, _SCRUB_WAIT / _SCRUB_POLLS)):
                left.append(
                    F.Remaining(
                        where=f"the Redis server's {where}",
                        what="the forgotten keys as they were written",
                        until=f"the {command} forget started finishes"
                        if started
                        else f"the server's next {command} (forget could not start one)",
                    )
                )
        replicas = int(self._r.info("replication").get("connected_slaves", 0))
        if replicas:
            left.append(
                F.Remaining(
                    where=f"{replicas} replica(s) of the Redis server",
                    what="the forgotten keys in their own AOF and RDB files",
                    until="each replica's next AOF rewrite and snapshot",
                )
            )
        return left

    def _drop_empty_users(self, p: str, users: Iterable[str]) -> None:
        """Remove a user's index entries once nothing of theirs is left (no name lingers)."""
        for u in users:
            namespaces = self._members(f"{p}:user:{u}:record-namespaces")
            pipe = self._r.pipeline(transaction=False)
            pipe.exists(f"{p}:user:{u}:sessions")
            for ns in namespaces:
                pipe.exists(f"{p}:user:{u}:records:{quote(ns, safe='')}")
            if not any(pipe.execute()):
                pipe = self._r.pipeline(transaction=True)
                pipe.unlink(f"{p}:user:{u}:record-namespaces")
                pipe.srem(f"{p}:users", u)
                pipe.execute()

    def stats(self, scope: Scope) -> dict[str, int]:
        """The scope's sizes from its sessions' counters and the sizes Redis keeps of each key (O(1) a session)."""
        sessions = self._sessions(scope)
        for s in sessions:
            if "counted" not in s.meta:  # made before counters existed: count it once, atomically
                self._run("recount", _scope_of(s, scope.tenant), [])
        totals = dict.fromkeys(("m", "sm", "tb", "ib", "v", "vb", "server"), 0)
        oldest: int | None = None
        newest: int | None = None
        with self._errors("read from"):
            pipe = self._r.pipeline(transaction=True)
            for s in sessions:
                pipe.hmget(s.key("meta"), ["summary_count", "text_bytes", "index_bytes", "vec_dim"])
                pipe.zcard(s.key("order"))
                pipe.hlen(s.key("vecs"))
                pipe.zrange(s.key("order"), 0, 0, withscores=True)
                pipe.zrange(s.key("order"), -1, -1, withscores=True)
                for f in _FAMILIES:
                    pipe.memory_usage(s.key(f))  # sampled: O(1) whatever the key's size
            replies = pipe.execute()
            per = 5 + len(_FAMILIES)
            for n in range(len(sessions)):
                counters, messages, vectors, first, last, *sizes = replies[n * per : (n + 1) * per]
                summaries, text_bytes, index_bytes, dim = (int(c or 0) for c in counters)
                totals["m"] += messages
                totals["sm"] += summaries
                totals["tb"] += text_bytes
                totals["ib"] += index_bytes
                totals["v"] += vectors
                totals["vb"] += vectors * dim * 4
                totals["server"] += sum(int(b or 0) for b in sizes)
                if first:
                    oldest = int(first[0][1]) if oldest is None else min(oldest, int(first[0][1]))
                    newest = int(last[0][1]) if newest is None else max(newest, int(last[0][1]))
            records = len(self._record_fields(scope, None, exact=True))
        return C.stats_dict(totals["m"], totals["sm"], totals["tb"], totals["ib"], totals["v"], totals["vb"],
                            sessions=len(sessions), records=records, oldest=oldest, newest=newest,
                            server_bytes=totals["server"])


def _scope_of(session: _Session, tenant: str) -> Scope:
    m = session.meta
    return Scope(tenant=tenant, user_id=m["user_id"], agent_id=m["agent_id"], session_id=m["session_id"])


def _owner(session: _Session) -> Vec.Owner:
    """(user_id, agent_id, session_id) of a session, as stored."""
    meta = session.meta
    return (meta.get("user_id", ""), meta.get("agent_id", ""), meta["session_id"])


def _key(session: _Session, row: dict[str, Any]) -> str:
    """A stored message's store-global key: its session's key base (quoted, so free of the separator),
    the session's birth (a conversation forgotten and begun again under the same keys is another one),
    the message's serial (the append script numbers each message a session stores: one deleted and
    added again under its id, even with its creation time, is another one) and its id.

    A message stored before serials existed has none; its key holds its creation time, as it always
    did ("n" never begins a float's repr), so the keys already handed out keep naming it.
    """
    serial = row.get("serial")
    stamp = repr(float(row["created_at"])) if serial is None else f"n{serial}"
    return _KEY_SEP.join((session.base, session.meta.get("born", ""), stamp, row["id"]))


class _ScriptError(ValueError):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


def _script_error(exc: Exception) -> Exception:
    """Our scripts' refusals as ValueError; any other server reply as StoreError."""
    text = str(exc)
    if text.startswith("fullrecall:"):
        kind, _, detail = text[len("fullrecall:") :].partition(" ")
        return _ScriptError(kind, detail)
    return StoreError(f"Redis refused the command: {text}")

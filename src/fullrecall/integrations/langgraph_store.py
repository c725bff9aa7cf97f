"""A LangGraph ``BaseStore`` kept in a fullrecall store (SQLite, PostgreSQL or Redis).

:class:`FullrecallStore` gives LangGraph agents (``create_agent(store=...)``,
``graph.compile(store=...)``) long-term memory in any fullrecall backend, through
the public :class:`~fullrecall.stores.Store` records API only:

* an item is one record: namespace ``"langgraph:" + ".".join(labels)``, id = the
  item's key (its hash if long or with a NUL), ``data`` = ``{"value", "vectors", "model", "ttl", "expires_at"}``;
* the namespaces in use are indexed by prefix: namespace ``("a", "b")`` is a
  record in each of ``"langgraph-index:"``, ``"langgraph-index:a"`` and
  ``"langgraph-index:a.b"``, so a search or a listing under a prefix reads only
  the namespaces under it. They are written before and after each item write,
  so neither a crash nor a concurrent delete leaves an item unlisted;
* semantic search follows LangGraph's ``index={"dims", "embed", "fields"}``;
  ``embed`` defaults to fullrecall's embedder (MiniLM, ONNX), a string names a
  fullrecall embedder (``"openai:..."``, ``"bedrock:..."``, a local model), and a
  LangChain ``Embeddings`` or an (async) embedding function works as in
  LangGraph. Vectors are computed once, in one batch per ``batch`` call, stored
  with the item (float32) and never recomputed; search is exact cosine;
* TTL (minutes, as in LangGraph) is kept in the item as ``expires_at``: expired
  items are hidden from reads (``omit_expired``, on unless the TTL config says
  ``False``), deleted by :meth:`FullrecallStore.sweep_ttl` or the sweeper thread,
  and refreshed on read when ``refresh_on_read``.

Every op of a batch is checked (namespaces, keys, values, filters, paging) and
every text embedded before anything is written, so a bad op or a failing
embedder writes nothing. Ops run in order: a read sees the writes before it.
A get or delete where no put can write (an empty namespace, the reserved root,
a key or label no record can hold) finds nothing, as in LangGraph's own stores.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from .._json import check_json_value
from ..embeddings import Embedder, l2_normalize, load_embedder
from ..errors import EmbeddingError, FullRecallError, InvalidInput, StateConflict
from ..stores import open_store
from ..stores._validate import MAX_ID_BYTES, check_owner, check_text
from ..stores.base import DEFAULT_TENANT, Record, Scope, Store

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["INDEX_PREFIX", "ITEM_PREFIX", "STORE_SESSION", "FullrecallStore", "ItemError"]

ITEM_PREFIX = "langgraph:"  # record namespace of an item = ITEM_PREFIX + ".".join(labels)
STORE_SESSION = "langgraph-store"  # the fullrecall session every item is written under (items span threads)
INDEX_PREFIX = "langgraph-index:"  # + ".".join(prefix): one record per namespace in use under that prefix
log = logging.getLogger("fullrecall.integrations")
_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


class ItemError(FullRecallError, ValueError):
    """An op cannot be executed as given (its index and field are named); nothing of the batch was written."""


# -- embeddings ---------------------------------------------------------------------------------


class _Embeddings:
    """Documents and queries to unit float32 rows, through a fullrecall Embedder or a LangChain Embeddings."""

    def __init__(self, embed: Any, dims: int | None) -> None:
        if embed is None or isinstance(embed, (str, Embedder)):
            self._fullrecall: Embedder | None = load_embedder(embed)
            self._langchain = None
            self.name = self._fullrecall.name
            if dims and dims != self._fullrecall.dimension:
                raise ValueError(
                    f'index "dims" is {dims}, but {self.name} makes {self._fullrecall.dimension}-dimensional vectors'
                )
            self.dims = self._fullrecall.dimension
        else:
            self._fullrecall = None
            self._langchain = ensure_embeddings(embed)
            self.name = f"langchain:{type(self._langchain).__name__}"
            if not dims:
                raise ValueError('index={"embed": ...} with a LangChain embedder needs "dims"')
            self.dims = dims

    @property
    def _lc(self) -> Embeddings:
        """The LangChain embedder (set whenever no fullrecall one is)."""
        assert self._langchain is not None
        return self._langchain

    def _rows(self, vectors: Any, n: int) -> np.ndarray:
        rows = np.asarray(vectors, dtype=np.float32).reshape(n, -1) if n else np.zeros((0, self.dims), np.float32)
        if rows.shape != (n, self.dims):
            raise EmbeddingError(f"the embedder returned vectors of shape {rows.shape}, expected ({n}, {self.dims})")
        return l2_normalize(rows) if n else rows

    def documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return self._rows([], 0)
        if self._fullrecall is not None:
            return self._rows(self._fullrecall.embed(texts), len(texts))
        return self._rows(self._lc.embed_documents(texts), len(texts))

    def query(self, text: str) -> np.ndarray:
        if self._fullrecall is not None:
            return self._rows(self._fullrecall.embed([text]), 1)[0]
        return self._rows([self._lc.embed_query(text)], 1)[0]

    async def adocuments(self, texts: list[str]) -> np.ndarray:
        if not texts or self._fullrecall is not None:
            return await asyncio.to_thread(self.documents, texts)
        return self._rows(await self._lc.aembed_documents(texts), len(texts))

    async def aquery(self, text: str) -> np.ndarray:
        if self._fullrecall is not None:
            return await asyncio.to_thread(self.query, text)
        return self._rows([await self._lc.aembed_query(text)], 1)[0]


def _encode(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _decode(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4")


# -- filters and namespace matching ---------------------------------------------------------------


def _number(x: Any) -> float | int | None:
    """``x`` as a range reads it, as LangGraph's InMemoryStore does (``float(x)``): a number (a bool
    counts as 0 or 1) or a string that reads as one (``"10"``, ``" 2.5 "``, ``"1e3"``); None otherwise.
    Numbers are kept as they are, so that two ints compare exactly, whatever their size.
    """
    if isinstance(x, (int, float)):
        return x
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def _compare(value: Any, operator: str, wanted: Any) -> bool:
    if operator == "$eq":
        return value == wanted
    if operator == "$ne":
        return value != wanted
    a: Any = _number(value)
    b: Any = _number(wanted)
    if a is None or b is None:
        if not (isinstance(value, str) and isinstance(wanted, str)):
            return False  # a missing field, or values that do not order, never match a range
        a, b = value, wanted  # two strings, not both numbers: compared as strings
    if operator == "$gt":
        return bool(a > b)
    if operator == "$gte":
        return bool(a >= b)
    if operator == "$lt":
        return bool(a < b)
    return bool(a <= b)


def _matches(value: Any, wanted: Any) -> bool:
    """Whether a stored value satisfies a filter value (nested dicts, lists, operators)."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_compare(value, op, w) for op, w in wanted.items())
        return isinstance(value, dict) and all(_matches(value.get(k), w) for k, w in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(wanted)
            and all(_matches(v, w) for v, w in zip(value, wanted))
        )
    return value == wanted


def _check_filter(filter: dict[Any, Any], where: str) -> None:
    """A search filter: its keys are field names (even one starting with ``$``), each value a condition."""
    for k, w in filter.items():
        if not isinstance(k, str):
            raise ItemError(f"{where}: filter keys must be strings, got {k!r}")
        _check_condition(w, f"{where}.{k}")


def _check_condition(wanted: Any, where: str) -> None:
    """A condition: a dict of operators (``$eq``: any operand, compared whole), a dict of field conditions,
    a list of element conditions, or a value to equal.
    """
    if isinstance(wanted, dict):
        operators = [k for k in wanted if isinstance(k, str) and k.startswith("$")]
        if operators:
            for k in wanted:
                if k not in _OPERATORS:
                    raise ItemError(f"{where}: unsupported filter operator {k!r} (a dict with an operator holds "
                                    f"operators only); expected one of {_OPERATORS}")
            return
        _check_filter(wanted, where)
    elif isinstance(wanted, (list, tuple)):
        for i, w in enumerate(wanted):
            _check_condition(w, f"{where}[{i}]")


def _bad_labels(i: int, labels: Iterable[Any]) -> str | None:
    """Why no record can hold these labels (a lone surrogate is not valid Unicode), or None."""
    try:
        for label in labels:
            check_text(label, f"op {i}: namespace label {label!r}")
    except InvalidInput as exc:
        return str(exc)
    return None


def _unstorable(i: int, namespace: tuple[str, ...], key: str) -> str | None:
    """Why no record can hold this item (its key or a label not valid Unicode, the namespace too long for
    the index bucket it names), or None.
    """
    try:
        check_text(key, f"op {i}: key")
    except InvalidInput as exc:
        return str(exc)
    bad = _bad_labels(i, namespace)
    if bad:
        return bad
    if _too_long(namespace):
        size = len((INDEX_PREFIX + ".".join(namespace)).encode("utf-8"))
        return (f"op {i}: namespace {namespace} is too long: its labels and dots take "
                f"{size - len(INDEX_PREFIX)} bytes, at most {MAX_ID_BYTES - len(INDEX_PREFIX)}")
    return None


def _too_long(labels: tuple[str, ...]) -> bool:
    """Whether these labels name an index bucket longer than a record's name can be (no put lists one there)."""
    return len((INDEX_PREFIX + ".".join(labels)).encode("utf-8", "surrogatepass")) > MAX_ID_BYTES


def _literal(path: Iterable[str]) -> tuple[str, ...]:
    """A match condition's labels up to its first wildcard: the prefix every namespace it matches starts with."""
    labels = tuple(path)
    return labels[: labels.index("*")] if "*" in labels else labels


def _path_matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    if condition.match_type not in ("prefix", "suffix"):
        raise ItemError(f"unsupported namespace match type {condition.match_type!r}; expected 'prefix' or 'suffix'")
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part))


# -- the store -------------------------------------------------------------------------------------


@dataclass
class _Batch:
    """What one batch has read: each namespace's records once, kept up to date by the batch's own writes."""

    namespaces: dict[str, dict[str, Record]] = field(default_factory=dict)
    index: dict[tuple[str, ...], list[tuple[str, ...]]] = field(default_factory=dict)  # prefix -> namespaces
    emptied: set[str] = field(default_factory=set)
    registered: dict[str, tuple[str, ...]] = field(default_factory=dict)  # listed ahead of this batch's puts


class FullrecallStore(BaseStore):
    """LangGraph's ``BaseStore`` over a fullrecall :class:`~fullrecall.stores.Store`.

    ``store``: a Store or a URL (``sqlite:///memory.db``, ``postgresql://...``,
    ``redis://...``). ``index``: LangGraph's ``{"dims", "embed", "fields"}``
    (``embed`` defaults to fullrecall's embedder; ``fields`` to ``["$"]``); without
    it, ``query`` is ignored and search filters and pages only. ``ttl``:
    LangGraph's ``{"default_ttl", "refresh_on_read", "omit_expired",
    "sweep_interval_minutes"}``. Items are kept under one fullrecall owner:
    ``tenant``, ``user_id``, ``agent_id`` (LangGraph's namespaces divide them
    further; an owner that shows nothing is refused). ``clock`` gives the time in Unix seconds.
    """

    supports_ttl = True

    def __init__(
        self,
        store: Store | str = "sqlite:///:memory:",
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        tenant: str = DEFAULT_TENANT,
        user_id: str = "",
        agent_id: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_owner(user_id, agent_id)  # one that shows nothing, refused before the store is opened
        self.store: Store = open_store(store) if isinstance(store, str) else store
        self._owns_store = isinstance(store, str)
        self.scope = Scope(tenant=tenant, user_id=user_id, agent_id=agent_id, session_id=STORE_SESSION)
        self.index_config: IndexConfig | None = dict(index) if index else None  # type: ignore[assignment]
        self.ttl_config: TTLConfig | None = dict(ttl) if ttl else None  # type: ignore[assignment]
        self._clock = clock
        self.embeddings: _Embeddings | None = None
        self._fields: list[str] = ["$"]
        if self.index_config is not None:
            self.embeddings = _Embeddings(self.index_config.get("embed"), self.index_config.get("dims"))
            self._fields = list(self.index_config.get("fields") or ["$"])
        self._sweeper: threading.Thread | None = None
        self._stop_sweeping = threading.Event()

    # -- BaseStore ----------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        void = self._check(ops)
        texts, queries = self._texts(ops), self._queries(ops)
        vectors = self.embeddings.documents([t for _, _, t in texts]) if texts and self.embeddings else None
        query_vectors = {q: self.embeddings.query(q) for q in queries} if self.embeddings else {}
        return self._run(ops, self._vectors_by_op(texts, vectors), query_vectors, void)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        void = self._check(ops)
        texts, queries = self._texts(ops), self._queries(ops)
        vectors = await self.embeddings.adocuments([t for _, _, t in texts]) if texts and self.embeddings else None
        query_vectors: dict[str, np.ndarray] = {}
        if self.embeddings and queries:
            found = await asyncio.gather(*(self.embeddings.aquery(q) for q in queries))
            query_vectors = dict(zip(queries, found))
        return await asyncio.to_thread(self._run, ops, self._vectors_by_op(texts, vectors), query_vectors, void)

    # -- checks and embedding, before anything is written ----------------------------------------------

    def _check(self, ops: list[Op]) -> set[int]:
        """Refuse a bad op (nothing of the batch is then written); return the ops that address nothing storable.

        Such an op (a get or delete of an empty namespace, of the reserved root, of a key or label no record
        can hold; a search or listing under a label no record can hold) finds nothing, as in LangGraph's own
        stores, where nothing can be put there either: a get answers None, a delete does nothing, a search or
        a listing answers [].
        """
        void: set[int] = set()
        for i, op in enumerate(ops):
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise ItemError(f"op {i}: unknown operation type {type(op).__name__}")
            validate_op_namespace(op)
            if isinstance(op, PutOp) and op.value is not None:
                self._check_put(i, op)
            elif isinstance(op, (GetOp, PutOp)):
                if not isinstance(op.key, str):
                    raise ItemError(f"op {i}: key must be a string, got {type(op.key).__name__}")
                if not op.namespace or op.namespace[0] == "langgraph" or _unstorable(i, op.namespace, op.key):
                    void.add(i)
            elif isinstance(op, SearchOp):
                if op.filter is not None and not isinstance(op.filter, dict):
                    raise ItemError(f"op {i}: filter must be a dict, got {type(op.filter).__name__}")
                _check_filter(op.filter or {}, f"op {i}: filter")
                self._check_paging(i, op.limit, op.offset)
                if _bad_labels(i, op.namespace_prefix) or _too_long(tuple(op.namespace_prefix)):
                    void.add(i)
            else:
                self._check_paging(i, op.limit, op.offset)
                if op.max_depth is not None and op.max_depth < 1:
                    raise ItemError(f"op {i}: max_depth must be at least 1, got {op.max_depth}")
                for condition in op.match_conditions or ():
                    _path_matches((), condition)  # the match type is checked here
                    if _bad_labels(i, condition.path) or (
                            condition.match_type == "prefix" and _too_long(_literal(condition.path))):
                        void.add(i)
        return void

    def _check_put(self, i: int, op: PutOp) -> None:
        """A put of a value: LangGraph's rules for its namespace, then ours for what a record can hold."""
        if not op.namespace:
            raise InvalidNamespaceError(f"op {i}: namespace cannot be empty")
        if op.namespace[0] == "langgraph":
            raise InvalidNamespaceError(f'op {i}: the root label "langgraph" is reserved; got {op.namespace}')
        if not isinstance(op.key, str):
            raise ItemError(f"op {i}: key must be a string, got {type(op.key).__name__}")
        unstorable = _unstorable(i, op.namespace, op.key)
        if unstorable:
            raise ItemError(unstorable)
        if not isinstance(op.value, Mapping):
            raise ItemError(f"op {i}: value must be a mapping or None, got {type(op.value).__name__}")
        if op.ttl is not None and not (
            isinstance(op.ttl, (int, float)) and op.ttl > 0 and math.isfinite(self._clock() + op.ttl * 60)
        ):  # an expiry past the largest float could not be stored (JSON has no infinity)
            raise ItemError(f"op {i}: ttl must be a positive, finite number of minutes or None, got {op.ttl!r}")
        if op.index not in (None, False) and not (
            isinstance(op.index, list) and all(isinstance(p, str) for p in op.index)
        ):
            raise ItemError(f"op {i}: index must be False, None or a list of field paths, got {op.index!r}")
        try:
            json.dumps(dict(op.value), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ItemError(f"op {i}: value of key {op.key!r} is not JSON-serialisable: {exc}") from exc
        try:  # as its record holds it: one level down, under "value"
            check_json_value({"value": dict(op.value)}, f"op {i}: key {op.key!r}")
        except InvalidInput as exc:
            raise ItemError(str(exc)) from None

    @staticmethod
    def _check_paging(i: int, limit: Any, offset: Any) -> None:
        for name, number in (("limit", limit), ("offset", offset)):
            if not isinstance(number, int) or isinstance(number, bool) or number < 0:
                raise ItemError(f"op {i}: {name} must be a non-negative integer, got {number!r}")

    def _texts(self, ops: list[Op]) -> list[tuple[int, str, str]]:
        """(op index, path label, text) for every text the puts index; a path with many texts gets ``path.i``."""
        if self.embeddings is None:
            return []
        out: list[tuple[int, str, str]] = []
        for i, op in enumerate(ops):
            if not isinstance(op, PutOp) or op.value is None or op.index is False:
                continue
            for path in self._fields if op.index is None else op.index:
                found = get_text_at_path(dict(op.value), path if path == "$" else tokenize_path(path))
                labels = [path] if len(found) == 1 else [f"{path}.{j}" for j in range(len(found))]
                out += [(i, label, text) for label, text in zip(labels, found)]
        return out

    @staticmethod
    def _queries(ops: list[Op]) -> list[str]:
        return list(dict.fromkeys(op.query for op in ops if isinstance(op, SearchOp) and op.query))

    @staticmethod
    def _vectors_by_op(
        texts: list[tuple[int, str, str]], vectors: np.ndarray | None
    ) -> dict[int, dict[str, tuple[str, str]]]:
        """Op index -> path label -> (text, encoded vector)."""
        out: dict[int, dict[str, tuple[str, str]]] = {}
        for (i, label, text), vector in zip(texts, vectors if vectors is not None else []):
            out.setdefault(i, {})[label] = (text, _encode(vector))
        return out

    # -- execution, in op order ----------------------------------------------------------------------

    def _run(
        self,
        ops: list[Op],
        vectors: dict[int, dict[str, tuple[str, str]]],
        queries: dict[str, np.ndarray],
        void: set[int],
    ) -> list[Result]:
        batch = _Batch()
        results: list[Result] = []
        puts = [op for op in ops if isinstance(op, PutOp) and op.value is not None]
        for namespace in dict.fromkeys(op.namespace for op in puts):
            self._register(namespace)  # before the items: a crash never leaves an item unlisted
            batch.registered[ITEM_PREFIX + ".".join(namespace)] = namespace
        for i, op in enumerate(ops):
            if i in void:  # it addresses nothing storable (see _check): nothing found, nothing to delete
                results.append([] if isinstance(op, (SearchOp, ListNamespacesOp)) else None)
            elif isinstance(op, GetOp):
                results.append(self._get(batch, op))
            elif isinstance(op, PutOp):
                self._put(batch, op, vectors.get(i, {}))
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(batch, op, queries.get(op.query) if op.query else None))
            else:
                results.append(self._list(batch, op))
        for namespace in dict.fromkeys(op.namespace for op in puts):
            self._register(namespace)  # after them too: a concurrent delete may have unlisted it meanwhile
        for name in batch.emptied:
            self._unregister(name)
        return results

    def _records(self, batch: _Batch, name: str) -> dict[str, Record]:
        if name not in batch.namespaces:
            batch.namespaces[name] = {_item_key(r): r for r in self.store.get_records(self.scope, name)}
        return batch.namespaces[name]

    @staticmethod
    def _past(record: Record, now: float) -> bool:
        expires = record.data.get("expires_at")
        return expires is not None and expires <= now

    def _expired(self, record: Record, now: float) -> bool:
        """Expired, and to be hidden (``omit_expired``, on by default)."""
        return (self.ttl_config or {}).get("omit_expired", True) and self._past(record, now)

    def _refresh(self, records: Iterable[Record], wanted: bool) -> None:
        """Push back the expiry of live items that were read (an expired one is never brought back)."""
        if not wanted:
            return
        now = self._clock()
        for record in records:
            ttl = record.data.get("ttl")
            if ttl is not None and not self._past(record, now):
                # only the record as read: a put or delete by another writer since stands (no older value back)
                refreshed = replace(record, data={**record.data, "expires_at": now + ttl * 60})
                try:
                    record.version = self.store.put_record(self.scope, refreshed, expected=record.version or None)
                except StateConflict:
                    continue
                record.data = refreshed.data

    def _get(self, batch: _Batch, op: GetOp) -> Item | None:
        record = self._records(batch, ITEM_PREFIX + ".".join(op.namespace)).get(op.key)
        if record is None or self._expired(record, self._clock()):
            return None
        self._refresh([record], op.refresh_ttl)
        return _item(op.namespace, record)

    def _put(self, batch: _Batch, op: PutOp, indexed: dict[str, tuple[str, str]]) -> None:
        name = ITEM_PREFIX + ".".join(op.namespace)
        records = self._records(batch, name)
        existing = records.get(op.key)
        if op.value is None:
            # even if unseen here: another writer may have made it
            self.store.delete_record(self.scope, name, _record_id(op.key))
            records.pop(op.key, None)
            if not records:
                batch.emptied.add(name)
            return
        now = self._clock()
        record = Record(
            id=_record_id(op.key),
            namespace=name,
            text="\n".join(text for text, _ in indexed.values()).replace("\x00", ""),
            data={
                "key": op.key,
                "value": dict(op.value),
                "vectors": {label: vector for label, (_, vector) in indexed.items()},
                "model": self.embeddings.name if indexed and self.embeddings else None,
                "ttl": op.ttl,
                "expires_at": now + op.ttl * 60 if op.ttl is not None else None,
            },
            created_at=existing.created_at if existing is not None else now,
            updated_at=now,
        )
        record.version = self.store.put_record(self.scope, record)
        records[op.key] = record
        batch.emptied.discard(name)

    def _search(self, batch: _Batch, op: SearchOp, query: np.ndarray | None) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        now = self._clock()
        found: list[tuple[tuple[str, ...], Record]] = []
        for namespace in self._namespaces(batch, prefix):
            for record in self._records(batch, ITEM_PREFIX + ".".join(namespace)).values():
                if not self._expired(record, now) and all(
                    _matches(record.data["value"].get(k), w) for k, w in (op.filter or {}).items()
                ):
                    found.append((namespace, record))
        found.sort(key=lambda nr: (-nr[1].updated_at, nr[0], nr[1].id))
        scores: dict[int, float] = {}
        if query is not None:
            for n, (_, record) in enumerate(found):
                if record.data.get("vectors") and record.data.get("model") == self.embeddings.name:  # type: ignore[union-attr]
                    rows = np.stack([_decode(v) for v in record.data["vectors"].values()])
                    if rows.shape[1] == query.shape[0]:
                        scores[n] = float((rows @ query).max())
            order = sorted(range(len(found)), key=lambda n: (n not in scores, -scores.get(n, 0.0), n))
            found = [found[n] for n in order]
            ranked = [scores.get(n) for n in order]
        else:
            ranked = [None] * len(found)
        page = slice(op.offset, op.offset + op.limit)
        self._refresh([r for _, r in found[page]], op.refresh_ttl)
        return [_search_item(ns, r, score) for (ns, r), score in zip(found[page], ranked[page])]

    def _list(self, batch: _Batch, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        prefix: tuple[str, ...] = ()
        for condition in op.match_conditions or ():
            if condition.match_type == "prefix":  # its labels up to the first wildcard narrow what is read
                literal = _literal(condition.path)
                prefix = literal if len(literal) > len(prefix) else prefix
        namespaces = [
            ns for ns in self._namespaces(batch, prefix) if all(_path_matches(ns, c) for c in op.match_conditions or ())
        ]
        if (self.ttl_config or {}).get("omit_expired", True):  # as get and search hide them
            now = self._clock()
            namespaces = [
                ns
                for ns in namespaces
                if any(not self._expired(r, now) for r in self._records(batch, ITEM_PREFIX + ".".join(ns)).values())
            ]
        if op.max_depth is not None:
            namespaces = [ns[: op.max_depth] for ns in namespaces]
        return sorted(set(namespaces))[op.offset : op.offset + op.limit]

    # -- the namespace index ---------------------------------------------------------------------------

    def _namespaces(self, batch: _Batch, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        """The namespaces under ``prefix`` holding items (as the batch has changed them), read from its bucket."""
        if prefix not in batch.index:
            bucket = self.store.get_records(self.scope, INDEX_PREFIX + ".".join(prefix))
            batch.index[prefix] = [tuple(r.data["namespace"]) for r in bucket]
        for name, namespace in batch.registered.items():
            if namespace[: len(prefix)] == prefix:
                self._records(batch, name)  # listed ahead of a put of this batch: listed here if it holds items
        held = {tuple(n.removeprefix(ITEM_PREFIX).split(".")): bool(rs) for n, rs in batch.namespaces.items()}
        found = {ns for ns in batch.index[prefix] if held.get(ns, True)}
        found |= {ns for ns, has in held.items() if has and ns[: len(prefix)] == prefix}
        return sorted(found)

    def _register(self, namespace: tuple[str, ...]) -> None:
        """List the namespace in the bucket of each of its prefixes (the empty one included)."""
        joined = ".".join(namespace)
        for depth in range(len(namespace) + 1):
            bucket = INDEX_PREFIX + ".".join(namespace[:depth])
            self.store.put_record(
                self.scope, Record(id=joined, namespace=bucket, text=joined, data={"namespace": list(namespace)})
            )

    def _unregister(self, name: str) -> None:
        """Unlist an emptied namespace, then list it again if a concurrent put filled it meanwhile."""
        namespace = tuple(name.removeprefix(ITEM_PREFIX).split("."))
        for depth in range(len(namespace) + 1):
            self.store.delete_record(self.scope, INDEX_PREFIX + ".".join(namespace[:depth]), ".".join(namespace))
        if self.store.get_records(self.scope, name):
            self._register(namespace)

    # -- TTL ---------------------------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete every expired item (whatever ``omit_expired`` says); return how many went."""
        now, swept = self._clock(), 0
        batch = _Batch()
        for namespace in self._namespaces(batch):
            name = ITEM_PREFIX + ".".join(namespace)
            records = self._records(batch, name)
            for key, record in list(records.items()):
                # only the record as read: one another writer put again since, fresh, stays
                if self._past(record, now) and self.store.delete_record(self.scope, name, record.id,
                                                                        expected=record.version or None):
                    swept += 1
                    del records[key]
            if not records:
                self._unregister(name)
        return swept

    async def asweep_ttl(self) -> int:
        return await asyncio.to_thread(self.sweep_ttl)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> threading.Thread:
        """Sweep in a daemon thread every ``sweep_interval_minutes`` (default: the TTL config's, else 5)."""
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        if self._sweeper is not None and self._sweeper.is_alive():
            return self._sweeper
        self._stop_sweeping.clear()

        def loop() -> None:
            while not self._stop_sweeping.wait(minutes * 60):
                try:
                    self.sweep_ttl()
                except Exception:  # noqa: BLE001 - a failed sweep is retried at the next interval
                    log.exception("TTL sweep failed; retried in %s minutes", minutes)

        self._sweeper = threading.Thread(target=loop, name="fullrecall-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return self._sweeper

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True once it has stopped (or none ran)."""
        self._stop_sweeping.set()
        if self._sweeper is None:
            return True
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    def close(self) -> None:
        """Stop the sweeper; close the underlying store if this object opened it (from a URL)."""
        self.stop_ttl_sweeper()
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> FullrecallStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _record_id(key: str) -> str:
    """The record id of an item key. LangGraph allows any key, empty, long or with a NUL; a record id
    is a non-empty identifier of at most 256 bytes without NUL, so such a key is named by its hash (the
    key itself is kept in the record's data).
    """
    if "\x00" not in key and len(key.encode("utf-8")) <= 200:
        return "k" + key
    return "h" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def _item_key(record: Record) -> str:
    return record.data.get("key", record.id[1:])


def _stamps(record: Record) -> tuple[datetime, datetime]:
    return (datetime.fromtimestamp(record.created_at, UTC),
            datetime.fromtimestamp(record.updated_at, UTC))


def _item(namespace: tuple[str, ...], record: Record) -> Item:
    created, updated = _stamps(record)
    return Item(value=record.data["value"], key=_item_key(record), namespace=namespace, created_at=created,
                updated_at=updated)


def _search_item(namespace: tuple[str, ...], record: Record, score: float | None) -> SearchItem:
    created, updated = _stamps(record)
    return SearchItem(namespace, _item_key(record), record.data["value"], created, updated, score)

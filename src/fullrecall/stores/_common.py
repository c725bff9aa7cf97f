"""Helpers every backend shares: validation, (de)serialisation, filters, exact vector search.

Kept here so the three backends agree on the details that the conformance suite checks
(what a bad vector is, how filters apply, how ties and ``k`` behave).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from ..errors import StateConflict
from . import _validate as V
from .base import ANY, Filters, Hit, Record, Scope, StoredMessage

# -- scopes ------------------------------------------------------------------


def scope_fields(scope: Scope) -> dict[str, str | None]:
    """The scope as column -> stored value; ``None`` means "any" (ANY, or no session) in a read."""
    return {
        "tenant": scope.tenant,
        "user_id": _stored(scope.user_id),
        "agent_id": _stored(scope.agent_id),
        "session_id": _stored(scope.session_id),
    }


def _stored(value: object) -> str | None:
    return value if isinstance(value, str) else None


def check_positive_k(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    return k


class Sql:
    """SQL fragments shared by the SQL backends; only the placeholder style differs."""

    def __init__(self, placeholder: str) -> None:
        self.ph = placeholder  # "?" (sqlite3) or "%s" (psycopg)

    def in_(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        if not values:
            return "1 = 0", []
        if self.ph == "%s":
            return f"{column} = ANY(%s)", [list(values)]
        return f"{column} IN ({','.join('?' * len(values))})", list(values)

    def scope_where(self, scope: Scope, alias: str = "s") -> tuple[str, list[Any]]:
        """Condition on the sessions table for a scope: unset user/agent is the stored '' (ANY: no condition)."""
        conds, params = [f"{alias}.tenant = {self.ph}"], [scope.tenant]
        for col, value in scope_fields(scope).items():
            if col != "tenant" and value is not None:
                conds.append(f"{alias}.{col} = {self.ph}")
                params.append(value)
        return " AND ".join(conds), params

    def record_where(self, scope: Scope, exact: bool = False, alias: str = "r") -> tuple[str, list[Any]]:
        """Records of a scope's owner (user and agent exactly, unless ANY).

        A record stored without a session applies to every session of its owner; with
        ``exact`` (forget, stats) a session scope matches only its own records.
        """
        conds, params = [f"{alias}.tenant = {self.ph}"], [scope.tenant]
        for col, value in scope_fields(scope).items():
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


# -- messages ----------------------------------------------------------------


def dump_json(value: Any, what: str) -> str:
    """JSON text of ``value``; :class:`~fullrecall.errors.InvalidInput` naming ``what`` if it is not JSON."""
    return V.check_json(value, what, tuples=True)


def state_json(key: str, value: Any) -> str:
    """A state document as JSON text, its key an identifier; InvalidInput naming the key otherwise."""
    V.check_id(key, "state key")
    if not isinstance(value, dict):
        raise V.InvalidInput(f"state {key!r} must be a dict, got {type(value).__name__}")
    return V.check_json(value, f"state {key!r}", limit=V.MAX_DOCUMENT_BYTES, tuples=True)


def check_expected(key: str, expected: int | None, current: int) -> None:
    """A compare-and-set's check: InvalidInput for a bad ``expected``, StateConflict when it is not ``current``."""
    if expected is None:
        return
    if not isinstance(expected, int) or isinstance(expected, bool) or expected < 0:
        raise V.InvalidInput(f"state {key!r}: expected must be a version (an int >= 0), got {expected!r}")
    if expected != current:
        raise StateConflict(f"state {key!r} is at version {current}, not the expected {expected}: nothing was written",
                            current=current)


def record_json(record: Record) -> str:
    """A long-term record's ``data`` as JSON text, once the whole record is checked (see :mod:`._validate`)."""
    V.check_record(record)
    return _dumps(record.data)


def check_messages(messages: Sequence[StoredMessage]) -> None:
    """Reject what no backend could store faithfully, before anything is written (see :mod:`._validate`)."""
    V.check_messages(messages)


def message_row(m: StoredMessage) -> dict[str, Any]:
    """The flat, JSON-encoded form every backend writes (of a message ``check_messages`` accepted).

    ``nbytes`` (text and verbatim data, UTF-8) and ``ibytes`` (the indexed prefix of the text) are
    what the message adds to its session's ``text_bytes`` and ``index_bytes`` counters.
    """
    data = _dumps(m.data)
    return {
        "id": m.id,
        "role": m.role,
        "text": m.text,
        "nbytes": row_bytes(m.text, data),
        "ibytes": indexed_bytes(m.text),
        "data": data,
        "kind": m.kind,
        "created_at": float(m.created_at),
        "archived_at": float(m.archived_at),
        "summary_id": m.summary_id,
        "metadata": _dumps(m.metadata or {}),
    }


def _dumps(value: Any) -> str:
    return V.dumps(value)


def assign_positions(
    messages: Sequence[StoredMessage], known: dict[str, int], next_position: int
) -> tuple[list[int], list[tuple[StoredMessage, int]], int]:
    """Positions for an append, given the ids the session already holds (id -> position).

    Returns (position of each input message, the new messages with their positions, next free
    position). An id seen before, in the session or earlier in the batch, keeps its position.
    """
    known = dict(known)
    positions: list[int] = []
    new: list[tuple[StoredMessage, int]] = []
    for m in messages:
        if m.id not in known:
            pos = m.position if m.position is not None else next_position
            next_position = max(next_position, pos + 1)
            known[m.id] = pos
            new.append((m, pos))
        positions.append(known[m.id])
    return positions, new, next_position


def message_from_row(
    row: dict[str, Any], position: int, session_id: str | None, *, user_id: str | None = None,
    agent_id: str | None = None, key: str | None = None,
) -> StoredMessage:
    """A stored message from its row, with where it lives (owner, session, store-global key)."""
    return StoredMessage(
        id=row["id"],
        role=row["role"],
        text=row["text"],
        data=V.loads(row["data"]),
        position=int(position),
        kind=row["kind"],
        created_at=float(row["created_at"]),
        archived_at=float(row["archived_at"]),
        summary_id=row.get("summary_id") or None,
        metadata=V.loads(row["metadata"]) if row.get("metadata") else {},
        session_id=session_id,
        user_id=user_id,
        agent_id=agent_id,
        key=key,
    )


def read_ids(ids: Iterable[str]) -> list[str]:
    """Message ids a read or delete names, each once; InvalidInput naming the first that is no identifier
    (the same on every backend: a NUL is refused, not silently unmatched).
    """
    if isinstance(ids, str):
        raise V.InvalidInput("ids must be a sequence of message ids, not one string")
    out = list(dict.fromkeys(ids))
    for n, i in enumerate(out):
        V.check_id(i, f"id {n}")
    return out


def check_spans(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``(start, end)`` position spans of a ``ranges`` read; InvalidInput naming the first bad one."""
    if isinstance(spans, (str, bytes)) or not isinstance(spans, Sequence):
        raise V.InvalidInput(f"spans must be a list of (start, end) pairs, got {type(spans).__name__}")
    out = []
    for n, span in enumerate(spans):
        try:
            start, end = span
            out.append((operator.index(start), operator.index(end)))  # ints, numpy's included
        except (TypeError, ValueError):
            raise V.InvalidInput(f"span {n} must be a (start, end) pair of ints, got {span!r}") from None
    return out


def split_spans(messages: Sequence[StoredMessage], spans: Sequence[tuple[int, int]]) -> list[list[StoredMessage]]:
    """Each span's messages (in position order) from the messages of all the spans."""
    ordered = sorted(messages, key=lambda m: m.position or 0)
    return [[m for m in ordered if start <= (m.position or 0) <= end] for start, end in spans]


def in_conversation_order(messages: list[StoredMessage]) -> list[StoredMessage]:
    """Messages of one or several sessions in one order on every backend: by owner, session, then position."""
    return sorted(messages, key=lambda m: (m.user_id or "", m.agent_id or "", m.session_id or "", m.position or 0))


def int_keys(keys: Iterable[str]) -> list[int]:
    """The integer keys (row ids) among ``keys``; anything else names no row of a SQL store."""
    return list(dict.fromkeys(int(k) for k in keys if isinstance(k, str) and k.isdigit() and len(k) < 19))


def split_url(url: str, schemes: Sequence[str], own_options: Sequence[str], scheme: str | None = None
              ) -> tuple[str, dict[str, str]]:
    """(the client's URL, fullrecall's own options) from a store URL: our options leave the query string."""
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        raise ValueError(f"not a {' or '.join(schemes)} URL: {url!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in own_options}
    rest = urlencode([(k, v) for k, v in query if k not in own_options])
    return urlunsplit((scheme or parts.scheme, parts.netloc, parts.path, rest, parts.fragment)), own


def record_from_row(row: Any) -> Record:
    """A long-term record from a stored row or hash (``data`` as JSON text)."""
    return Record(
        id=row["id"],
        namespace=row["namespace"],
        text=row["text"],
        data=V.loads(row["data"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
    )


def row_bytes(text: str, data_json: str) -> int:
    """Same measure as ``StoredMessage.size_bytes`` but on the stored JSON."""
    return len(text.encode("utf-8")) + len(data_json.encode("utf-8"))


def indexed_bytes(text: str) -> int:
    """UTF-8 bytes of what lexical search indexes of ``text`` (a session's ``index_bytes`` adds these up)."""
    return len(V.indexed_prefix(text).encode("utf-8"))


STATS_COUNTERS = ("message_count", "summary_count", "text_bytes", "index_bytes", "vector_count", "vector_bytes")
"""What ``stats`` reads from per-session counters, kept in the same transaction as every write."""


# -- filters -----------------------------------------------------------------


def filters_match(f: Filters | None, *, id: str, role: str, kind: str, created_at: float) -> bool:
    """Python-side filter check (backends that cannot push filters into a query)."""
    if f is None:
        return True
    if f.roles is not None and role not in f.roles:
        return False
    if f.kinds is not None and kind not in f.kinds:
        return False
    if f.since is not None and created_at < f.since:
        return False
    if f.until is not None and created_at > f.until:
        return False
    if f.exclude_ids and id in f.exclude_ids:
        return False
    return True


# -- vectors -----------------------------------------------------------------


def as_matrix(vectors: np.ndarray | Sequence[Sequence[float]], n: int) -> np.ndarray:
    """``vectors`` as a C-contiguous float32 (n, dim) matrix, or a ValueError saying why not."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1 and n == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ValueError(f"expected {n} vectors as an (n, dim) array, got shape {arr.shape}")
    if arr.shape[1] == 0:
        raise ValueError("vectors have dimension 0")
    if not np.isfinite(arr).all():
        raise ValueError("vectors contain NaN or infinity")
    return np.ascontiguousarray(arr)


def as_query(vector: np.ndarray | Sequence[float]) -> np.ndarray:
    q = np.asarray(vector, dtype=np.float32).reshape(-1)
    if q.size == 0 or not np.isfinite(q).all():
        raise ValueError("query vector is empty or contains NaN/infinity")
    return q


def normalize_rows(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (m / norms).astype(np.float32, copy=False)


def check_model(model: str) -> str:
    if not model or not isinstance(model, str):
        raise ValueError("set_vectors needs the embedding model's name (model=...)")
    return model


def model_mismatch(stored: tuple[str, int], model: str, dim: int) -> ValueError:
    return ValueError(
        f"this scope holds vectors of model {stored[0]!r} (dim {stored[1]}); refusing {model!r} (dim {dim}): "
        "re-embed everything with one model or use another store"
    )


def dim_mismatch(stored_dim: int, got: int) -> ValueError:
    return ValueError(f"query vector has dimension {got} but the stored vectors have dimension {stored_dim}")


@dataclass
class VectorBlock:
    """Vectors of one scope, normalised, with what filters need, for exact cosine search."""

    ids: list[str]
    keys: list[str]  # store-global message keys, parallel to ids
    matrix: np.ndarray  # (n, dim) float32, rows L2-normalised
    roles: np.ndarray  # object array
    kinds: np.ndarray
    created: np.ndarray  # float64

    @classmethod
    def build(
        cls, rows: Iterable[tuple[str, str, bytes | np.ndarray, str, str, float]], dim: int
    ) -> VectorBlock:
        """``rows``: (id, key, vector, role, kind, created_at)."""
        rows = list(rows)
        if not rows:
            return cls([], [], np.zeros((0, dim), np.float32), np.array([], object), np.array([], object),
                       np.array([]))
        ids, keys, vecs, roles, kinds, created = zip(*rows)
        mat = np.empty((len(rows), dim), dtype=np.float32)
        for i, v in enumerate(vecs):
            mat[i] = np.frombuffer(v, dtype=np.float32) if isinstance(v, (bytes, bytearray, memoryview)) else v
        return cls(
            list(ids),
            list(keys),
            normalize_rows(mat),
            np.array(roles, dtype=object),
            np.array(kinds, dtype=object),
            np.array(created, dtype=np.float64),
        )

    def extend(self, other: VectorBlock) -> VectorBlock:
        """This block plus ``other``'s rows (for vectors added since it was built)."""
        if not other.ids:
            return self
        return VectorBlock(
            self.ids + other.ids,
            self.keys + other.keys,
            np.concatenate([self.matrix, other.matrix]),
            np.concatenate([self.roles, other.roles]),
            np.concatenate([self.kinds, other.kinds]),
            np.concatenate([self.created, other.created]),
        )

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes) + 64 * len(self.ids)

    def search(self, query: np.ndarray, k: int, filters: Filters | None) -> list[Hit]:
        if k == 0 or not self.ids:
            return []
        if query.shape[0] != self.matrix.shape[1]:
            raise dim_mismatch(self.matrix.shape[1], query.shape[0])
        q = query / (np.linalg.norm(query) or 1.0)
        scores = self.matrix @ q
        mask = self._mask(filters)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        n_ok = int(mask.sum()) if mask is not None else len(self.ids)
        k = min(k, n_ok)
        if k == 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        return [Hit(self.ids[i], float(scores[i]), self.keys[i]) for i in top if scores[i] != -np.inf][:k]

    def _mask(self, f: Filters | None) -> np.ndarray | None:
        return filter_mask(f, self.ids, self.roles, self.kinds, self.created)


def filter_mask(
    f: Filters | None, ids: Sequence[str], roles: np.ndarray, kinds: np.ndarray, created: np.ndarray
) -> np.ndarray | None:
    """Boolean mask of the rows that pass ``f`` (None: no filter)."""
    if f is None:
        return None
    mask = np.ones(len(ids), dtype=bool)
    if f.roles is not None:
        mask &= np.isin(roles, list(f.roles))
    if f.kinds is not None:
        mask &= np.isin(kinds, list(f.kinds))
    if f.since is not None:
        mask &= created >= f.since
    if f.until is not None:
        mask &= created <= f.until
    if f.exclude_ids:
        excluded = f.exclude_ids
        mask &= np.fromiter((i not in excluded for i in ids), dtype=bool, count=len(ids))
    return mask


# -- lexical (for backends without a text index) --------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)


class Tokenizer:
    """Lower-cased word tokens, Snowball-stemmed when PyStemmer is installed (like FTS5's porter)."""

    def __init__(self) -> None:
        try:
            import Stemmer

            self._stem = Stemmer.Stemmer("english").stemWords
        except ImportError:  # plain words still match exactly
            self._stem = lambda words: words

    def __call__(self, text: str) -> list[str]:
        return self._stem(_WORD.findall(text.lower()))


@dataclass
class LexicalIndex:
    """An inverted index of one session's messages, for BM25 in process (Redis without a search module)."""

    ids: list[str]
    keys: list[str]  # store-global message keys, parallel to ids
    roles: np.ndarray
    kinds: np.ndarray
    created: np.ndarray
    lengths: np.ndarray  # tokens per message
    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # term -> (row numbers, term frequencies)

    @classmethod
    def build(cls, rows: Sequence[tuple[str, str, str, str, float, list[str]]]) -> LexicalIndex:
        """``rows``: (id, key, role, kind, created_at, tokens)."""
        counts: dict[str, dict[int, int]] = {}
        for n, (_, _, _, _, _, tokens) in enumerate(rows):
            for t in tokens:
                doc = counts.setdefault(t, {})
                doc[n] = doc.get(n, 0) + 1
        postings = {
            t: (np.fromiter(d.keys(), np.int64, len(d)), np.fromiter(d.values(), np.float64, len(d)))
            for t, d in counts.items()
        }
        return cls(
            [r[0] for r in rows],
            [r[1] for r in rows],
            np.array([r[2] for r in rows], dtype=object),
            np.array([r[3] for r in rows], dtype=object),
            np.array([r[4] for r in rows], dtype=np.float64),
            np.array([len(r[5]) for r in rows], dtype=np.float64),
            postings,
        )

    def extend(self, other: LexicalIndex) -> LexicalIndex:
        """This index plus ``other``'s rows (messages added since it was built); neither is changed."""
        if not other.ids:
            return self
        offset = len(self.ids)
        postings = dict(self.postings)
        for term, (rows, tf) in other.postings.items():
            held = postings.get(term)
            postings[term] = (rows + offset, tf) if held is None else (
                np.concatenate([held[0], rows + offset]), np.concatenate([held[1], tf]))
        return LexicalIndex(
            self.ids + other.ids,
            self.keys + other.keys,
            np.concatenate([self.roles, other.roles]),
            np.concatenate([self.kinds, other.kinds]),
            np.concatenate([self.created, other.created]),
            np.concatenate([self.lengths, other.lengths]),
            postings,
        )


def bm25_search(
    indexes: Sequence[LexicalIndex],
    terms: Sequence[str],
    k: int,
    filters: Filters | None,
    k1: float = 1.2,
    b: float = 0.75,
) -> list[Hit]:
    """Okapi BM25 (OR of ``terms``, already tokenised) over several sessions with shared statistics."""
    n_docs = sum(len(ix.ids) for ix in indexes)
    if n_docs == 0 or not terms or k == 0:
        return []
    avg = float(sum(ix.lengths.sum() for ix in indexes)) / n_docs or 1.0
    terms = list(dict.fromkeys(terms))
    df = {t: sum(len(ix.postings[t][0]) for ix in indexes if t in ix.postings) for t in terms}
    hits: list[tuple[float, str, str]] = []
    for ix in indexes:
        scores = np.zeros(len(ix.ids))
        for t in terms:
            if t not in ix.postings:
                continue
            rows, tf = ix.postings[t]
            idf = math.log(1.0 + (n_docs - df[t] + 0.5) / (df[t] + 0.5))
            scores[rows] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * ix.lengths[rows] / avg))
        mask = filter_mask(filters, ix.ids, ix.roles, ix.kinds, ix.created)
        if mask is not None:
            scores[~mask] = 0.0
        found = np.flatnonzero(scores > 0)
        if len(found) > k:  # the k best and every row tied with the k-th: ties are broken by key below
            kth = np.partition(scores[found], len(found) - k)[len(found) - k]
            found = found[scores[found] >= kth]
        hits += [(float(scores[i]), ix.ids[i], ix.keys[i]) for i in found]
    hits.sort(key=lambda h: (-h[0], h[2]))
    return [Hit(i, s, key) for s, i, key in hits[:k]]


def split_terms(terms: Sequence[str]) -> list[str]:
    """Search terms that hold at least one word character; a ValueError for a bare string (a common slip)."""
    if isinstance(terms, str):
        raise ValueError("terms must be a sequence of words, not one string")
    words = (V.check_text(str(t), f"search term {i}").replace("\x00", " ").strip() for i, t in enumerate(terms))
    return [t for t in words if _WORD.search(t)]


def json_loads(text: str | bytes) -> Any:
    return V.loads(text)


def record_scope(scope: Scope) -> tuple[str, str, str, str]:
    """A record's scope columns: its owner, and '' for a record that applies to every session."""
    if scope.user_id is ANY or scope.agent_id is ANY:
        raise ValueError("a record needs one owner: ANY is only for reads and forget")
    return (scope.tenant, str(scope.user_id), str(scope.agent_id), scope.session or "")


def stats_dict(
    messages: int, summaries: int, text_bytes: int, index_bytes: int, vectors: int, vector_bytes: int, *,
    sessions: int, records: int, oldest: int | None, newest: int | None, **extra: int,
) -> dict[str, int]:
    """What ``stats`` returns, the same keys on every backend (positions are -1 when no message is held)."""
    return {
        "message_count": int(messages),
        "summary_count": int(summaries),
        "text_bytes": int(text_bytes),
        "index_bytes": int(index_bytes),
        "vector_count": int(vectors),
        "vector_bytes": int(vector_bytes),
        "record_count": int(records),
        "session_count": int(sessions),
        "oldest_position": -1 if oldest is None else int(oldest),
        "newest_position": -1 if newest is None else int(newest),
        **extra,
    }

"""Helpers every backend shares: scopes, rows and their (de)serialisation, input checks, filters.

Vectors are in :mod:`._vectors`, in-process BM25 in :mod:`._bm25`, the SQL backends' core in :mod:`._sql`.

Kept here so the three backends agree on the details that the conformance suite checks
(what a bad vector is, how filters apply, how ties and ``k`` behave).
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Collection, Iterable, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from ..errors import InvalidInput, StateConflict
from . import _validate as V
from ._bm25 import words as _words
from .base import ANY, Appended, Filters, Record, Scope, Store, StoredMessage

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
        raise InvalidInput(f"k must be a non-negative integer, got {k!r}")
    return k


def check_search(where: str, k: int, filters: Filters | None) -> int:
    """A store search's result count and filters, checked the same way on every backend; the count to use: ``k``,
    at most ``MAX_POSITION`` (2**53 - 1, past any real count), which every database's integers hold.
    """
    check_positive_k(k)
    V.check_filters(where, filters)
    return min(k, V.MAX_POSITION)


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


def check_version(key: str, expected: int | None, what: str = "state") -> None:
    """InvalidInput unless ``expected`` is None or a version (an int from 0 to 2**63 - 1, what every database's
    integers hold: a larger one overflowed SQLite's driver).
    """
    if expected is not None and (not isinstance(expected, int) or isinstance(expected, bool)
                                 or not 0 <= expected < 2**63):
        raise V.InvalidInput(f"{what} {key!r}: expected must be a version (an int >= 0), got {expected!r}")


def check_expected(key: str, expected: int | None, current: int) -> None:
    """A compare-and-set's check: InvalidInput for a bad ``expected``, StateConflict when it is not ``current``."""
    check_version(key, expected)
    if expected is None:
        return
    if expected != current:
        raise state_conflict(key, expected, current)


def state_conflict(key: str, expected: int | None, current: int, what: str = "state") -> StateConflict:
    """The refusal of a compare-and-set whose ``expected`` version is not the ``current`` one (of a state
    document, or of another ``what``: a record).
    """
    return StateConflict(f"{what} {key!r} is at version {current}, not the expected {expected}: nothing was written",
                         current=current)


def position_taken(scope: Scope) -> ValueError:
    """The refusal of an append that names a position its session already holds, the same on every backend."""
    return ValueError(f"cannot append to session {scope.session_id!r}: an explicit position is already taken")


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
) -> tuple[Appended, list[tuple[StoredMessage, int]], int]:
    """Positions for an append, given the ids the session already holds (id -> position).

    Returns (position of each input message with the ids the session held, the new messages with their positions,
    next free position). An id seen before, in the session or earlier in the batch, keeps its position. A new
    message without a position when none is left past the last one taken is refused (:func:`no_position_left`).
    """
    held = [m.id for m in messages if m.id in known]
    known = dict(known)
    positions: list[int] = []
    new: list[tuple[StoredMessage, int]] = []
    for index, m in enumerate(messages):
        if m.id not in known:
            if m.position is None and next_position > V.MAX_POSITION:
                raise no_position_left(messages, index)
            pos = m.position if m.position is not None else next_position
            next_position = max(next_position, pos + 1)
            known[m.id] = pos
            new.append((m, pos))
        positions.append(known[m.id])
    return Appended(positions, held), new, next_position


def no_position_left(messages: Sequence[StoredMessage], index: int) -> V.InvalidInput:
    """The refusal of an append whose message ``index`` would go past the last position (``MAX_POSITION``), which
    no read reaches and Redis's numbers do not tell from the one before: the same text on every backend.
    """
    return V.InvalidInput(f"message {index} (id {messages[index].id!r}): no position is left for it after position "
                          f"{V.MAX_POSITION} (2**53 - 1), the last a conversation has; nothing was written")


def message_from_row(
    row: dict[str, Any], position: int, session_id: str | None, *, user_id: str | None = None,
    agent_id: str | None = None, key: str | None = None,
) -> StoredMessage:
    """A stored message from its row, with where it lives (owner, session, store-global key)."""
    return stored_message(
        row["id"], row["role"], row["text"], row["data"], row["kind"], row["created_at"], row["archived_at"],
        row.get("summary_id"), row.get("metadata"), key, position, session_id, user_id, agent_id,
    )


def stored_message(
    id: str, role: str, text: str, data: str, kind: str, created_at: float, archived_at: float,
    summary_id: str | None, metadata: str | None, key: Any, position: int, session_id: str | None,
    user_id: str | None = None, agent_id: str | None = None,
) -> StoredMessage:
    """A stored message from its columns, in the order a SQL read selects them (a plain tuple row is
    ``stored_message(*row)``: no mapping made a row); ``data`` and ``metadata`` as stored JSON.
    """
    return StoredMessage(
        id=id,
        role=role,
        text=text,
        data=V.loads(data),
        position=int(position),
        kind=kind,
        created_at=float(created_at),
        archived_at=float(archived_at),
        summary_id=summary_id or None,
        metadata=V.loads(metadata) if metadata not in (None, "", "{}") else {},
        session_id=session_id,
        user_id=user_id,
        agent_id=agent_id,
        key=str(key) if key is not None else None,
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


def derived_from(key: str, ids: Collection[str]) -> bool:
    """Whether the message id ``key`` is ``X@...`` for one of ``ids`` (the key a memory stores a message under when
    it stores it again): tested in Python, where an id's ``*``, ``%`` or ``_`` is a plain character.
    """
    return any(c == "@" and key[:i] in ids for i, c in enumerate(key))


def check_spans(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``(start, end)`` position spans of a ``ranges`` read, each end brought within one past the
    positions a store can hold (so that no driver overflows); InvalidInput naming the first bad one.
    """
    if isinstance(spans, (str, bytes)) or not isinstance(spans, Sequence):
        raise V.InvalidInput(f"spans must be a list of (start, end) pairs, got {type(spans).__name__}")
    out = []
    for n, span in enumerate(spans):
        try:
            start, end = span
            out.append((_bounded(operator.index(start)), _bounded(operator.index(end))))  # numpy's ints too
        except (TypeError, ValueError):
            raise V.InvalidInput(f"span {n} must be a (start, end) pair of ints, got {span!r}") from None
    return out


def _bounded(position: int) -> int:
    """``position``, or the nearest of -1 and ``MAX_POSITION + 1`` when it lies beyond them."""
    return max(-1, min(position, V.MAX_POSITION + 1))


def split_spans(messages: Sequence[StoredMessage], spans: Sequence[tuple[int, int]]) -> list[list[StoredMessage]]:
    """Each span's messages (in position order) from the messages of all the spans."""
    ordered = sorted(messages, key=lambda m: m.position or 0)
    return [[m for m in ordered if start <= (m.position or 0) <= end] for start, end in spans]


def in_conversation_order(messages: list[StoredMessage]) -> list[StoredMessage]:
    """Messages of one or several sessions in one order on every backend: by owner, session, then position."""
    return sorted(messages, key=lambda m: (m.user_id or "", m.agent_id or "", m.session_id or "", m.position or 0))


def newest(store: Store, scope: Scope, n: int) -> list[StoredMessage]:
    """The newest ``n`` messages of one conversation, in order, stepping back over the gaps deletions left.

    Read back from the newest position held, as many positions at a time as messages are still missing while
    reads find some; across empty spans the span read doubles, so a gap of ``g`` positions costs about
    ``log2(g / n)`` reads, and the read that ends it at most about ``g`` messages more than wanted: never a
    read of every position, nor of every message past ``count - n``.
    """
    if n < 1:
        return []
    at = store.stats(scope)
    oldest, end = int(at.get("oldest_position", -1)), int(at.get("newest_position", -1))
    found: list[StoredMessage] = []
    span = n
    while end >= max(oldest, 0) and len(found) < n:
        start = max(oldest, end - span + 1, 0)
        chunk = store.range(scope, start, end)
        found = chunk + found
        end, span = start - 1, (n - len(found) if chunk else span * 2)
    return found[-n:]


def first_at_or_after(store: Store, scope: Scope, starts: Sequence[int], ends: Sequence[int]
                      ) -> list[StoredMessage | None]:
    """For each span ``starts[i]..ends[i]``, its first message (None when it holds none), all spans read together.

    Each round reads the positions of a span not read yet, twice as many as the round before (1, 2, 4, ...):
    a span whose first positions were deleted costs a few rounds and about as many messages as positions
    stepped over, never the whole span.
    """
    out: list[StoredMessage | None] = [None] * len(starts)
    todo = {i: (int(s), 1) for i, (s, e) in enumerate(zip(starts, ends)) if s <= e}  # span -> (next start, width)
    while todo:
        spans = {i: (at, min(at + width - 1, int(ends[i]))) for i, (at, width) in todo.items()}
        for i, found in zip(spans, store.ranges(scope, list(spans.values()))):
            if found:
                out[i] = found[0]
                del todo[i]
            elif spans[i][1] >= ends[i]:
                del todo[i]
            else:
                todo[i] = (spans[i][1] + 1, todo[i][1] * 2)
    return out


def session_scopes(tenant: str, owners: Iterable[tuple[str, str, str]]) -> list[Scope]:
    """One exact scope per (user_id, agent_id, session_id), in one order on every backend: by owner, then session."""
    return [Scope(tenant=tenant, user_id=u, agent_id=a, session_id=s) for u, a, s in sorted(set(owners))]


def session_owners(sessions: Iterable[Any]) -> dict[int, tuple[str, str, str]]:
    """Each session row's (user_id, agent_id, session_id) by its ``sid``: the owner a search hit carries."""
    return {r["sid"]: (r["user_id"], r["agent_id"], r["session_id"]) for r in sessions}


def int_keys(keys: Iterable[str]) -> list[int]:
    """The integer keys (row ids) among ``keys``; anything else names no row of a SQL store
    (ASCII digits only: ``str.isdigit`` also says yes to "²", which ``int`` refuses, and to other scripts' digits).
    """
    return list(dict.fromkeys(
        int(k) for k in keys if isinstance(k, str) and k.isascii() and k.isdigit() and len(k) < 19
    ))


def split_url(url: str, schemes: Sequence[str], own_options: Sequence[str], scheme: str | None = None
              ) -> tuple[str, dict[str, str]]:
    """(the client's URL, fullrecall's own options) from a store URL: our options leave the query string. The rest
    stays as written, for the client to decode as it does: libpq reads ``%20`` as a space and ``+`` as a plus,
    which a query decoded and encoded again changes (``my%20app`` arrived as ``my+app``, or ``app+1`` as ``app 1``).
    """
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        raise ValueError(f"not a {' or '.join(schemes)} URL: {url!r}")
    own, rest = {}, []
    for field in parts.query.split("&"):
        pair = parse_qsl(field, keep_blank_values=True)  # one (key, value), or none for an empty field
        if pair and pair[0][0] in own_options:
            own[pair[0][0]] = pair[0][1]
        elif field:
            rest.append(field)
    return urlunsplit((scheme or parts.scheme, parts.netloc, parts.path, "&".join(rest), parts.fragment)), own


MAX_OPTION = 2**53 - 1
"""The largest number an option takes: exact as a float, so as a Lua number and a JSON number."""


def number_option(name: str, value: Any, *, whole: bool, least: float, most: float = MAX_OPTION) -> Any:
    """A store's numeric option (a URL query string or a keyword's number) checked: a ValueError naming it and
    the range it takes, worded alike on every backend, rather than a driver's words, an OverflowError, or a
    negative size quietly taken.
    """
    number: Any = None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = int(value) if whole else float(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = value
    finite = number is not None and (isinstance(number, int) or math.isfinite(number))  # an int of 400 digits too
    if not finite or (whole and not isinstance(number, int)) or not least <= number <= most:
        kind = "an integer" if whole else "a number"
        raise ValueError(f"store option {name} must be {kind} from {least} to {most}, got {value!r}")
    return number


def record_from_row(row: Any) -> Record:
    """A long-term record from a stored row or hash (``data`` as JSON text; a row written before records had
    versions is at version 1).
    """
    return Record(
        id=row["id"],
        namespace=row["namespace"],
        text=row["text"],
        data=V.loads(row["data"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
        version=int(row.get("version") or 1),
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


def split_terms(terms: Sequence[str]) -> list[str]:
    """Search terms that hold at least one word (as FTS5 finds words); InvalidInput for a bare string (a common slip)."""
    if isinstance(terms, str):
        raise InvalidInput("terms must be a sequence of words, not one string")
    terms = list(terms)  # read twice below: a generator is taken whole first
    for i, t in enumerate(terms):
        if not isinstance(t, str):
            raise InvalidInput(f"search term {i} must be a str, got {type(t).__name__}")
    words = (V.check_text(t, f"search term {i}").replace("\x00", " ").strip() for i, t in enumerate(terms))
    return [t for t in words if _words(t)]


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

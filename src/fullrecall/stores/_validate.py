"""What fullrecall accepts as input: one rule, checked before anything is written, the same on every backend.

* **Text** (``StoredMessage.text``, ``Record.text``, message text blocks): any ``str`` that is valid
  Unicode (no lone surrogate), NUL and other control characters included, stored and returned
  verbatim by every backend. At most :data:`MAX_FIELD_BYTES` UTF-8 bytes in a store, and a message
  given to :class:`~fullrecall.memory.ConversationMemory` at most :data:`MAX_MESSAGE_BYTES` as JSON.
* **Identifiers** (tenant, user, agent and session ids, message ids, roles, summary ids, state keys,
  record ids and namespaces): a ``str`` of 1 to :data:`MAX_ID_BYTES` UTF-8 bytes without NUL or
  lone surrogates (``user_id``/``agent_id`` may also be ``""`` or ``None``). A conversation named to be
  written (:func:`check_session_id`) also shows something (not only whitespace or invisible
  characters) and is none of long-term memory's change logs (``_log.``...); a user or agent named
  (:func:`check_owner_id`) shows something too.
* **JSON values** (``data``, ``metadata``, record data, whole messages): ``dict`` with ``str`` keys,
  ``list``, ``str``, ``int``, finite ``float``, ``bool`` and ``None``, nested at most :data:`MAX_DEPTH`
  levels. A ``tuple`` is refused (it would come back as a list), except in fullrecall's own state
  documents, which may be :data:`MAX_DOCUMENT_BYTES` long.
* **Search** indexes the first :data:`INDEXED_CHARS` characters of a text, on every backend; the
  whole text is kept and returned.

A violation raises :class:`~fullrecall.errors.InvalidInput` (a ``ValueError``) naming the message
index and the field, e.g. ``message 2: 'metadata.score' is nan; JSON has no NaN or infinity``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

from .._json import MAX_DEPTH as MAX_DEPTH
from .._json import MAX_FIELD_BYTES, check_json_value
from .._json import MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES
from .._json import check_json as check_json
from .._json import dumps as dumps
from .._json import loads as loads
from ..errors import InvalidInput
from ._forget import LOG_PREFIX
from .base import Filters, Record, Scope, StoredMessage

MAX_DOCUMENT_BYTES = 256 * 2**20  # one state document (a window of several large messages)
MAX_ID_BYTES = 256  # six of them fit in one PostgreSQL index entry (2,704 bytes)
INDEXED_CHARS = 65_536  # the prefix of a text that lexical search indexes (PostgreSQL's tsvector is 1 MB at most)
MESSAGE_KINDS = ("message", "summary")
MAX_POSITION = 2**53 - 1  # the largest a Redis script (Lua numbers are doubles) holds exactly

def _utf8_size(value: str, where: str) -> int:
    if value.isascii():
        return len(value)
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{where} is not valid Unicode (a lone surrogate at character {exc.start})") from None


def check_unicode(value: str, where: str) -> str:
    """``value`` if it holds no lone surrogate (which no backend stores and no embedder reads)."""
    _utf8_size(value, where)
    return value


EARLIEST, LATEST = -62_135_596_800, 253_402_300_800  # 0001-01-01 and 10000-01-01, UTC: the times a date has


def is_time(value: Any) -> bool:
    """Whether ``value`` is a time fullrecall takes: Unix seconds (not a bool) of the years 1 to 9999, the times
    a date can be shown for (1e300 seconds was stored, and every later read that showed its date failed).
    """
    return not isinstance(value, bool) and isinstance(value, (int, float)) and EARLIEST <= value < LATEST


def check_text(value: Any, where: str, limit: int = MAX_FIELD_BYTES) -> str:
    """``value`` if it is a str of valid Unicode within ``limit`` UTF-8 bytes (NUL allowed)."""
    if not isinstance(value, str):
        raise InvalidInput(f"{where} must be a str, got {type(value).__name__}")
    size = _utf8_size(value, where)
    if size > limit:
        raise InvalidInput(f"{where} is {size:,} bytes, over the {limit:,}-byte limit")
    return value


def check_id(value: Any, where: str, *, empty: bool = False) -> str:
    """``value`` if it is an identifier: a str of 1 (0 with ``empty``) to MAX_ID_BYTES bytes, no NUL."""
    if not isinstance(value, str):
        raise InvalidInput(f"{where} must be a str, got {type(value).__name__}")
    if not value and not empty:
        raise InvalidInput(f"{where} must not be empty")
    if "\x00" in value:
        raise InvalidInput(f"{where} contains a NUL character (not allowed in identifiers)")
    size = _utf8_size(value, where)
    if size > MAX_ID_BYTES:
        raise InvalidInput(f"{where} is {size:,} bytes long; identifiers are at most {MAX_ID_BYTES} bytes")
    return value


# shown as nothing though of no invisible category: the combining grapheme joiner, Hangul and Khmer fillers, the blank
# Braille pattern
_INVISIBLE = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u2800\u3164\uffa0")


def _invisible(c: str) -> bool:
    """Whether ``c`` shows nothing: whitespace, a control or format character (a zero-width space or joiner, a
    byte order mark, a direction mark), a variation selector or a filler.
    """
    return (c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Zs", "Zl", "Zp") or c in _INVISIBLE
            or "\ufe00" <= c <= "\ufe0f" or "\U000e0100" <= c <= "\U000e01ef")


def check_shows(value: str, where: str, what: str) -> None:
    """InvalidInput unless ``value`` shows something: one of only whitespace or invisible characters cannot be told
    from another, nor typed back (``what`` says what to name instead).
    """
    if all(_invisible(c) for c in value):
        raise InvalidInput(f"{where} {value!r} is blank (whitespace or invisible characters only): {what}")


def check_not_change_log(value: Any, where: str) -> Any:
    """``value`` unless it names one of long-term memory's change logs (``_log.``...), which hold its bookkeeping."""
    if isinstance(value, str) and value.startswith(LOG_PREFIX):
        raise InvalidInput(f"{where} {value!r} is reserved (a session id starting with {LOG_PREFIX!r} is long-term "
                           "memory's own change log)")
    return value


def check_session_id(value: Any, where: str) -> str:
    """``value`` if it can name a conversation to write: an identifier (:func:`check_id`) that shows something
    and is none of long-term memory's change logs (:func:`check_not_change_log`). The library, the service, the
    MCP tools and the CLI refuse alike.
    """
    check_id(value, where)
    check_shows(value, where, "name a conversation")
    return check_not_change_log(value, where)


def check_owner_id(value: Any, where: str) -> str | None:
    """``value`` if it can name a user or agent: ``None`` or ``""`` (no owner), or an identifier (:func:`check_id`)
    that shows something (an owner nobody can see or type is a mistake, not a name). ``where`` names the field
    (``'user_id'``, ``'agent_id'``), the same words from the library, the service, the MCP tools and the CLI.
    """
    if value is None or value == "":
        return value
    check_id(value, where)
    check_shows(value, where, "name an owner, or leave it out for none")
    return value


def check_owner(user_id: Any, agent_id: Any) -> None:
    """:func:`check_owner_id` of a user and an agent, each named by its field (``'user_id'``, ``'agent_id'``)."""
    check_owner_id(user_id, "'user_id'")
    check_owner_id(agent_id, "'agent_id'")


def check_query(where: str, query: Any, limit_name: str, limit: Any) -> str:
    """A search's ``query`` (a str of valid Unicode) and its result count ``limit`` (an int, or None)."""
    if not isinstance(query, str):
        raise InvalidInput(f"{where}: 'query' must be a str, got {type(query).__name__}")
    _utf8_size(query, f"{where}: 'query'")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise InvalidInput(f"{where}: {limit_name!r} must be an integer, got {limit!r}")
    return query


def check_filters(where: str, filters: Any) -> Filters | None:
    """A search's ``filters``: a :class:`~fullrecall.stores.base.Filters` or None (a dict, a common slip, is
    refused here, the same on every backend, not found wanting deep in one).
    """
    if filters is not None and not isinstance(filters, Filters):
        raise InvalidInput(f"{where}: 'filters' must be a Filters (fullrecall.stores.Filters) or None, "
                           f"got {type(filters).__name__}")
    return filters


def check_scope(scope: Any) -> Scope:
    """A :class:`Scope` whose ids are identifiers (``None`` and the ANY sentinel pass where allowed)."""
    if not isinstance(scope, Scope):
        raise InvalidInput(f"scope must be a Scope, got {type(scope).__name__}")
    check_id(scope.tenant, "scope 'tenant'")
    for name in ("user_id", "agent_id", "session_id"):
        value = getattr(scope, name)
        if isinstance(value, str):
            check_id(value, f"scope '{name}'", empty=True)
        elif value is not None and value is not _any():
            raise InvalidInput(f"scope '{name}' must be a str or None, got {type(value).__name__}")
    return scope


def _any() -> Any:
    from . import base

    return getattr(base, "ANY", None)


def check_messages(messages: Sequence[Any]) -> None:
    """Reject a batch of which any message no backend could store faithfully, before anything is written."""
    for i, m in enumerate(messages):
        check_message(m, i)


def check_message(m: Any, index: int, where: str | None = None) -> None:
    """InvalidInput naming ``where`` (default: ``message <index>``) and the field for a message no backend could
    store faithfully.
    """
    where = where or f"message {index}"
    if not isinstance(m, StoredMessage):
        raise InvalidInput(f"{where} is a {type(m).__name__}, not a StoredMessage")
    check_id(m.id, f"{where}: 'id'")
    check_id(m.role, f"{where}: 'role'")
    check_text(m.text, f"{where}: 'text'")
    if not isinstance(m.data, dict):
        raise InvalidInput(f"{where}: 'data' must be a dict (a JSON object), got {type(m.data).__name__}")
    check_json_value(m.data, f"{where}: 'data'")
    if m.kind not in MESSAGE_KINDS:
        raise InvalidInput(f"{where}: 'kind' is {m.kind!r}; expected one of {MESSAGE_KINDS}")
    if m.position is not None and (not isinstance(m.position, int) or isinstance(m.position, bool) or m.position < 0):
        raise InvalidInput(f"{where}: 'position' is {m.position!r}; expected an int >= 0 or None")
    if m.position is not None and m.position > MAX_POSITION:
        raise InvalidInput(f"{where}: 'position' is {m.position}; positions are at most {MAX_POSITION} (2**53 - 1)")
    for name in ("created_at", "archived_at"):
        check_time(getattr(m, name), f"{where}: '{name}'")
    if m.summary_id is not None:
        check_id(m.summary_id, f"{where}: 'summary_id'")
    if not isinstance(m.metadata, dict):
        raise InvalidInput(f"{where}: 'metadata' must be a dict, got {type(m.metadata).__name__}")
    check_json_value(m.metadata, f"{where}: 'metadata'")


def check_time(value: Any, where: str) -> float:
    if not is_time(value):
        raise InvalidInput(f"{where} is {value!r}; expected Unix seconds of the years 1 to 9999")
    return float(value)


def check_record(record: Any) -> None:
    if not isinstance(record, Record):
        raise InvalidInput(f"record must be a Record, got {type(record).__name__}")
    where = f"record {record.id!r}" if isinstance(record.id, str) else "record"
    check_id(record.id, f"{where}: 'id'")
    check_id(record.namespace, f"{where}: 'namespace'")
    check_text(record.text, f"{where}: 'text'")
    if not isinstance(record.data, dict):
        raise InvalidInput(f"{where}: 'data' must be a dict, got {type(record.data).__name__}")
    check_json_value(record.data, f"{where}: 'data'")
    check_time(record.created_at, f"{where}: 'created_at'")
    check_time(record.updated_at, f"{where}: 'updated_at'")


def not_unicode(exc: UnicodeEncodeError | UnicodeDecodeError) -> InvalidInput:
    """What a backend raises when a driver meets a lone surrogate the checks above do not cover."""
    return InvalidInput(f"a string given is not valid Unicode ({exc.reason} at character {exc.start}); "
                        "nothing was written")


def indexed_prefix(text: str) -> str:
    """The part of ``text`` that lexical search indexes: all of it up to :data:`INDEXED_CHARS` characters."""
    return text[:INDEXED_CHARS]

"""What fullrecall accepts as input: one rule, checked before anything is written, the same on every backend.

* **Text** (``StoredMessage.text``, ``Record.text``, message text blocks): any ``str`` that is valid
  Unicode (no lone surrogate), NUL and other control characters included, stored and returned
  verbatim by every backend. At most :data:`MAX_FIELD_BYTES` UTF-8 bytes in a store, and a message
  given to :class:`~fullrecall.memory.ConversationMemory` at most :data:`MAX_MESSAGE_BYTES` as JSON.
* **Identifiers** (tenant, user, agent and session ids, message ids, roles, summary ids, state keys,
  record ids and namespaces): a ``str`` of 1 to :data:`MAX_ID_BYTES` UTF-8 bytes without NUL or
  lone surrogates (``user_id``/``agent_id`` may also be ``""`` or ``None``).
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

import base64
import json
import math
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidInput
from .base import Record, Scope, StoredMessage

MAX_MESSAGE_BYTES = 32 * 2**20  # one message as the application gives it, serialised as JSON
MAX_FIELD_BYTES = 64 * 2**20  # one stored text, data or metadata field (room for the rendered message)
MAX_DOCUMENT_BYTES = 256 * 2**20  # one state document (a window of several large messages)
MAX_ID_BYTES = 256  # six of them fit in one PostgreSQL index entry (2,704 bytes)
MAX_DEPTH = 64  # nesting of JSON values
INDEXED_CHARS = 65_536  # the prefix of a text that lexical search indexes (PostgreSQL's tsvector is 1 MB at most)
MESSAGE_KINDS = ("message", "summary")

_SCALARS = (str, int, float, bool, type(None), bytes)
_BYTES_KEY = "__bytes_encoded__"  # the marker Strands sessions use for bytes in JSON, so both read each other


def _encode_bytes(value: Any) -> Any:
    if isinstance(value, bytes):
        return {_BYTES_KEY: True, "data": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _decode_bytes(obj: dict[str, Any]) -> Any:
    if obj.get(_BYTES_KEY) is True and len(obj) == 2 and isinstance(obj.get("data"), str):
        return base64.b64decode(obj["data"])
    return obj


def dumps(value: Any) -> str:
    """Compact JSON of a value :func:`check_json` accepted; bytes (an image in a tool result) as base64."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_encode_bytes)


def loads(text: str | bytes) -> Any:
    """JSON written by :func:`dumps`, bytes restored."""
    return json.loads(text, object_hook=_decode_bytes)


def _utf8_size(value: str, where: str) -> int:
    if value.isascii():
        return len(value)
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{where} is not valid Unicode (a lone surrogate at character {exc.start})") from None


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


def check_json(value: Any, where: str, *, limit: int = MAX_FIELD_BYTES, tuples: bool = False) -> str:
    """``value`` as compact JSON text, or InvalidInput naming the first offending path under ``where``.

    A tuple would come back as a list, so it is refused unless ``tuples`` (fullrecall's own documents).
    """
    check_json_value(value, where, limit=limit, tuples=tuples)
    return dumps(value)


def check_json_value(value: Any, where: str, *, limit: int = MAX_FIELD_BYTES, tuples: bool = False) -> None:
    """Like :func:`check_json`, without making the text when a quick pass shows it fits.

    The pass needs no recursion (a value nested 5,000 levels deep is a clear error, not a
    RecursionError); only a value that fails it is walked again to name the offending path.
    """
    bound = _plain_json_bound(value, tuples)
    if bound is None:
        _find_fault(value, where, tuples)
    elif bound <= limit:
        return
    text = dumps(value)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput(f"{_at(where, _surrogate_path(value))} is not valid Unicode (a lone surrogate)") from None
    if size > limit:
        raise InvalidInput(f"{where} is {size:,} bytes as JSON, over the {limit:,}-byte limit")


def _plain_json_bound(value: Any, tuples: bool) -> int | None:
    """An upper bound of ``value``'s JSON size in bytes if it is made of exact JSON types only, valid
    Unicode, nested within MAX_DEPTH; None if not (or not sure: subclasses), to be looked at closely.
    """
    chars = items = 0
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        items += 1
        t = type(v)
        if t is str:
            if not v.isascii() and not _valid(v):
                return None
            chars += len(v)
        elif t is int or t is bool or v is None:
            pass
        elif t is bytes:  # base64 in a tagged object (see dumps)
            chars += (len(v) + 2) // 3 * 4 + 40
        elif t is float:
            if not math.isfinite(v):
                return None
        elif depth >= MAX_DEPTH:
            return None
        elif t is dict:
            for key in v:
                if type(key) is not str or (not key.isascii() and not _valid(key)):
                    return None
                chars += len(key)
                items += 1
            stack.extend((item, depth + 1) for item in v.values())
        elif t is list or (tuples and t is tuple):
            stack.extend((item, depth + 1) for item in v)
        else:
            return None
    # a character takes at most 6 bytes in JSON (\u0000); a number, literal or separator at most 32
    return 6 * chars + 32 * items


def _find_fault(value: Any, where: str, tuples: bool) -> None:
    """Raise InvalidInput naming the first value under ``where`` that is not JSON (subclasses of JSON types pass)."""
    arrays = (list, tuple) if tuples else list
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        v, path, depth = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                raise InvalidInput(f"{_at(where, path)} is {v!r}; JSON has no NaN or infinity")
        elif isinstance(v, _SCALARS):
            continue
        elif depth >= MAX_DEPTH:
            raise InvalidInput(f"{_at(where, path)} is nested more than {MAX_DEPTH} levels deep")
        elif isinstance(v, dict):
            for key, item in v.items():
                if not isinstance(key, str):
                    raise InvalidInput(f"{_at(where, path)} has a key {key!r} of type {type(key).__name__}; "
                                       "JSON keys are strings")
                stack.append((item, f"{path}.{key}", depth + 1))
        elif isinstance(v, arrays):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(v))
        elif isinstance(v, tuple):
            raise InvalidInput(f"{_at(where, path)} is a tuple; use a list (JSON gives arrays back as lists)")
        else:
            raise InvalidInput(f"{_at(where, path)} is a {type(v).__name__}, not a JSON value")


def _at(where: str, path: str) -> str:
    """``message 0: 'data.content[1]'`` from ``message 0: 'data'`` and ``.content[1]``."""
    if not path:
        return where
    if len(path) > 80:  # a deep path: its start says enough
        head = path[:60]
        path = head[: max(head.rfind("["), head.rfind("."), 1)] + "..."
    if where.endswith("'"):
        return where[:-1] + path + "'"
    return f"{where}: '{path.lstrip('.')}'"


def _surrogate_path(value: Any) -> str:
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        v, path = stack.pop()
        items: Any = ()
        if isinstance(v, dict):
            items = ((f"{path}.{k}", k, x) for k, x in v.items())
        elif isinstance(v, (list, tuple)):
            items = ((f"{path}[{i}]", "", x) for i, x in enumerate(v))
        elif isinstance(v, str) and not _valid(v):
            return path
        for sub, key, item in items:
            if not _valid(key):
                return sub
            stack.append((item, sub))
    return ""


def _valid(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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


def check_message(m: Any, index: int) -> None:
    where = f"message {index}"
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
    for name in ("created_at", "archived_at"):
        check_time(getattr(m, name), f"{where}: '{name}'")
    if m.summary_id is not None:
        check_id(m.summary_id, f"{where}: 'summary_id'")
    if not isinstance(m.metadata, dict):
        raise InvalidInput(f"{where}: 'metadata' must be a dict, got {type(m.metadata).__name__}")
    check_json_value(m.metadata, f"{where}: 'metadata'")


def check_time(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"{where} is {value!r}; expected a finite number of Unix seconds")
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

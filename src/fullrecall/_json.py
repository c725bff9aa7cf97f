"""JSON values as fullrecall accepts them: checked (naming the offending path), written compactly, read back.

The part of the input rule (see :mod:`fullrecall.stores._validate`) that messages and stores share:
``dict`` with ``str`` keys, ``list``, ``str`` (valid Unicode), ``int``, finite ``float``, ``bool`` and
``None``, nested at most :data:`MAX_DEPTH` levels, within a byte limit; ``bytes`` (an image in a tool
result) are written as base64 in a tagged object and restored by :func:`loads`. A violation raises
:class:`~fullrecall.errors.InvalidInput`. It depends on nothing but :mod:`fullrecall.errors`, so any
layer may use it.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from typing import Any

from .errors import InvalidInput

MAX_MESSAGE_BYTES = 32 * 2**20  # one message as the application gives it, serialised as JSON
MAX_FIELD_BYTES = 64 * 2**20  # one stored text, data or metadata field (room for the rendered message)
MAX_DEPTH = 64  # nesting of JSON values

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


def dumps_text(value: Any, *, indent: int | None = None) -> str:
    """JSON of a value for a file or stream people and other tools read (an export): not ASCII-escaped, and
    bytes (an image in a Strands message) in the tagged base64 object :func:`loads` restores, the encoding
    Strands sessions use, as :func:`dumps` writes them.
    """
    return json.dumps(value, ensure_ascii=False, indent=indent, default=_encode_bytes)


# json.loads's own scanner (C, an attribute typeshed leaves out), called on a text's first character
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def loads(text: str | bytes) -> Any:
    """JSON written by :func:`dumps`, bytes restored.

    Text that cannot hold the bytes marker (not there literally, and no escape that could spell it) is
    decoded without the per-object hook, all in C: several times faster for the messages a recall reads.
    """
    if isinstance(text, str):
        if _BYTES_KEY not in text and "\\u" not in text:
            try:  # compact JSON as written here: the C scanner alone, without json.loads's whitespace checks
                value, end = _scan(text, 0)
                if end == len(text):
                    return value
            except (StopIteration, ValueError):
                pass
            return json.loads(text)
    elif _BYTES_KEY.encode() not in text and b"\\u" not in text:
        return json.loads(text)
    return json.loads(text, object_hook=_decode_bytes)


def parse(text: str) -> Any:
    """``json.loads(text)``; a document nested past Python's parser (a RecursionError) raises the
    ``json.JSONDecodeError`` any invalid JSON does, ``msg`` "nested too deep", so every reader refuses it alike.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deep", text, 0) from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer of more digits than Python converts (4,300)
        raise json.JSONDecodeError("a number too long (over 4,300 digits)", text, 0) from None


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
    try:
        bound = _plain_json_bound(value, tuples)
        if bound is None:
            _find_fault(value, where, tuples)
        elif bound <= limit:
            return
        text = dumps(value)
    except ValueError as exc:  # an integer of more digits than Python converts (4,300)
        if isinstance(exc, InvalidInput):
            raise
        raise InvalidInput(f"{where} holds an integer too long to write (over 4,300 digits)") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput(f"{_at(where, _surrogate_path(value))} is not valid Unicode (a lone surrogate)") from None
    if size > limit:
        raise InvalidInput(f"{where} is {size:,} bytes as JSON, over the {limit:,}-byte limit")


_BIG = 10**30


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
        elif t is int:
            if not -_BIG < v < _BIG:  # over 30 digits: its size is not bounded here (nor written past 4,300)
                return None
        elif t is bool or v is None:
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

"""The up-front check of a window: every manager reads the whole list before it does anything.

An entry that is no message dict, a missing or wrong field, or two shapes in one list raises the
:class:`~fullrecall.errors.MessageFormatError` that :func:`~fullrecall.messages.parse_messages` raises
for the whole list (the message's index and the field), whatever the manager would do next: trim,
summarize, or nothing. Nothing has moved by then.

It runs after every turn, so it reads only what it has not read. The list as last checked is kept:
when it is still the front of the list (compared with ``==``, which for the very same dicts is a
pointer comparison), only the messages after it are parsed; otherwise (a trimmed window, a summary
put in, a message replaced) every message that is not one of the dict objects checked before is
parsed. A message dict edited in place after it was checked is read again when a manager parses it
to act on it, and raises the same error then, before anything moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..messages.formats import parse_messages, shape_of, shape_signals


class WindowCheck:
    """Raises what ``parse_messages(messages)`` raises, reading only the messages it has not checked."""

    __slots__ = ("_found", "_known", "_seen", "_shape")

    def __init__(self) -> None:
        self._seen: list[Any] = []  # the list as last checked: every message valid
        self._found: dict[str, int] = {}  # the shapes its messages show, each with its first index
        self._shape = ""
        self._known: dict[int, Any] = {}  # id -> the message dict checked (held, so no other object takes its id)

    def __call__(self, messages: Sequence[Any]) -> None:
        if not isinstance(messages, list):
            parse_messages(messages)  # a tuple is read whole; anything else gets parse_messages' error
            return
        n = len(self._seen)
        if n and len(messages) >= n and _equal(messages[:n], self._seen):
            found = {**shape_signals(messages[n:], n), **self._found}  # the earlier index of a shape stands
            shape = shape_of(found)
            if shape == self._shape:
                parse_messages(messages[n:], shape, first_index=n)
                self._known.update((id(m), m) for m in messages[n:])
                self._remember(messages, found, shape)
                return
        found = shape_signals(messages)
        shape = shape_of(found)
        known = self._known if shape == self._shape else {}
        for index, msg in enumerate(messages):
            if known.get(id(msg)) is not msg:
                parse_messages([msg], shape, first_index=index)
        self._known = {id(m): m for m in messages}
        self._remember(messages, found, shape)

    def _remember(self, messages: list[Any], found: dict[str, int], shape: str) -> None:
        self._seen, self._found, self._shape = list(messages), found, shape


def _equal(a: list[Any], b: list[Any]) -> bool:
    try:
        return a == b
    except Exception:  # a value whose comparison raises (an array): read the list again
        return False

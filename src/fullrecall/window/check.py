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
        self._seen: list[Any] = []  # the list as last checked: every message valid in ``_shape``
        self._found: dict[str, int] = {}  # the shapes its messages show, each with its first index
        self._shape = ""
        # id -> (a message dict checked in ``_shape``, the shape it shows); held, so no other object takes its id
        self._known: dict[int, tuple[Any, str | None]] = {}

    def __call__(self, messages: Sequence[Any]) -> None:
        if not isinstance(messages, list):
            parse_messages(messages)  # a tuple is read whole; anything else gets parse_messages' error
            return
        n = len(self._seen)
        grown = bool(n) and len(messages) >= n and _equal(messages[:n], self._seen)
        start = n if grown else 0
        found = dict(self._found) if grown else {}  # the earlier index of a shape stands
        entries, fresh = self._scan(messages, start, found)  # MessageFormatError: the first entry not a dict
        shape = shape_of(found)  # MessageFormatError: two shapes
        if shape != self._shape:  # a message's fields are read as its list's shape has them: all again
            parse_messages(messages, shape)
            known = {}
        else:
            for index in fresh:
                parse_messages([messages[index]], shape, first_index=index)
            known = self._known if grown else {}
        known.update((id(e[0]), e) for e in entries)
        self._known, self._seen, self._found, self._shape = known, list(messages), found, shape

    def _scan(self, messages: list[Any], start: int, found: dict[str, int]
              ) -> tuple[list[tuple[Any, str | None]], list[int]]:
        """Each message from ``start`` on with the shape it shows (remembered for a dict checked before), each
        shape's first index added to ``found``, and the indexes of the messages not checked before.
        """
        known = self._known
        entries, fresh = [], []
        for index in range(start, len(messages)):
            msg = messages[index]
            entry = known.get(id(msg))
            if entry is None or entry[0] is not msg:
                entry = (msg, next(iter(shape_signals([msg], index)), None))
                fresh.append(index)
            entries.append(entry)
            if entry[1] is not None and entry[1] not in found:
                found[entry[1]] = index
        return entries, fresh


def _equal(a: list[Any], b: list[Any]) -> bool:
    try:
        return a == b
    except Exception:  # a value whose comparison raises (an array): read the list again
        return False

"""Columns that grow in place: a kept vector block or keyword index extended by the rows written since it was
read appends them to storage it shares with the block it was extended from, instead of copying every row
(at 10,000 rows the copies cost more than the rows added, on every search after a write).

Rows are only ever appended, and each block or index reads only its own first rows, so the blocks extended
from one another can share one list or array. Only the one whose rows end where the storage's end may write
past them; any other (two extended from the same block, one of them first) copies its own rows to new storage.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

import numpy as np

from .._fork import after_fork_in_child

T = TypeVar("T")

_lock = threading.Lock()


@after_fork_in_child
def _renew() -> None:
    """A new lock in a forked child (see ``_fork``)."""
    global _lock
    _lock = threading.Lock()


class Rows(Sequence[T]):
    """The first ``len(self)`` items of a list that only grows (``items``: the whole list, past them too).

    ``rows + more`` are these rows followed by ``more``: appended to the list in place when nothing was
    appended after these rows, else a copy.
    """

    __slots__ = ("items", "_n")

    def __init__(self, items: list[T], n: int | None = None) -> None:
        self.items = items
        self._n = len(items) if n is None else n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, row: int) -> T: ...

    @overload
    def __getitem__(self, row: slice) -> list[T]: ...

    def __getitem__(self, row: int | slice) -> T | list[T]:
        if isinstance(row, slice):
            return self.items[: self._n][row]
        if not -self._n <= row < self._n:
            raise IndexError(row)
        return self.items[row % self._n]

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self.items, self._n)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rows({self.items[: self._n]!r})"

    def __add__(self, more: Sequence[T]) -> Rows[T]:
        n, m = self._n, len(more)
        with _lock:  # claimed by one of the rows extended from these at most
            if len(self.items) == n:
                self.items.extend(more)
                return Rows(self.items, n + m)
        copy = self.items[:n]
        copy.extend(more)
        return Rows(copy)


def items(rows: Sequence[T]) -> Sequence[T]:
    """What to read ``rows``' items from by row number, fastest (a :class:`Rows`' whole list: rows read below its
    length are its own).
    """
    return rows.items if isinstance(rows, Rows) else rows


class Room:
    """The array whose first rows are a block's column (``array[:used]``), with spare rows past ``used``: a
    column grows by writing its new rows there, not by copying all its rows into a new array (3 MB for a user's
    2,000 vectors, about 3 ms on the first search after each record). Columns extended from one another share
    it: only the one whose rows end at ``used`` may write past them; any other, or one that does not fit, moves
    to a new room a quarter larger than it needs.
    """

    __slots__ = ("array", "used")

    def __init__(self, rows: int, like: np.ndarray) -> None:
        self.array: np.ndarray = np.empty((rows + rows // 4 + 64, *like.shape[1:]), like.dtype)
        self.used = rows

    @classmethod
    def extended(cls, first: np.ndarray, room: Room | None, more: np.ndarray) -> tuple[np.ndarray, Room]:
        """``first`` (the first rows of ``room``, or of no room) with the rows ``more`` after it."""
        n, m = len(first), len(more)
        with _lock:  # claimed by one column at most
            if room is not None and room.used == n and n + m <= len(room.array):
                room.used = n + m
            else:
                room = None
        if room is None:
            room = cls(n + m, first)
            room.array[:n] = first
        room.array[n:n + m] = more
        return room.array[:n + m], room


def grown(columns: Sequence[np.ndarray], rooms: Sequence[Room] | None, more: Sequence[np.ndarray]
          ) -> tuple[list[np.ndarray], tuple[Room, ...]]:
    """Each of ``columns`` with the rows of its ``more`` after it, and their rooms (``rooms``: those of the first
    columns, the others in none).
    """
    held: list[Room | None] = [*(rooms or ()), *[None] * (len(columns) - len(rooms or ()))]
    pairs = [Room.extended(c, r, m) for c, r, m in zip(columns, held, more)]
    return [c for c, _ in pairs], tuple(r for _, r in pairs)


def as_rows(values: Sequence[T]) -> Rows[T]:
    """``values`` as :class:`Rows` (a list of its own unless they are)."""
    return values if isinstance(values, Rows) else Rows(list(values))

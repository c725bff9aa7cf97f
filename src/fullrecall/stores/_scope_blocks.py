"""Small scopes' vectors kept in process by a server store (PostgreSQL), so that a search of one user's or one
conversation's few thousand vectors is a numpy scan instead of the server's, checked against the server's
own counters in one round trip.

A scope's block is described by its sessions' ``(vector epoch, vectors held)``: the epoch moves when a vector
is overwritten or a message deleted, so while every epoch stands, a session has only gained vectors, and
those past the block's highest row id are what it gained, unless a vector came late for an older message
(then the counts do not add up and the block is read again). Blocks are kept least recently used first out,
within a byte budget.

A block keeps its rows' messages too (as the server's rows, decoded when a caller asks), so that neither its
search nor a keyword search of the same scope reads its hits' messages again. A stored message never changes
under its row id (a replacement is a new row), and a search's hits are rows that exist when it is checked, so a
kept message is the stored one for as long as its row is a hit; forgetting a session drops every block of it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._vectors import VectorBlock

Versions = Mapping[int, tuple[int, int]]
"""sid -> (vector epoch, vectors held) of each session of a scope."""

Rows = Mapping[str, Mapping[str, Any]]
"""row id (as text) -> the server's row of that message (its columns by name)."""

_ROW_OVERHEAD = 600  # bytes a kept row costs beyond its strings (the dict and its values)


@dataclass(frozen=True)
class ScopeBlock:
    """One scope's vectors (each row with its owner and place), what each session held when they were read, the
    highest row id among them, and the rows' messages (``rows``: a message too large to carry is not there).
    """

    versions: Versions
    max_rid: int
    block: VectorBlock
    rows: Rows = field(default_factory=dict)
    rows_nbytes: int = 0  # about what ``rows`` hold (:func:`rows_nbytes`)

    @classmethod
    def of(cls, versions: Versions, max_rid: int, block: VectorBlock, rows: Rows) -> ScopeBlock:
        """A block read whole, with its rows' messages."""
        return cls(versions, max_rid, block, rows, rows_nbytes(rows))

    def extended(self, versions: Versions, max_rid: int, new: VectorBlock, rows: Rows) -> ScopeBlock:
        """This block with the vectors (and their rows) added since it was read: only the new rows are measured."""
        return ScopeBlock(versions, max(max_rid, self.max_rid), self.block.extend(new),
                          {**self.rows, **rows} if rows else self.rows, self.rows_nbytes + rows_nbytes(rows))

    @property
    def nbytes(self) -> int:
        return self.block.nbytes + self.rows_nbytes

    def grown_by(self, versions: Versions) -> bool:
        """Whether ``versions`` (read later) can only have added vectors: the same sessions or more, and each
        of the known ones at the same epoch.
        """
        return all(sid in versions and versions[sid][0] == epoch for sid, (epoch, _) in self.versions.items())


def rows_nbytes(rows: Rows) -> int:
    """About the bytes kept rows hold: their strings, and what a row costs beyond them."""
    return strings_nbytes([row.values() for row in rows.values()], _ROW_OVERHEAD)


def strings_nbytes(rows: Collection[Iterable[Any]], per_row: int) -> int:
    """About the bytes kept messages hold, whatever shape their rows have: their strings' characters, and
    ``per_row`` for what each row costs beyond them (its container and its other values).
    """
    return sum(len(v) for row in rows for v in row if isinstance(v, str)) + per_row * len(rows)


class ScopeBlocks:
    """The kept blocks, by scope, within ``budget`` bytes (the least recently used dropped first).

    ``forgets`` counts the forgets (and clears) seen: a block read before one of them may hold what it dropped, so
    :meth:`put` keeps a block only if none came since its read began.
    """

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._held: OrderedDict[Hashable, ScopeBlock] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.forgets = 0

    def get(self, scope: Hashable) -> ScopeBlock | None:
        with self._lock:
            found = self._held.get(scope)
            if found is not None:
                self._held.move_to_end(scope)
            return found

    def put(self, scope: Hashable, block: ScopeBlock, read_after: int) -> None:
        """Keep ``block``, whose read began when :attr:`forgets` was ``read_after`` (not kept if it moved since)."""
        with self._lock:
            if read_after != self.forgets:
                return
            old = self._held.pop(scope, None)
            self._bytes += block.nbytes - (old.nbytes if old is not None else 0)
            self._held[scope] = block
            while self._bytes > self._budget and self._held:
                _, dropped = self._held.popitem(last=False)
                self._bytes -= dropped.nbytes

    def drop(self, scope: Hashable) -> None:
        with self._lock:
            old = self._held.pop(scope, None)
            if old is not None:
                self._bytes -= old.nbytes

    def drop_sessions(self, sids: Iterable[int]) -> None:
        """Drop every block holding vectors of one of the sessions ``sids`` (forgotten, or messages of them deleted:
        nothing of those is kept).
        """
        gone = set(sids)
        with self._lock:
            self.forgets += 1
            for scope in [scope for scope, kept in self._held.items() if gone.intersection(kept.versions)]:
                self._bytes -= self._held.pop(scope).nbytes

    def clear(self) -> None:
        with self._lock:
            self.forgets += 1
            self._held.clear()
            self._bytes = 0

"""What a fact's write looks up among the owner's facts, indexed as the record book's cache changes.

A write asks: which fact holding at its ``valid_from`` does this one repeat (the same words, or the
same attribute with the same value), which open facts (``valid_to`` None) without an attribute might
mean the same (compared by vector), and which facts hold its attribute (its rivals). Scanning every fact for that costs a millisecond at a
few hundred facts; this index answers from dictionaries and a kept stack of vectors, and follows each
change the book makes (:meth:`FactIndex.applied`) instead of being built again.

An index is a snapshot of one state of the cache (its ``basis``): a change makes a new index, copying
only what it touches, so a reader holding the old one is never disturbed.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Hashable, Mapping
from typing import Any, NamedTuple, cast

import numpy as np

from ..stores.base import Record
from ._records import Entry

USER = "user"  # a fact's subject when it names none (the user)


@functools.lru_cache(maxsize=65_536)
def normalize(text: str) -> str:
    """Case folded, compatibility-composed (NFKC: "Zürich" typed with a combining mark, or in full-width
    letters, is "zürich"), words only, single spaces: how duplicates are recognized.
    """
    return " ".join(re.findall(r"\w+", unicodedata.normalize("NFKC", text).casefold()))


def holds(record: Record, when: float) -> bool:
    """Whether a stored fact is valid at ``when``: from its ``valid_from`` (included) to its ``valid_to``."""
    start, end = record.data.get("valid_from"), record.data.get("valid_to")
    return (start is None or start <= when) and (end is None or when < end)


def repeatable(record: Record, when: float, *, undated: bool = False) -> bool:
    """Whether a stored fact takes a repeat stated for ``when``: it is valid then; or, for a repeat stated
    without a date (``undated``: valid from when it was said), it is open-ended and was itself said without one.
    Two writers stating one fact at once then make one fact, whichever read its clock first; a fact dated
    ahead, or one dated back, still takes repeats only for the times it is valid.
    """
    if holds(record, when):
        return True
    data = record.data
    return undated and data.get("valid_to") is None and data.get("valid_from") is not None \
        and data.get("valid_from") == data.get("stated_at")


class Traits(NamedTuple):
    """What a write compares of a stored fact: whose, which attribute, whether open-ended (``valid_to`` None:
    current, or to be once its ``valid_from`` comes), its words normalized.
    """

    subject: str
    attribute: str | None
    open: bool
    text: str
    value: str


def traits(record: Record) -> Traits:
    data = record.data
    return Traits(data.get("subject", USER), data.get("attribute"), data.get("valid_to") is None,
                  normalize(record.text), normalize(data.get("value") or record.text))  # no value: its words


_View = tuple[float, float, list[Entry], np.ndarray | None]  # (since, until, the facts valid then, their vectors)
_MAX_CHANGES = 256  # changes a view is followed through before one is built again


def _order(record: Record) -> tuple[float, str]:
    """The book's order of records: (created_at, id), oldest first."""
    return record.created_at, record.id


class FactIndex:
    """The facts of one state of the book's cache (``basis``), by what a write looks up."""

    __slots__ = ("basis", "_text", "_value", "_attribute", "_loose", "_stacks", "_valid", "_since")

    def __init__(self, basis: Mapping[str, Entry]) -> None:
        self.basis = basis
        self._text: dict[tuple[str, str], dict[str, Record]] = {}  # every fact by (subject, words)
        self._value: dict[tuple[str, str, str], dict[str, Record]] = {}  # ... by (subject, attribute, value)
        self._attribute: dict[tuple[str, str], dict[str, Record]] = {}  # every fact by (subject, attribute)
        self._loose: dict[str, dict[str, Entry]] = {}  # open facts without an attribute, by subject
        self._stacks: dict[str, tuple[list[Entry], np.ndarray]] = {}  # their vectors, stacked in order
        self._valid: _View | None = None  # see valid()
        # an earlier index's view and the changes made since (replaced, entry): see _followed()
        self._since: tuple[_View, list[tuple[Entry | None, Entry | None]]] | None = None

    @classmethod
    def of(cls, basis: Mapping[str, Entry]) -> FactIndex:
        index = cls(basis)
        for entry in basis.values():
            index._add(entry, fresh=True)
        return index

    # -- what a write asks -------------------------------------------------------------------
    def repeated(self, subject: str, text: str, attribute: str | None, value: str, when: float, *,
                 undated: bool = False) -> list[Record]:
        """The facts of ``subject`` that take a repeat stated for ``when`` (:func:`repeatable`, ``undated``) with these
        normalized words, or (given an attribute) with this attribute and normalized value, oldest first.
        """
        found = dict(self._text.get((subject, text), {}))
        if attribute:
            found.update(self._value.get((subject, attribute, value), {}))
        return sorted((r for r in found.values() if repeatable(r, when, undated=undated)), key=_order)

    def loose(self, subject: str) -> tuple[list[Entry], np.ndarray | None]:
        """The open facts of ``subject`` without an attribute that have a vector, oldest first, with those
        vectors stacked (None when there are none).
        """
        stacked = self._stacks.get(subject)
        if stacked is None:
            entries = sorted((e for e in self._loose.get(subject, {}).values() if e[1] is not None),
                             key=lambda e: _order(e[0]))
            if not entries:
                return [], None
            stacked = self._stacks[subject] = (entries, np.stack([e[1] for e in entries]))  # type: ignore[misc]
        return stacked

    def valid(self, when: float) -> tuple[list[Entry], np.ndarray | None]:
        """The facts valid at ``when`` (of every subject) that have a vector, in the basis's order, with those
        vectors stacked (None when there are none): what a search of current facts ranks. Kept for the next
        call while no fact starts or ends between the two times.
        """
        view = self._valid
        if view is None or not view[0] <= when < view[1]:
            view = self._valid = self._followed(when) or self._built(when)
        return view[2], view[3]

    def _built(self, when: float) -> _View:
        entries = [e for e in self.basis.values() if e[1] is not None and holds(e[0], when)]
        times = [t for r, _ in self.basis.values() for t in (r.data.get("valid_from"), r.data.get("valid_to"))
                 if t is not None]
        since, until = max((t for t in times if t <= when), default=-math.inf), \
            min((t for t in times if t > when), default=math.inf)
        matrix = np.stack([v for _, v in entries]) if entries else None  # type: ignore[misc]
        return since, until, entries, matrix

    def _followed(self, when: float) -> _View | None:
        """The view at ``when`` from an earlier index's (when it covers ``when``) and the changes since, without
        visiting every fact again: each change's entry takes its record's row (or a row of its own, in the
        book's order), or leaves it; its times can only narrow the span the view holds for. None: build it.
        """
        if self._since is None:
            return None
        (since, until, entries, matrix), changes = self._since
        if not since <= when < until:
            return None
        rows: dict[str, tuple[Entry, int | None]] = {e[0].id: (e, i) for i, e in enumerate(entries)}  # None: new
        for replaced, entry in changes:
            if replaced is not None:
                rows.pop(replaced[0].id, None)
            if entry is None:
                continue
            for t in (entry[0].data.get("valid_from"), entry[0].data.get("valid_to")):
                if t is not None:
                    since, until = (max(since, t), until) if t <= when else (since, min(until, t))
            if entry[1] is not None and holds(entry[0], when):
                rows[entry[0].id] = (entry, None)
        kept = list(rows.values())
        if not kept:
            return since, until, [], None
        if any(i is None for _, i in kept):  # in the book's order (the rows kept are in it already)
            place = {record_id: i for i, record_id in enumerate(self.basis)}
            kept.sort(key=lambda found: place[found[0][0].id])
        entries = [e for e, _ in kept]
        new = [(j, cast("np.ndarray", e[1])) for j, (e, i) in enumerate(kept) if i is None]
        if matrix is None or any(v.shape != matrix.shape[1:] or v.dtype != matrix.dtype for _, v in new):
            return since, until, entries, np.stack([e[1] for e in entries])  # type: ignore[misc]
        stacked = np.empty((len(kept), matrix.shape[1]), dtype=matrix.dtype)
        old = [(j, i) for j, (_, i) in enumerate(kept) if i is not None]
        stacked[[j for j, _ in old]] = matrix[[i for _, i in old]]
        for j, v in new:
            stacked[j] = v
        return since, until, entries, stacked

    def holding(self, subject: str, attribute: str) -> list[Record]:
        """The facts of ``subject`` with this attribute, current or not, oldest first."""
        return sorted(self._attribute.get((subject, attribute), {}).values(), key=_order)

    # -- following the book ------------------------------------------------------------------
    def applied(self, basis: Mapping[str, Entry], record_id: str, replaced: Entry | None,
                entry: Entry | None) -> FactIndex:
        """The index of ``basis``: this one's state with the record ``record_id`` (was ``replaced``) now
        ``entry`` (None: deleted).
        """
        index = FactIndex(basis)
        view, changes = (self._valid, []) if self._valid is not None else self._since or (None, [])
        if view is not None and len(changes) < _MAX_CHANGES:
            index._since = (view, [*changes, (replaced, entry)])
        index._text, index._value = dict(self._text), dict(self._value)
        index._attribute, index._loose, index._stacks = dict(self._attribute), dict(self._loose), dict(self._stacks)
        stacked = self._stacks.get(traits(entry[0]).subject) if entry is not None else None
        if replaced is not None:
            index._remove(replaced)
        if entry is not None:
            index._add(entry, fresh=False)
            if replaced is not None and stacked is not None and _same_loose(replaced, entry):
                # the same loose fact written again (one more mention), its vector unchanged: its row stays
                rows = [entry if e[0].id == entry[0].id else e for e in stacked[0]]
                index._stacks[traits(entry[0]).subject] = (rows, stacked[1])
        return index

    def _add(self, entry: Entry, *, fresh: bool) -> None:
        """Index ``entry``; ``fresh``: while building (the inner dictionaries are this index's own)."""
        r = entry[0]
        t = traits(r)

        def put(table: dict[Any, dict[str, Any]], key: Hashable, value: object) -> None:
            inner = table.get(key)
            inner = {} if inner is None else (inner if fresh else dict(inner))
            inner[r.id] = value
            table[key] = inner

        put(self._text, (t.subject, t.text), r)
        if t.attribute:
            put(self._attribute, (t.subject, t.attribute), r)
            put(self._value, (t.subject, t.attribute, t.value), r)
            return
        if not t.open:
            return
        put(self._loose, t.subject, entry)
        stacked = self._stacks.pop(t.subject, None)
        vector = entry[1]
        if not fresh and stacked is not None and vector is not None and vector.shape == stacked[1].shape[1:] and (
                not stacked[0] or _order(stacked[0][-1][0]) < _order(r)):  # the newest: one row more
            self._stacks[t.subject] = ([*stacked[0], entry], np.vstack([stacked[1], vector[None, :]]))

    def _remove(self, entry: Entry) -> None:
        r = entry[0]
        t = traits(r)

        def drop(table: dict[Any, dict[str, Any]], key: Hashable) -> None:
            inner = table.get(key)
            if inner is not None and r.id in inner:
                inner = dict(inner)
                del inner[r.id]
                if inner:
                    table[key] = inner
                else:
                    del table[key]

        drop(self._text, (t.subject, t.text))
        if t.attribute:
            drop(self._attribute, (t.subject, t.attribute))
            drop(self._value, (t.subject, t.attribute, t.value))
        elif t.open:
            drop(self._loose, t.subject)
            self._stacks.pop(t.subject, None)


def _same_loose(old: Entry, new: Entry) -> bool:
    """Whether two entries are the same open fact without an attribute, with the same vector."""
    a, b = traits(old[0]), traits(new[0])
    return (old[0].id == new[0].id and a.open and b.open and not a.attribute and not b.attribute
            and a.subject == b.subject and old[1] is not None and new[1] is not None
            and bool(np.array_equal(old[1], new[1])))

"""Budget-aware packing: which recalled messages to hand the model within a budget.

Measured on LoCoMo (``docs/search.md``): at an equal number of turns handed
over, more distinct hits find more evidence than fewer hits with their
neighbours. So the budget goes to hits, most relevant first, and a neighbour
only where it pays: the question a hit answers (the turn before it, from the
other speaker, ending in "?") and the answer to a hit that is itself a
question. Neighbours within ``radius`` (the context radius) are added
around the first ``radius_hits`` hits only. Messages are whole (cut at message
boundaries), never repeated, never at or after ``before`` (the first position
the model already sees in its window), and returned in conversation order.

Costs and budgets are vectors, so one call can honour a token budget and a
character budget together (or count turns: cost 1 each).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..stores.base import StoredMessage

Cost = Callable[[StoredMessage], Sequence[int]]


@dataclass
class Packed:
    """What was chosen: messages in conversation order, what they cost, which hits made it."""

    messages: list[StoredMessage] = field(default_factory=list)
    spent: list[int] = field(default_factory=list)
    hit_positions: list[int] = field(default_factory=list)

    @property
    def positions(self) -> list[int]:
        return [m.position for m in self.messages if m.position is not None]


SHORT_REPLY = 80  # characters: a reply this short means little without the question it answers


def own_text(message: StoredMessage) -> str:
    """The message's own words (``data["text"]`` when there, else the indexed text)."""
    text = message.data.get("text") if isinstance(message.data, dict) else None
    return text if isinstance(text, str) else message.text


def is_question(message: StoredMessage | None) -> bool:
    """A turn that asks something: a question mark in its last sentence or so."""
    return message is not None and "?" in own_text(message).rstrip()[-160:]


def paying_neighbours(hit: StoredMessage, around: Mapping[int, StoredMessage]) -> list[StoredMessage]:
    """The neighbours worth their cost: the question the hit answers, the answer to a hit that asks."""
    p = hit.position
    if p is None:
        return []
    out = []
    before, after = around.get(p - 1), around.get(p + 1)
    if before is not None and before.role != hit.role and is_question(before) and len(own_text(hit)) <= SHORT_REPLY:
        out.append(before)
    if after is not None and after.role != hit.role and is_question(hit):
        out.append(after)
    return out


def spans_around(positions: Sequence[int], radius: int) -> list[tuple[int, int]]:
    """The spans ``[p - radius, p + radius]`` (from 0) around ``positions``, in order, overlapping or touching
    ones merged.
    """
    spans: list[tuple[int, int]] = []
    for p in sorted(positions):
        start, end = max(0, p - radius), p + radius
        if spans and start <= spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans


def uncovered(spans: Sequence[tuple[int, int]], covered: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``spans`` outside ``covered`` (both inclusive, in order, none overlapping), in order."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        for low, high in covered:
            if high < start or low > end:
                continue
            if low > start:
                out.append((start, low - 1))
            start = high + 1
            if start > end:
                break
        if start <= end:
            out.append((start, end))
    return out


def neighbour_positions(hits: Sequence[StoredMessage], *, radius: int = 0, radius_hits: int = 0,
                        before: int | None = None) -> list[int]:
    """Positions :func:`pack` may want beside ``hits``: one each side, ``radius`` around the first ``radius_hits``;
    none at or past ``before`` (the window's first position: a radius far larger than the archive costs what it holds).
    """
    wanted: set[int] = set()
    for i, h in enumerate(hits):
        if h.position is None:
            continue
        r = max(1, radius if i < radius_hits else 1)
        end = h.position + r if before is None else min(h.position + r, before - 1)
        wanted.update(p for p in range(max(0, h.position - r), end + 1) if p != h.position)
    return sorted(wanted)


def pack(
    hits: Sequence[StoredMessage],
    budget: Sequence[int],
    cost: Cost,
    *,
    around: Mapping[int, StoredMessage] | None = None,
    before: int | None = None,
    radius: int = 0,
    radius_hits: int = 0,
    pair_questions: bool = True,
) -> Packed:
    """The messages to hand over for ``hits`` (best first, one session) within ``budget``.

    ``around`` maps positions to messages near the hits (see :func:`neighbour_positions`);
    without it only hits are packed. A message that does not fit is skipped and
    the next tried, so the budget is filled with whole messages.
    """
    around = around or {}
    left = list(budget)
    chosen: dict[int, StoredMessage] = {}
    spent = [0] * len(left)
    hit_positions: list[int] = []

    def take(m: StoredMessage) -> bool:
        p = m.position
        if p is None or p in chosen or (before is not None and p >= before):
            return False
        c = list(cost(m))
        if any(ci > li for ci, li in zip(c, left)):
            return False
        for i, ci in enumerate(c):
            left[i] -= ci
            spent[i] += ci
        chosen[p] = m
        return True

    for i, hit in enumerate(hits):
        at = hit.position
        if at is None:
            continue
        if at not in chosen and not take(hit):
            continue
        hit_positions.append(at)
        extra = paying_neighbours(hit, around) if pair_questions else []
        if i < radius_hits and radius > 0:
            near = sorted(  # of the neighbours read, not range(): a radius may be far larger than the read
                (p for p in around if p != at and abs(p - at) <= radius),
                key=lambda p: (abs(p - at), p),
            )
            extra += [around[p] for p in near]
        for m in extra:
            take(m)
        if all(v <= 0 for v in left):
            break
    return Packed([chosen[p] for p in sorted(chosen)], spent, hit_positions)

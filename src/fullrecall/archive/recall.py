"""Turning search hits into recalled context: radius, overlap merge, budget packing, enrichment text."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..search.packing import Packed, neighbour_positions, pack
from ..stores.base import Scope, Store, StoredMessage

ENRICHMENT_HEADER = "Based on our previous conversation, these earlier exchanges may be relevant:"
CONTEXT_START = "---Previous Context---"
CONTEXT_END = "---End Previous Context---"
QUESTION_PREFIX = "Current question: "
COST_CACHE_SIZE = 100_000  # messages whose line costs a packing cost keeps (a long-lived hook's recalls)


@dataclass
class RecalledRange:
    """Consecutive archived messages around one or more hits, in conversation order."""

    start: int
    end: int
    messages: list[StoredMessage] = field(default_factory=list)
    best_score: float = 0.0
    hit_positions: list[int] = field(default_factory=list)


def merge_ranges(hits: list[tuple[int, float]], radius: int, *, before: int | None = None) -> list[RecalledRange]:
    """Ranges of ``radius`` around each (position, score); overlapping or touching ones merged.

    ``before`` (the first position still in the active window) cuts ranges so
    nothing the model already sees is repeated.
    """
    spans = []
    for position, score in hits:
        start, end = max(0, position - radius), position + radius
        if before is not None:
            end = min(end, before - 1)
        if start <= end:
            spans.append((start, end, position, score))
    spans.sort()
    merged: list[RecalledRange] = []
    for start, end, position, score in spans:
        if merged and start <= merged[-1].end + 1:
            last = merged[-1]
            last.end = max(last.end, end)
            last.best_score = max(last.best_score, score)
            last.hit_positions.append(position)
        else:
            merged.append(RecalledRange(start, end, best_score=score, hit_positions=[position]))
    return merged


def fill_ranges(store: Store, scope: Scope, ranges: list[RecalledRange], hits: Sequence[Any],
                first: int = 0, skip: Collection[int] = ()) -> list[RecalledRange]:
    """Give each range its messages (none before ``first``, none at a position in ``skip``: still in the window)
    and drop the empty ones: from the hits' ``context`` when the search read it with them
    (``search(..., around=radius)``), else every range in one ``ranges`` read.
    """
    if ranges and all(h.context is not None for h in hits):
        near = {m.position: m for h in hits for m in h.context or ()}
        held = sorted(p for p in near if p is not None)  # not range(): a radius may be far larger than what it read
        for r in ranges:
            r.messages = [near[p] for p in held if max(r.start, first) <= p <= r.end]
    elif ranges:
        for r, messages in zip(ranges, store.ranges(scope, [(max(r.start, first), r.end) for r in ranges])):
            r.messages = messages
    for r in ranges:
        r.messages = [m for m in r.messages if m.position not in skip] if skip else r.messages
    return [r for r in ranges if r.messages]


def format_enrichment(question: str, ranges: list[RecalledRange], *, max_context_length: int = 2000,
                      include_metadata: bool = True) -> str | None:
    """The enrichment text, within ``max_context_length`` characters of context.

    Whole messages only: the most relevant ranges are kept first, then shown in
    conversation order. None when nothing fits.
    """
    lines_by_range: list[tuple[RecalledRange, list[str]]] = []
    for r in ranges:
        lines = [_line(m, include_metadata) for m in r.messages]
        lines_by_range.append((r, [line for line in lines if line]))
    budget = max_context_length
    chosen: list[tuple[int, str]] = []
    for r, lines in sorted(lines_by_range, key=lambda rl: -rl[0].best_score):
        # keep the hit itself first, then its neighbours nearest-first, as the budget allows
        order = sorted(range(len(lines)), key=lambda i: _distance(r, i))
        for i in order:
            cost = len(lines[i]) + 1
            if cost <= budget:
                chosen.append((r.messages[i].position or 0, lines[i]))
                budget -= cost
    if not chosen:
        return None
    body = "\n".join(line for _, line in sorted(chosen))
    return f"{ENRICHMENT_HEADER}\n{CONTEXT_START}\n{body}\n{CONTEXT_END}\n{QUESTION_PREFIX}{question}"


def format_context(question: str, messages: Sequence[StoredMessage], *, include_metadata: bool = True) -> str | None:
    """The enrichment text for already-chosen messages (conversation order); None when there are none.

    With ``include_metadata`` each line is ``[Message N, role]: text``; without, ``role: text``, and a blank
    line separates messages that were not consecutive in the conversation (the positions are not shown).
    """
    lines: list[str] = []
    last: int | None = None
    for m in messages:
        line = _line(m, include_metadata)
        if not line:
            continue
        if lines and not include_metadata and (m.position is None or last is None or m.position != last + 1):
            line = "\n" + line
        lines.append(line)
        last = m.position
    if not lines:
        return None
    body = "\n".join(lines)
    return f"{ENRICHMENT_HEADER}\n{CONTEXT_START}\n{body}\n{CONTEXT_END}\n{QUESTION_PREFIX}{question}"


def line_cost(counter: Any | None, include_metadata: bool = True):
    """A packing cost for messages as the enrichment shows them: (characters, tokens) of the line and its newline.

    ``counter`` is a :class:`~fullrecall.tokens.TokenCounter`; None counts characters only (tokens 0).
    Without metadata a line may follow a blank line (a new range): one more character, counted always.
    Costs are kept by the message's store key, which names one message for good (a session id and a position
    do not: one hook recalls for several owners, and a forgotten conversation begun again reuses positions).
    """
    cache: dict[str, tuple[int, int]] = {}
    newlines = 1 if include_metadata else 2

    def cost(m: StoredMessage) -> tuple[int, int]:
        known = cache.get(m.key) if m.key is not None else None
        if known is not None:
            return known
        line = _line(m, include_metadata)
        known = (len(line) + newlines, (counter.count(line) + 1) if counter is not None else 0)
        if m.key is not None:
            if len(cache) >= COST_CACHE_SIZE:
                cache.clear()
            cache[m.key] = known
        return known

    return cost


def packed_recall(search: Any, question: str, budget: Sequence[int], cost: Any, *, depth: int, radius: int = 0,
                  radius_hits: int = 0, pair_questions: bool = True, before: int | None = None,
                  min_score: float | None = None, spread: int = 0) -> tuple[list[Any], Packed]:
    """Search (``depth`` hits, only those before ``before``), then :func:`pack_hits`."""
    hits = search.search(question, top_k=depth, min_score=min_score, spread=spread)
    if before is not None:
        hits = [h for h in hits if h.position is not None and h.position < before]
    return hits, pack_hits(search, hits, budget, cost, radius=radius, radius_hits=radius_hits,
                           pair_questions=pair_questions, before=before)


def pack_hits(search: Any, hits: Sequence[Any], budget: Sequence[int], cost: Any, *, radius: int = 0,
              radius_hits: int = 0, pair_questions: bool = True, before: int | None = None) -> Packed:
    """Fetch the neighbours packing may use (one read through ``search.messages_at``), pack within ``budget``.

    ``search`` is a :class:`~fullrecall.search.SemanticSearch`, ``hits`` its search hits, best first.
    """
    messages = [h.message for h in hits]
    positions = neighbour_positions(messages, radius=radius, radius_hits=radius_hits, before=before)
    known = {m.position for m in messages}
    fetched = search.messages_at([p for p in positions if p not in known])
    around = {m.position: m for m in [*fetched, *messages] if m.position is not None}
    return pack(messages, budget, cost, around=around, before=before, radius=radius, radius_hits=radius_hits,
                pair_questions=pair_questions)


def as_ranges(packed: Packed) -> list[RecalledRange]:
    """Packed messages as runs of consecutive positions (each with the hits it holds)."""
    ranges: list[RecalledRange] = []
    hits = set(packed.hit_positions)
    for m in packed.messages:
        p = m.position if m.position is not None else -1
        if not ranges or p != ranges[-1].end + 1:
            ranges.append(RecalledRange(p, p))
        r = ranges[-1]
        r.end = p
        r.messages.append(m)
        if p in hits:
            r.hit_positions.append(p)
    return ranges


def _distance(r: RecalledRange, index: int) -> int:
    position = r.messages[index].position or 0
    return min(abs(position - p) for p in r.hit_positions)


def _line(message: StoredMessage, include_metadata: bool) -> str:
    text = display_text(message)
    if not text:
        return ""
    if include_metadata:
        return f"[Message {message.position}, {message.role}]: {text}"
    return f"{message.role}: {text}"


def display_text(message: StoredMessage) -> str:
    """The message as the user or tool wrote it, rendered from the verbatim copy."""
    shape = message.metadata.get("shape")
    if shape:
        from ..messages.formats import parse_message

        return parse_message(message.data, shape).text
    text = message.data.get("text") if isinstance(message.data, dict) else None
    return text if isinstance(text, str) else message.text


def original_question(text: str) -> str:
    """The user's own words from an enriched message (itself if it was not enriched)."""
    if text.startswith(ENRICHMENT_HEADER) and QUESTION_PREFIX in text:
        return text.rsplit(QUESTION_PREFIX, 1)[1]
    return text

"""Turning search hits into recalled context: radius, overlap merge, enrichment text."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..stores.base import StoredMessage

ENRICHMENT_HEADER = "Based on our previous conversation, these earlier exchanges may be relevant:"
CONTEXT_START = "---Previous Context---"
CONTEXT_END = "---End Previous Context---"
QUESTION_PREFIX = "Current question: "


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


def format_enrichment(question: str, ranges: list[RecalledRange], *, max_context_length: int = 2000,
                      include_metadata: bool = True) -> str | None:
    """The seed's enrichment text, within ``max_context_length`` characters of context.

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

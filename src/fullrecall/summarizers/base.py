"""What every summarizer returns and promises.

A :class:`Summary` says which messages it replaces (positions and ids), so a
summary can always be expanded back to the archived originals, and carries a
:class:`CheckReport` saying what the checks found and repaired: a caller can
see that a citation was re-added or a private number redacted instead of
having to trust the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..messages.model import Message


@dataclass
class CheckReport:
    """What the preservation and exclusion checks saw, and what was done about it.

    ``required``: citations and protected items found in the summarized messages.
    ``missing``: required items the first answer lacked. ``reprompted``: whether
    the model was asked again naming them. ``appended``: items still missing then,
    added as a "Preserved details" list. ``excluded``: private terms found in the
    messages (their values are not repeated here, only counted, by design).
    ``leaked``: how many private terms the model wrote anyway (redacted).
    ``fallback``: "extractive" or "truncation" when the model's answer was not used.
    ``errors``: one line per failed attempt, with its cause.
    """

    required: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    reprompted: bool = False
    appended: list[str] = field(default_factory=list)
    excluded: int = 0
    excluded_messages: list[int | str] = field(default_factory=list)
    leaked: int = 0
    redacted: bool = False
    fallback: str | None = None
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    over_budget: bool = False

    @property
    def repaired(self) -> bool:
        """True when the summary differs from what the summarizer first produced."""
        return bool(self.appended or self.redacted or self.reprompted)

    def as_dict(self) -> dict[str, Any]:
        return {
            "required": list(self.required), "missing": list(self.missing), "reprompted": self.reprompted,
            "appended": list(self.appended), "excluded": self.excluded,
            "excluded_messages": list(self.excluded_messages), "leaked": self.leaked, "redacted": self.redacted,
            "fallback": self.fallback, "attempts": self.attempts, "errors": list(self.errors),
            "over_budget": self.over_budget,
        }


@dataclass
class Summary:
    """A summary and the messages it stands for.

    ``positions``/``message_ids`` list every message given to the summarizer
    (private ones included: they are covered, just not written out), so the
    archive can expand the summary back to the originals.
    """

    text: str
    positions: tuple[int, ...] = ()
    message_ids: tuple[str, ...] = ()
    token_count: int = 0
    method: str = "extractive"  # "extractive", "llm" or "truncation"
    report: CheckReport = field(default_factory=CheckReport)

    def __str__(self) -> str:
        return self.text


@runtime_checkable
class Summarizer(Protocol):
    """Turns old messages (and the previous summary) into one new summary.

    The new summary replaces both: it must carry forward what the previous one
    said. Raising means "could not summarize": the window manager then keeps
    every message.
    """

    def summarize(self, messages: Sequence[Message], previous_summary: str | None = None) -> Summary: ...

    async def asummarize(self, messages: Sequence[Message], previous_summary: str | None = None) -> Summary: ...


def as_messages(messages: Sequence[Message | dict[str, Any]]) -> list[Message]:
    """Accept typed messages or dicts in any supported shape; give positions to those without."""
    from ..messages import parse_messages

    if messages and all(isinstance(m, dict) for m in messages):
        _, parsed = parse_messages(list(messages))
    else:
        parsed = [m if isinstance(m, Message) else parse_messages([m])[1][0] for m in messages]
    out = []
    for i, m in enumerate(parsed):
        if m.position is None:
            from dataclasses import replace

            m = replace(m, position=i)
        out.append(m)
    return out


def covered(messages: Sequence[Message]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Positions and ids of the messages a summary stands for."""
    positions = tuple(m.position for m in messages if m.position is not None)
    ids = tuple(m.id for m in messages if m.id is not None)
    return positions, ids

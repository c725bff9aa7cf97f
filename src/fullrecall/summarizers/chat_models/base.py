"""The one call an LLM summarizer needs: a system prompt and messages in, text out.

Clients stay small on purpose: retries with backoff for transport failures
live in each client (they know which errors are transient); judging the
answer (empty, refusal, over-long, missing facts) lives in the summarizer.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ...errors import InvalidInput, SummarizationError

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class ChatRequest:
    """``messages`` are ``{"role": "user"|"assistant", "content": str}`` dicts.

    What no provider can be sent is refused when it is made, an :class:`~fullrecall.errors.InvalidInput` naming
    the field: half a surrogate pair in a text (no UTF-8 holds it), a temperature that is no finite number.
    """

    system: str
    messages: tuple[dict[str, str], ...]
    max_tokens: int = 800
    temperature: float = 0.3

    def __post_init__(self) -> None:
        texts = [("'system'", self.system)] + [(f"message {i}: 'content'", m.get("content"))
                                                 for i, m in enumerate(self.messages) if isinstance(m, dict)]
        for field_name, text in texts:
            lone = _LONE_SURROGATE.search(text) if isinstance(text, str) else None
            if lone is not None:
                raise InvalidInput(f"chat request: {field_name} is not valid Unicode (a lone surrogate at "
                                   f"character {lone.start()})")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise InvalidInput(f"chat request: 'temperature' must be a finite number, not {t!r}")


@dataclass(frozen=True)
class ChatResponse:
    """``finish_reason``: "stop", "length" (cut at max_tokens), "refusal" or "content_filter"."""

    text: str
    finish_reason: str = "stop"
    model: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", valid_text(self.text))


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate (half a pair, which JSON may escape) as U+FFFD: text any store takes."""
    return _LONE_SURROGATE.sub("\ufffd", text) if isinstance(text, str) else text


class ChatModelError(SummarizationError):
    """A chat model call failed; ``retryable`` says whether trying again may help."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


@runtime_checkable
class ChatModel(Protocol):
    """A chat model: sync ``complete`` and async ``acomplete``; both raise :class:`ChatModelError`."""

    name: str

    def complete(self, request: ChatRequest) -> ChatResponse: ...

    async def acomplete(self, request: ChatRequest) -> ChatResponse: ...

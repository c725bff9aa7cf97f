"""Enrich a new user message with recalled archived messages (seed 000's hook).

Framework-neutral: :meth:`SemanticMemoryHook.enrich` takes the message list
and returns a new one for the model call; the history itself is not changed,
so enriched text never leaks into what is stored or archived.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from ..messages.formats import parse_messages, render_message
from ..messages.model import TextBlock
from .recall import ENRICHMENT_HEADER, format_enrichment
from .semantic_manager import SemanticSummarizingConversationManager

log = logging.getLogger("fullrecall.archive")


class SemanticMemoryHook:
    """Adds "---Previous Context---" to the newest user message when the archive has something.

    Only user text messages are enriched (never tool results); the context is
    cut at message boundaries to ``max_context_length`` characters, the most
    relevant kept; ``include_metadata`` adds "[Message N, role]" labels.
    """

    def __init__(self, enabled: bool = True, max_context_length: int = 2000, include_metadata: bool = True,
                 manager: SemanticSummarizingConversationManager | None = None) -> None:
        if max_context_length < 1:
            raise ValueError(f"max_context_length must be positive, got {max_context_length}")
        self.enabled = enabled
        self.max_context_length = max_context_length
        self.include_metadata = include_metadata
        self.manager = manager
        self.last_recall = None
        self.last_error: BaseException | None = None

    def enrich_text(self, question: str, manager: SemanticSummarizingConversationManager | None = None) -> str | None:
        """The enriched text for ``question``, or None when nothing relevant is archived."""
        manager = manager or self.manager
        if not self.enabled or manager is None or not question.strip() or question.startswith(ENRICHMENT_HEADER):
            return None
        try:
            recall = manager.recall(question)
        except Exception as exc:  # noqa: BLE001 - recall is an extra: the turn goes on without it
            self.last_error = exc
            log.warning("recall failed (%s: %s); the message goes to the model without recalled context",
                        type(exc).__name__, exc)
            return None
        self.last_recall = recall
        return format_enrichment(question, recall.ranges, max_context_length=self.max_context_length,
                                 include_metadata=self.include_metadata)

    def enrich(self, messages: Sequence[dict[str, Any]], manager: SemanticSummarizingConversationManager | None = None
               ) -> list[dict[str, Any]]:
        """A copy of ``messages`` whose last user text message carries recalled context."""
        out = list(messages)
        if not out:
            return out
        shape, (last,) = parse_messages(out[-1:])
        if last.role != "user" or last.has_tool_result:
            return out
        index = next((i for i, b in enumerate(last.content) if isinstance(b, TextBlock)), None)
        if index is None:
            return out
        enriched = self.enrich_text(last.content[index].text, manager)
        if enriched is None:
            return out
        content = list(last.content)
        content[index] = TextBlock(enriched)
        out[-1] = render_message(last.with_content(content), shape)
        return out

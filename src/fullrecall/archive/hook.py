"""Enrich a new user message with recalled archived messages (the recall hook).

Framework-neutral: :meth:`SemanticMemoryHook.enrich` takes the message list
and returns a new one for the model call; the history itself is not changed,
so enriched text never leaks into what is stored or archived.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from ..messages.formats import parse_messages, render_message
from ..messages.model import TextBlock
from ..search.packing import Packed
from .archive import Recall
from .recall import ENRICHMENT_HEADER, as_ranges, format_context, line_cost, packed_recall
from .semantic_manager import SemanticSummarizingConversationManager

log = logging.getLogger("fullrecall.archive")


class SemanticMemoryHook:
    """Adds "---Previous Context---" to the newest user message when the archive has something.

    Only user text messages are enriched (never tool results). What goes in is
    packed within ``max_context_length`` characters and, when set,
    ``max_context_tokens`` tokens (counted with ``token_counter``, default the
    safe estimate): the most relevant archived messages first, whole, never
    repeating the window, shown in conversation order (see
    :mod:`fullrecall.search.packing`). The manager's ``message_context_radius``
    neighbours are added around its first ``radius_hits`` hits (default 0:
    measured, distinct hits find more evidence per token); a neighbour that is
    the question a hit answers, or the answer to a hit that asks, is always
    added. Lines read ``role: text``, a blank line between messages that were not
    consecutive; ``include_metadata=True`` gives ``[Message N, role]: text`` lines
    instead (the default spends those ~5 tokens a line on more recalled messages:
    see docs/search.md).
    """

    def __init__(self, enabled: bool = True, max_context_length: int | None = 2000, include_metadata: bool = False,
                 manager: SemanticSummarizingConversationManager | None = None, *,
                 max_context_tokens: int | None = None, token_counter: Any = None, radius_hits: int = 0,
                 pair_questions: bool = True, depth: int | None = None) -> None:
        for name, value in (("max_context_length", max_context_length), ("max_context_tokens", max_context_tokens)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive, got {value}")
        if max_context_length is None and max_context_tokens is None:
            raise ValueError("give max_context_length or max_context_tokens: recalled context needs a budget")
        if radius_hits < 0 or (depth is not None and depth < 1):
            raise ValueError(f"radius_hits must be >= 0 and depth >= 1, got {radius_hits} and {depth}")
        self.enabled = enabled
        self.max_context_length = max_context_length
        self.max_context_tokens = max_context_tokens
        self.include_metadata = include_metadata
        self.manager = manager
        self.radius_hits = radius_hits
        self.pair_questions = pair_questions
        self.depth = depth
        if token_counter is None and max_context_tokens is not None:
            from ..tokens import default_token_counter

            token_counter = default_token_counter()
        self.token_counter = token_counter
        self._cost = line_cost(token_counter, include_metadata)
        self.last_recall: Recall | None = None
        self.last_packed: Packed | None = None
        self.last_error: BaseException | None = None

    @property
    def budget(self) -> tuple[int, int]:
        """(characters, tokens) the recalled context may take."""
        big = 1 << 62
        return (self.max_context_length or big, self.max_context_tokens or big)

    def hit_depth(self, manager: SemanticSummarizingConversationManager) -> int:
        """How many hits to ask for: enough to fill the budget with one-message hits (~80 characters, ~20 tokens)."""
        if self.depth is not None:
            return self.depth
        chars, tokens = self.budget
        return max(manager.semantic_search_top_k, min(chars // 80, tokens // 20, 100) + 2)

    def enrich_text(self, question: str, manager: SemanticSummarizingConversationManager | None = None) -> str | None:
        """The enriched text for ``question``, or None when nothing relevant is archived."""
        manager = manager or self.manager
        if not self.enabled or manager is None or not question.strip() or question.startswith(ENRICHMENT_HEADER):
            return None
        started = time.perf_counter()
        try:
            archive = manager.archive
            if archive.store.count(archive.scope) == 0:
                return None
            hits, packed = packed_recall(
                archive.search_engine, question, self.budget, self._cost, depth=self.hit_depth(manager),
                radius=manager.message_context_radius, radius_hits=self.radius_hits,
                pair_questions=self.pair_questions, before=manager.first_active_position,
                min_score=manager.semantic_search_min_score,
                spread=manager.message_context_radius if self.radius_hits else 0,
            )
        except Exception as exc:  # noqa: BLE001 - recall is an extra: the turn goes on without it
            self.last_error = exc
            log.warning("recall failed (%s: %s); the message goes to the model without recalled context",
                        type(exc).__name__, exc)
            return None
        self.last_recall = Recall(question, as_ranges(packed), hits, (time.perf_counter() - started) * 1000)
        self.last_packed = packed
        return format_context(question, packed.messages, include_metadata=self.include_metadata)

    def enrich(self, messages: Sequence[dict[str, Any]], manager: SemanticSummarizingConversationManager | None = None
               ) -> list[dict[str, Any]]:
        """A copy of ``messages`` whose newest user text message carries recalled context: the last message, or
        the question of a turn still in its tool loop (only tool calls and their results after it), so every
        model call of the turn sees what was recalled for it, not the first alone.
        """
        out = list(messages)
        at = len(out) - 1
        while at >= 0:
            shape, (last,) = parse_messages(out[at:at + 1], first_index=at)
            if last.role == "user" and not last.has_tool_result:
                break
            if not (last.tool_use_ids or last.has_tool_result or not any(isinstance(b, TextBlock) for b in last.content)):
                return out  # an answer in words: the turn is over, nothing to enrich
            at -= 1
        if at < 0:
            return out
        index = next((i for i, b in enumerate(last.content) if isinstance(b, TextBlock)), None)
        if index is None:
            return out
        block = last.content[index]
        assert isinstance(block, TextBlock)
        enriched = self.enrich_text(block.text, manager)
        if enriched is None:
            return out
        content = list(last.content)
        content[index] = TextBlock(enriched)
        out[at] = render_message(last.with_content(content), shape)
        return out

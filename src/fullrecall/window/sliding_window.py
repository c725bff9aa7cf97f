"""Keep the most recent messages; on overflow shorten big tool results first."""

from __future__ import annotations

from typing import Any, MutableSequence

from ..errors import ContextWindowOverflowError
from ..messages.model import Block, Message, OpaqueBlock, TextBlock, ToolResultBlock
from .base import ConversationManager, RemovalListener, RemovedMessages, log
from .cuts import clean_cuts, is_window_start

TRUNCATION_NOTICE = "[... fullrecall cut {cut:,} characters of this tool result here; the full result is in the archive ...]"
_NOTICE_PREFIX = "[... fullrecall cut "
MEDIA_PLACEHOLDER = "[{kind} removed from the window by fullrecall; the original is in the archive]"


class SlidingWindowConversationManager(ConversationManager):
    """Keeps the last ``window_size`` messages (a leading system message is not counted).

    The kept window always starts with a user turn that holds no tool result
    and splits no tool call from its result. On overflow (``reduce_context``
    with an error) it first shortens the oldest oversized tool result, keeping
    its head and tail, then trims; when no valid cut exists it raises.
    """

    def __init__(
        self,
        window_size: int = 40,
        should_truncate_results: bool = True,
        *,
        max_tool_result_chars: int = 4000,
        on_remove: RemovalListener | None = None,
    ) -> None:
        if window_size < 1:
            raise ValueError(f"window_size must be at least 1, got {window_size}")
        if max_tool_result_chars < 200:
            raise ValueError(f"max_tool_result_chars must be at least 200, got {max_tool_result_chars}")
        super().__init__(on_remove=on_remove)
        self.window_size = window_size
        self.should_truncate_results = should_truncate_results
        self.max_tool_result_chars = max_tool_result_chars

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "window_size": self.window_size}

    def apply_management(self, messages: MutableSequence[dict[str, Any]]) -> MutableSequence[dict[str, Any]]:
        pinned = self._pinned_count(messages)
        if len(messages) - pinned <= self.window_size:
            return messages
        shape, body = self._parse(messages[pinned:], pinned + self.removed_message_count)
        cut = self._first_window_start(body, len(body) - self.window_size)
        if cut is None:
            log.warning("window holds %d messages, over %d, but no cut keeps tool pairs whole and starts "
                        "with a user turn; keeping all of them for now", len(body), self.window_size)
            return messages
        self._trim(messages, pinned, body, cut, shape)
        return messages

    def reduce_context(
        self, messages: MutableSequence[dict[str, Any]], error: BaseException | None = None
    ) -> MutableSequence[dict[str, Any]]:
        pinned = self._pinned_count(messages)
        shape, body = self._parse(messages[pinned:], pinned + self.removed_message_count)
        if error is not None and self.should_truncate_results and self._truncate_oldest_result(messages, pinned, body, shape):
            return messages
        target = 2 if len(body) <= self.window_size else len(body) - self.window_size
        cut = self._first_window_start(body, target)
        if cut is None:
            raise ContextWindowOverflowError(
                f"cannot trim the window: none of the {len(body)} messages from index {target} on starts a valid "
                "window (a user turn without a tool result, with no tool call split from its result)"
            ) from error
        self._trim(messages, pinned, body, cut, shape)
        return messages

    # -- trimming ------------------------------------------------------------------------
    @staticmethod
    def _first_window_start(body: list[Message], target: int) -> int | None:
        clean = clean_cuts(body)
        for cut in range(max(1, target), len(body)):
            if is_window_start(body, cut, clean):
                return cut
        return None

    def _trim(self, messages: MutableSequence[dict[str, Any]], pinned: int, body: list[Message], cut: int, shape: str) -> None:
        self._release(RemovedMessages(messages=body[:cut], reason="trimmed", shape=shape))
        del messages[pinned : pinned + cut]
        self.removed_message_count += cut

    # -- tool result truncation --------------------------------------------------------------
    def _truncate_oldest_result(self, messages: MutableSequence[dict[str, Any]], pinned: int, body: list[Message], shape: str) -> bool:
        for index, msg in enumerate(body):
            if not msg.has_tool_result:
                continue
            content = [self._shorten(b) if isinstance(b, ToolResultBlock) else b for b in msg.content]
            if content == msg.content:
                continue
            self._release(RemovedMessages(messages=[msg], reason="truncated", shape=shape))
            messages[pinned + index] = self._render(msg.with_content(content), shape)
            return True
        return False

    def _shorten(self, result: ToolResultBlock) -> ToolResultBlock:
        parts: list[Block] = []
        for part in result.content:
            if isinstance(part, TextBlock):
                parts.append(self._shorten_text(part))
            elif isinstance(part, OpaqueBlock) and part.kind in ("image", "image_url", "document", "video", "file"):
                parts.append(TextBlock(MEDIA_PLACEHOLDER.format(kind=part.kind)))
            else:
                parts.append(part)
        if parts == list(result.content):
            return result
        return ToolResultBlock(result.tool_use_id, tuple(parts), result.status)

    def _shorten_text(self, part: TextBlock) -> TextBlock:
        text = part.text
        if len(text) <= self.max_tool_result_chars or _NOTICE_PREFIX in text:
            return part
        head = self.max_tool_result_chars * 3 // 4
        tail = self.max_tool_result_chars // 4
        cut = len(text) - head - tail
        return TextBlock(f"{text[:head]}\n{TRUNCATION_NOTICE.format(cut=cut)}\n{text[-tail:]}")

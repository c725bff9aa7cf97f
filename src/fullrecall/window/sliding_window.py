"""Keep the most recent messages; on overflow shorten the oldest tool result first.

The rules are the Strands SDK's ``SlidingWindowConversationManager``'s, so the
same conversation leaves the same window: the window counts every message
(pinned ones too, not a leading system message); it starts with a user turn
that holds no tool result, or, when no such turn is left (a tool loop), with a
tool call whose results follow; pinned messages stay; ``window_size=0`` keeps
only the pinned ones. fullrecall adds that no cut splits a tool call from its
result (pairs matched by id and position) and that everything removed is
reported (archived) before it leaves.
"""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence
from typing import Any

from ..errors import ContextWindowOverflowError
from ..messages.formats import with_result_content
from ..messages.model import Block, Message, OpaqueBlock, TextBlock, ToolResultBlock
from .base import ConversationManager, RemovalListener, RemovedMessages, log
from .cuts import clean_cuts, is_tool_pair_start, is_window_start
from .pins import is_pinned, leading_pinned, pin_first, taken_from_front

TRUNCATION_NOTICES = ("fullrecall", "sdk")
TRUNCATION_NOTICE = "[... fullrecall cut {cut:,} characters of this tool result here; the full result is in the archive ...]"
_NOTICE_PREFIX = "[... fullrecall cut "
MEDIA_PLACEHOLDER = "[{kind} removed from the window by fullrecall; the original is in the archive]"
SDK_TRUNCATION = "{head}...\n\n... [truncated: {cut} chars removed] ...\n\n...{tail}"
_SDK_MARKER = "... [truncated:"
MEDIA_KINDS = ("image", "image_url", "document", "video", "file", "input_image", "input_file")  # input_*: Responses


class SlidingWindowConversationManager(ConversationManager):
    """Keeps the last ``window_size`` messages, trimming the oldest ones that are not pinned.

    On overflow (``reduce_context`` with an error) the oldest message holding
    tool results is first shortened when one of its results is over
    ``max_tool_result_chars`` (400, the SDK's threshold; the first and last
    half stay) or holds media; otherwise the window is trimmed. When no valid
    cut exists it raises. ``truncation_notice="fullrecall"`` (the default) says
    in the shortened result that the original is in the archive and replaces
    documents and files too; ``"sdk"`` writes the SDK's own notice and image
    placeholder. ``pin_first`` pins the first messages at the first reduction.
    """

    def __init__(
        self,
        window_size: int = 40,
        should_truncate_results: bool = True,
        *,
        pin_first: int | None = None,
        max_tool_result_chars: int = 400,
        truncation_notice: str = "fullrecall",
        on_remove: RemovalListener | None = None,
    ) -> None:
        if isinstance(window_size, bool) or window_size < 0:
            raise ValueError(f"window_size must be a non-negative integer, got {window_size}")
        if max_tool_result_chars < 2:
            raise ValueError(f"max_tool_result_chars must be at least 2, got {max_tool_result_chars}")
        if truncation_notice not in TRUNCATION_NOTICES:
            raise ValueError(f"truncation_notice must be one of {TRUNCATION_NOTICES}, got {truncation_notice!r}")
        super().__init__(on_remove=on_remove)
        self.window_size = window_size
        self.should_truncate_results = should_truncate_results
        self.pin_first = max(0, pin_first) if pin_first is not None else None
        self.max_tool_result_chars = max_tool_result_chars
        self.truncation_notice = truncation_notice
        self._pin_first_applied = False

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "window_size": self.window_size, "pin_first_applied": self._pin_first_applied,
                "front_positions": list(self._front_positions), "held_pins": list(self._held_pins)}

    def restore_from_state(self, state: dict[str, Any] | None) -> None:
        super().restore_from_state(state)
        if state:
            self._pin_first_applied = bool(state.get("pin_first_applied", False))
            self._held_pins = list(state.get("held_pins") or ())
            # a memory reloads them at their places (a Strands session does not: its manager reports them)
            self._front_positions = [int(p) for p in state.get("front_positions") or ()]
            self._front_raws = []  # not in the state: seen again in the window

    def apply_management(self, messages: MutableSequence[dict[str, Any]]) -> MutableSequence[dict[str, Any]]:
        self._check_input(messages)
        self._settle_front(messages)
        if len(messages) - self._pinned_count(messages) <= self.window_size:
            return messages
        return self._reduce(messages, None)

    def reduce_context(
        self, messages: MutableSequence[dict[str, Any]], error: BaseException | None = None
    ) -> MutableSequence[dict[str, Any]]:
        self._check_input(messages)
        return self._reduce(messages, error)

    # -- the work --------------------------------------------------------------------------
    def _reduce(self, messages: MutableSequence[dict[str, Any]], error: BaseException | None) -> MutableSequence[dict[str, Any]]:
        self._settle_front(messages)
        system = self._pinned_count(messages)
        if self.pin_first and not self._pin_first_applied:
            pin_first(messages[system:], self.pin_first, self._held_pins)
            self._pin_first_applied = True
        window = messages[system:]
        shape, body = self._parse_window(window, system)
        if self.window_size == 0:
            return self._remove(messages, system, body, len(body), shape, error, reason="trimmed")
        if error is not None and self.should_truncate_results and self._truncate_oldest_result(messages, system, body, shape):
            return messages
        start = 2 if len(body) <= self.window_size else len(body) - self.window_size
        cut = self._cut(body, start)
        if cut is None:
            if error is not None:
                raise ContextWindowOverflowError(
                    f"cannot trim the window: none of the {len(body)} messages from index {start} on starts a valid "
                    "window (a user turn without a tool result, or a tool call followed by its results, with no "
                    "tool call split from its result)") from error
            log.warning("window holds %d messages, over %d, but no valid cut keeps tool pairs whole; keeping all "
                        "of them for now", len(body), self.window_size)
            return messages
        return self._remove(messages, system, body, cut, shape, error, reason="trimmed")

    @staticmethod
    def _cut(body: list[Message], start: int) -> int | None:
        """The first window start at or after ``start``; else the first tool-pair start (a tool loop)."""
        clean = clean_cuts(body)
        start = max(1, start)
        for test in (is_window_start, is_tool_pair_start):
            for cut in range(start, len(body)):
                if test(body, cut, clean):
                    return cut
        return None

    def _remove(self, messages: MutableSequence[dict[str, Any]], system: int, body: list[Message], cut: int,
                shape: str, error: BaseException | None, *, reason: str) -> MutableSequence[dict[str, Any]]:
        """Archive, then delete, the messages before ``cut`` that are not pinned."""
        window = messages[system:]
        doomed = [i for i in range(cut) if not is_pinned(window, i, self._held_pins)]
        if not doomed:
            if error is not None:
                raise ContextWindowOverflowError("cannot trim the window: every message in the trim range is pinned") from error
            log.warning("every message in the trim range is pinned; the window keeps %d messages", len(body))
            return messages
        self._check_leaving(messages, (system + i for i in doomed))
        self._release(RemovedMessages(messages=[body[i] for i in doomed], reason=reason, shape=shape))
        for i in reversed(doomed):
            del messages[system + i]
        self.removed_message_count += len(doomed)
        gone = set(doomed)
        self._front_positions = [body[i].position or 0 for i in range(cut) if i not in gone]
        self._front_raws = [window[i] for i in range(cut) if i not in gone]
        return messages

    def _settle_front(self, messages: MutableSequence[dict[str, Any]]) -> None:
        """Pinned messages the last cut kept at the front that the caller took out of the window since (a pinned
        opening popped from ``agent.messages``) are archived at their own places (see :meth:`_release_taken`).
        """
        if self._front_positions and len(self._front_raws) == len(self._front_positions):
            self._release_taken(taken_from_front(self._front_raws, messages))

    def _parse_window(self, window: Sequence[dict[str, Any]], system: int) -> tuple[str, list[Message]]:
        """The window's messages at their places in the conversation.

        The pinned messages the last cut kept at the front keep theirs (unpinned since, they leave from
        there); every other message came after each removed one.
        """
        front = self._front_positions[: len(window)]
        start = system + self.removed_message_count + len(front)
        return self._parse_at(window, [*front, *range(start, start + len(window) - len(front))], system)

    def _window_start(self, messages: Any) -> int:
        return self._pinned_count(messages) + leading_pinned(messages, self._pinned_count(messages), self._held_pins)

    def clear(self, messages: MutableSequence[dict[str, Any]]) -> MutableSequence[dict[str, Any]]:
        """Empty the window but for the pinned messages; every other message is reported first."""
        self._check_input(messages)
        self._settle_front(messages)
        system = self._pinned_count(messages)
        shape, body = self._parse_window(messages[system:], system)
        if body:
            self._remove(messages, system, body, len(body), shape, None, reason="cleared")
        return messages

    # -- tool result truncation --------------------------------------------------------------
    def _truncate_oldest_result(self, messages: MutableSequence[dict[str, Any]], system: int, body: list[Message], shape: str) -> bool:
        """Shorten the oldest unpinned message with tool results, as the SDK does; False when nothing changed."""
        window = messages[system:]
        index = next((i for i, m in enumerate(body) if m.has_tool_result and not is_pinned(window, i, self._held_pins)), None)
        if index is None:
            return False
        msg = body[index]
        content = [self._shorten(b) if isinstance(b, ToolResultBlock) else b for b in msg.content]
        if content == msg.content:
            return False
        self._check_leaving(messages, (system + index,))
        self._release(RemovedMessages(messages=[msg], reason="truncated", shape=shape))
        messages[system + index] = self._render(msg.with_content(content), shape)
        return True

    def _shorten(self, result: ToolResultBlock) -> ToolResultBlock:
        parts: list[Block] = []
        for part in result.content:
            if isinstance(part, TextBlock):
                parts.append(self._shorten_text(part))
            elif isinstance(part, OpaqueBlock) and self._is_media(part):
                text = self._media_placeholder(part)  # a Responses output's text part is its input_text
                parts.append(TextBlock(text, raw={"type": "input_text", "text": text} if part.kind.startswith("input_")
                                       else None))
            else:
                parts.append(part)
        if parts == list(result.content):
            return result
        return with_result_content(result, tuple(parts))

    def _is_media(self, part: OpaqueBlock) -> bool:
        return part.kind == "image" if self.truncation_notice == "sdk" else part.kind in MEDIA_KINDS

    def _media_placeholder(self, part: OpaqueBlock) -> str:
        if self.truncation_notice == "fullrecall":
            return MEDIA_PLACEHOLDER.format(kind=part.kind)
        data = part.data if isinstance(part.data, dict) else {}
        source = data.get("source")
        if not isinstance(source, dict):
            source = {}
        raw = source.get("bytes") or b""
        return f"[image: {data.get('format', 'unknown')}, {len(raw)} bytes]"

    def _shorten_text(self, part: TextBlock) -> TextBlock:
        text = part.text
        if len(text) <= self.max_tool_result_chars or _NOTICE_PREFIX in text or _SDK_MARKER in text:
            return part
        head = self.max_tool_result_chars // 2
        tail = self.max_tool_result_chars - head
        cut = len(text) - head - tail
        if self.truncation_notice == "sdk":
            short = SDK_TRUNCATION.format(head=text[:head], cut=cut, tail=text[-tail:])
        else:
            short = f"{text[:head]}\n{TRUNCATION_NOTICE.format(cut=cut)}\n{text[-tail:]}"
        # the part's own keys stay (its type: a Responses output's input_text, not chat completions' text)
        return TextBlock(short, raw={**part.raw, "text": short} if isinstance(part.raw, dict) else None)

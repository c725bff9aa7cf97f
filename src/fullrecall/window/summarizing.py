"""Replace the oldest messages with a summary instead of dropping them.

The summary is one message placed first (after a pinned system message), with
role ``summary_role`` (user by default, as Strands does, so user-first
providers accept it). The previous summary is folded into the next one. The
summarized messages are reported (to the archive) before they leave.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, MutableSequence, Sequence
from typing import Any, cast

from ..errors import ContextWindowOverflowError, InvalidInput
from ..messages.formats import detect_shape
from ..messages.model import Message, TextBlock
from ..tokens import default_token_counter
from .base import ConversationManager, RemovalListener, RemovedMessages
from .cuts import clean_cuts, is_tool_pair_start, is_window_start
from .pins import is_pinned, leading_pinned, pin_first, taken_from_front

log = logging.getLogger("fullrecall.window")

SummarizerLike = Any  # an object with .summarize(messages, previous_summary) or a callable
SUMMARY_ROLES = ("user", "assistant", "system")
FALLBACKS = (None, "sliding_window")
SHORTENED_NOTICE = "[summary shortened to fit its token budget]"
# the block fullrecall's summarizers append with the exact items their prose lacks (summarizers.checks)
_PRESERVED = re.compile(r"^## Preserved details[ \t]*$", re.MULTILINE)


class SummarizingConversationManager(ConversationManager):
    """Summarizes the oldest ``summary_ratio`` of the window, keeping recent messages.

    Triggers on overflow (``reduce_context``) and, proactively in
    ``apply_management``, when the window passes ``max_context_tokens`` or
    ``max_history_turns`` (user+assistant pairs).
    On summarizer failure every message stays and the overflow error is raised,
    unless ``fallback="sliding_window"`` drops (after archiving) what would have
    been summarized, cutting where a sliding window would (before a user turn).

    On overflow it summarizes ``int(len(window) * summary_ratio)`` messages (the
    summary and pinned messages count, as in the Strands SDK), moving the cut
    forward past tool results, never into the ``preserve_recent_messages``.
    Pinned messages (``pin_first``, or the SDK's pin flag) are kept, before the
    summary. ``prefer_alternating_roles`` moves the cut a little so that the
    summary is not followed by a message of its own role; the SDK does not.
    """

    def __init__(
        self,
        summary_ratio: float = 0.3,
        preserve_recent_messages: int = 10,
        summarizer: SummarizerLike | None = None,
        summarization_system_prompt: str | None = None,
        max_context_tokens: int | None = None,
        max_history_turns: int | None = None,
        *,
        summary_role: str = "user",
        fallback: str | None = None,
        pin_first: int | None = None,
        prefer_alternating_roles: bool = True,
        max_summary_tokens: int = 800,
        token_counter: Any = None,
        on_remove: RemovalListener | None = None,
    ) -> None:
        if summarizer is not None and summarization_system_prompt is not None:
            raise ValueError("give either summarizer or summarization_system_prompt, not both")
        if preserve_recent_messages < 0:
            raise ValueError(f"preserve_recent_messages must be >= 0, got {preserve_recent_messages}")
        if summary_role not in SUMMARY_ROLES:
            raise ValueError(f"summary_role must be one of {SUMMARY_ROLES}, got {summary_role!r}")
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        for name, value in (("max_context_tokens", max_context_tokens), ("max_history_turns", max_history_turns)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer or None, got {value}")
        if max_summary_tokens < 16:
            raise ValueError(f"max_summary_tokens must be at least 16, got {max_summary_tokens}")
        super().__init__(on_remove=on_remove)
        self.summary_ratio = min(0.8, max(0.1, float(summary_ratio)))
        self.preserve_recent_messages = preserve_recent_messages
        self.summarization_system_prompt = summarization_system_prompt
        self.max_context_tokens = max_context_tokens
        self.max_history_turns = max_history_turns
        self.summary_role = summary_role
        self.fallback = fallback
        self.pin_first = max(0, pin_first) if pin_first is not None else None
        self.prefer_alternating_roles = prefer_alternating_roles
        self._pin_first_applied = False
        self._front_seen = 0  # pinned originals before the summary, as last seen
        self.max_summary_tokens = max_summary_tokens
        self.token_counter = token_counter or default_token_counter()
        self._summarizer = summarizer
        self._summary_message: dict[str, Any] | None = None
        self.last_error: BaseException | None = None

    # -- the summarizer ------------------------------------------------------------------
    @property
    def summarizer(self) -> SummarizerLike:
        """Built on first use, so an unused manager imports nothing heavy."""
        if self._summarizer is None:
            from .. import summarizers

            if self.summarization_system_prompt is not None:
                self._summarizer = summarizers.summarizer_from_prompt(
                    self.summarization_system_prompt, max_summary_tokens=self.max_summary_tokens)
            else:
                self._summarizer = summarizers.ExtractiveSummarizer(max_summary_tokens=self.max_summary_tokens)
        return self._summarizer

    def _summarize(self, messages: list[Message], previous: str | None) -> str:
        summarizer = self.summarizer
        call = cast("Callable[..., Any]", getattr(summarizer, "summarize", summarizer))
        result = call(messages, previous)
        text = result if isinstance(result, str) else getattr(result, "text", None)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"summarizer returned no text ({type(result).__name__})")
        return self._bound(text.strip())

    def _bound(self, text: str) -> str:
        """Keep the summary within ``max_summary_tokens``, cutting at a line end where possible.

        A trailing "Preserved details" block (exact items a summarizer appended because its
        prose lacked them) is kept whole while any prose is left to cut: the prose goes first.
        """
        count = self.token_counter.count
        if count(text) <= self.max_summary_tokens:
            return text
        match = _PRESERVED.search(text)
        if match is not None:
            prose, details = text[: match.start()].rstrip(), text[match.start():].strip()
            room = self.max_summary_tokens - count("\n\n" + details)
            for _ in range(3):  # a tokenizer may count the joined text a little differently
                if room < count(SHORTENED_NOTICE):
                    break
                kept = self._cut(prose, room)
                bounded = f"{kept}\n\n{details}"
                over = count(bounded) - self.max_summary_tokens
                if over <= 0:
                    return bounded
                room -= over
        return self._cut(text, self.max_summary_tokens)  # no details, or they alone overflow: cut from the end

    def _cut(self, text: str, limit: int) -> str:
        """``text`` cut to at most ``limit`` tokens from its end, with the shortened notice last."""
        count = self.token_counter.count
        budget = limit - count("\n" + SHORTENED_NOTICE)
        kept: list[str] = []
        used = 0
        for line in text.splitlines():
            cost = count(line) + 1  # the newline joining it
            if used + cost > budget:
                break
            kept.append(line)
            used += cost
        body = "\n".join(kept)
        if not kept or count(body) > budget:  # one huge line, or a tokenizer that merges across lines
            lo, hi = 0, len(text)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if count(text[:mid]) <= budget else (lo, mid - 1)
            body = text[:lo]
        return f"{body}\n{SHORTENED_NOTICE}" if body.strip() else SHORTENED_NOTICE

    # -- state -----------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "summary_message": self._summary_message,
                "pin_first_applied": self._pin_first_applied, "front_positions": list(self._front_positions),
                "held_pins": list(self._held_pins)}

    def restore_from_state(self, state: dict[str, Any] | None) -> None:
        super().restore_from_state(state)
        if state:
            self._summary_message = state.get("summary_message")
            self._pin_first_applied = bool(state.get("pin_first_applied", False))
            self._front_positions = [int(p) for p in state.get("front_positions") or ()]
            self._held_pins = list(state.get("held_pins") or ())
            self._front_raws = []  # not in the state: seen again in the window

    @property
    def summary_message(self) -> dict[str, Any] | None:
        """The summary message now at the head of the window, if any."""
        return self._summary_message

    # -- triggers --------------------------------------------------------------------------
    def apply_management(self, messages: MutableSequence[dict[str, Any]]) -> MutableSequence[dict[str, Any]]:
        self._check_input(messages)
        self._settle_front(messages)
        layout = self._layout(messages)
        keep = self._proactive_keep(messages, layout)
        if keep is None:
            return messages
        if self._apply_pin_first(messages):
            layout = self._layout(messages)
            keep = min(keep, len(messages) - layout.start)
        try:
            self._summarize_head(messages, layout, target=len(messages) - layout.start - keep, at_least=True)
        except ContextWindowOverflowError as exc:
            self.last_error = exc
            log.warning("proactive summarization skipped, every message kept: %s", exc)
        return messages

    def reduce_context(
        self, messages: MutableSequence[dict[str, Any]], error: BaseException | None = None
    ) -> MutableSequence[dict[str, Any]]:
        self._check_input(messages)
        self._settle_front(messages)
        window = len(messages) - self._pinned_count(messages)
        count = min(max(1, int(window * self.summary_ratio)), window - self.preserve_recent_messages)
        if count > 0:  # as the SDK does: a reduction that cannot summarize anything pins nothing either
            self._apply_pin_first(messages)
        layout = self._layout(messages)
        self._summarize_head(messages, layout, target=count - (layout.start - layout.pinned), reach=count, error=error)
        return messages

    def _apply_pin_first(self, messages: MutableSequence[dict[str, Any]]) -> bool:
        """Pin the first ``pin_first`` messages at the first reduction, as the SDK does; True when it did now."""
        if not self.pin_first or self._pin_first_applied:
            return False
        pin_first(messages[self._pinned_count(messages) :], self.pin_first, self._held_pins)
        self._pin_first_applied = True
        return True

    def _proactive_keep(self, messages: Sequence[dict[str, Any]], layout: _Layout) -> int | None:
        """How many recent originals may stay, or None when no trigger fired."""
        originals = len(messages) - layout.start
        keeps = []
        if self.max_history_turns is not None and originals > 2 * self.max_history_turns:
            keeps.append(2 * self.max_history_turns)
        if self.max_context_tokens is not None:
            shape, parsed = self._parse_tail(messages, layout)
            sizes = [self.token_counter.count_message(m) for m in parsed]
            total = sum(sizes) + sum(self.token_counter.count_message(m) for m in self._parse(messages[: layout.start], 0)[1])
            if total > self.max_context_tokens:
                budget = self.max_context_tokens - self.max_summary_tokens - (total - sum(sizes))
                kept, used = 0, 0
                for size in reversed(sizes):
                    if used + size > budget:
                        break
                    used, kept = used + size, kept + 1
                keeps.append(kept)
        return min(keeps) if keeps else None

    def clear(self, messages: MutableSequence[dict[str, Any]]) -> MutableSequence[dict[str, Any]]:
        """Empty the window but for pinned messages; the summary goes, every original is reported first."""
        self._check_input(messages)
        self._settle_front(messages)
        layout = self._layout(messages)
        tail = messages[layout.start :]
        shape, body = self._parse_tail(messages, layout)
        front, loose = self._front(messages, layout, reach=layout.front)
        doomed = [i for i in range(len(tail)) if not is_pinned(tail, i, self._held_pins)]
        gone = [m for i, m in enumerate(front) if i in loose] + [body[i] for i in doomed]
        if gone:
            self._check_leaving(messages, [layout.pinned + i for i in sorted(loose)] + [layout.start + i for i in doomed])
            self._release(RemovedMessages(messages=gone, reason="cleared", shape=shape))
        kept_front = [i for i in range(layout.front) if i not in loose]
        kept_tail = [i for i in range(len(tail)) if i not in doomed]
        messages[layout.pinned :] = [messages[layout.pinned + i] for i in kept_front] + [tail[i] for i in kept_tail]
        # the pinned messages after the summary stay too, now at the front, at their own places (as a summary keeps
        # them): the window's next original comes after every removed one
        self._front_positions = [front[i].position or 0 for i in kept_front] + [body[i].position or 0 for i in kept_tail]
        self._front_raws = list(messages[layout.pinned :])
        self.removed_message_count += len(gone)
        self._summary_message = None
        return messages

    def _settle_front(self, messages: MutableSequence[dict[str, Any]]) -> None:
        """Messages kept pinned before the summary that the caller took out of the window since (a pinned
        opening popped from ``agent.messages``, or the whole history emptied) are archived at their own places
        and count as removed, so no later message is given a place one of them held, and none of them is lost.

        Only when what is left there is the messages seen there, in order, less those gone from the window:
        otherwise (a restored session, a window rewritten) nothing is assumed.
        """
        layout = self._layout(messages)
        seen, positions = self._front_raws, self._front_positions
        if layout.front >= len(positions) or len(seen) != len(positions):
            return
        gone = taken_from_front(seen, messages)
        kept = [m for i, m in enumerate(seen) if i not in gone]
        left = messages[layout.pinned : layout.pinned + layout.front]
        if gone and len(kept) == len(left) and all(a is b or a == b for a, b in zip(kept, left)):
            self._release_taken(gone)

    def _window_start(self, messages: Sequence[dict[str, Any]]) -> int:
        return self._layout(messages).start

    def _pinned_count(self, raw: Sequence[dict[str, Any]]) -> int:
        """The caller's leading system message, never our own summary: a ``summary_role="system"`` summary first in
        a list without a system prompt is folded into the next one, not kept as if the caller had written it.
        """
        summary = self._summary_message
        if summary is not None and raw and (raw[0] is summary or raw[0] == summary):
            return 0
        return super()._pinned_count(raw)

    # -- the work --------------------------------------------------------------------------
    def _layout(self, messages: Sequence[dict[str, Any]]) -> _Layout:
        pinned = self._pinned_count(messages)
        summary = self._summary_message
        # Our summary follows the messages kept in front of it; one of those may have lost its pin since
        # (its tool-call partner summarized), so the summary is looked for, not assumed after pinned ones.
        at = next((i for i in range(pinned, len(messages)) if messages[i] is summary or messages[i] == summary),
                  None) if summary is not None else None
        front = at - pinned if at is not None else leading_pinned(messages, pinned, self._held_pins)
        self._front_seen = front
        if at is not None and front == len(self._front_positions):
            self._front_raws = list(messages[pinned:at])
        return _Layout(pinned=pinned, front=front, has_summary=at is not None)

    def _parse_tail(self, messages: Sequence[dict[str, Any]], layout: _Layout) -> tuple[str, list[Message]]:
        """The originals after the summary at their places in the conversation.

        With the summary gone and the messages pinned before it too (the caller emptied the history),
        the first take the places those pinned messages held: no place an archived message holds is given.
        """
        tail = messages[layout.start :]
        spare = [] if layout.has_summary else self._front_positions[layout.front :][: len(tail)]
        start = layout.first_position(self) + len(spare)
        return self._parse_at(tail, [*spare, *range(start, start + len(tail) - len(spare))], layout.start)

    def _front(self, messages: Sequence[dict[str, Any]], layout: _Layout, reach: int) -> tuple[list[Message], set[int]]:
        """The messages kept before the summary, and those among the first ``reach`` no longer pinned.

        The SDK decides what is pinned afresh at each reduction, across the whole range it
        summarizes: a message kept beside a pinned tool call it seemed to answer (tool ids
        are reused across turns) is summarized once it no longer sits beside it.
        """
        raw = messages[layout.pinned : layout.pinned + layout.front]
        positions = self._front_positions[: len(raw)]
        if len(positions) < len(raw):
            # pinned from the start (pin_first, the SDK's flag), or put before the summary by the caller since:
            # the places just before the window's first original, never one an archived message holds
            end = layout.first_position(self)
            positions = [*positions, *range(end - (len(raw) - len(positions)), end)]
        _, front = self._parse_at(raw, positions, layout.pinned)
        loose = {i for i in range(min(reach, len(raw))) if not is_pinned(messages, layout.pinned + i, self._held_pins)}
        return front, loose

    def _summarize_head(
        self,
        messages: MutableSequence[dict[str, Any]],
        layout: _Layout,
        *,
        target: int,
        reach: int | None = None,
        error: BaseException | None = None,
        at_least: bool = False,
    ) -> None:
        """Fold the oldest originals into the summary; front messages no longer pinned go with them.

        ``at_least``: ``target`` is what a limit (the token budget, the turns) needs summarized, so the cut goes
        no earlier than it where a later one is clean.
        """
        tail = messages[layout.start :]
        shape, body = self._parse_tail(messages, layout)
        if self.summary_role == "system" and shape != "openai":
            shape = self._system_summary_shape(messages, shape)
        limit = len(body) - max(self.preserve_recent_messages, 0)
        cut = self._choose_cut(body, min(target, limit), limit, at_least=at_least)
        front, loose = self._front(messages, layout, layout.front if reach is None else reach)
        if cut is None and loose:  # no cut after the summary keeps each tool call with its result, but messages
            cut = 0  # kept before it have lost their pins: they are summarized alone, as the SDK does
        if cut is None:
            raise ContextWindowOverflowError(
                f"cannot summarize: {len(body)} message(s) in the window, {self.preserve_recent_messages} must be "
                "preserved, and no earlier cut keeps every tool call with its result"
            ) from error
        kept = [i for i in range(cut) if is_pinned(tail, i, self._held_pins)]
        head = [m for i, m in enumerate(front) if i in loose] + [body[i] for i in range(cut) if i not in kept]
        if not head:
            raise ContextWindowOverflowError("cannot summarize: every message in the summarize range is pinned") from error
        # before the summarizer runs: a message the archive would refuse costs no model call
        self._check_leaving(messages, [layout.pinned + i for i in sorted(loose)]
                            + [layout.start + i for i in range(cut) if i not in kept])
        previous = self._previous_summary(messages, layout, shape)
        try:
            text = self._summarize(head, previous.text if previous else None)
        except Exception as exc:
            self.last_error = exc
            if self.fallback == "sliding_window" and self._drop_instead(messages, layout, body, cut, shape, exc):
                return
            log.error("summarizer failed (%s: %s); every message kept", type(exc).__name__, exc)
            if error is not None:
                raise error from exc
            raise ContextWindowOverflowError(f"summarization failed, every message kept: {type(exc).__name__}: {exc}") from exc
        summary = Message(role=self.summary_role, content=[TextBlock(text)], id=f"summary-{head[-1].position}",
                          position=None, metadata={"summary_of": [head[0].position, head[-1].position]}, shape=shape)
        summary_raw = self._render(summary, shape)
        self._release(RemovedMessages(messages=head, reason="summarized", shape=shape, summary=summary, replaced_summary=previous))
        kept_front = [i for i in range(layout.front) if i not in loose]
        messages[layout.pinned : layout.start + cut] = [
            *(messages[layout.pinned + i] for i in kept_front), *(tail[i] for i in kept), summary_raw]
        self._front_positions = [front[i].position or 0 for i in kept_front] + [body[i].position or 0 for i in kept]
        self._front_seen = len(self._front_positions)
        self._front_raws = list(messages[layout.pinned : layout.pinned + self._front_seen])
        self._summary_message = summary_raw
        self.removed_message_count += len(head)

    def _drop_instead(self, messages: MutableSequence[dict[str, Any]], layout: _Layout, body: list[Message],
                      cut: int, shape: str, exc: BaseException) -> bool:
        """The sliding-window fallback: drop the oldest messages, cutting where a sliding window may start."""
        limit = len(body) - max(self.preserve_recent_messages, 0)
        clean = clean_cuts(body)
        order = [*range(cut, 0, -1), *range(cut + 1, limit + 1)]  # nearest cut that drops no more than asked first
        chosen = next((c for test in (is_window_start, is_tool_pair_start) for c in order if test(body, c, clean)), None)
        if chosen is None:
            return False
        tail = messages[layout.start :]
        doomed = [i for i in range(chosen) if not is_pinned(tail, i, self._held_pins)]
        if not doomed:
            return False
        self._check_leaving(messages, (layout.start + i for i in doomed))
        log.warning("summarizer failed (%s: %s); archiving and dropping %d messages instead", type(exc).__name__, exc,
                    len(doomed))
        self._release(RemovedMessages(messages=[body[i] for i in doomed], reason="fallback", shape=shape,
                                      metadata={"error": repr(exc)}))
        for i in reversed(doomed):
            del messages[layout.start + i]
        self.removed_message_count += len(doomed)
        if not layout.has_summary:  # the places of pinned messages gone with the summary went to the dropped ones
            self._front_positions = self._front_positions[: layout.front]
            self._front_raws = self._front_raws[: layout.front]
        return True

    @staticmethod
    def _system_summary_shape(messages: Sequence[dict[str, Any]], shape: str) -> str:
        """``openai`` when the whole list is chat completions, though the messages after the system prompt read as
        Anthropic ones (MassGen keeps Claude's blocks there); else ``InvalidInput``, before anything changed.
        """
        if detect_shape(messages) != "openai":
            raise InvalidInput(f"summary_role='system' needs chat-completions messages; these are {shape}")
        return "openai"

    def _choose_cut(self, body: list[Message], target: int, limit: int, *, at_least: bool = False) -> int | None:
        """A clean cut near ``target`` within ``[1, limit]``; prefer one where roles alternate.

        With ``at_least`` a cut before ``target`` is taken only when no later one is clean: the limit that set
        the target wins over the preference.
        """
        if limit < 1:
            return None
        clean = clean_cuts(body)
        target = max(1, min(target, limit))
        forward = [c for c in range(target, limit + 1) if clean[c]]
        backward = [c for c in range(target - 1, 0, -1) if clean[c]]
        candidates = forward if at_least and forward else forward + backward
        if not candidates:
            return None
        for c in candidates[:8] if self.prefer_alternating_roles else ():  # the summary not followed by its role
            if c < len(body) and body[c].role != self.summary_role and not body[c].has_tool_result:
                return c
        for c in candidates:
            if c >= len(body) or not body[c].has_tool_result:
                return c
        return candidates[0]

    def _previous_summary(self, messages: Sequence[dict[str, Any]], layout: _Layout, shape: str) -> Message | None:
        if not layout.has_summary:
            return None
        _, (previous,) = self._parse([messages[layout.pinned + layout.front]], -1)
        previous.id, previous.position = None, None
        previous.metadata = {**previous.metadata, "kind": "summary"}
        return previous


class _Layout:
    """Where the originals start: after a system message, pinned messages at the front, and our summary."""

    __slots__ = ("front", "has_summary", "pinned")

    def __init__(self, pinned: int, front: int, has_summary: bool) -> None:
        self.pinned, self.front, self.has_summary = pinned, front, has_summary

    @property
    def start(self) -> int:
        return self.pinned + self.front + int(self.has_summary)

    def first_position(self, manager: ConversationManager) -> int:
        """Every message before the first unpinned original is either removed or pinned at the front."""
        return self.pinned + manager.removed_message_count + self.front

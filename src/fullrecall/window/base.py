"""The base of every window manager: one place where removed messages are reported.

Managers work on a plain list of message dicts in any supported shape and
edit it in place (as Strands does with ``agent.messages``), returning it too.

Every message that leaves the window goes through :meth:`ConversationManager._release`
*before* the list is changed. Listeners (the archive) run there; if one
fails, the list is left as it was and the error propagates, so a message is
never gone from the window without being somewhere else first.

Before that, when a listener that stores JSON is attached (an
:class:`~fullrecall.archive.Archive`, or any listener, or the object of a bound
method, with a true ``stores_json`` attribute), :meth:`ConversationManager._check_leaving`
checks that each leaving message is a JSON value a store can hold (no NaN, no
Python object, valid Unicode): one that is not stops the operation before any
summarizer call, with an :class:`ArchiveError` naming its index in the caller's
list and the field, and the list as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, MutableSequence, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._json import MAX_MESSAGE_BYTES, check_json_value
from ..errors import ArchiveError, ContextWindowOverflowError, InvalidInput
from ..messages.formats import parse_messages, render_message
from ..messages.model import Message
from .check import WindowCheck
from .pins import bind_held

log = logging.getLogger("fullrecall.window")


@dataclass
class RemovedMessages:
    """What a manager is about to take out of the window, and why.

    ``messages`` are original conversation messages (verbatim, with positions);
    ``reason`` is ``"trimmed"``, ``"summarized"``, ``"truncated"`` (the original
    of a tool result that stays, shortened), ``"fallback"``, ``"cleared"`` or ``"restored"`` (an
    archive rebuilt from a session's message log). ``summary`` is the
    summary that covers them, ``replaced_summary`` an earlier summary that the
    new one folds in (archived as a summary, never as user words).
    """

    messages: list[Message]
    reason: str
    shape: str
    summary: Message | None = None
    replaced_summary: Message | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


RemovalListener = Callable[[RemovedMessages], None]


class ConversationManager:
    """Keeps a conversation within its budget; subclasses pick the strategy.

    ``apply_management(messages)`` runs after each turn; ``reduce_context(messages,
    error)`` runs when the model reported an overflow and must shrink the window
    or raise :class:`ContextWindowOverflowError`, so a retry loop always ends.

    Each of them (and ``clear``, ``leave``) first checks the whole list (:meth:`_check_input`): a malformed
    message raises :class:`~fullrecall.errors.MessageFormatError` naming its index and field, whether or
    not the manager would have changed anything, and the list stays as it was.
    """

    def __init__(self, *, on_remove: RemovalListener | None = None) -> None:
        self.removed_message_count = 0
        self._listeners: list[RemovalListener] = [on_remove] if on_remove else []
        self._front_positions: list[int] = []  # messages a manager keeps pinned at the front: their places
        self._front_raws: list[dict[str, Any]] = []  # and the messages, as last seen in the window
        self._held_pins: list[dict[str, Any]] = []  # messages pin_first pinned without a flag (not Converse)
        self._window_check = WindowCheck()

    @property
    def pinned_front(self) -> tuple[int, ...]:
        """The conversation positions of the original messages the manager keeps pinned at the window's front
        (``pin_first``), which are neither removed nor after the rest: empty for most windows.
        """
        return tuple(self._front_positions)

    # -- the strategy ----------------------------------------------------------------
    def apply_management(self, messages: MutableSequence[dict[str, Any]]) -> MutableSequence[dict[str, Any]]:
        self._check_input(messages)
        return messages

    def reduce_context(
        self, messages: MutableSequence[dict[str, Any]], error: BaseException | None = None
    ) -> MutableSequence[dict[str, Any]]:
        self._check_input(messages)
        raise ContextWindowOverflowError(f"{type(self).__name__} does not reduce context") from error

    def _check_input(self, messages: MutableSequence[dict[str, Any]]) -> None:
        """``MessageFormatError`` naming the first malformed message of ``messages`` (its index, the field), as
        :func:`~fullrecall.messages.parse_messages` names it, before anything is changed or reported; only the
        messages not checked by the previous call are parsed (see :class:`~fullrecall.window.check.WindowCheck`).
        """
        self._window_check(messages)
        self._held_pins = bind_held(messages, self._held_pins, self._pinned_count(messages))

    def clear(self, messages: MutableSequence[dict[str, Any]]) -> MutableSequence[dict[str, Any]]:
        """Empty the window (a pinned system message stays); every message is reported first."""
        self._check_input(messages)
        pinned = self._pinned_count(messages)
        start = self._window_start(messages)
        shape, body = self._parse(messages[start:], pinned + self.removed_message_count, start)
        if body:
            self._check_leaving(messages, range(start, len(messages)))
            self._release(RemovedMessages(messages=body, reason="cleared", shape=shape))
        del messages[pinned:]
        self.removed_message_count += len(body)
        return messages

    def _window_start(self, messages: Sequence[dict[str, Any]]) -> int:
        """Index of the first original message (after what the manager pins or adds)."""
        return self._pinned_count(messages)

    def leave(self, messages: MutableSequence[dict[str, Any]], start: int, count: int, *, positions: Sequence[int],
              originals: Sequence[dict[str, Any]] | None = None, reason: str = "cleared") -> None:
        """``messages[start:start + count]``, the window's oldest originals, leave it for the archive.

        They are checked and reported to the listeners first (as ``originals`` when given: the verbatim
        messages, where the window may hold shortened ones; at ``positions`` in the conversation), then
        taken out of ``messages``, and they count as removed. If a listener fails, the list stays as it was.
        """
        self._check_input(messages)
        leaving = list(messages[start:start + count])
        if len(leaving) != count or len(positions) != count or (originals is not None and len(originals) != count):
            raise InvalidInput(f"leave: {count} message(s) from index {start} with {len(positions)} position(s), "
                               f"but the window holds {len(leaving)} there")
        self._check_leaving(messages, range(start, start + count))
        shape, parsed = self._parse_at(list(originals) if originals is not None else leaving, positions, start)
        self._release(RemovedMessages(messages=parsed, reason=reason, shape=shape))
        del messages[start:start + count]
        self.removed_message_count += count

    def _release_taken(self, gone: Sequence[int]) -> None:
        """The pinned front messages at ``gone`` (indexes in ``_front_raws`` and ``_front_positions``) were taken
        out of the window by the caller: they are reported at their own places, no longer held at the front, and
        count as removed, so no later message takes a place one of them held.
        """
        if not gone:
            return
        raws, positions = self._front_raws, self._front_positions
        shape, parsed = self._parse_at([raws[i] for i in gone], [positions[i] for i in gone])
        self._release(RemovedMessages(messages=parsed, reason="cleared", shape=shape))
        self._front_positions = [p for i, p in enumerate(positions) if i not in gone]
        self._front_raws = [m for i, m in enumerate(raws) if i not in gone]
        self._held_pins = [h for h in self._held_pins if not any(h is raws[i] for i in gone)]
        self.removed_message_count += len(gone)

    def release_front(self, raws: Sequence[dict[str, Any]], positions: Sequence[int], *,
                      reason: str = "restored") -> int | None:
        """The messages ``pin_first`` held at the window's front are no longer in it (a session restored the window
        without them: it reloads from ``removed_message_count`` on): ``raws``, at ``positions`` in the conversation,
        are reported to the listeners at those places with ``reason``, and nothing is held at the front any more.

        Returns how many were reported, or None when no listener keeps removed messages (the caller may say they
        are lost). They do not count as removed: their places are below ``removed_message_count`` already.
        """
        self._front_positions, self._front_raws = [], []
        if not self._listeners:
            return None
        if raws:
            shape, parsed = self._parse_at(raws, positions)
            self._release(RemovedMessages(messages=parsed, reason=reason, shape=shape))
        return len(raws)

    def drop_front(self, positions: Iterable[int]) -> None:
        """The pinned front messages at ``positions`` were deleted from the conversation by the caller (a memory
        deleting them from its log: nothing to archive). They are no longer held at the front and count as removed,
        so no later message takes a place one of them held.
        """
        doomed = set(positions)
        gone = [i for i, p in enumerate(self._front_positions) if p in doomed]
        if not gone:
            return
        if len(self._front_raws) == len(self._front_positions):
            self._held_pins = [h for h in self._held_pins if not any(h is self._front_raws[i] for i in gone)]
            self._front_raws = [m for i, m in enumerate(self._front_raws) if i not in gone]
        self._front_positions = [p for i, p in enumerate(self._front_positions) if i not in gone]
        self.removed_message_count += len(gone)

    # -- state -------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """JSON-serializable state; ``restore_from_state`` takes it back."""
        return {"__name__": type(self).__name__, "removed_message_count": self.removed_message_count}

    def restore_from_state(self, state: dict[str, Any] | None) -> None:
        if not state:
            return
        if state.get("__name__") not in (None, type(self).__name__):
            raise ValueError(f"state belongs to {state.get('__name__')}, not {type(self).__name__}")
        self.removed_message_count = int(state.get("removed_message_count", 0))

    # -- reporting removals ------------------------------------------------------------
    def add_removal_listener(self, listener: RemovalListener) -> None:
        """Call ``listener`` with every :class:`RemovedMessages`, before the window changes."""
        self._listeners.append(listener)

    def _check_leaving(self, messages: Sequence[dict[str, Any]], indexes: Iterable[int]) -> None:
        """Each ``messages[i]`` about to leave must be storable JSON when a listener archives it.

        Raises :class:`ArchiveError` naming the first that is not (its index in ``messages`` and the
        field) before anything is summarized, released or removed: the window stays as it was.
        """
        if not any(_stores_json(listener) for listener in self._listeners):
            return
        for index in indexes:
            try:
                check_json_value(messages[index], f"message {index}", limit=MAX_MESSAGE_BYTES)
            except InvalidInput as exc:
                raise ArchiveError(f"cannot archive {exc}; nothing was archived or removed, every message "
                                   "stays in the window") from exc

    def _release(self, event: RemovedMessages) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception as exc:
                positions = [m.position for m in event.messages]
                raise ArchiveError(
                    f"could not archive {len(event.messages)} message(s) at positions {positions} "
                    f"({type(exc).__name__}: {exc}); they stay in the window"
                ) from exc

    # -- shared helpers ----------------------------------------------------------------
    def _pinned_count(self, raw: Sequence[dict[str, Any]]) -> int:
        """A leading system message (chat-completions shape) is never trimmed."""
        return 1 if raw and isinstance(raw[0], dict) and raw[0].get("role") in ("system", "developer") else 0

    def _parse(self, raw: Sequence[dict[str, Any]], first_position: int, first_index: int = 0
               ) -> tuple[str, list[Message]]:
        """Typed messages numbered from ``first_position``; ids are stable per position.

        ``raw`` starts at ``first_index`` of the caller's list: a bad message is named by its index there.
        """
        return self._parse_at(raw, range(first_position, first_position + len(raw)), first_index)

    def _parse_at(self, raw: Sequence[dict[str, Any]], positions: Sequence[int], first_index: int = 0
                  ) -> tuple[str, list[Message]]:
        """Typed messages at the given ``positions`` (one each), ``raw`` starting at ``first_index``."""
        shape, parsed = parse_messages(raw, first_index=first_index)
        for msg, position in zip(parsed, positions, strict=True):
            msg.position = position
            msg.id = _message_id(msg)
        return shape, parsed

    @staticmethod
    def _render(msg: Message, shape: str) -> dict[str, Any]:
        return render_message(msg, shape)


def _stores_json(listener: RemovalListener) -> bool:
    """True for a listener (or a bound method of an object) that declares ``stores_json = True``, as an Archive does."""
    return getattr(listener, "stores_json", False) is True or \
        getattr(getattr(listener, "__self__", None), "stores_json", False) is True


def _message_id(msg: Message) -> str:
    meta_id = msg.metadata.get("id") if msg.metadata else None
    return str(meta_id) if meta_id else f"m{msg.position}"

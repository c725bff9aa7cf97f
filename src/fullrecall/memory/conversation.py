"""A conversation that survives restarts and concurrent writers: its message log is the truth.

Every added message is appended to the store before ``add`` returns, in one
atomic, idempotent append (the store assigns its position, so writers in any
number of processes each land, in one order). The window is not saved whole:
it is *derived* from the log, as

    the pinned system message (position 0, if it is one) + the manager's summary
    + every message from the first position still in the window on.

The state document holds only what is small and bounded: the manager's state
(how many messages left the window, the current summary) and any message the
manager replaced in the window (a shortened tool result), plus a version.
Archiving a removed message is indexing it, since its text is stored already.

So nothing acknowledged is lost: not by a crash (mid-write or mid-summarization),
not by a concurrent writer, not by two writers managing the window at once
(the state is one consistent document; the one that went further wins, and the
log holds every message whichever wins). Every read starts from the store, so a
conversation deleted by ``forget()`` (this object's or an administrator's
``store.forget``) stays deleted: nothing held in memory is written back.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from typing import Any

from ..archive.archive import END, message_record
from ..errors import ArchiveError, MessageFormatError
from ..messages.formats import parse_messages
from ..stores.base import Scope, Store, StoredMessage

log = logging.getLogger("fullrecall.memory")

_WINDOW_KEY = "window"
_PINNED_ROLES = ("system", "developer")


class ConversationMemory:
    """The chat loop's memory (seed 001's ``ConversationMemory``), durable and with full recall.

    ``add`` records messages; ``messages`` is the active window; ``model_input()``
    is the window with recalled context added to the newest user message;
    ``clear()`` empties the window after archiving it (nothing is deleted:
    ``forget()`` does that). A message's own ``"id"`` field is its idempotency
    key: adding a message whose id the conversation already holds stores nothing
    new (a retried ``add`` is safe). Extra keyword arguments configure the default
    :class:`~fullrecall.archive.SemanticSummarizingConversationManager`.
    """

    def __init__(
        self,
        store: Store | str = "sqlite:///:memory:",
        session_id: str = "default",
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        manager: Any = None,
        hook: Any = None,
        **manager_options: Any,
    ) -> None:
        from ..archive import SemanticMemoryHook, SemanticSummarizingConversationManager
        from ..stores import open_store

        self.store: Store = open_store(store) if isinstance(store, str) else store
        self.scope = Scope(user_id=user_id, agent_id=agent_id, session_id=session_id).require_session()
        self.manager = manager or SemanticSummarizingConversationManager(
            store=self.store, session_id=session_id, user_id=user_id, agent_id=agent_id, **manager_options)
        archive = getattr(self.manager, "archive", None)
        if archive is not None:
            archive.archived_span = self._archived_span  # the log holds every message: archiving is indexing
        self.hook = hook or SemanticMemoryHook(manager=self.manager)
        self._fresh_state = self.manager.get_state()  # what the manager starts from (and returns to after forget)
        self._messages: list[dict[str, Any]] = []
        self._rows: list[StoredMessage] = []  # the window's originals as stored
        self._pinned = 0
        self._version = 0
        self._sync()

    # -- the window ---------------------------------------------------------------------------
    @property
    def messages(self) -> list[dict[str, Any]]:
        """The active window as the store has it now (a copy: change it through ``add`` and the managers)."""
        self._sync()
        return list(self._messages)

    def add(self, messages: dict[str, Any] | Iterable[dict[str, Any]]) -> None:
        """Record one message or several durably (one atomic append), then let the manager keep the window in budget.

        A message whose ``"id"`` the conversation already holds is not stored again. Once the
        append returns the messages are kept: if managing the window then fails (a removal
        listener raised), that is logged, the window stays as it is, and the next call tries again.
        """
        new = [messages] if isinstance(messages, dict) else list(messages)
        if not new:
            return
        shape, parsed = parse_messages(new)  # a clear error naming the message and field, before anything is stored
        self._sync()
        if self._messages:
            parse_messages(self._messages + new)  # one shape per conversation (indices count the window)
        records = []
        for index, (raw, msg) in enumerate(zip(new, parsed)):
            msg.id = _message_id(raw, index)
            records.append(message_record(msg, shape, data=raw))
        self.store.append(self.scope, records)  # durable, positioned and deduplicated by the store
        self._sync()
        try:
            self._manage(self.manager.apply_management)
        except ArchiveError as exc:  # the messages are stored: a failed trim must not look like a failed add
            log.warning("messages stored, but the window could not be managed (it stays as it is): %s", exc)

    def apply_management(self) -> None:
        """Let the manager trim or summarize the window now."""
        self._sync()
        self._manage(self.manager.apply_management)

    def reduce_context(self, error: BaseException | None = None) -> None:
        """Shrink after a context overflow (raises ``ContextWindowOverflowError`` if it cannot)."""
        self._sync()
        self._manage(lambda window: self.manager.reduce_context(window, error))

    def model_input(self) -> list[dict[str, Any]]:
        """What to send the model: the window, the newest user message enriched with recalled context."""
        self._sync()
        return self.hook.enrich(self._messages)

    def recall(self, query: str) -> Any:
        """The archived messages relevant to ``query`` (a :class:`~fullrecall.archive.Recall`), never the window."""
        self._sync()
        return self.manager.recall(query)

    def clear(self) -> None:
        """Empty the window; every message in it goes to the archive first (a pinned system message stays)."""
        self._sync()
        self._manage(self.manager.clear)

    def forget(self) -> dict[str, Any]:
        """Delete this conversation everywhere (window, archive, vectors, summaries); per-kind counts."""
        counts = self.store.forget(self.scope)
        self._sync()
        return counts

    def __len__(self) -> int:
        return len(self.messages)

    # -- the log and the state ------------------------------------------------------------------
    def _archived_span(self) -> tuple[int, int]:
        """Positions ``[first, end)`` that have left the window (as of the last read of the store)."""
        return self._pinned, self._pinned + self.manager.removed_message_count

    def _sync(self) -> None:
        """Rebuild the window from the store: state first, then the log from the window's start on."""
        state = self.store.get_state(self.scope, _WINDOW_KEY) or {}
        self.manager.restore_from_state(state.get("manager") or self._fresh_state)
        if "messages" in state:
            state = self._upgrade(state)
        self._version = int(state.get("version", 0))
        head = self.store.range(self.scope, 0, 0)
        pinned = [head[0].data] if head and head[0].data.get("role") in _PINNED_ROLES else []
        self._pinned = len(pinned)
        start = self._pinned + self.manager.removed_message_count
        self._rows = self.store.range(self.scope, start, END)
        replaced = state.get("replaced") or {}
        summary = getattr(self.manager, "summary_message", None)
        self._messages = pinned + ([summary] if summary is not None else []) + [
            replaced.get(str(row.position), row.data) for row in self._rows]

    def _upgrade(self, state: dict[str, Any]) -> dict[str, Any]:
        """A window saved whole (by fullrecall before the log was the truth): its messages join the log.

        The system message goes to position 0 and the originals after what was archived, with the ids
        the archive gave by position, so processes that upgrade at once append each message once.
        """
        saved = state["messages"]
        pinned = 1 if saved and saved[0].get("role") in _PINNED_ROLES else 0
        summary = getattr(self.manager, "summary_message", None)
        skip = pinned + int(summary is not None and len(saved) > pinned and saved[pinned] == summary)
        start = pinned + self.manager.removed_message_count
        raws, positions = saved[:pinned] + saved[skip:], [0] * pinned + list(range(start, start + len(saved) - skip))
        if raws:
            shape, parsed = parse_messages(raws)
            for msg, position in zip(parsed, positions):
                msg.position, msg.id = position, f"m{position}"
            self.store.append(self.scope, [message_record(m, shape, data=raw) for m, raw in zip(parsed, raws)])
        upgraded: dict[str, Any] = {"manager": state.get("manager"), "replaced": {}, "version": int(state.get("version", 0)) + 1}
        self.store.put_state(self.scope, _WINDOW_KEY, upgraded)
        return upgraded

    def _manage(self, operation) -> None:
        """Run a manager operation on the window; save the state if the window changed."""
        before = list(self._messages)
        removed_before = self.manager.removed_message_count
        try:
            operation(self._messages)
        finally:
            if self._messages != before or self.manager.removed_message_count != removed_before:
                self._save()

    def _save(self) -> None:
        """Save the manager's state, unless the store moved on meanwhile.

        Re-read first: if the conversation was forgotten, nothing is written back; if another
        writer saved a state that got as far as ours (or further), its state stands. Either way
        every message is in the log, so no choice loses one.
        """
        current = self.store.get_state(self.scope, _WINDOW_KEY) or {}
        removed = self.manager.removed_message_count
        version = int(current.get("version", 0))
        theirs = int((current.get("manager") or {}).get("removed_message_count", 0))
        forgotten = (self._version and not current) or self.store.count(self.scope) == 0
        if forgotten or (version != self._version and theirs >= removed):
            self._sync()
            return
        start = self._pinned + removed
        kept = [row for row in self._rows if row.position is not None and row.position >= start]
        body = self._messages[len(self._messages) - len(kept):] if kept else []
        replaced = {str(row.position): raw for row, raw in zip(kept, body) if raw != row.data}
        self._version = max(version, self._version) + 1
        self.store.put_state(self.scope, _WINDOW_KEY,
                             {"manager": self.manager.get_state(), "replaced": replaced, "version": self._version})
        # the window is as the manager left it; the next operation reads the store again anyway


def _message_id(raw: dict[str, Any], index: int) -> str:
    """The message's own ``"id"`` (its idempotency key), or a fresh unique one."""
    if "id" not in raw:
        return uuid.uuid4().hex
    value = raw["id"]
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise MessageFormatError(f"message {index}: 'id' must be a non-empty string or an integer, got {value!r}")
    return str(value)

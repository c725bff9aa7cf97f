"""A conversation that survives restarts: its window and its archive in one store.

Window managers work on a list the application holds; when the process dies,
that list is gone. :class:`ConversationMemory` keeps the list in the store
too: every added message is committed before ``add`` returns, and every
change the manager makes is saved after the archive has the removed messages.
A process killed at any point (mid-write, mid-summarization) loses nothing
that was acknowledged; a new process with the same store and session resumes
where it stopped, and a summarization that was cut short simply runs again
(archive writes are idempotent per message, so nothing is archived twice).
"""

from __future__ import annotations

from typing import Any, Iterable

from ..messages.formats import parse_messages
from ..stores.base import Scope, Store

_WINDOW_KEY = "window"


class ConversationMemory:
    """The chat loop's memory (seed 001's ``ConversationMemory``), durable and with full recall.

    ``add`` records messages; ``messages`` is the active window; ``model_input()``
    is the window with recalled context added to the newest user message;
    ``clear()`` empties the window after archiving it (nothing is deleted:
    ``forget()`` does that). Extra keyword arguments configure the default
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
        self.scope = Scope(user_id=user_id, agent_id=agent_id, session_id=session_id)
        self.manager = manager or SemanticSummarizingConversationManager(
            store=self.store, session_id=session_id, user_id=user_id, agent_id=agent_id, **manager_options)
        self.hook = hook or SemanticMemoryHook(manager=self.manager)
        saved = self.store.get_state(self.scope, _WINDOW_KEY) or {}
        self._messages: list[dict[str, Any]] = list(saved.get("messages", []))
        self.manager.restore_from_state(saved.get("manager"))

    # -- the window ---------------------------------------------------------------------------
    @property
    def messages(self) -> list[dict[str, Any]]:
        """The active window (a copy: change it through ``add`` and the managers)."""
        return list(self._messages)

    def add(self, messages: dict[str, Any] | Iterable[dict[str, Any]]) -> None:
        """Record one message or several, durably, then let the manager keep the window in budget."""
        new = [messages] if isinstance(messages, dict) else list(messages)
        if not new:
            return
        parse_messages(new, storable=True)  # a clear error naming the message and field, before anything is stored
        if self._messages:
            parse_messages(self._messages + new)  # one shape per conversation (indices count the window)
        self._messages.extend(new)
        try:
            self._save()
        except Exception:
            del self._messages[-len(new):]
            raise
        self.apply_management()

    def apply_management(self) -> None:
        before = (len(self._messages), self.manager.removed_message_count)
        self.manager.apply_management(self._messages)
        if (len(self._messages), self.manager.removed_message_count) != before:  # saved already by add()
            self._save()

    def reduce_context(self, error: BaseException | None = None) -> None:
        """Shrink after a context overflow (raises ``ContextWindowOverflowError`` if it cannot)."""
        try:
            self.manager.reduce_context(self._messages, error)
        finally:
            self._save()

    def model_input(self) -> list[dict[str, Any]]:
        """What to send the model: the window, the newest user message enriched with recalled context."""
        return self.hook.enrich(self._messages)

    def recall(self, query: str):
        return self.manager.recall(query)

    def clear(self) -> None:
        """Empty the window; every message in it goes to the archive first (a pinned system message stays)."""
        self.manager.clear(self._messages)
        self._save()

    def forget(self) -> dict[str, int]:
        """Delete this conversation everywhere (window, archive, vectors, summaries); per-kind counts."""
        self._messages = []
        return self.store.forget(self.scope)

    def _save(self) -> None:
        self.store.put_state(self.scope, _WINDOW_KEY, {"messages": self._messages, "manager": self.manager.get_state()})

    def __len__(self) -> int:
        return len(self._messages)


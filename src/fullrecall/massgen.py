"""Drop-in memories for MassGen agents (``SingleAgent``, ``ConfigurableAgent``).

MassGen's agents use their memories by duck typing: ``conversation_memory.add / get_messages /
clear / size`` and ``persistent_memory.record / retrieve``, all awaited. fullrecall's
:class:`~fullrecall.memory.ConversationMemory` and :class:`~fullrecall.memory.PersistentMemory`
speak exactly that API (MassGen's ``MemoryBase`` and ``PersistentMemoryBase``), so they are the
drop-ins; :func:`memories` builds the pair on one store::

    from fullrecall.massgen import memories

    with memories("sqlite:///memory.db", user_id="ann", agent_id="agent_a", session_id="task-7") as (
            conversation, persistent):
        agent = SingleAgent(backend=backend, agent_id="agent_a",
                            conversation_memory=conversation, persistent_memory=persistent)
        ...

The pair unpacks like a tuple; a store :func:`memories` opened from a URL is closed by its
``close()`` (or on leaving the ``with`` block). A store passed in stays the caller's to close.

This module does not import MassGen (nor need it installed).
"""

from __future__ import annotations

from typing import Any, Self

from .errors import InvalidInput
from .memory.conversation import ConversationMemory
from .memory.persistent import PersistentMemory
from .stores._validate import MAX_ID_BYTES, check_owner, check_session_id
from .stores.base import Store

__all__ = ["ConversationMemory", "Memories", "PersistentMemory", "memories"]

MEMORY_SUFFIX = "-memory"  # the long-term memory's session: the conversation's id and this


class Memories(tuple[ConversationMemory, PersistentMemory]):
    """``(conversation, persistent)``, which also closes the store :func:`memories` opened for them (if it did)."""

    _store: Store | None

    def __new__(cls, conversation: ConversationMemory, persistent: PersistentMemory,
                owned_store: Store | None = None) -> Self:
        pair = super().__new__(cls, (conversation, persistent))
        pair._store = owned_store
        return pair

    @property
    def conversation(self) -> ConversationMemory:
        return self[0]

    @property
    def persistent(self) -> PersistentMemory:
        return self[1]

    def close(self) -> None:
        """Finish the conversation's background indexing, then close the store if :func:`memories` opened it
        from a URL (idempotent); a store passed in is left open.
        """
        self.conversation.close()  # before the store: its indexer may still be embedding what left the window
        store, self._store = self._store, None
        if store is not None:
            store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def memories(
    store: Store | str,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    session_id: str = "default",
    conversation_options: dict[str, Any] | None = None,
    persistent_options: dict[str, Any] | None = None,
) -> Memories:
    """A MassGen agent's two memories, on one store (opened once when given as a URL), for one owner.

    The conversation is the session ``session_id``; the long-term memory writes to its own
    session, ``session_id + "-memory"`` (so what it records never enters the conversation's
    window), and reads across all the owner's sessions. ``*_options`` go to each constructor.
    The result unpacks as ``(conversation, persistent)``; close it (or use it as a context
    manager) to close a store opened here from a URL.
    """
    check_session_id(session_id, "memories: 'session_id'")  # refused before the store is opened
    size = len(f"{session_id}{MEMORY_SUFFIX}".encode())
    if size > MAX_ID_BYTES:  # the long-term memory's session takes the suffix: named here, by the caller's name
        raise InvalidInput(f"memories: 'session_id' is {size - len(MEMORY_SUFFIX)} bytes long; with the "
                           f"{MEMORY_SUFFIX!r} of the long-term memory's session it must be at most "
                           f"{MAX_ID_BYTES - len(MEMORY_SUFFIX)}")
    check_owner(user_id, agent_id)
    owned: Store | None = None
    if isinstance(store, str):
        from .stores import open_store

        store = owned = open_store(store)
    try:
        conversation = ConversationMemory(store, session_id, user_id=user_id, agent_id=agent_id,
                                          **(conversation_options or {}))
        persistent = PersistentMemory(user_id=user_id, agent_id=agent_id, session_id=f"{session_id}{MEMORY_SUFFIX}",
                                      store=store, **(persistent_options or {}))
    except BaseException:
        if owned is not None:
            owned.close()
        raise
    return Memories(conversation, persistent, owned)

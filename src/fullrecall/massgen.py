"""Drop-in memories for MassGen agents (``SingleAgent``, ``ConfigurableAgent``).

MassGen's agents use their memories by duck typing: ``conversation_memory.add / get_messages /
clear / size`` and ``persistent_memory.record / retrieve``, all awaited. fullrecall's
:class:`~fullrecall.memory.ConversationMemory` and :class:`~fullrecall.memory.PersistentMemory`
speak exactly that API (MassGen's ``MemoryBase`` and ``PersistentMemoryBase``), so they are the
drop-ins; :func:`memories` builds the pair on one store::

    from fullrecall.massgen import memories

    conversation, persistent = memories("sqlite:///memory.db", user_id="ann", agent_id="agent_a",
                                        session_id="task-7")
    agent = SingleAgent(backend=backend, agent_id="agent_a",
                        conversation_memory=conversation, persistent_memory=persistent)

This module does not import MassGen (nor need it installed).
"""

from __future__ import annotations

from typing import Any

from .memory.conversation import ConversationMemory
from .memory.persistent import PersistentMemory
from .stores.base import Store

__all__ = ["ConversationMemory", "PersistentMemory", "memories"]


def memories(
    store: Store | str,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    session_id: str = "default",
    conversation_options: dict[str, Any] | None = None,
    persistent_options: dict[str, Any] | None = None,
) -> tuple[ConversationMemory, PersistentMemory]:
    """A MassGen agent's two memories, on one store (opened once when given as a URL), for one owner.

    The conversation is the session ``session_id``; the long-term memory writes to its own
    session, ``session_id + "-memory"`` (so what it records never enters the conversation's
    window), and reads across all the owner's sessions. ``*_options`` go to each constructor.
    """
    if isinstance(store, str):
        from .stores import open_store

        store = open_store(store)
    conversation = ConversationMemory(store, session_id, user_id=user_id, agent_id=agent_id,
                                      **(conversation_options or {}))
    persistent = PersistentMemory(user_id=user_id, agent_id=agent_id, session_id=f"{session_id}-memory", store=store,
                                  **(persistent_options or {}))
    return conversation, persistent

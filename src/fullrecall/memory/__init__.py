"""Memory built on the archive and the stores: durable conversations and long-term memory."""

from typing import Any

from .conversation import ConversationMemory, SyncConversationMemory
from .facts import Fact, FactMemory
from .persistent import MemoryHit, PersistentMemory
from .procedural import ProceduralMemory
from .tools import MemoryTools

__all__ = [
    "ConversationMemory", "Fact", "FactMemory", "MemoryAgent", "MemoryHit", "MemoryTools", "PersistentMemory",
    "ProceduralMemory", "SyncConversationMemory",
]


def __getattr__(name: str) -> Any:
    if name == "MemoryAgent":  # lazily: it pulls in the chat model clients
        from .agent import MemoryAgent

        return MemoryAgent
    raise AttributeError(f"module 'fullrecall.memory' has no attribute {name!r}")

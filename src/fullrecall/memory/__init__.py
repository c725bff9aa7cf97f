"""Memory built on the archive and the stores: durable conversations and long-term memory."""

from .conversation import ConversationMemory, SyncConversationMemory
from .facts import Fact, FactMemory
from .persistent import MemoryHit, PersistentMemory
from .procedural import ProceduralMemory
from .tools import MemoryTools

__all__ = [
    "ConversationMemory", "Fact", "FactMemory", "MemoryHit", "MemoryTools", "PersistentMemory", "ProceduralMemory",
    "SyncConversationMemory",
]

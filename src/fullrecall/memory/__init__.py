"""Memory built on the archive and the stores: durable conversations and long-term memory."""

from .conversation import ConversationMemory
from .facts import Fact, FactMemory
from .procedural import ProceduralMemory

__all__ = ["ConversationMemory", "Fact", "FactMemory", "ProceduralMemory"]

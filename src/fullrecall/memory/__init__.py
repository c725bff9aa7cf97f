"""Memory built on the archive and the stores: durable conversations and long-term memory."""

from .conversation import ConversationMemory
from .procedural import ProceduralMemory

__all__ = ["ConversationMemory", "ProceduralMemory"]

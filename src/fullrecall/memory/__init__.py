"""Memory built on the archive and the stores: durable conversations (and, next, long-term memory)."""

from .conversation import ConversationMemory

__all__ = ["ConversationMemory"]

"""Window managers: keep what the model sees within its budget, never silently."""

from .base import ConversationManager, RemovalListener, RemovedMessages
from .null import NullConversationManager
from .sliding_window import SlidingWindowConversationManager
from .summarizing import SummarizingConversationManager

__all__ = [
    "ConversationManager", "NullConversationManager", "RemovalListener", "RemovedMessages",
    "SlidingWindowConversationManager", "SummarizingConversationManager",
]

"""A manager that never changes the conversation."""

from __future__ import annotations

from .base import ConversationManager


class NullConversationManager(ConversationManager):
    """Leaves the window as it is; on overflow raises ContextWindowOverflowError (from the model's error), so a retry ends.

    For short conversations, debugging, or apps that manage context themselves.
    """

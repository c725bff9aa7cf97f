"""A manager that never changes the conversation."""

from __future__ import annotations

from .base import ConversationManager


class NullConversationManager(ConversationManager):
    """Leaves the window as it is; on overflow re-raises, so the caller's retry ends.

    For short conversations, debugging, or apps that manage context themselves.
    """

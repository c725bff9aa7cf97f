"""The archive of every message that left the window, and recall from it."""

from .archive import Archive, Recall, stored_as_message
from .hook import SemanticMemoryHook
from .recall import RecalledRange, format_enrichment, merge_ranges
from .semantic_manager import SemanticSummarizingConversationManager

__all__ = [
    "Archive", "Recall", "RecalledRange", "SemanticMemoryHook", "SemanticSummarizingConversationManager",
    "format_enrichment", "merge_ranges", "stored_as_message",
]

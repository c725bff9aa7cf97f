"""fullrecall for Strands Agents: conversation managers, the enrichment hook, and the archive as a MemoryStore.

Importing this module imports ``strands``; ``import fullrecall`` never does.
"""

from .hook import SemanticMemoryHook
from .manager import (
    ContextWindowOverflow,
    NullConversationManager,
    SemanticSummarizingConversationManager,
    SlidingWindowConversationManager,
    SummarizingConversationManager,
)
from .memory_store import ArchiveMemoryStore
from .summarizer import AgentModelSummarizer, SummarizationAgentSummarizer

__all__ = [
    "AgentModelSummarizer", "ArchiveMemoryStore", "ContextWindowOverflow", "NullConversationManager", "SemanticMemoryHook",
    "SemanticSummarizingConversationManager", "SlidingWindowConversationManager", "SummarizationAgentSummarizer",
    "SummarizingConversationManager",
]

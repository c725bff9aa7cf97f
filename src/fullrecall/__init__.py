"""fullrecall: memory for LLM agents that never loses a word.

Public names are imported lazily (PEP 562) so ``import fullrecall`` stays fast
and pulls in no optional dependency.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    # errors
    "FullRecallError": "fullrecall.errors",
    "ContextWindowOverflowError": "fullrecall.errors",
    "MessageFormatError": "fullrecall.errors",
    "InvalidInput": "fullrecall.errors",
    "ArchiveError": "fullrecall.errors",
    "SummarizationError": "fullrecall.errors",
    "StoreError": "fullrecall.errors",
    "EmbeddingError": "fullrecall.errors",
    "MemoryInputError": "fullrecall.errors",
    "FactExtractionError": "fullrecall.errors",
    # messages
    "Message": "fullrecall.messages",
    "TextBlock": "fullrecall.messages",
    "ToolUseBlock": "fullrecall.messages",
    "ToolResultBlock": "fullrecall.messages",
    "OpaqueBlock": "fullrecall.messages",
    "parse_messages": "fullrecall.messages",
    "render_messages": "fullrecall.messages",
    # tokens
    "TokenCounter": "fullrecall.tokens",
    "EstimatingTokenCounter": "fullrecall.tokens",
    "TiktokenCounter": "fullrecall.tokens",
    "HuggingFaceTokenCounter": "fullrecall.tokens",
    "default_token_counter": "fullrecall.tokens",
    # window managers
    "ConversationManager": "fullrecall.window",
    "NullConversationManager": "fullrecall.window",
    "SlidingWindowConversationManager": "fullrecall.window",
    "SummarizingConversationManager": "fullrecall.window",
    "RemovedMessages": "fullrecall.window",
    # durable conversation memory and recall
    "ConversationMemory": "fullrecall.memory.conversation",
    "SyncConversationMemory": "fullrecall.memory.conversation",
    # long-term memory
    "ProceduralMemory": "fullrecall.memory.procedural",
    "FactMemory": "fullrecall.memory.facts",
    "Fact": "fullrecall.memory.facts",
    "PersistentMemory": "fullrecall.memory.persistent",
    "MemoryHit": "fullrecall.memory.persistent",
    "MemoryTools": "fullrecall.memory.tools",
    "MemoryAgent": "fullrecall.memory.agent",
    "SemanticSummarizingConversationManager": "fullrecall.archive",
    "SemanticMemoryHook": "fullrecall.archive",
    "Archive": "fullrecall.archive",
    # search and embeddings
    "SemanticSearch": "fullrecall.search",
    "SearchHit": "fullrecall.search",
    "Embedder": "fullrecall.embeddings",
    "load_embedder": "fullrecall.embeddings",
    # stores
    "Store": "fullrecall.stores",
    "Scope": "fullrecall.stores",
    "ANY": "fullrecall.stores",
    "Hit": "fullrecall.stores",
    "StoredMessage": "fullrecall.stores",
    "open_store": "fullrecall.stores",
}

if TYPE_CHECKING:  # editors and type checkers see every lazy export (tests/test_exports.py keeps this in step)
    from .archive import Archive, SemanticMemoryHook, SemanticSummarizingConversationManager
    from .embeddings import Embedder, load_embedder
    from .errors import (
        ArchiveError,
        ContextWindowOverflowError,
        EmbeddingError,
        FactExtractionError,
        FullRecallError,
        InvalidInput,
        MemoryInputError,
        MessageFormatError,
        StoreError,
        SummarizationError,
    )
    from .memory.agent import MemoryAgent
    from .memory.conversation import ConversationMemory, SyncConversationMemory
    from .memory.facts import Fact, FactMemory
    from .memory.persistent import MemoryHit, PersistentMemory
    from .memory.procedural import ProceduralMemory
    from .memory.tools import MemoryTools
    from .messages import (
        Message,
        OpaqueBlock,
        TextBlock,
        ToolResultBlock,
        ToolUseBlock,
        parse_messages,
        render_messages,
    )
    from .search import SearchHit, SemanticSearch
    from .stores import ANY, Hit, Scope, Store, StoredMessage, open_store
    from .tokens import (
        EstimatingTokenCounter,
        HuggingFaceTokenCounter,
        TiktokenCounter,
        TokenCounter,
        default_token_counter,
    )
    from .window import (
        ConversationManager,
        NullConversationManager,
        RemovedMessages,
        SlidingWindowConversationManager,
        SummarizingConversationManager,
    )

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fullrecall' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

"""fullrecall: memory for LLM agents that never loses a word.

Public names are imported lazily (PEP 562) so ``import fullrecall`` stays fast
and pulls in no optional dependency.
"""

from __future__ import annotations

import importlib
from typing import Any

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
    "open_store": "fullrecall.stores",
}

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

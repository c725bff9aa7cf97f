"""Summarizers that keep what matters: an offline extractive one and LLM ones, all checked.

Public names load lazily so ``import fullrecall.summarizers`` pulls in no HTTP
or cloud client.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Summary": "fullrecall.summarizers.base",
    "CheckReport": "fullrecall.summarizers.base",
    "Summarizer": "fullrecall.summarizers.base",
    "ExtractiveSummarizer": "fullrecall.summarizers.extractive",
    "Exclusions": "fullrecall.summarizers.checks",
    "DEFAULT_PROTECTED": "fullrecall.summarizers.checks",
    "LLMSummarizer": "fullrecall.summarizers.llm",
    "DEFAULT_SYSTEM_PROMPT": "fullrecall.summarizers.llm",
    "summarizer_from_prompt": "fullrecall.summarizers.llm",
    "ChatModel": "fullrecall.summarizers.chat_models",
    "ChatRequest": "fullrecall.summarizers.chat_models",
    "ChatResponse": "fullrecall.summarizers.chat_models",
    "ChatModelError": "fullrecall.summarizers.chat_models",
    "OpenAIChatModel": "fullrecall.summarizers.chat_models",
    "BedrockChatModel": "fullrecall.summarizers.chat_models",
    "StrandsChatModel": "fullrecall.summarizers.chat_models",
    "chat_model_from_env": "fullrecall.summarizers.chat_models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fullrecall.summarizers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

"""Pick a chat model from environment variables.

``FULLRECALL_LLM_MODEL`` (or ``OPENAI_MODEL``, or ``OPENAI_API_KEY`` with
``FULLRECALL_LLM_MODEL``) selects the OpenAI-compatible client;
``FULLRECALL_BEDROCK_MODEL_ID`` selects Bedrock. ``FULLRECALL_LLM_PROVIDER``
("openai" or "bedrock") settles it when both are set.
"""

from __future__ import annotations

import os

from .base import ChatModel, ChatModelError

ENV_HELP = ("set FULLRECALL_LLM_MODEL (with FULLRECALL_LLM_BASE_URL / FULLRECALL_LLM_API_KEY, or "
            "OPENAI_BASE_URL / OPENAI_API_KEY) for an OpenAI-compatible endpoint, or "
            "FULLRECALL_BEDROCK_MODEL_ID (with AWS_REGION) for Amazon Bedrock")


def chat_model_from_env() -> ChatModel:
    """The chat model the environment configures; :class:`ChatModelError` naming the variables if none."""
    env = os.environ
    provider = (env.get("FULLRECALL_LLM_PROVIDER") or "").strip().lower()
    openai_set = bool(env.get("FULLRECALL_LLM_MODEL") or env.get("OPENAI_MODEL"))
    bedrock_set = bool(env.get("FULLRECALL_BEDROCK_MODEL_ID"))
    if provider == "bedrock" or (bedrock_set and not openai_set and provider != "openai"):
        from .bedrock import BedrockChatModel

        return BedrockChatModel.from_env()
    if provider == "openai" or openai_set:
        from .openai import OpenAIChatModel

        return OpenAIChatModel.from_env()
    raise ChatModelError(f"no LLM configured: {ENV_HELP}")  # for summaries, MemoryAgent("env"), the chat alike

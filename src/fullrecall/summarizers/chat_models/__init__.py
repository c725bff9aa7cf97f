"""Chat model clients for :class:`~fullrecall.summarizers.LLMSummarizer`; each imports its SDK lazily."""

from .base import ChatModel, ChatModelError, ChatRequest, ChatResponse
from .bedrock import BedrockChatModel
from .env import chat_model_from_env
from .openai import OpenAIChatModel
from .strands import StrandsChatModel

__all__ = ["BedrockChatModel", "ChatModel", "ChatModelError", "ChatRequest", "ChatResponse", "OpenAIChatModel",
           "StrandsChatModel", "chat_model_from_env"]

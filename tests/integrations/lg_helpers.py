"""A deterministic LangChain embedder, a scripted chat model and a hand-moved clock for the LangGraph tests."""

from __future__ import annotations

import math
import zlib
from collections import Counter
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field


class CharEmbeddings(Embeddings):
    """A real, deterministic LangChain embedder: character and bigram counts hashed into ``dims`` buckets.

    Texts that share characters score high; the same text always gets the same vector.
    """

    def __init__(self, dims: int = 64) -> None:
        self.dims = dims
        self.calls: list[list[str]] = []

    def _one(self, text: str) -> list[float]:
        grams = Counter(text.lower()) + Counter(text.lower()[i : i + 2] for i in range(len(text) - 1))
        vector = [0.0] * self.dims
        for gram, n in grams.items():
            vector[zlib.crc32(gram.encode()) % self.dims] += n
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls.append([text])
        return self._one(text)


class Clock:
    """A clock the TTL tests move by hand (Unix seconds)."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, minutes: float) -> None:
        self.now += minutes * 60


class ScriptedChatModel(BaseChatModel):
    """A real LangChain chat model that answers from a script and records every list of messages it gets.

    A reply is a string (a text answer) or an ``AIMessage`` (e.g. with tool calls); past the script it says "OK."
    A call whose messages hold more than ``max_prompt_chars`` characters raises ``ContextOverflowError``, as a
    provider would (and is recorded in ``overflows``).
    """

    replies: list[Any] = Field(default_factory=list)
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    max_prompt_chars: int | None = None
    overflows: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        if self.max_prompt_chars is not None and sum(len(str(m.content)) for m in messages) > self.max_prompt_chars:
            self.overflows += 1
            raise ContextOverflowError(f"scripted: the prompt is over {self.max_prompt_chars} characters")
        self.calls.append(list(messages))
        reply = self.replies.pop(0) if self.replies else "OK."
        message = reply.model_copy() if isinstance(reply, AIMessage) else AIMessage(content=reply)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self


def tool_call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])

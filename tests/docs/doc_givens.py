"""What an example of the docs takes from its surroundings: each is the value of its name (those that import a
framework are made on first use).

A block names the ones it needs with ``<!-- doc-test: given NAME, ... -->`` (see ``doc_blocks.py``). The chat
models here answer offline; the LLM behind ``OPENAI_BASE_URL`` is the test's scripted server.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any


def _conversation() -> list[dict[str, Any]]:
    """A chat-completions conversation long enough to leave a window: a system prompt, 30 turns, a question."""
    turns: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    turns += [{"role": "user", "content": "Our shared reference number for this conversation is 4711."},
              {"role": "assistant", "content": "Understood, I will keep 4711 in mind."}]
    for i in range(14):
        turns += [{"role": "user", "content": f"Tell me about data structure number {i}."},
                  {"role": "assistant", "content": f"Data structure {i} stores items in order {i}."}]
    turns.append({"role": "user", "content": "What was our shared reference number?"})
    return turns


messages = _conversation()


class ContextLengthExceeded(Exception):  # noqa: N818 (a provider's name for it)
    """What a model's client raises when the prompt is too long."""


def call_model(messages: list[dict[str, Any]]) -> str:
    """The application's own model call: messages in, the answer's text out."""
    return f"(an answer to {len(messages)} messages)"


some_time = time.time() - 3600  # a moment of the past (Unix seconds)
next_month = time.time() + 30 * 86400
tools_used = ["get_weight_log", "compute_trend"]
tool_results = [{"weights": [81.2, 80.6, 80.1]}, {"trend": "-1.1 kg in 3 weeks"}]


def __getattr__(name: str) -> Any:
    """The givens that import a framework, made when an example names them."""
    if name not in _MADE:
        raise AttributeError(name)
    return _MADE[name]()


def _model() -> Any:
    """A LangChain chat model that answers from a script (no tool calls)."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class Model(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    return Model(messages=iter([AIMessage(content=f"answer {i}") for i in range(100)]))


def _tools() -> list[Any]:
    """One LangChain tool."""
    from langchain_core.tools import tool

    @tool
    def get_time(city: str) -> str:
        """The local time in a city."""
        return f"12:00 in {city}"

    return [get_time]


def _saver() -> Any:
    """A LangGraph checkpointer."""
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


def _memory() -> Any:
    """The long-term memory of docs/memory.md's examples."""
    from fullrecall import PersistentMemory

    return PersistentMemory(user_id="user_123", agent_id="assistant", store="sqlite:///memory.db")


class _Client:
    """The shape of the OpenAI SDK's client that the examples use (``client.chat.completions.create``),
    talking to ``OPENAI_BASE_URL``: answers come back as objects with attributes, as the SDK's do."""

    def __init__(self) -> None:
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _create(self, **body: Any) -> Any:
        import httpx

        url = os.environ["OPENAI_BASE_URL"] + "/chat/completions"
        answer = httpx.post(url, json=body, headers={"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"})
        return _sdk(answer.raise_for_status().json())


def _sdk(value: Any) -> Any:
    """A JSON answer as the SDK gives it: objects with attributes and ``model_dump()``."""
    if isinstance(value, list):
        return [_sdk(v) for v in value]
    if not isinstance(value, dict):
        return value
    made = SimpleNamespace(**{k: _sdk(v) for k, v in value.items()})
    made.model_dump = lambda: value
    return made


_MADE = {"model": _model, "tools": _tools, "saver": _saver, "memory": _memory, "client": _Client}

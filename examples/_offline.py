"""What the examples share: the chat model (a real one when configured, else a scripted one) and a store.

With ``FULLRECALL_LLM_MODEL`` (OpenAI-compatible) or ``FULLRECALL_BEDROCK_MODEL_ID`` set, the
examples talk to that provider; without, a scripted model answers offline from what memory
gave it, so every example runs anywhere (and in the tests).
"""

from __future__ import annotations

import os
import re
import tempfile

from fullrecall.summarizers.chat_models import ChatModelError, ChatRequest, ChatResponse, chat_model_from_env


class ScriptedChatModel:
    """An offline stand-in for an LLM: it answers with the remembered line that best matches the question."""

    name = "scripted"

    def complete(self, request: ChatRequest) -> ChatResponse:
        question = request.messages[-1]["content"] if request.messages else ""
        return ChatResponse(text=answer_from_memory(question, request.system))

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        return self.complete(request)


def answer_from_memory(question: str, memory: str) -> str:
    """The memory line sharing most words with the question, or an acknowledgement when none does."""
    words = set(re.findall(r"\w{3,}", question.lower())) - {"what", "which", "the", "did", "you", "and", "that"}
    lines = [line.lstrip("- ").strip() for line in (memory or "").splitlines() if line.startswith("- ")]
    best = max(lines, key=lambda line: len(words & set(re.findall(r"\w{3,}", line.lower()))), default="")
    if best and words & set(re.findall(r"\w{3,}", best.lower())):
        return f"From memory: {best}"
    return "Noted."


def chat_model() -> object:
    """The configured provider's chat model, or the scripted one."""
    try:
        return chat_model_from_env()
    except ChatModelError:
        return ScriptedChatModel()


def store_url(name: str) -> str:
    """Where an example keeps its memory: ``FULLRECALL_EXAMPLE_STORE`` (a URL), else a SQLite file in a temp folder."""
    url = os.environ.get("FULLRECALL_EXAMPLE_STORE")
    if url:
        return url
    folder = os.environ.get("FULLRECALL_EXAMPLE_DIR") or tempfile.mkdtemp(prefix="fullrecall-example-")
    return f"sqlite:///{os.path.join(folder, name + '.db')}"

"""Who writes the summary for a Strands agent: its own model, called directly, or a summarization agent.

The managed agent is never invoked from inside its own conversation manager:
that re-enters its invocation lock (``ConcurrencyException`` on current SDKs)
and its tools and history. Like the SDK's ``SummarizingConversationManager``,
the default streams from ``agent.aux_model`` (or ``agent.model``) with a
summarization system prompt and no tools.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..messages.formats import render_message
from ..messages.model import Message

AgentGetter = Callable[[], Any]


def summarization_model(agent: Any) -> Any:
    """``agent.aux_model`` where the SDK has one (it defaults to ``model``), else ``agent.model``."""
    return getattr(agent, "aux_model", None) or agent.model


class AgentModelSummarizer:
    """Summarizes with the model of the agent being managed, via fullrecall's checked ``LLMSummarizer``.

    ``current_agent`` returns the agent the manager is working on right now
    (the manager sets it before each call); the summarizer is rebuilt only when
    that agent's summarization model changes.
    """

    def __init__(self, current_agent: AgentGetter, system_prompt: str | None = None, **llm_options: Any) -> None:
        self._current_agent = current_agent
        self.system_prompt = system_prompt
        self.llm_options = llm_options
        self._cached: tuple[Any, Any] | None = None

    def _llm(self) -> Any:
        agent = self._current_agent()
        if agent is None:
            raise RuntimeError("no Strands agent bound: the manager sets it before summarizing")
        model = summarization_model(agent)
        if self._cached is None or self._cached[0] is not model:
            from ..summarizers.chat_models.strands import StrandsChatModel
            from ..summarizers.llm import LLMSummarizer

            llm = LLMSummarizer(StrandsChatModel(model), system_prompt=self.system_prompt, **self.llm_options)
            self._cached = (model, llm)
        return self._cached[1]

    def summarize(self, messages: Sequence[Message], previous_summary: str | None = None) -> Any:
        return self._llm().summarize(messages, previous_summary)


PROMPT = "Please summarize this conversation."


class ModelReplySummarizer:
    """The SDK's own summary call, unchecked: the agent's model, the SDK's prompt, the reply as the summary.

    The messages (after the earlier summary, as a user message) and "Please
    summarize this conversation." go to ``agent.aux_model`` (or ``agent.model``)
    with ``system_prompt`` (the SDK's ``DEFAULT_SUMMARIZATION_PROMPT`` when
    None) and no tools. A failed call or an empty reply raises.
    """

    def __init__(self, current_agent: AgentGetter, system_prompt: str | None = None) -> None:
        self._current_agent = current_agent
        self.system_prompt = system_prompt

    def summarize(self, messages: Sequence[Message], previous_summary: str | None = None) -> str:
        from strands.agent.conversation_manager.summarizing_conversation_manager import DEFAULT_SUMMARIZATION_PROMPT

        agent = self._current_agent()
        if agent is None:
            raise RuntimeError("no Strands agent bound: the manager sets it before summarizing")
        request = [{"role": "user", "content": [{"text": previous_summary}]}] if previous_summary else []
        request += [_converse(m) for m in messages] + [{"role": "user", "content": [{"text": PROMPT}]}]
        prompt = self.system_prompt if self.system_prompt is not None else DEFAULT_SUMMARIZATION_PROMPT
        text = _run(lambda: _reply_text(summarization_model(agent), request, prompt))
        if not text.strip():
            raise RuntimeError("Failed to generate summary: model response contained no text")
        return text


async def _reply_text(model: Any, messages: list[dict[str, Any]], system_prompt: str) -> str:
    parts: list[str] = []
    async for event in model.stream(messages, tool_specs=None, system_prompt=system_prompt):
        delta = event.get("contentBlockDelta", {}).get("delta", {}) if isinstance(event, dict) else {}
        if isinstance(delta.get("text"), str):
            parts.append(delta["text"])
    return "".join(parts)


def _run(make: Callable[[], Awaitable[str]]) -> str:
    """Run a coroutine from sync code, on a worker's own loop when a loop is already running here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())  # type: ignore[arg-type]
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()  # type: ignore[arg-type]


class SummarizationAgentSummarizer:
    """Runs a separate summarization agent over the messages, as the SDK does with ``summarization_agent``.

    For the call, its messages are the ones to summarize, structured output is
    off (a summary is plain text), and an agent without tools gets the SDK's
    no-op tool, so that providers which reject tool blocks without tool specs
    (Bedrock) accept the messages; its messages, system prompt, tools and
    structured output model are restored afterwards. It must be a Strands
    ``Agent`` and not the agent being managed (that would re-enter the running agent).
    """

    PROMPT = PROMPT

    def __init__(self, agent: Any, current_agent: AgentGetter) -> None:
        from strands import Agent

        if not isinstance(agent, Agent):
            raise TypeError(f"summarization_agent must be a strands Agent, got {type(agent).__name__}")
        self.agent = agent
        self._current_agent = current_agent

    def summarize(self, messages: Sequence[Message], previous_summary: str | None = None) -> str:
        if self.agent is self._current_agent():
            raise ValueError("summarization_agent is the agent being managed; give a separate Agent")
        agent = self.agent
        request = [{"role": "user", "content": [{"text": previous_summary}]}] if previous_summary else []
        saved = (agent.system_prompt, agent.messages, agent.tool_registry,
                 getattr(agent, "_default_structured_output_model", None))
        try:
            if hasattr(agent, "_default_structured_output_model"):
                agent._default_structured_output_model = None
            if not agent.tool_names:
                agent.tool_registry = _noop_registry()
            agent.messages = request + [_converse(m) for m in messages]  # type: ignore[assignment]  # strands' Message TypedDict
            result = agent(self.PROMPT)
        finally:
            agent.system_prompt, agent.messages, agent.tool_registry = saved[:3]
            if hasattr(agent, "_default_structured_output_model"):
                agent._default_structured_output_model = saved[3]
        return str(result).strip()


def _noop_registry() -> Any:
    """A tool registry holding only the SDK's no-op tool: a tool spec for messages with tool blocks."""
    from strands.tools.registry import ToolRegistry

    try:  # the very tool spec the SDK sends
        from strands.tools._tool_helpers import noop_tool
    except ImportError:  # pragma: no cover - an SDK without it
        from strands import tool

        noop_tool = tool(name="noop", description="This is a fake tool that MUST be completely ignored.")(lambda: "")
    registry = ToolRegistry()
    registry.register_tool(noop_tool)
    return registry


def _converse(msg: Message) -> dict[str, Any]:
    rendered = render_message(msg, "converse")
    return {"role": rendered["role"], "content": rendered["content"]}

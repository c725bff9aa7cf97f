"""Who writes the summary for a Strands agent: its own model, called directly, or a summarization agent.

The managed agent is never invoked from inside its own conversation manager:
that re-enters its invocation lock (``ConcurrencyException`` on current SDKs)
and its tools and history. Like the SDK's ``SummarizingConversationManager``,
the default streams from ``agent.aux_model`` (or ``agent.model``) with a
summarization system prompt and no tools.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

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


class SummarizationAgentSummarizer:
    """Runs a separate summarization agent over the messages, as the SDK does with ``summarization_agent``.

    Its messages are swapped in for the call and restored afterwards. It must
    not be the agent being managed (that would re-enter the running agent).
    """

    PROMPT = "Please summarize this conversation."

    def __init__(self, agent: Any, current_agent: AgentGetter) -> None:
        self.agent = agent
        self._current_agent = current_agent

    def summarize(self, messages: Sequence[Message], previous_summary: str | None = None) -> str:
        if self.agent is self._current_agent():
            raise ValueError("summarization_agent is the agent being managed; give a separate Agent")
        prompt = self.PROMPT
        if previous_summary:
            prompt += f"\n\nThe new summary replaces this earlier summary; carry its content forward:\n{previous_summary}"
        saved = self.agent.messages
        try:
            self.agent.messages = [_converse(m) for m in messages]
            result = self.agent(prompt)
        finally:
            self.agent.messages = saved
        return str(result).strip()


def _converse(msg: Message) -> dict[str, Any]:
    rendered = render_message(msg, "converse")
    return {"role": rendered["role"], "content": rendered["content"]}

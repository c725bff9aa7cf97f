"""LLMSummarizer over a Strands Model (a scripted subclass, offline) and over a Strands Agent's model."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

strands = pytest.importorskip("strands")

from strands.models import Model  # noqa: E402
from strands.types.exceptions import ModelThrottledException  # noqa: E402

from fullrecall.summarizers import LLMSummarizer, StrandsChatModel  # noqa: E402
from strands import Agent  # noqa: E402


class ScriptedModel(Model):
    """A Strands Model that streams scripted replies (text, or an exception to raise) and records its calls."""

    def __init__(self, *replies: str | Exception) -> None:
        self.replies = list(replies)
        self.calls: list[dict[str, Any]] = []

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):  # pragma: no cover
        raise NotImplementedError

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        self.calls.append({"messages": messages, "tool_specs": tool_specs, "system_prompt": system_prompt})
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockStart": {"start": {}}}
        for i in range(0, len(reply), 40):
            yield {"contentBlockDelta": {"delta": {"text": reply[i:i + 40]}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}


def test_model_is_streamed_directly(tech_conversation, good_summary, citations):
    scripted = ScriptedModel(good_summary)
    summary = LLMSummarizer(scripted).summarize(tech_conversation)
    assert summary.method == "llm" and summary.text.startswith(good_summary)
    (call,) = scripted.calls
    assert call["tool_specs"] is None
    assert call["messages"][0]["role"] == "user" and "700" not in call["messages"][0]["content"][0]["text"]


def test_agent_model_is_used_and_agent_never_invoked(tech_conversation, good_summary, citations):
    scripted = ScriptedModel(good_summary.replace(" [3]", ""), good_summary)
    agent = Agent(model=scripted, system_prompt="Summarize for a GPU buyer; keep prices.", callback_handler=None)
    summary = LLMSummarizer(agent).summarize(tech_conversation)
    assert summary.report.reprompted and all(c in summary.text for c in citations)
    assert agent.messages == []  # the agent's own conversation was never touched
    assert scripted.calls[0]["system_prompt"] == "Summarize for a GPU buyer; keep prices."


def test_throttling_is_retried_then_falls_back(tech_conversation, citations):
    scripted = ScriptedModel(*[ModelThrottledException("slow down")] * 3)
    summary = LLMSummarizer(StrandsChatModel(scripted, max_retries=2, backoff=0.01)).summarize(tech_conversation)
    assert len(scripted.calls) == 3 and summary.method == "extractive"
    assert "ModelThrottledException" in summary.report.errors[0]
    assert all(c in summary.text for c in citations) and "700" not in summary.text


def test_leak_is_redacted_on_the_async_path(tech_conversation, good_summary):
    scripted = ScriptedModel(good_summary + "\n* Reference: 700")

    async def inside_a_loop():
        return await LLMSummarizer(scripted).asummarize(tech_conversation)

    summary = asyncio.run(inside_a_loop())
    assert summary.report.redacted and "700" not in summary.text


def test_sync_call_from_inside_a_running_loop(tech_conversation, good_summary):
    """Strands calls managers from its event loop: the sync path must not deadlock there."""
    scripted = ScriptedModel(good_summary)

    async def inside_a_loop():
        return LLMSummarizer(scripted).summarize(tech_conversation)

    assert asyncio.run(inside_a_loop()).method == "llm"


def test_rejects_what_is_not_a_model():
    with pytest.raises(TypeError, match="Strands Model or Agent"):
        StrandsChatModel(object())


class TricklingModel(ScriptedModel):
    """A Strands Model whose provider sends a word every ``pause`` seconds: a whole answer takes minutes."""

    def __init__(self, reply: str, pause: float) -> None:
        super().__init__(reply)
        self.pause = pause

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        self.calls.append({"messages": messages})
        for word in self.replies[0].split(" "):
            await asyncio.sleep(self.pause)
            yield {"contentBlockDelta": {"delta": {"text": word + " "}}}
        yield {"messageStop": {"stopReason": "end_turn"}}


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_model_that_trickles_its_answer_ends_at_the_deadline(tech_conversation, good_summary, citations, run,
                                                              monkeypatch):
    """A Strands model had no deadline at all: a provider that trickled (or never finished) its stream held the
    summarizer, and the window manager calling it, for as long as it liked. Each try now ends at ``deadline``
    (default 120 s, or FULLRECALL_LLM_DEADLINE) as the other clients' do, counts as a timeout and is retried."""
    scripted = TricklingModel(good_summary, pause=0.1)  # ~80 words: 8 s a try
    summarizer = LLMSummarizer(StrandsChatModel(scripted, deadline=0.4, max_retries=1, backoff=0.01))
    started = time.monotonic()
    summary = (summarizer.summarize(tech_conversation) if run == "sync"
               else asyncio.run(summarizer.asummarize(tech_conversation)))
    assert time.monotonic() - started < 3.0 and len(scripted.calls) == 2
    assert summary.method == "extractive" and "deadline of 0.4 s" in summary.report.errors[0]
    assert all(c in summary.text for c in citations) and "700" not in summary.text
    assert StrandsChatModel(scripted).deadline == 120.0
    monkeypatch.setenv("FULLRECALL_LLM_DEADLINE", "42")
    assert StrandsChatModel(scripted).deadline == 42.0
    with pytest.raises(ValueError, match="deadline"):
        StrandsChatModel(scripted, deadline=-1)


class FloodingModel(ScriptedModel):
    """A Strands Model whose provider streams text without end, as fast as it can."""

    closed = False

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        self.calls.append({"messages": messages})
        try:
            while True:
                yield {"contentBlockDelta": {"delta": {"text": "é" * 1000}}}
                await asyncio.sleep(0)
        finally:
            FloodingModel.closed = True


def test_a_model_streaming_without_end_stops_at_the_size_limit(monkeypatch):
    """The OpenAI and Bedrock clients read at most max_response_bytes of an answer; a Strands model's stream was
    gathered whole, however long, until the deadline. It now ends at the limit (UTF-8 bytes of text), the
    provider's stream closed, in a ChatModelError naming the model and the limit, not retried."""
    from fullrecall.summarizers.chat_models.base import ChatModelError, ChatRequest

    flood = FloodingModel()
    model = StrandsChatModel(flood, max_response_bytes=100_000, max_retries=2)
    started = time.monotonic()
    with pytest.raises(ChatModelError, match=r"strands:FloodingModel failed: .*over the limit of 100000 bytes"):
        model.complete(ChatRequest(system="s", messages=({"role": "user", "content": "hi"},)))
    assert time.monotonic() - started < 2.0 and len(flood.calls) == 1 and FloodingModel.closed
    assert StrandsChatModel(flood).max_response_bytes == 32 * 2**20
    monkeypatch.setenv("FULLRECALL_LLM_MAX_RESPONSE_BYTES", "5")
    assert StrandsChatModel(flood).max_response_bytes == 5


class CutModel(ScriptedModel):
    """Streams the start of an answer, then its stream ends with no messageStop (the connection dropped)."""

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        self.calls.append({"messages": messages})
        reply = self.replies.pop(0)
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockDelta": {"delta": {"text": reply}}}
        if not reply.endswith("..."):
            yield {"messageStop": {"stopReason": "end_turn"}}


def test_a_stream_cut_short_is_no_whole_answer():
    """A stream that ended without its messageStop was taken as a whole answer ('Your locker code is 31', finish
    'stop'): it is now an error worth a retry, and the retry's whole answer is taken."""
    from fullrecall.summarizers.chat_models.base import ChatModelError, ChatRequest

    request = ChatRequest(system="s", messages=({"role": "user", "content": "What is my locker code?"},))
    cut = CutModel("Your locker code is 31...", "Your locker code is 3141.")
    answer = StrandsChatModel(cut, max_retries=1, backoff=0.01).complete(request)
    assert (answer.text, answer.finish_reason, len(cut.calls)) == ("Your locker code is 3141.", "stop", 2)
    with pytest.raises(ChatModelError, match="ended without its stop"):
        StrandsChatModel(CutModel("Your locker code is 31..."), max_retries=0).complete(request)


@pytest.mark.parametrize("where", ["plain", "inside a running loop"])
def test_a_stalled_provider_ends_the_sync_call_at_its_deadline(aws, monkeypatch, where):
    """Strands' Bedrock model reads its stream on a worker thread: when the provider stalled, the try timed out at
    its deadline but ``complete`` returned only when the stalled read ended (``asyncio.run`` waited for the
    thread; botocore's read timeout is 120 s). The sync call now raises at its deadline as the async one does."""
    from strands.models.bedrock import BedrockModel
    from summarizer_peers import Reply

    from fullrecall.summarizers.chat_models.base import ChatModelError, ChatRequest

    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    aws.script(Reply(delay=4.0, status=500, body=b"{}"))  # no answer for 4 s
    model = StrandsChatModel(BedrockModel(model_id="m", region_name="us-east-1"), deadline=0.5, max_retries=0)
    request = ChatRequest(system="s", messages=({"role": "user", "content": "hi"},))

    async def inside_a_loop():
        return model.complete(request)

    started = time.monotonic()
    with pytest.raises(ChatModelError, match="deadline of 0.5 s"):
        model.complete(request) if where == "plain" else asyncio.run(inside_a_loop())
    assert time.monotonic() - started < 2.0 and len(aws.requests) == 1

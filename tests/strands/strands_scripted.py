"""An offline Strands ``Model`` that answers from a script and records every request it gets."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from strands.models.model import Model
from strands.types.exceptions import ContextWindowOverflowException

AGENT_PROMPT = "You are a helpful assistant."


def prompt_chars(messages: list[dict[str, Any]]) -> int:
    return len(json.dumps([m.get("content") for m in messages], default=lambda raw: "x" * len(raw)))  # bytes


class ScriptedModel(Model):
    """Agent calls (system prompt ``AGENT_PROMPT``) get the next scripted reply: a string, or
    ``("tool", name, input)`` for a tool call. Any other call is a side call (a summary) and gets
    ``summary_reply``. An agent call whose messages exceed ``max_prompt_chars`` raises the SDK's
    ``ContextWindowOverflowException``, as a provider would.
    """

    def __init__(self, replies: list[Any] | None = None, *, summary_reply: str | Callable[[list], str] = "",
                 max_prompt_chars: int | None = None) -> None:
        self.replies = list(replies or [])
        self.summary_reply = summary_reply
        self.max_prompt_chars = max_prompt_chars
        self.calls: list[dict[str, Any]] = []
        self.config: dict[str, Any] = {}

    # -- Model's abstract surface ----------------------------------------------------------
    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> Any:
        return self.config

    async def structured_output(self, output_model: Any, prompt: Any, system_prompt: Any = None, **kwargs: Any):
        raise NotImplementedError
        yield  # pragma: no cover

    async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
                     ) -> AsyncIterator[dict[str, Any]]:
        side = system_prompt != AGENT_PROMPT
        call = {"messages": copy.deepcopy(messages), "system_prompt": system_prompt, "tool_specs": tool_specs,
                "side": side, "overflow": False}
        self.calls.append(call)
        if side:
            reply: Any = self.summary_reply(messages) if callable(self.summary_reply) else self.summary_reply
        else:
            if self.max_prompt_chars is not None and prompt_chars(messages) > self.max_prompt_chars:
                call["overflow"] = True
                raise ContextWindowOverflowException("scripted: prompt is too long")
            reply = self.replies.pop(0) if self.replies else "OK."
        for event in _events(reply):
            yield event

    # -- views for assertions ------------------------------------------------------------------
    @property
    def agent_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if not c["side"] and not c["overflow"]]

    @property
    def side_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["side"]]


def _events(reply: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"messageStart": {"role": "assistant"}}]
    if isinstance(reply, tuple) and reply[0] == "tool":
        _, name, tool_input, use_id = (*reply, None)[:4]
        events += [
            {"contentBlockStart": {"start": {"toolUse": {"toolUseId": use_id or f"t-{name}-{id(reply)}", "name": name}}}},
            {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(tool_input)}}}},
            {"contentBlockStop": {}},
            {"messageStop": {"stopReason": "tool_use"}},
        ]
        return events
    events += [
        {"contentBlockStart": {"start": {}}},
        {"contentBlockDelta": {"delta": {"text": str(reply)}}},
        {"contentBlockStop": {}},
        {"messageStop": {"stopReason": "end_turn"}},
    ]
    return events

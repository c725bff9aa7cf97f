"""A Strands Model for ``fullrecall chat --provider strands --model strands_peer:model``: answers offline."""

from __future__ import annotations

from typing import Any

from strands.models import Model


class EchoModel(Model):
    """Streams "strands heard: <the last user text>" (the recalled context included, as the model got it)."""

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):  # pragma: no cover
        raise NotImplementedError

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        text = messages[-1]["content"][0]["text"]
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockStart": {"start": {}}}
        yield {"contentBlockDelta": {"delta": {"text": f"strands heard: {text}"}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}


def model() -> EchoModel:
    return EchoModel()

"""A Strands agent with semantic memory: a summarizing window whose removed messages stay searchable.

The agent keeps only its last turns in the window; older messages are summarized and archived
verbatim in a store (SQLite here), and ``SemanticMemoryHook`` adds the archived messages relevant to
each new question to the model's input. So a detail said long ago (a locker code) still reaches
the model after it left the window.

Run: ``python examples/strands_semantic_memory.py``. Offline a scripted Strands model answers from
the recalled context; with ``FULLRECALL_BEDROCK_MODEL_ID`` (and AWS credentials) Bedrock answers.
"""

from __future__ import annotations

import os
from typing import Any

from _offline import answer_from_memory, store_url
from strands.models import Model

from fullrecall.strands import SemanticMemoryHook, SemanticSummarizingConversationManager
from fullrecall.summarizers import ExtractiveSummarizer
from strands import Agent


class ScriptedStrandsModel(Model):
    """An offline Strands model: it answers the newest question from the context recalled into it."""

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, output_model: Any, prompt: Any, system_prompt: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any) -> Any:
        text = "\n".join(b.get("text", "") for b in messages[-1]["content"] if isinstance(b, dict))
        question = text.strip().splitlines()[-1] if text.strip() else ""
        lines = "\n".join("- " + line for line in text.splitlines()[:-1])
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockStart": {"start": {}}}
        yield {"contentBlockDelta": {"delta": {"text": answer_from_memory(question, lines)}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}


def model() -> Any:
    model_id = os.environ.get("FULLRECALL_BEDROCK_MODEL_ID")
    if model_id:
        from strands.models.bedrock import BedrockModel

        return BedrockModel(model_id=model_id, region_name=os.environ.get("AWS_REGION"))
    return ScriptedStrandsModel()


def main() -> None:
    real = bool(os.environ.get("FULLRECALL_BEDROCK_MODEL_ID"))
    manager = SemanticSummarizingConversationManager(
        preserve_recent_messages=2,
        max_history_turns=2,  # keep the window small, so the example shows recall from the archive
        summarizer=None if real else ExtractiveSummarizer(),  # the agent's own model summarizes when real
        store=store_url("strands"),  # no session_id: this run's conversation gets a fresh one (one id, one conversation)
    )
    hook = SemanticMemoryHook(max_context_length=2000)
    agent = Agent(model=model(), conversation_manager=manager, hooks=[hook], callback_handler=None,
                  system_prompt="You are a concise assistant.")
    for text in ["Hi! My locker code is 4417, please remember it.", "I am planning a hiking trip to Norway.",
                 "Which boots are good for wet trails?", "And what about a tent for two people?"]:
        print(f"user> {text}\nagent> {agent(text)}".rstrip())
    question = "What is my locker code?"
    print(f"user> {question}\nagent> {agent(question)}".rstrip())
    print(f"window: {len(agent.messages)} messages; archive: {manager.get_memory_usage_summary()}")
    print("recalled into the model input:", hook.last_enriched)


if __name__ == "__main__":
    main()

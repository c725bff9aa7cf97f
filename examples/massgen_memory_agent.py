"""A MassGen-style agent with both memories (``fullrecall.MemoryAgent``), in three steps.

1. Conversation memory: within a session the agent sees what was said (durable, summarized when long).
2. Persistent memory: a new session (a new agent object, as after a restart) still knows the user.
3. Both: the stats show what memory did, and that memory itself made no LLM call.

Run: ``python examples/massgen_memory_agent.py`` (offline with a scripted model; set
``FULLRECALL_LLM_MODEL`` or ``FULLRECALL_BEDROCK_MODEL_ID`` for a real provider).
"""

from __future__ import annotations

import asyncio

from _offline import chat_model, store_url

from fullrecall import MemoryAgent
from fullrecall.stores import open_store


async def say(agent: MemoryAgent, text: str) -> str:
    print(f"user> {text}")
    chunks = [chunk async for chunk in agent.chat([{"role": "user", "content": text}])]
    answer = "".join(chunks)
    print(f"agent> {answer}")
    return answer


async def main() -> None:
    store = open_store(store_url("massgen"))
    model = chat_model()

    # Example 1: one session; the conversation so far is part of every model call.
    monday = MemoryAgent(model, store=store, user_id="user_123", agent_id="assistant", session_id="monday")
    await say(monday, "Hello! My name is Alice.")
    await say(monday, "Remember that I like Python. My locker code is 4417.")
    print(f"conversation has {len(monday.conversation.messages)} messages")

    # Example 2: a later session (a new agent, as after a restart): long-term memory persists.
    tuesday = MemoryAgent(model, store=store, user_id="user_123", agent_id="assistant", session_id="tuesday",
                          embedder=monday.embedder)
    await say(tuesday, "What programming language do I like?")
    await say(tuesday, "What is my locker code?")

    # Example 3: both memories at work; another user sees none of Alice's.
    bob = MemoryAgent(model, store=store, user_id="user_456", agent_id="assistant", embedder=monday.embedder)
    await say(bob, "What is my locker code?")
    print("stats:", tuesday.stats())
    store.close()


if __name__ == "__main__":
    asyncio.run(main())

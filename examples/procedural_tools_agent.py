"""A tool-using agent with procedural memory: it learns which tools, in which order, solve a kind of task.

For each task the agent asks procedural memory for a plan (tools that solved similar tasks), runs
the tools, scores the run (``evaluate_workflow``) and keeps the workflow when it scored well
(``store_pattern``). A ``MemoryAgent`` given the same procedural memory sees the suggested tools in
its context, and its memory tools (``MemoryTools``) let a model search memory or recall patterns itself.

Run: ``python examples/procedural_tools_agent.py`` (offline; set ``FULLRECALL_LLM_MODEL`` or
``FULLRECALL_BEDROCK_MODEL_ID`` to have a real model write the final answer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from _offline import chat_model, store_url

from fullrecall import MemoryAgent, MemoryTools, PersistentMemory, ProceduralMemory
from fullrecall.stores import open_store

PRICES = {"flight": 240.0, "hotel": 95.0, "train": 60.0}

TOOLS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "lookup_price": lambda state: {"price": PRICES[state["item"]]},
    "convert_currency": lambda state: {"price": round(state["price"] * 0.92, 2), "currency": "EUR"},
    "format_quote": lambda state: f"{state['item']}: {state['price']} {state.get('currency', 'USD')}",
}
DEFAULT_TOOLS = ["lookup_price", "format_quote"]


def run_task(task: str, item: str, procedural: ProceduralMemory) -> tuple[list[str], Any]:
    """Plan with procedural memory, run the tools, score the run and keep the workflow if it was good."""
    plan = procedural.plan_tool_sequence(task)
    tools = plan["suggested_tools"] if plan["pattern_id"] else DEFAULT_TOOLS + (
        ["convert_currency"] if "euro" in task.lower() else [])
    tools = sorted(tools, key=lambda t: list(TOOLS).index(t))  # prices before conversion before formatting
    print(f"task: {task!r}\n  plan: {tools} (confidence {plan['confidence']:.2f})")
    state: dict[str, Any] = {"item": item}
    results = []
    start = time.perf_counter()
    for name in tools:
        try:
            result = TOOLS[name](state)
        except Exception as exc:  # a failed tool lowers the run's score
            result = exc
        results.append(result)
        if isinstance(result, dict):
            state.update(result)
    elapsed_ms = (time.perf_counter() - start) * 1000
    answer = results[-1] if results and isinstance(results[-1], str) else None
    score = procedural.evaluate_workflow(tools, results, answer, elapsed_ms)
    kept = procedural.store_pattern(task, tools, score, elapsed_ms)
    print(f"  result: {answer}  score {score:.2f}  {'kept as ' + kept if kept else 'not kept'}")
    return tools, answer


async def main() -> None:
    store = open_store(store_url("procedural"))
    procedural = ProceduralMemory(store, user_id="user_123", agent_id="travel")
    run_task("Quote the flight price in euros", "flight", procedural)
    tools, _ = run_task("Quote the hotel price in euros", "hotel", procedural)  # the learned plan

    memory = PersistentMemory("user_123", "travel", store=store, embedder=procedural.book.embedder)
    agent = MemoryAgent(chat_model(), memory=memory, procedural=procedural)
    async for chunk in agent.chat("How do I quote the train price in euros?"):
        print(f"agent> {chunk}")
    print("context the model was given:\n" + agent.last_context)
    print("recall_patterns tool:", MemoryTools(memory, procedural).call("recall_patterns", {"task": "train in euros"}))
    print("stats:", agent.stats())
    store.close()


if __name__ == "__main__":
    asyncio.run(main())

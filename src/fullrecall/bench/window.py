"""Window managers on a long conversation: import time, per-turn cost, one big reduction.

``fullrecall bench window --messages 10000`` builds a conversation with tool
pairs (Converse shape), then for each manager measures (a) feeding it turn by
turn with ``apply_management`` after every turn, (b) one ``reduce_context`` on
the whole conversation held in the window, and (c) ``import fullrecall`` in a
fresh interpreter.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from . import count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=count, default=10_000, help="conversation length (default 10,000)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def conversation(n: int) -> list[dict]:
    """About ``n`` messages: questions, answers and, every third turn, a tool round."""
    out: list[dict] = []
    turn = 0
    while len(out) < n:
        out.append({"role": "user", "content": [{"text": f"Question {turn}: what about item {turn * 7} in the report?"}]})
        if turn % 3 == 0:
            tid = f"tool-{turn}"
            out.append({"role": "assistant", "content": [{"toolUse": {"toolUseId": tid, "name": "lookup", "input": {"item": turn}}}]})
            result = {"toolUseId": tid, "status": "success", "content": [{"text": f"item {turn}: " + "data " * 40}]}
            out.append({"role": "user", "content": [{"toolResult": result}]})
        out.append({"role": "assistant", "content": [{"text": f"Item {turn * 7} is discussed in section {turn % 12}, page {turn % 90}."}]})
        turn += 1
    return out[:n]


def import_time(runs: int = 5) -> float:
    """Median seconds for ``import fullrecall`` in a fresh interpreter, minus the bare start."""
    def timed(code: str) -> float:
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    return max(0.0, timed("import fullrecall") - timed("pass"))


def run(args: argparse.Namespace) -> int:
    from .. import (
        ContextWindowOverflowError,
        NullConversationManager,
        SlidingWindowConversationManager,
        SummarizingConversationManager,
    )
    from ..summarizers import ExtractiveSummarizer

    full = conversation(args.messages)
    managers = {
        "null": lambda: NullConversationManager(),
        "sliding_window(40)": lambda: SlidingWindowConversationManager(window_size=40),
        "summarizing(turns=20, trivial summarizer)": lambda: SummarizingConversationManager(
            summarizer=lambda m, p: f"{len(m)} messages", max_history_turns=20),
        "summarizing(turns=20, extractive)": lambda: SummarizingConversationManager(
            summarizer=ExtractiveSummarizer(), max_history_turns=20),
        "summarizing(tokens=8000, extractive)": lambda: SummarizingConversationManager(
            summarizer=ExtractiveSummarizer(), max_context_tokens=8000),
    }
    results: dict[str, Any] = {"messages": len(full), "import_s": round(import_time(), 3), "managers": {}}
    for name, make in managers.items():
        manager = make()
        window: list[dict] = []
        per_turn = []
        started = time.perf_counter()
        for msg in full:
            window.append(msg)
            if msg["role"] == "assistant" and "text" in msg["content"][0]:
                t0 = time.perf_counter()
                manager.apply_management(window)
                per_turn.append(time.perf_counter() - t0)
        total = time.perf_counter() - started
        big = list(full)
        t0 = time.perf_counter()
        try:
            make().reduce_context(big, RuntimeError("overflow"))
            reduce_ms = (time.perf_counter() - t0) * 1000
        except ContextWindowOverflowError:  # the null manager refuses by design
            reduce_ms = None
        per_turn.sort()
        results["managers"][name] = {
            "total_s": round(total, 3),
            "turn_ms_p50": round(per_turn[len(per_turn) // 2] * 1000, 3),
            "turn_ms_p95": round(per_turn[int(len(per_turn) * 0.95)] * 1000, 3),
            "reduce_10k_ms": None if reduce_ms is None else round(reduce_ms, 1),
            "final_window": len(window),
            "removed": manager.removed_message_count,
        }
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"import fullrecall: {results['import_s'] * 1000:.0f} ms (fresh interpreter, start-up subtracted)")
    print(f"\n{len(full):,} messages fed turn by turn, apply_management after every turn\n")
    print("| manager | total | per turn p50 | p95 | one reduce_context on all | final window | archived |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results["managers"].items():
        reduce = "refuses (re-raises)" if r["reduce_10k_ms"] is None else f"{r['reduce_10k_ms']} ms"
        print(f"| {name} | {r['total_s']} s | {r['turn_ms_p50']} ms | {r['turn_ms_p95']} ms | {reduce} | {r['final_window']} | {r['removed']:,} |")
    return 0

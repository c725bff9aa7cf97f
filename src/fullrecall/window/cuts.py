"""Where a conversation may be cut without splitting a tool call from its result.

A cut at ``c`` keeps ``messages[c:]``. It is *clean* when no tool use before
``c`` has its result at or after ``c``; it is a valid *window start* when it is
clean and ``messages[c]`` is a user turn that holds no tool result (so
user-first providers accept the window and no result is orphaned).
"""

from __future__ import annotations

from typing import Sequence

from ..messages.model import Message


def clean_cuts(messages: Sequence[Message]) -> list[bool]:
    """``out[c]`` is True when cutting before ``messages[c]`` splits no tool pair (``c`` in 0..n)."""
    n = len(messages)
    used_at: dict[str, int] = {}
    for i, msg in enumerate(messages):
        for tool_id in msg.tool_use_ids:
            used_at.setdefault(tool_id, i)
    # difference array: a pair (u, r) forbids every cut in (u, r]
    delta = [0] * (n + 2)
    for r, msg in enumerate(messages):
        for tool_id in msg.tool_result_ids:
            u = used_at.get(tool_id)
            if u is not None and u < r:
                delta[u + 1] += 1
                delta[r + 1] -= 1
    out, open_pairs = [], 0
    for c in range(n + 1):
        open_pairs += delta[c]
        out.append(open_pairs == 0)
    return out


def is_window_start(messages: Sequence[Message], c: int, clean: Sequence[bool]) -> bool:
    if c >= len(messages) or not clean[c]:
        return False
    first = messages[c]
    return first.role == "user" and not first.has_tool_result


def unanswered_tool_uses(messages: Sequence[Message]) -> set[str]:
    """Tool use ids with no result anywhere in ``messages``."""
    answered = {tid for m in messages for tid in m.tool_result_ids}
    return {tid for m in messages for tid in m.tool_use_ids if tid not in answered}

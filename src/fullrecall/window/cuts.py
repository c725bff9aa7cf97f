"""Where a conversation may be cut without splitting a tool call from its result.

A cut at ``c`` keeps ``messages[c:]``. It is *clean* when no tool use before
``c`` has its result at or after ``c``; it is a valid *window start* when it is
clean and ``messages[c]`` is a user turn that holds no tool result (so
user-first providers accept the window and no result is orphaned). A *tool-pair
start* is the fallback for windows made of tool turns: a clean cut at a tool
call whose results open the next message.

Pairs are matched by position and id together: a result answers the nearest
earlier call with its id that is still unanswered, so ids reused in one
conversation (local models often send ``"call_0"`` every time) pair correctly.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages.model import Message


def tool_pairs(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """``(use_index, result_index)`` for every answered tool call, matched by id and position."""
    open_uses: dict[str, list[int]] = {}
    pairs: list[tuple[int, int]] = []
    for i, msg in enumerate(messages):
        for tool_id in msg.tool_result_ids:
            waiting = open_uses.get(tool_id)
            if waiting:
                pairs.append((waiting.pop(), i))
        for tool_id in msg.tool_use_ids:
            open_uses.setdefault(tool_id, []).append(i)
    return pairs


def first_pending_call(messages: Sequence[Message], pairs: Sequence[tuple[int, int]]) -> int | None:
    """Index of the first tool call still waiting for its result (``pairs``: the list's :func:`tool_pairs`):
    unanswered, with only tool calls and results after it (parallel calls whose outputs arrive one by one). A
    call the conversation went on past unanswered is abandoned, not pending: it blocks nothing.
    """
    answered = {u for u, _ in pairs}
    run = len(messages)
    while run and (messages[run - 1].tool_use_ids or messages[run - 1].has_tool_result):
        run -= 1
    return next((i for i in range(run, len(messages)) if messages[i].tool_use_ids and i not in answered), None)


def clean_cuts(messages: Sequence[Message]) -> list[bool]:
    """``out[c]`` is True when cutting before ``messages[c]`` splits no tool pair (``c`` in 0..n), nor a pending call
    from the results still to come.
    """
    n = len(messages)
    delta = [0] * (n + 2)  # difference array: a pair (u, r) forbids every cut in (u, r]
    pairs = tool_pairs(messages)
    for u, r in pairs:
        if u < r:
            delta[u + 1] += 1
            delta[r + 1] -= 1
    pending = first_pending_call(messages, pairs)
    if pending is not None:  # its result is still to come: every cut after it would orphan that result
        delta[pending + 1] += 1
    out, open_pairs = [], 0
    for c in range(n + 1):
        open_pairs += delta[c]
        out.append(open_pairs == 0)
    return out


def is_window_start(messages: Sequence[Message], c: int, clean: Sequence[bool]) -> bool:
    """A clean cut before a user turn that holds no tool result."""
    if c >= len(messages) or not clean[c]:
        return False
    first = messages[c]
    return first.role == "user" and not first.has_tool_result


def is_tool_pair_start(messages: Sequence[Message], c: int, clean: Sequence[bool]) -> bool:
    """A clean cut before a tool call whose results open the next message (a user or tool turn)."""
    if c + 1 >= len(messages) or not clean[c] or not messages[c].tool_use_ids:
        return False
    return messages[c + 1].role in ("user", "tool") and messages[c + 1].has_tool_result


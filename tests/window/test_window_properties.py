"""Invariants every window manager keeps, over random conversations in every shape."""

from __future__ import annotations

import json

import pytest
from conversations import conversations
from hypothesis import given
from hypothesis import strategies as st

from fullrecall import (
    ContextWindowOverflowError,
    NullConversationManager,
    SlidingWindowConversationManager,
    SummarizingConversationManager,
)
from fullrecall.messages import parse_messages


def summarize(messages, previous):
    return f"summary of {len(messages)} messages" + (" after an earlier summary" if previous else "")


MANAGERS = {
    "null": lambda listener: NullConversationManager(on_remove=listener),
    "sliding": lambda listener: SlidingWindowConversationManager(window_size=6, max_tool_result_chars=300, on_remove=listener),
    "summarizing": lambda listener: SummarizingConversationManager(
        summarizer=summarize, preserve_recent_messages=3, max_history_turns=4, on_remove=listener),
    "summarizing_tokens": lambda listener: SummarizingConversationManager(
        summarizer=summarize, preserve_recent_messages=2, max_context_tokens=400, max_summary_tokens=40, on_remove=listener),
}


class Archive:
    """What a store would keep: the first version written under each position."""

    def __init__(self):
        self.by_position: dict[int, dict] = {}
        self.reported: list[int] = []  # positions that left the window (trimmed/summarized/fallback)
        self.summaries: list[dict] = []

    def __call__(self, event):
        for msg in event.messages:
            self.by_position.setdefault(msg.position, msg.raw)
            if event.reason != "truncated":
                self.reported.append(msg.position)
        if event.replaced_summary is not None:
            self.summaries.append(event.replaced_summary.raw)


def groups(messages):
    """Split a conversation at each user question (what arrives in one turn)."""
    shape, parsed = parse_messages(messages)
    out, current = [], []
    for raw, msg in zip(messages, parsed):
        if msg.role == "user" and not msg.has_tool_result and current:
            out.append(current)
            current = []
        current.append(raw)
    return out + [current]


def run(manager_name, messages, overflow_every, system):
    archive = Archive()
    manager = MANAGERS[manager_name](archive)
    full = ([{"role": "system", "content": "be brief"}] if system else []) + []
    window = list(full)
    for turn, group in enumerate(groups(messages)):
        full.extend(group)
        window.extend(group)
        manager.apply_management(window)
        if overflow_every and turn % overflow_every == 0:
            before = list(window)
            try:
                manager.reduce_context(window, RuntimeError("context window overflow"))
            except ContextWindowOverflowError:
                assert window == before, "a failed reduction must leave the window as it was"
            except RuntimeError:
                assert manager_name.startswith("summarizing") or window == before
    return manager, archive, full, window


def window_layout(manager, window):
    pinned = 1 if window and window[0].get("role") == "system" else 0
    summary = getattr(manager, "summary_message", None)
    start = pinned + int(summary is not None and len(window) > pinned and window[pinned] == summary)
    return pinned, start


@pytest.mark.parametrize("manager_name", list(MANAGERS))
@given(conv=conversations, overflow_every=st.sampled_from([0, 1, 3]), system=st.booleans())
def test_invariants(manager_name, conv, overflow_every, system):
    messages, shape = conv
    if system and shape != "openai":
        system = False
    manager, archive, full, window = run(manager_name, messages, overflow_every, system)
    pinned, start = window_layout(manager, window)
    originals = window[start:]
    first = pinned + manager.removed_message_count

    # every removed message reported exactly once, and the count agrees
    assert sorted(archive.reported) == list(range(pinned, first))
    assert len(set(archive.reported)) == len(archive.reported)

    # active + archive = every message ever added, in order
    rebuilt = full[:pinned] + [archive.by_position.get(p, m) for p, m in enumerate(originals, start=first)]
    restored = [archive.by_position[p] for p in range(pinned, first)]
    assert full[:pinned] + restored + rebuilt[pinned:] == full

    # order kept: the window is a suffix of the conversation (truncated results aside)
    for p, msg in enumerate(originals, start=first):
        if msg is not full[p]:
            assert archive.by_position[p] is full[p], "only a truncated message may differ, and its original is archived"

    # no tool pair split inside the window (a result answers the nearest open call with its id)
    _, parsed = parse_messages(window) if window else ("openai", [])
    open_calls: dict[str, int] = {}
    for msg in parsed:
        for tid in msg.tool_result_ids:
            assert open_calls.get(tid), "an orphaned tool result is in the window"
            open_calls[tid] -= 1
        for tid in msg.tool_use_ids:
            open_calls[tid] = open_calls.get(tid, 0) + 1
    waiting = sum(open_calls.values())
    assert waiting == 0 or waiting <= len(parsed[-1].tool_use_ids), "a tool call lost its result"

    # a trimmed window starts with a user turn that holds no tool result, or (a tool loop) a call and its results
    if manager_name == "sliding" and manager.removed_message_count:
        head = parsed[start]
        user_turn = head.role == "user" and not head.has_tool_result
        tool_pair = bool(head.tool_use_ids) and start + 1 < len(parsed) and parsed[start + 1].has_tool_result
        assert user_turn or tool_pair

    # state round trip through JSON
    clone = MANAGERS[manager_name](None)
    clone.restore_from_state(json.loads(json.dumps(manager.get_state())))
    assert clone.get_state() == manager.get_state()


@given(conv=conversations)
def test_shapes_round_trip(conv):
    from fullrecall.messages import render_messages

    messages, shape = conv
    detected, parsed = parse_messages(messages)
    assert render_messages(parsed, detected) == messages
    for msg in parsed:  # a fresh rendering (no raw dicts reused) gives the same dicts
        msg.changed = True
    assert render_messages(parsed, detected) == messages

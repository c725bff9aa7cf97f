"""Bad input to every window manager: named up front, the same from every entry point, nothing moved.

A manager reads the whole list before it acts, whether or not it would trim: a list that
``parse_messages`` refuses raises that very ``MessageFormatError`` (the message's index, the field)
from ``apply_management``, ``reduce_context`` and ``clear`` alike, leaves the list as it was and
reports nothing; a list it takes is taken by every manager. The check reads only what it has not
read before, so the list is also changed between calls (a message replaced, put in, taken out).
"""

from __future__ import annotations

import copy

import pytest
from conversations import conversations
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fullrecall import (
    ContextWindowOverflowError,
    MessageFormatError,
    NullConversationManager,
    SlidingWindowConversationManager,
    SummarizingConversationManager,
)
from fullrecall.archive.semantic_manager import SemanticSummarizingConversationManager
from fullrecall.messages import parse_messages


def summarize(messages, previous):
    return f"summary of {len(messages)} messages"


MANAGERS = {
    "null": lambda listener: NullConversationManager(on_remove=listener),
    "sliding": lambda listener: SlidingWindowConversationManager(window_size=6, on_remove=listener),
    "summarizing": lambda listener: SummarizingConversationManager(
        summarizer=summarize, preserve_recent_messages=2, max_history_turns=3, on_remove=listener),
    "summarizing_tokens": lambda listener: SummarizingConversationManager(
        summarizer=summarize, preserve_recent_messages=2, max_context_tokens=300, max_summary_tokens=40,
        on_remove=listener),
    "semantic": lambda listener: SemanticSummarizingConversationManager(
        summarizer=summarize, preserve_recent_messages=2, max_history_turns=3, on_remove=listener),
}
ACTS = {
    "apply_management": lambda manager, messages: manager.apply_management(messages),
    "reduce_context": lambda manager, messages: manager.reduce_context(messages, RuntimeError("overflow")),
    "clear": lambda manager, messages: manager.clear(messages),
}
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def refusal(messages) -> str | None:
    """What ``parse_messages`` says of the whole list (None: it takes it)."""
    try:
        parse_messages(messages)
    except MessageFormatError as exc:
        return str(exc)
    return None


def run(manager, act, messages):
    """The act's error (a MessageFormatError), None when the manager took the list."""
    try:
        ACTS[act](manager, messages)
    except MessageFormatError as exc:
        return exc
    except ContextWindowOverflowError:  # the list was taken; the window just cannot shrink (or the manager won't)
        pass
    return None


NOT_DICTS = [..., 5, None, "hello", 1.5, b"bytes", ["user"], ("user",)]
BAD_ROLES = [3, 2.5, ["user"], {"name": "user"}, b"user", True]
BAD_CONTENT = [5, 1.5, {"text": "x"}, b"bytes", ("x",), True, {1, 2}]


@st.composite
def malformed(draw, message):
    """``message`` broken one way: not a dict, its role gone or not a string, its content of a wrong type."""
    how = draw(st.sampled_from(["not a dict", "no role", "role", "content"]))
    if how == "not a dict":
        return draw(st.sampled_from(NOT_DICTS))
    if how == "no role":
        return {k: v for k, v in message.items() if k != "role"}
    if how == "role":
        return {**message, "role": draw(st.sampled_from(BAD_ROLES))}
    return {**message, "content": draw(st.sampled_from(BAD_CONTENT))}


@st.composite
def broken_conversations(draw):
    """A conversation in any shape with one entry replaced by, or one put in as, a malformed one."""
    messages, _ = draw(conversations)
    index = draw(st.integers(0, len(messages) - 1))
    bad = draw(malformed(messages[index]))
    if draw(st.booleans()):
        messages[index] = bad
    else:
        messages.insert(index, bad)
    return messages


def turn_ends(messages):
    """Where each turn of a conversation ends: after each assistant message."""
    return [i + 1 for i, m in enumerate(messages) if m.get("role") == "assistant"]


@pytest.mark.parametrize("name", sorted(MANAGERS))
@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("bad", [..., 5, None, {"content": [{"text": "x"}]}, {"role": 3, "content": [{"text": "x"}]},
                                 {"role": "user", "content": 7}], ids=repr)
def test_a_malformed_entry_is_named_even_when_there_is_nothing_to_trim(name, act, bad):
    messages = [{"role": "user", "content": [{"text": "hi"}]}, bad, {"role": "assistant", "content": [{"text": "hello"}]}]
    before = copy.deepcopy(messages)
    events = []
    manager = MANAGERS[name](events.append)
    with pytest.raises(MessageFormatError) as info:
        ACTS[act](manager, messages)
    assert str(info.value) == refusal(messages) and str(info.value).startswith("message 1: ")
    assert messages == before and events == [] and manager.removed_message_count == 0


@pytest.mark.parametrize("name", sorted(MANAGERS))
def test_a_message_replaced_by_a_bad_one_after_it_was_checked_is_named(name):
    good = [{"role": "user" if i % 2 == 0 else "assistant", "content": [{"text": f"m{i}"}]} for i in range(4)]
    manager = MANAGERS[name](lambda event: None)
    manager.apply_management(good)
    for bad in (None, {"role": "user", "content": 7}):
        good[1] = bad  # the list the manager checked, changed in the middle by its caller
        with pytest.raises(MessageFormatError, match="^message 1: "):
            manager.apply_management(good)
    good[1] = {"role": "assistant", "content": [{"text": "m1"}]}
    good.append(...)  # a bad entry at the end, after the checked ones
    with pytest.raises(MessageFormatError, match="^message 4: expected a dict, got ellipsis"):
        manager.apply_management(good)


@FUZZ
@given(messages=broken_conversations(), name=st.sampled_from(sorted(MANAGERS)), act=st.sampled_from(sorted(ACTS)))
def test_every_manager_takes_a_list_or_names_what_parse_messages_names_and_changes_nothing(messages, name, act):
    expected = refusal(messages)
    before = copy.deepcopy(messages)
    events = []
    manager = MANAGERS[name](events.append)
    error = run(manager, act, messages)
    if expected is None:
        assert error is None
        return
    assert str(error) == expected and str(error).startswith("message ")
    assert messages == before and events == [] and manager.removed_message_count == 0


@FUZZ
@given(data=st.data(), name=st.sampled_from(sorted(MANAGERS)))
def test_after_turns_a_changed_list_is_read_again(data, name):
    """Turn by turn (the check remembers what it read), then the list is changed: a message replaced by a bad
    one, or a bad one put in or added: the manager names exactly what ``parse_messages`` names, moves nothing.
    """
    messages, _ = data.draw(conversations)
    events = []
    manager = MANAGERS[name](events.append)
    window: list = []
    fed = 0
    for end in turn_ends(messages)[: data.draw(st.integers(1, 8))]:
        window.extend(messages[fed:end])  # the turn's messages join the window the manager edits in place
        fed = end
        manager.apply_management(window)
    if not window:
        return
    index = data.draw(st.integers(0, len(window)))
    bad = data.draw(malformed(window[min(index, len(window) - 1)]))
    how = data.draw(st.sampled_from(["replace", "insert"]))
    if how == "replace" and index < len(window):
        window[index] = bad
    else:
        window.insert(index, bad)
    expected = refusal(window)
    before, reported, removed = copy.deepcopy(window), len(events), manager.removed_message_count
    act = data.draw(st.sampled_from(sorted(ACTS)))
    error = run(manager, act, window)
    if expected is None:
        assert error is None
        return
    assert str(error) == expected
    assert window == before and len(events) == reported and manager.removed_message_count == removed


@pytest.mark.parametrize("name", sorted(MANAGERS))
def test_every_documented_shape_is_taken(name):
    """Strands content blocks, chat completions with tool pairs, Responses items, Claude's blocks in chat messages."""
    lists = [
        [{"role": "user", "content": [{"text": "q"}]},
         {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t", "name": "f", "input": {}}}]},
         {"role": "user", "content": [{"toolResult": {"toolUseId": "t", "status": "success", "content": [{"text": "r"}]}}]},
         {"role": "assistant", "content": [{"text": "a"}, {"image": {"format": "png", "source": {"bytes": "AA"}}}]}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"},
         {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                               "function": {"name": "f", "arguments": "{}"}}]},
         {"role": "tool", "tool_call_id": "c", "content": "r"}, {"role": "assistant", "content": "a"}],
        [{"role": "user", "content": [{"type": "input_text", "text": "q"}], "type": "message"},
         {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
         {"type": "function_call_output", "call_id": "c", "output": "r"},
         {"type": "reasoning", "summary": []}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"},
         {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}],
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": [{"type": "text", "text": "a"},
                                                                          {"type": "thinking", "thinking": "t"}]}],
    ]
    for messages in lists:
        assert refusal(messages) is None
        for act in ACTS:
            assert run(MANAGERS[name](lambda event: None), act, copy.deepcopy(messages)) is None

"""Over random tool-heavy conversations, pins and overflows, the sliding window is the Strands SDK's.

The SDK's ``SlidingWindowConversationManager`` and fullrecall's core manager
(with the SDK's notice) run the same steps on copies of the same conversation;
the windows must be equal after every step, and everything fullrecall removed
must have been reported with its position, verbatim.
"""

from __future__ import annotations

import copy

from conversations import render, turns
from hypothesis import example, given
from hypothesis import strategies as st
from strands.agent.conversation_manager import SlidingWindowConversationManager as SdkSliding
from strands.agent.conversation_manager.compression.pin_message import pin_message
from strands.types.exceptions import ContextWindowOverflowException

from fullrecall import ContextWindowOverflowError, SlidingWindowConversationManager


class Holder:
    """What the SDK's sliding window reads of an agent: its messages."""

    def __init__(self, messages):
        self.messages = messages


def outcome(step):
    try:
        step()
        return None
    except (ContextWindowOverflowException, ContextWindowOverflowError) as exc:
        return exc


def pinned(conversation, pins):
    """The conversation in Converse shape with ``pins`` pinned, a copy of it as it was, and a removal
    listener that records every reported message by position (first report wins)."""
    messages = render(conversation, "converse")
    for index in pins:
        if index < len(messages):
            pin_message(messages, index)
    archived: dict[int, dict] = {}

    def report(event):
        for msg in event.messages:
            archived.setdefault(msg.position, msg.raw)

    return messages, copy.deepcopy(messages), archived, report


@given(
    conversation=turns(max_turns=10),
    pins=st.sets(st.integers(0, 80), max_size=3),
    window_size=st.integers(0, 12),
    pin_first=st.none() | st.integers(0, 3),
    steps=st.lists(st.sampled_from(["apply", "overflow"]), min_size=1, max_size=5),
    truncate=st.booleans(),
)
def test_sliding_window_leaves_the_sdks_window(conversation, pins, window_size, pin_first, steps, truncate):
    messages, original, archived, report = pinned(conversation, pins)

    sdk = SdkSliding(window_size=window_size, should_truncate_results=truncate, pin_first=pin_first)
    ours = SlidingWindowConversationManager(window_size, truncate, pin_first=pin_first, truncation_notice="sdk",
                                            on_remove=report)
    theirs, mine = Holder(copy.deepcopy(messages)), copy.deepcopy(messages)
    for step in steps:
        error = RuntimeError("overflow") if step == "overflow" else None
        if error is None:
            sdk_exc = outcome(lambda: sdk.apply_management(theirs))
            our_exc = outcome(lambda: ours.apply_management(mine))
        else:
            sdk_exc = outcome(lambda error=error: sdk.reduce_context(theirs, error))
            our_exc = outcome(lambda error=error: ours.reduce_context(mine, error))
        assert mine == theirs.messages
        assert ours.removed_message_count == sdk.removed_message_count
        if sdk_exc is not None:
            assert our_exc is not None
        elif our_exc is not None:  # fullrecall ends a retry loop the SDK would not: nothing was removable
            assert window_size == 0 and error is not None
    for position, raw in archived.items():
        assert raw["content"] == original[position]["content"]
    kept = [m["content"] for m in mine]
    assert all(p in archived or m["content"] in kept for p, m in enumerate(original))


SUMMARY = "## Conversation Summary\n* Records were looked up."


class SummaryModel:
    """A model that answers every request with ``SUMMARY`` (what the SDK's summarizer streams from)."""

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        for event in ({"messageStart": {"role": "assistant"}}, {"contentBlockStart": {"start": {}}},
                      {"contentBlockDelta": {"delta": {"text": SUMMARY}}}, {"contentBlockStop": {}},
                      {"messageStop": {"stopReason": "end_turn"}}):
            yield event


def plain(messages):
    return [{k: v for k, v in m.items() if k != "tracking_id"} for m in messages]


@given(
    conversation=turns(max_turns=10),
    pins=st.sets(st.integers(0, 80), max_size=2),
    ratio=st.sampled_from([0.1, 0.3, 0.5, 0.8]),
    preserve=st.integers(0, 6),
    pin_first=st.none() | st.integers(0, 2),
    rounds=st.integers(1, 4),
)
# a reduction with nothing to summarize raises before pinning anything, as the SDK does
@example(conversation=[("ask", ""), ("answer", "")], pins=set(), ratio=0.1, preserve=2, pin_first=1, rounds=1)
# a message kept before the summary beside a pinned call that reused its tool id loses that pin once the
# call moves behind the summary: the SDK summarizes it at the next reduction, and so does fullrecall
@example(
    conversation=[
        ("ask", ""), ("calls", [("call_0", "search", {})]), ("results", [("call_0", "")]),
        ("calls", [("call_0", "search", {})]), ("results", [("call_0", "")]), ("answer", ""),
        ("ask", ""), ("answer", ""),
        ("ask", ""), ("calls", [("call_0", "search", {})]), ("results", [("call_0", "")]),
        ("calls", [(f"call_{i}", "search", {}) for i in range(3)]), ("results", [(f"call_{i}", "") for i in range(3)]),
        ("answer", ""),
        ("ask", ""), ("answer", ""),
        ("ask", ""),
        ("calls", [(f"call_{i}", "search", {}) for i in range(3)]), ("results", [(f"call_{i}", "") for i in range(3)]),
        ("calls", [(f"call_{i}", "search", {}) for i in range(3)]), ("results", [(f"call_{i}", "") for i in range(3)]),
        ("answer", ""),
        ("ask", ""), ("calls", [("call_0", "search", {})]), ("results", [("call_0", "")]), ("answer", ""),
        ("ask", ""), ("answer", ""),
    ],
    pins={19},
    ratio=0.5,
    preserve=0,
    pin_first=2,
    rounds=3,
)
# the same kept message before the summary when nothing after the summary may be cut (the pinned call and the
# preserved messages): the SDK summarizes that message alone, and so does fullrecall (it raised instead)
@example(
    conversation=[("ask", ""), ("calls", [("call_0", "search", {"q": ""})]), ("results", [("call_0", "")]),
                  ("calls", [("call_0", "search", {"q": ""})]), ("results", [("call_0", "")]), ("answer", "")],
    pins={3},
    ratio=0.5,
    preserve=2,
    pin_first=None,
    rounds=2,
)
def test_summarizing_summarizes_what_the_sdk_summarizes(conversation, pins, ratio, preserve, pin_first, rounds):
    from strands.agent.conversation_manager import SummarizingConversationManager as SdkSummarizing

    from fullrecall import SummarizingConversationManager

    messages, original, archived, report = pinned(conversation, pins)

    sdk = SdkSummarizing(summary_ratio=ratio, preserve_recent_messages=preserve, pin_first=pin_first)
    ours = SummarizingConversationManager(ratio, preserve, lambda m, p: SUMMARY, pin_first=pin_first,
                                          prefer_alternating_roles=False, on_remove=report)
    theirs = Holder(copy.deepcopy(messages))
    theirs.aux_model = SummaryModel()
    mine = copy.deepcopy(messages)
    for _ in range(rounds):
        before, sdk_before = ours.removed_message_count, sdk.removed_message_count
        sdk_exc = outcome(lambda: sdk.reduce_context(theirs, RuntimeError("overflow")))
        our_exc = outcome(lambda: ours.reduce_context(mine, RuntimeError("overflow")))
        tail = len(theirs.messages) - 1 - next((i for i, m in enumerate(theirs.messages) if m["content"] == [{"text": SUMMARY}]), -1)
        if sdk_exc is None and tail < preserve:
            # deliberate: the SDK's cut walked into the preserved messages; fullrecall's never does, so it
            # folds fewer messages or, when only preserved ones and an unsplittable tool pair are left, raises
            break
        if (sdk_exc is None) != (our_exc is None) or plain(theirs.messages) != mine:
            if our_exc is not None:  # deliberate: fullrecall raises where the SDK re-summarizes its summary alone
                assert sdk_exc is None and sdk.removed_message_count == sdk_before
            else:  # deliberate: fullrecall folds at least one message in where the SDK gives up or walks on
                assert ours.removed_message_count > before and len(mine) - 1 >= preserve
            break
        assert ours.removed_message_count == sdk.removed_message_count
    for position, raw in archived.items():
        assert raw["content"] == original[position]["content"]

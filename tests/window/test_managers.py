"""Edge cases of the window managers (those the Strands SDK handles, and those users hit)."""

import pytest

from fullrecall import (
    ArchiveError,
    ContextWindowOverflowError,
    InvalidInput,
    MessageFormatError,
    NullConversationManager,
    SlidingWindowConversationManager,
    SummarizingConversationManager,
)


def user(text):
    return {"role": "user", "content": [{"text": text}]}


def assistant(text):
    return {"role": "assistant", "content": [{"text": text}]}


def tool_call(tid, name="calc"):
    return {"role": "assistant", "content": [{"toolUse": {"toolUseId": tid, "name": name, "input": {}}}]}


def tool_result(tid, text="ok"):
    return {"role": "user", "content": [{"toolResult": {"toolUseId": tid, "status": "success", "content": [{"text": text}]}}]}


def chat(n):
    return [m for i in range(n) for m in (user(f"q{i}"), assistant(f"a{i}"))]


def test_null_manager_changes_nothing_and_reraises_on_overflow():
    messages = chat(30)
    manager = NullConversationManager()
    assert manager.apply_management(messages) is messages and len(messages) == 60
    with pytest.raises(ContextWindowOverflowError) as info:
        manager.reduce_context(messages, RuntimeError("too long"))
    assert isinstance(info.value.__cause__, RuntimeError)


def test_sliding_window_keeps_last_messages_starting_with_user():
    messages = chat(10)
    removed = []
    SlidingWindowConversationManager(window_size=5, on_remove=removed.append).apply_management(messages)
    assert messages == chat(10)[16:]  # 5 would start with an assistant turn: the cut moves to the next user turn
    assert [m.position for m in removed[0].messages] == list(range(16))


def test_sliding_window_never_starts_with_an_orphaned_tool_result():
    messages = [user("q"), tool_call("t1"), tool_result("t1"), tool_call("t2"), tool_result("t2"), assistant("done"), user("next"), assistant("ok")]
    manager = SlidingWindowConversationManager(window_size=4)
    manager.apply_management(messages)
    assert messages[0] == user("next") and manager.removed_message_count == 6


def test_sliding_window_raises_when_no_valid_cut_exists_and_keeps_everything():
    messages = [user("q"), tool_call("t1"), tool_result("t1"), tool_call("t2"), tool_result("t2"), assistant("done")]
    before = list(messages)
    manager = SlidingWindowConversationManager(window_size=2, should_truncate_results=False)
    with pytest.raises(ContextWindowOverflowError, match="starts a valid window"):
        manager.reduce_context(messages, RuntimeError("overflow"))
    assert messages == before and manager.removed_message_count == 0
    manager.apply_management(messages)  # after a turn: over the size, but no valid cut: nothing lost
    assert messages == before


def test_overflow_shortens_the_oldest_tool_result_then_trims_as_the_sdk_does():
    big = "HEAD" + "x" * 10_000 + "TAIL"
    messages = [user("q"), tool_call("t1"), tool_result("t1", big), assistant("a"), user("q2"), tool_call("t2"), tool_result("t2", big), assistant("b")]
    events = []
    manager = SlidingWindowConversationManager(window_size=40, max_tool_result_chars=1000, on_remove=events.append)
    manager.reduce_context(messages, RuntimeError("overflow"))
    text = messages[2]["content"][0]["toolResult"]["content"][0]["text"]
    assert text.startswith("HEAD") and text.endswith("TAIL") and "fullrecall cut 9,008 characters" in text
    assert events[0].reason == "truncated" and events[0].messages[0].raw["content"][0]["toolResult"]["content"][0]["text"] == big
    assert messages[6]["content"][0]["toolResult"]["content"][0]["text"] == big  # only the oldest first
    manager.reduce_context(messages, RuntimeError("overflow"))  # the oldest is already short: trims
    assert manager.removed_message_count == 4 and messages[0] == user("q2")
    manager.reduce_context(messages, RuntimeError("overflow"))  # now the next one is the oldest
    assert "fullrecall cut" in messages[2]["content"][0]["toolResult"]["content"][0]["text"]
    assert [e.reason for e in events] == ["truncated", "trimmed", "truncated"]
    assert [m.position for m in events[2].messages] == [6]


def test_tool_results_over_the_sdks_threshold_are_shortened_by_default():
    text = "A" * 250 + "B" * 250
    messages = [user("q"), tool_call("t1"), tool_result("t1", text), assistant("a")]
    SlidingWindowConversationManager().reduce_context(messages, RuntimeError("overflow"))
    short = messages[2]["content"][0]["toolResult"]["content"][0]["text"]
    assert short.startswith("A" * 200 + "\n[... fullrecall cut 100 characters") and short.endswith("\n" + "B" * 200)
    assert len(messages) == 4


def test_images_in_tool_results_become_placeholders():
    result = {"role": "user", "content": [{"toolResult": {"toolUseId": "t", "status": "success", "content": [{"image": {"format": "png", "source": {"bytes": "AAAA"}}}]}}]}
    messages = [user("q"), tool_call("t"), result, assistant("a")]
    SlidingWindowConversationManager().reduce_context(messages, RuntimeError("overflow"))
    assert "image removed from the window by fullrecall" in messages[2]["content"][0]["toolResult"]["content"][0]["text"]


def test_failed_archive_keeps_every_message():
    def broken(event):
        raise OSError("disk full")

    messages = chat(10)
    manager = SlidingWindowConversationManager(window_size=4, on_remove=broken)
    with pytest.raises(ArchiveError, match="disk full.*stay in the window"):
        manager.apply_management(messages)
    assert messages == chat(10) and manager.removed_message_count == 0


@pytest.mark.parametrize("make", [
    lambda removed: SlidingWindowConversationManager(window_size=2, on_remove=removed.append),
    lambda removed: SummarizingConversationManager(summarizer=lambda m, p: "s", preserve_recent_messages=2,
                                                   max_history_turns=1, on_remove=removed.append),
])
@pytest.mark.parametrize("act", ["apply_management", "reduce_context", "clear"])
def test_a_bad_message_behind_a_system_message_is_named_by_its_index_and_nothing_moves(make, act):
    good = [{"role": "system", "content": "be brief"}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(8)]
    bad = {"role": "assistant", "content": 5}
    messages = [*good[:5], bad, *good[6:]]
    removed = []
    manager = make(removed)
    with pytest.raises(MessageFormatError, match="^message 5: 'content'"):
        getattr(manager, act)(messages)
    assert messages == [*good[:5], bad, *good[6:]] and removed == [] and manager.removed_message_count == 0


def test_summarizing_parameters_are_checked_and_clamped():
    with pytest.raises(ValueError, match="either summarizer or summarization_system_prompt"):
        SummarizingConversationManager(summarizer=lambda m, p: "s", summarization_system_prompt="x")
    assert SummarizingConversationManager(summary_ratio=5).summary_ratio == 0.8
    assert SummarizingConversationManager(summary_ratio=0).summary_ratio == 0.1
    with pytest.raises(ValueError, match="summary_role"):
        SummarizingConversationManager(summary_role="robot")
    with pytest.raises(ValueError, match="fallback"):
        SummarizingConversationManager(fallback="drop")


def test_summary_replaces_oldest_and_folds_previous_summary():
    seen = []

    def summarizer(messages, previous):
        seen.append(([m.position for m in messages], previous))
        return f"S{len(seen)}"

    events = []
    messages = chat(10)
    manager = SummarizingConversationManager(summarizer=summarizer, summary_ratio=0.5, preserve_recent_messages=4, on_remove=events.append)
    manager.reduce_context(messages, RuntimeError("overflow"))
    assert messages[0] == {"role": "user", "content": [{"text": "S1"}]} and messages[1] == assistant("a5")
    assert seen[0] == (list(range(11)), None) and manager.removed_message_count == 11
    manager.reduce_context(messages, RuntimeError("overflow"))
    assert seen[1][1] == "S1" and messages[0]["content"][0]["text"] == "S2"
    assert events[1].replaced_summary.text == "S1" and events[1].replaced_summary.position is None
    assert manager.removed_message_count == sum(len(e.messages) for e in events)


def test_summarizing_never_splits_tool_pairs():
    messages = [user("q"), tool_call("t1"), tool_result("t1"), tool_call("t2"), tool_result("t2"), assistant("a")] + chat(3)
    manager = SummarizingConversationManager(summarizer=lambda m, p: "S", summary_ratio=0.2, preserve_recent_messages=2)
    manager.reduce_context(messages, RuntimeError("overflow"))
    assert manager.removed_message_count in (3, 5, 6)
    assert "toolResult" not in messages[1]["content"][0]


def test_summarizing_raises_when_everything_is_preserved():
    messages = chat(3)
    manager = SummarizingConversationManager(summarizer=lambda m, p: "S", preserve_recent_messages=10)
    with pytest.raises(ContextWindowOverflowError, match="must be preserved"):
        manager.reduce_context(messages, RuntimeError("overflow"))
    assert messages == chat(3)


def test_summarizer_failure_keeps_messages_and_raises_original_error():
    def failing(messages, previous):
        raise TimeoutError("model timed out")

    messages = chat(10)
    overflow = RuntimeError("context overflow")
    manager = SummarizingConversationManager(summarizer=failing, preserve_recent_messages=2)
    with pytest.raises(RuntimeError) as info:
        manager.reduce_context(messages, overflow)
    assert info.value is overflow and isinstance(info.value.__cause__, TimeoutError)
    assert messages == chat(10) and manager.removed_message_count == 0


def test_summarizer_failure_with_sliding_window_fallback_archives_then_drops():
    events = []
    messages = chat(10)
    manager = SummarizingConversationManager(summarizer=lambda m, p: "", preserve_recent_messages=2, fallback="sliding_window", on_remove=events.append)
    manager.reduce_context(messages, RuntimeError("overflow"))
    assert events[0].reason == "fallback" and manager.removed_message_count == len(events[0].messages) > 0
    assert messages == chat(10)[manager.removed_message_count:]


def test_system_message_is_pinned_and_summary_role_system():
    messages = [{"role": "system", "content": "rules"}] + [{"role": r, "content": f"{r}{i}"} for i in range(6) for r in ("user", "assistant")]
    manager = SummarizingConversationManager(summarizer=lambda m, p: "S", max_history_turns=2, summary_role="system", preserve_recent_messages=0)
    manager.apply_management(messages)
    assert messages[0] == {"role": "system", "content": "rules"}
    assert messages[1] == {"role": "system", "content": "S"}
    assert len(messages) == 2 + 4  # the last two turns stay, as seed 003 keeps them


def test_a_system_summary_without_a_system_prompt_is_folded_and_never_taken_for_one():
    """summary_role='system' in a chat-completions list that has no system prompt: the summary sits first, and
    the next summary folds it in (one summary in the window), every removed message reported at its own place."""
    conversation = [{"role": r, "content": f"{r} {i}"} for i in range(6) for r in ("user", "assistant")]
    events, messages = [], []
    manager = SummarizingConversationManager(summarizer=lambda m, p: f"S{len(events)}", max_history_turns=1,
                                             summary_role="system", preserve_recent_messages=2,
                                             on_remove=events.append)
    for message in conversation:
        messages.append(message)
        manager.apply_management(messages)
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    removed = [m for e in events for m in e.messages]
    assert [m.position for m in removed] == list(range(len(removed))) == list(range(len(conversation) - 2))
    assert all(m.raw is conversation[m.position] for m in removed)
    assert [e.replaced_summary.text if e.replaced_summary else None for e in events][1:] == \
        [f"S{i}" for i in range(len(events) - 1)]


def test_summary_role_system_needs_chat_completions_shape():
    manager = SummarizingConversationManager(summarizer=lambda m, p: "S", summary_role="system", preserve_recent_messages=0)
    messages = chat(4)
    with pytest.raises(InvalidInput, match="needs chat-completions"):
        manager.reduce_context(messages, RuntimeError("overflow"))
    assert messages == chat(4) and manager.removed_message_count == 0


def test_a_system_summary_goes_into_a_chat_completions_list_holding_claude_blocks():
    """MassGen keeps Claude's tool_use / tool_result blocks in chat-completions messages: after the system prompt
    the messages alone read as Anthropic ones, but the list is chat completions, where a system summary belongs."""
    messages = [{"role": "system", "content": "You are helpful."}]
    for t in range(4):
        messages += [{"role": "user", "content": f"question {t}"},
                     {"role": "assistant", "content": [{"type": "text", "text": "let me look"}, {
                         "type": "tool_use", "id": f"tu_{t}", "name": "search", "input": {"q": str(t)}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"tu_{t}", "content": "r"}]},
                     {"role": "assistant", "content": f"answer {t}"}]
    given, events = list(messages), []
    manager = SummarizingConversationManager(summarizer=lambda m, p: "S", preserve_recent_messages=2,
                                             max_history_turns=2, summary_role="system", on_remove=events.append)
    manager.apply_management(messages)
    assert messages[:2] == [given[0], {"role": "system", "content": "S"}] and messages[2:] == given[-4:]
    assert [m.position for m in events[0].messages] == list(range(1, 13))


def test_proactive_token_budget_keeps_window_under_limit():
    from fullrecall.messages import parse_messages
    from fullrecall.tokens import EstimatingTokenCounter

    counter = EstimatingTokenCounter()
    messages = [m for i in range(40) for m in (user(f"question {i} " + "word " * 30), assistant("answer " * 30))]
    manager = SummarizingConversationManager(summarizer=lambda m, p: "short summary", max_context_tokens=1500,
                                             max_summary_tokens=50, preserve_recent_messages=2, token_counter=counter)
    manager.apply_management(messages)
    assert counter.count_messages(parse_messages(messages)[1]) <= 1500 and manager.removed_message_count > 0


@pytest.mark.parametrize("preserve", [0, 1])
def test_the_token_budget_wins_over_alternating_roles(preserve):
    """Summarizing up to the budget's cut would put the summary before a message of its own role (or last): the
    cut still goes no earlier, so the window fits; alternating roles is a preference, the budget is not."""
    from fullrecall.messages import parse_messages
    from fullrecall.tokens import EstimatingTokenCounter

    counter = EstimatingTokenCounter()
    log = "log line " + " ".join(f"entry{i} value {i * 7}" for i in range(600))
    messages = [user("please read the log"), assistant("ok, paste it"), user(log), user("thanks")][: 3 + preserve]
    manager = SummarizingConversationManager(summarizer=lambda m, p: "a log", max_context_tokens=300,
                                             max_summary_tokens=100, preserve_recent_messages=preserve,
                                             token_counter=counter)
    manager.apply_management(messages)
    assert counter.count_messages(parse_messages(messages)[1]) <= 300 and manager.removed_message_count == 3


def test_long_summary_is_bounded():
    messages = chat(10)
    manager = SummarizingConversationManager(summarizer=lambda m, p: "\n".join(f"- fact {i}" for i in range(500)),
                                             max_summary_tokens=100, preserve_recent_messages=2)
    manager.reduce_context(messages, RuntimeError("overflow"))
    text = messages[0]["content"][0]["text"]
    assert manager.token_counter.count(text) <= 100 and text.endswith("[summary shortened to fit its token budget]")


def test_restored_manager_recognises_its_summary():
    messages = chat(10)
    manager = SummarizingConversationManager(summarizer=lambda m, p: f"S({p})", preserve_recent_messages=2)
    manager.reduce_context(messages, RuntimeError("overflow"))
    clone = SummarizingConversationManager(summarizer=lambda m, p: f"S({p})", preserve_recent_messages=2)
    clone.restore_from_state(manager.get_state())
    clone.reduce_context(messages, RuntimeError("overflow"))
    assert messages[0]["content"][0]["text"] == "S(S(None))"
    with pytest.raises(ValueError, match="belongs to SlidingWindowConversationManager"):
        clone.restore_from_state(SlidingWindowConversationManager().get_state())


def reused_id_turns(turns):
    """Abstract turns of a local model that numbers its tool calls from call_0 every time."""
    out = []
    for t in range(turns):
        out += [("ask", f"question {t}"), ("calls", [("call_0", "search", {"q": t})]), ("results", [("call_0", f"r{t}")]),
                ("calls", [("call_1", "read", {"q": t})]), ("results", [("call_1", f"s{t}")]), ("answer", f"answer {t}")]
    return out


@pytest.mark.parametrize("shape", ["converse", "openai", "anthropic"])
def test_reused_tool_call_ids_do_not_stall_either_manager(shape):
    from conversations import render

    from fullrecall.messages import parse_messages

    original = render(reused_id_turns(20), shape)
    assert len(original) == 120
    messages, removed = list(original), []
    SlidingWindowConversationManager(window_size=8, on_remove=removed.append).apply_management(messages)
    assert 0 < len(messages) <= 8 and messages == original[-len(messages):]
    _, parsed = parse_messages(messages)
    assert parsed[0].role == "user" and not parsed[0].has_tool_result
    assert [m.position for e in removed for m in e.messages] == list(range(120 - len(messages)))

    messages = list(original)
    manager = SummarizingConversationManager(summarizer=lambda m, p: "S", preserve_recent_messages=8)
    manager.reduce_context(messages, RuntimeError("overflow"))
    assert manager.removed_message_count > 0 and messages[1:] == original[manager.removed_message_count:]
    _, parsed = parse_messages(messages[1:])
    assert not parsed[0].has_tool_result


def test_sliding_window_fallback_of_a_failed_summary_starts_with_a_user_turn():
    def failing(messages, previous):
        raise TimeoutError("model timed out")

    events = []
    messages = chat(20)
    manager = SummarizingConversationManager(summarizer=failing, preserve_recent_messages=4, fallback="sliding_window",
                                             on_remove=events.append)
    for _ in range(3):
        manager.reduce_context(messages, RuntimeError("overflow"))
        assert messages[0]["role"] == "user" and messages == chat(20)[manager.removed_message_count:]
        assert len(messages) >= 4
    assert [m.position for e in events for m in e.messages] == list(range(manager.removed_message_count))
    assert {e.reason for e in events} == {"fallback"}


def test_pinned_messages_survive_trimming_summarizing_and_clearing():
    from strands.agent.conversation_manager.compression.pin_message import pin_message

    for manager in (SlidingWindowConversationManager(window_size=4, pin_first=1),
                    SummarizingConversationManager(summarizer=lambda m, p: "S", summary_ratio=0.5, preserve_recent_messages=2,
                                                   pin_first=1)):
        messages = chat(8)
        pin_message(messages, 5)
        manager.reduce_context(messages, RuntimeError("overflow"))
        assert messages[0]["content"] == chat(8)[0]["content"] and messages[1]["content"] == chat(8)[5]["content"]
        manager.clear(messages)
        assert [m["content"] for m in messages] == [chat(8)[0]["content"], chat(8)[5]["content"]]
        assert manager.removed_message_count == 14


@pytest.mark.parametrize("kind", ["sliding", "summarizing"])
def test_a_flagged_message_kept_by_clear_keeps_its_place_in_the_conversation(kind):
    """``clear`` keeps a message flagged pinned after unpinned ones; the summarizing manager did not hold it at the
    front, so it took the place of the first removed message after it: it was reported at that place when it left,
    and a memory showed it in place of that message's row. Each message is reported at its own place."""
    reported = []
    if kind == "sliding":
        manager = SlidingWindowConversationManager(window_size=3, on_remove=lambda e: reported.extend(e.messages))
    else:
        manager = SummarizingConversationManager(summarizer=lambda m, p: "S", preserve_recent_messages=1,
                                                 on_remove=lambda e: reported.extend(e.messages))
    messages = chat(4)
    messages[2]["metadata"] = {"custom": {"pinned": True}}
    manager.clear(messages)
    assert [m["content"] for m in messages] == [chat(4)[2]["content"]]
    messages.extend(chat(8)[4:])
    messages[0]["metadata"]["custom"]["pinned"] = False
    manager.reduce_context(messages, RuntimeError("overflow"))
    assert {m.position: m.text for m in reported}[2] == chat(4)[2]["content"][0]["text"]


@pytest.mark.parametrize("shape", ["anthropic", "openai"])
@pytest.mark.parametrize("kind", ["sliding", "summarizing"])
def test_pin_first_writes_nothing_into_messages_of_apis_that_refuse_unknown_fields(shape, kind):
    """The Anthropic and OpenAI APIs reject a message's ``metadata``: pin_first holds the pinned messages itself,
    every message stays as the caller wrote it, the window is the one the SDK's pin flag leaves; a manager restored
    from its state keeps the pin on a window reloaded as copies."""
    import copy
    import json

    def reply(i):
        return {"role": "assistant", "content": [{"type": "text", "text": f"a{i}"}] if shape == "anthropic" else f"a{i}"}

    def make():
        if kind == "sliding":
            return SlidingWindowConversationManager(window_size=4, pin_first=1)
        return SummarizingConversationManager(summarizer=lambda m, p: "S", preserve_recent_messages=2,
                                              max_history_turns=2, pin_first=1)

    system = [{"role": "system", "content": "rules"}] if shape == "openai" else []
    conversation = system + [m for i in range(8) for m in ({"role": "user", "content": f"q{i}"}, reply(i))]
    written = copy.deepcopy(conversation)
    manager, messages = make(), []
    for message in conversation:
        messages.append(message)
        manager.apply_management(messages)
    assert conversation == written  # not one key added to any message the caller gave
    head = len(system)
    assert messages[head] is conversation[head]  # the pinned opening stays
    expected = [*system, conversation[head], *(conversation[-4:] if kind == "sliding" else [
        {"role": "user", "content": "S"}, *conversation[-3:]])]
    assert messages == expected
    clone = make()
    clone.restore_from_state(json.loads(json.dumps(manager.get_state())))
    reloaded = copy.deepcopy(messages) + [{"role": "user", "content": "q8"}, reply(8)]
    clone.apply_management(reloaded)
    assert reloaded[head] == conversation[head] and "metadata" not in reloaded[head]


def test_pin_first_pins_converse_messages_with_the_sdks_flag():
    messages = chat(8)
    SlidingWindowConversationManager(window_size=4, pin_first=1).apply_management(messages)
    assert messages[0] == {**user("q0"), "metadata": {"custom": {"pinned": True}}} and len(messages) == 5


@pytest.mark.parametrize(("preserve", "calls"), [(2, 4), (0, 1)])
def test_calls_still_waiting_for_their_outputs_are_never_summarized_away_from_them(preserve, calls):
    """Parallel Responses function calls, managed after each item as ConversationMemory does: a call whose output
    has not come yet is no place to cut, so every output that arrives finds its call in the window."""
    manager = SummarizingConversationManager(summarizer=lambda m, p: "S", preserve_recent_messages=preserve,
                                             max_history_turns=1)
    messages = []
    items = [{"role": "user", "content": "earlier question"}, {"role": "assistant", "content": "earlier answer"},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather in 4 cities?"}]},
             *({"type": "function_call", "call_id": f"call_{k}", "name": "weather", "arguments": "{}"}
               for k in range(calls)),
             *({"type": "function_call_output", "call_id": f"call_{k}", "output": f"{20 + k} C"} for k in range(calls))]
    for item in items:
        messages.append(item)
        manager.apply_management(messages)
        called = [m["call_id"] for m in messages if m.get("type") == "function_call"]
        answered = [m["call_id"] for m in messages if m.get("type") == "function_call_output"]
        assert answered == called[: len(answered)]  # no output without its call
    assert manager.removed_message_count >= 1  # what came before the calls was summarized


def test_a_shortened_tool_result_keeps_its_shape_and_keys():
    """A Responses output's parts stay Responses parts (input_text; its input_image becomes the placeholder), and an
    Anthropic tool_result keeps its own keys and its string content: the API takes the shortened message back."""
    big = "row " * 300
    responses = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
                 {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                 {"type": "function_call_output", "call_id": "c", "id": "o1", "output": [
                     {"type": "input_text", "text": big}, {"type": "input_image", "image_url": "data:image/png;base64,AA"}]}]
    SlidingWindowConversationManager(window_size=10).reduce_context(responses, RuntimeError("overflow"))
    output = responses[-1]["output"]
    assert responses[-1]["id"] == "o1" and [p["type"] for p in output] == ["input_text", "input_text"]
    assert "fullrecall cut" in output[0]["text"] and output[1]["text"].startswith("[input_image removed")
    anthropic = [{"role": "user", "content": "q"},
                 {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "f", "input": {}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": big,
                                               "cache_control": {"type": "ephemeral"}}]}]
    SlidingWindowConversationManager(window_size=10).reduce_context(anthropic, RuntimeError("overflow"))
    block = anthropic[-1]["content"][0]
    assert block["cache_control"] == {"type": "ephemeral"} and "fullrecall cut" in block["content"]


def test_the_previous_summary_not_a_pinned_message_is_folded_in():
    seen, events = [], []
    manager = SummarizingConversationManager(summarizer=lambda m, p: seen.append(p) or f"S{len(seen)}",
                                             summary_ratio=0.5, preserve_recent_messages=2, pin_first=2,
                                             on_remove=events.append)
    messages = chat(10)
    for _ in range(3):
        manager.reduce_context(messages, RuntimeError("overflow"))
    assert seen == [None, "S1", "S2"] and [m["content"] for m in messages[:2]] == [m["content"] for m in chat(10)[:2]]
    assert [e.replaced_summary.text if e.replaced_summary else None for e in events] == [None, "S1", "S2"]
    archived = [m.position for e in events for m in e.messages]
    assert archived == list(range(2, 2 + len(archived))) and manager.removed_message_count == len(archived)


def test_a_kept_message_that_loses_its_pin_is_summarized_at_its_own_position():
    from strands.agent.conversation_manager.compression.pin_message import pin_message

    # call_0 is reused: the result at 4 sits beside the pinned call at 5 and is kept before the summary;
    # the next reduction finds it beside the summary, no longer pinned, and summarizes it, as the SDK does
    messages = [user("q0"), assistant("a0"), user("q1"), tool_call("call_0"), tool_result("call_0"),
                tool_call("call_0"), tool_result("call_0"), assistant("a1"), *chat(4)]
    pin_message(messages, 5)
    events = []
    manager = SummarizingConversationManager(summarizer=lambda m, p: "S", summary_ratio=0.34, preserve_recent_messages=2,
                                             prefer_alternating_roles=False, on_remove=events.append)
    manager.reduce_context(messages, RuntimeError("overflow"))
    assert [m.position for m in events[0].messages] == [0, 1, 2, 3]
    assert messages[0] == tool_result("call_0") and messages[1] == user("S")
    manager.reduce_context(messages, RuntimeError("overflow"))
    assert [m.position for m in events[1].messages] == [4] and events[1].messages[0].has_tool_result
    assert messages[2] == user("S") and messages[0]["content"][0]["toolUse"] and messages[1] == tool_result("call_0")
    assert manager.removed_message_count == 5 and len(messages) == 16 - 5 + 1


def test_window_size_zero_removes_every_unpinned_message():
    messages, events = chat(5), []
    manager = SlidingWindowConversationManager(window_size=0, on_remove=events.append)
    manager.apply_management(messages)
    assert messages == [] and [m.position for m in events[0].messages] == list(range(10))
    with pytest.raises(ValueError, match="non-negative"):
        SlidingWindowConversationManager(window_size=-1)


def test_recall_reaches_the_newest_archived_message_when_a_message_is_pinned():
    from fullrecall.archive import SemanticSummarizingConversationManager

    messages = chat(10)
    messages[9] = assistant("The vault code is 4417.")
    manager = SemanticSummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2,
                                                     summarizer=lambda m, p: "S", pin_first=1, prefer_alternating_roles=False)
    manager.reduce_context(messages, RuntimeError("overflow"))
    assert messages[0]["content"] == user("q0")["content"] and messages[2] == user("q5")
    assert manager.removed_message_count == 9
    assert manager.first_active_position == 10
    assert 9 in [m.position for m in manager.recall("vault code", radius=0).messages]


class _Unjsonable:
    pass


@pytest.mark.parametrize("value", [float("nan"), float("inf"), _Unjsonable(), {1, 2}],
                         ids=["nan", "infinity", "object", "set"])
@pytest.mark.parametrize("kind", ["sliding", "summarizing", "semantic"])
@pytest.mark.parametrize("act", ["apply_management", "reduce_context", "clear"])
def test_a_tool_input_json_cannot_hold_is_named_and_the_window_stays_as_it_was(kind, act, value):
    """A Strands toolUse whose input holds NaN or a Python object: the archive could not keep it, so the
    manager names the message (its index in the list) and the field, calls no summarizer and changes nothing."""
    from fullrecall.archive import Archive, SemanticSummarizingConversationManager

    calls = []

    def summarizer(messages, previous):
        calls.append(messages)
        return "summary"

    bad = {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "calc",
                                                         "input": {"when": value}}}]}
    messages = [user("q0"), assistant("a0"), user("q1"), bad, tool_result("t1"), assistant("a1"), *chat(6)]
    snapshot = list(messages)
    archive = Archive()
    manager = {
        "sliding": lambda: SlidingWindowConversationManager(window_size=2, on_remove=archive),
        "summarizing": lambda: SummarizingConversationManager(summarizer=summarizer, preserve_recent_messages=2,
                                                              max_history_turns=1, on_remove=archive.write),
        "semantic": lambda: SemanticSummarizingConversationManager(summarizer=summarizer, preserve_recent_messages=2,
                                                                   max_history_turns=1),
    }[kind]()
    store = manager.archive if kind == "semantic" else archive
    args = (messages, RuntimeError("overflow")) if act == "reduce_context" else (messages,)
    with pytest.raises(ArchiveError, match=r"^cannot archive message 3: 'content\[0\]\.toolUse\.input\.when' is "
                                           r".*stays in the window"):
        getattr(manager, act)(*args)
    assert len(messages) == len(snapshot) and all(a is b for a, b in zip(messages, snapshot, strict=True))
    assert bad["content"][0]["toolUse"]["input"]["when"] is value
    assert manager.removed_message_count == 0 and getattr(manager, "summary_message", None) is None
    assert calls == [] and store.store.count(store.scope) == 0


def test_an_unstorable_message_is_named_by_its_index_in_the_list_not_in_the_batch():
    from fullrecall.archive import Archive

    messages = [{"role": "system", "content": "be brief"}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(16)]
    messages[8]["extra"] = float("nan")
    manager = SlidingWindowConversationManager(window_size=2, on_remove=Archive())
    with pytest.raises(ArchiveError, match="^cannot archive message 8: 'extra' is nan"):
        manager.apply_management(messages)
    assert len(messages) == 17 and manager.removed_message_count == 0


def test_a_listener_that_keeps_python_objects_gets_them():
    removed = []
    bad = {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "calc",
                                                         "input": {"when": float("nan")}}}]}
    messages = [user("q0"), bad, tool_result("t1"), assistant("a0"), *chat(4)]
    SlidingWindowConversationManager(window_size=2, on_remove=removed.append).apply_management(messages)
    assert len(messages) == 2 and sum(len(e.messages) for e in removed) == 10


def test_leave_reports_the_oldest_messages_before_they_leave_the_window():
    heard = []
    manager = SlidingWindowConversationManager(window_size=100, on_remove=heard.append)
    messages = chat(3)
    manager.leave(messages, 0, 2, positions=[0, 1], originals=[user("q0, verbatim"), messages[1]])
    assert [m["content"][0]["text"] for m in messages] == ["q1", "a1", "q2", "a2"]
    assert manager.removed_message_count == 2
    assert [(m.position, m.text) for m in heard[0].messages] == [(0, "q0, verbatim"), (1, "a0")]

    def refuse(event):
        raise OSError("disk full")

    manager.add_removal_listener(refuse)
    with pytest.raises(ArchiveError, match="disk full"):
        manager.leave(messages, 0, 1, positions=[2])
    assert len(messages) == 4 and manager.removed_message_count == 2  # a failed report: nothing left
    with pytest.raises(InvalidInput, match="leave: 5 message"):
        manager.leave(messages, 0, 5, positions=range(5))


@pytest.mark.parametrize("kind", ["sliding", "summarizing"])
def test_a_later_message_equal_to_a_pinned_one_is_not_pinned(kind):
    """pin_first outside Converse holds the pinned message itself, by identity: a later "ok" equal to a pinned
    "ok" was held pinned too, and the window never shrank past it. A window restored as copies binds the pin to
    the first equal message at its front; one the caller took out leaves no copy in the manager's state."""
    import json

    def make():
        if kind == "sliding":
            return SlidingWindowConversationManager(window_size=4, pin_first=1)
        return SummarizingConversationManager(summarizer=lambda m, p: "S", preserve_recent_messages=2,
                                              max_history_turns=2, pin_first=1)

    manager, messages = make(), []
    for i in range(8):
        messages += [{"role": "user", "content": "ok"}, {"role": "assistant", "content": f"a{i}"}]
        manager.apply_management(messages)
    assert messages[0]["content"] == "ok" and len(messages) <= 5 and len(manager.get_state()["held_pins"]) == 1
    assert sum(m["content"] == "ok" for m in messages) <= 3  # the pinned opening, and the questions kept
    manager, messages = make(), [{"role": "user", "content": "my passport is ZX9981"}]
    for i in range(8):
        messages += [{"role": "assistant", "content": f"a{i}"}, {"role": "user", "content": f"q{i}"}]
        manager.apply_management(messages)
    clone = make()
    clone.restore_from_state(json.loads(json.dumps(manager.get_state())))
    copies = json.loads(json.dumps(messages))
    clone.apply_management(copies)
    assert len(clone.get_state()["held_pins"]) == 1  # restored as copies: still pinned
    copies.pop(0)  # the caller takes the pinned opening out
    clone.apply_management(copies)
    assert "ZX9981" not in json.dumps(clone.get_state())


@pytest.mark.parametrize("kind", ["sliding", "summarizing"])
def test_pinned_front_messages_a_restore_left_out_are_reported_at_their_places(kind):
    """A session restored without the messages ``pin_first`` held at the window's front (it reloads from
    ``removed_message_count`` on): ``release_front`` reports them to the listeners at their own places, as
    restored, and they are no longer held at the front; with no listener nothing keeps them (None)."""
    def manager(**kw):
        return (SlidingWindowConversationManager(window_size=4, pin_first=1, **kw) if kind == "sliding" else
                SummarizingConversationManager(summarizer=lambda m, p: "S", summary_ratio=0.5,
                                               preserve_recent_messages=2, pin_first=1, **kw))

    events = []
    kept = manager(on_remove=events.append)
    messages = chat(8)
    kept.reduce_context(messages, RuntimeError("overflow"))
    assert kept.pinned_front == (0,) and messages[0]["content"] == chat(8)[0]["content"]
    before, removed = len(events), kept.removed_message_count
    assert kept.release_front([chat(8)[0]], [0]) == 1
    (event,) = events[before:]
    assert (event.reason, [(m.position, m.text) for m in event.messages]) == ("restored", [(0, "q0")])
    assert kept.pinned_front == () and kept.removed_message_count == removed

    lost = manager()
    lost.reduce_context(chat(8), RuntimeError("overflow"))
    assert lost.release_front([chat(8)[0]], [0]) is None and lost.pinned_front == ()

"""The SDK's conversation managers and fullrecall's side by side: the same scenario leaves the same window.

Each scenario runs once through ``strands``' own manager and once through
fullrecall's (same options), on real ``Agent`` objects with a scripted model,
and asserts the same messages in the window (tracking ids aside), the same
``removed_message_count`` and, for fullrecall, that every message that left the
window is in the archive, verbatim.
"""

from __future__ import annotations

import copy
import os

import pytest
from pydantic import BaseModel
from strands.agent.conversation_manager import NullConversationManager as SdkNull
from strands.agent.conversation_manager import SlidingWindowConversationManager as SdkSliding
from strands.agent.conversation_manager import SummarizingConversationManager as SdkSummarizing
from strands.agent.conversation_manager.compression.pin_message import pin_message
from strands.session.file_session_manager import FileSessionManager
from strands.types.exceptions import ContextWindowOverflowException
from strands_scripted import AGENT_PROMPT, ScriptedModel

import fullrecall.strands as fr
from fullrecall.archive import Archive
from strands import Agent, tool

SUMMARY = "## Conversation Summary\n* The user looked up several records with the lookup tool."
OVERFLOW = ContextWindowOverflowException("scripted: prompt is too long")


# -- messages -----------------------------------------------------------------------------------
def user(text):
    return {"role": "user", "content": [{"text": text}]}


def assistant(text):
    return {"role": "assistant", "content": [{"text": text}]}


def call(tid, query="x"):
    return {"role": "assistant", "content": [{"toolUse": {"toolUseId": tid, "name": "lookup", "input": {"q": query}}}]}


def result(tid, text="ok"):
    return {"role": "user", "content": [{"toolResult": {"toolUseId": tid, "status": "success", "content": [{"text": text}]}}]}


def chat(turns):
    return [m for i in range(turns) for m in (user(f"question {i}"), assistant(f"answer {i}"))]


def tool_loop(calls, ids=lambda i: f"t{i}"):
    """One user request and ``calls`` tool round trips (2 * calls + 1 messages)."""
    return [user("collect every record")] + [m for i in range(calls) for m in (call(ids(i), f"r{i}"), result(ids(i), f"record {i}"))]


def reused_ids_chat(turns):
    """Turns of a local model that numbers its tool calls from call_0 every time (6 messages a turn)."""
    out = []
    for t in range(turns):
        out += [user(f"question {t}"), call("call_0", f"a{t}"), result("call_0", f"first {t}"),
                call("call_1", f"b{t}"), result("call_1", f"second {t}"), assistant(f"answer {t}")]
    return out


def plain(messages):
    """Messages without the SDK's per-message tracking ids."""
    return [{k: v for k, v in m.items() if k != "tracking_id"} for m in messages]


@tool
def lookup(q: str) -> str:
    """Look a record up."""
    return f"record for {q}"


# -- running both -----------------------------------------------------------------------------
class Pair:
    """One agent per manager over copies of the same messages; ``archive`` is fullrecall's."""

    def __init__(self, sdk_manager, ours, messages=(), *, model=None, **agent_options):
        self.original = copy.deepcopy(list(messages))
        self.archive = Archive()
        ours.add_removal_listener(self.archive) if hasattr(ours, "add_removal_listener") else None
        self.models = [model() if model else ScriptedModel() for _ in range(2)]
        self.sdk, self.ours = (
            Agent(model=m, messages=copy.deepcopy(self.original), conversation_manager=cm, system_prompt=AGENT_PROMPT,
                  callback_handler=None, **agent_options)
            for m, cm in zip(self.models, (sdk_manager, ours)))

    def both(self, action):
        """``action(manager, agent)`` on each side; an exception is part of the outcome."""
        outcomes = []
        for agent in (self.sdk, self.ours):
            try:
                action(agent.conversation_manager, agent)
                outcomes.append(None)
            except Exception as exc:  # noqa: BLE001 - compared below
                outcomes.append(exc)
        for sdk_exc, our_exc in [outcomes]:
            assert (sdk_exc is None) == (our_exc is None), outcomes
            if sdk_exc is not None:
                assert isinstance(our_exc, ContextWindowOverflowException), outcomes
        return outcomes

    def assert_same(self):
        assert plain(self.ours.messages) == plain(self.sdk.messages)
        assert self.ours.conversation_manager.removed_message_count == self.sdk.conversation_manager.removed_message_count

    def assert_archived(self):
        """Every original message is in the window or, verbatim, in the archive (shortened ones: both)."""
        stored = {m.position: m.data for m in self.archive.get(0, len(self.original))}
        window = [m["content"] for m in self.ours.messages]
        for position, message in enumerate(self.original):
            if position in stored:
                assert stored[position]["content"] == message["content"]
            else:
                assert message["content"] in window, f"message {position} is neither in the window nor archived"


def apply(manager, agent):
    manager.apply_management(agent)


def overflow(manager, agent):
    manager.reduce_context(agent, OVERFLOW)


# -- sliding window ------------------------------------------------------------------------------------
def test_a_tool_loop_is_trimmed_at_a_tool_pair_as_the_sdk_trims_it():
    pair = Pair(SdkSliding(window_size=10), fr.SlidingWindowConversationManager(window_size=10), tool_loop(30))
    assert len(pair.original) == 61
    pair.both(apply)
    pair.assert_same()
    assert len(pair.ours.messages) == 10 and "toolUse" in pair.ours.messages[0]["content"][0]
    pair.assert_archived()
    pair.ours.messages += [user("more"), *tool_loop(5)[1:]]
    pair.sdk.messages += [user("more"), *tool_loop(5)[1:]]
    pair.both(overflow)  # on overflow too: trimmed, not an error
    pair.assert_same()


def test_reused_tool_call_ids_do_not_stall_the_window():
    pair = Pair(SdkSliding(window_size=8), fr.SlidingWindowConversationManager(window_size=8), reused_ids_chat(20))
    assert len(pair.original) == 120
    pair.both(apply)
    pair.assert_same()
    assert len(pair.ours.messages) <= 8
    pair.assert_archived()
    pair.both(overflow)
    pair.assert_same()


@pytest.mark.parametrize("pinned", [[3], [0, 7], [5]])
def test_pinned_messages_stay_through_trimming(pinned):
    messages = chat(6) + tool_loop(4) + chat(3)
    for index in pinned:
        pin_message(messages, index)
    pair = Pair(SdkSliding(window_size=6), fr.SlidingWindowConversationManager(window_size=6), messages)
    pair.both(apply)
    pair.assert_same()
    pair.assert_archived()
    pair.ours.messages += chat(4)
    pair.sdk.messages += chat(4)
    pair.both(overflow)
    pair.assert_same()
    assert all(pair.original[i]["content"] in [m["content"] for m in pair.ours.messages] for i in pinned)


def test_pin_first_keeps_the_opening_messages():
    pair = Pair(SdkSliding(window_size=5, pin_first=2), fr.SlidingWindowConversationManager(window_size=5, pin_first=2),
                chat(8))
    pair.both(apply)
    pair.assert_same()
    assert plain(pair.ours.messages[:2]) != [] and pair.ours.messages[0]["content"] == pair.original[0]["content"]
    pair.assert_archived()


def test_window_size_zero_keeps_only_pinned_messages():
    pair = Pair(SdkSliding(window_size=0, pin_first=1), fr.SlidingWindowConversationManager(window_size=0, pin_first=1),
                chat(3))
    pair.both(apply)
    pair.assert_same()
    assert len(pair.ours.messages) == 1
    pair.assert_archived()
    pair.ours.messages += chat(2)
    pair.sdk.messages += chat(2)
    pair.both(overflow)
    pair.assert_same()
    assert pair.ours.conversation_manager.removed_message_count == 9


def big_results():
    return [user("q"), call("t1"), result("t1", "A" * 300 + "B" * 300), assistant("a"),
            user("q2"), call("t2"), result("t2", "C" * 450), assistant("b")]


def test_overflow_shortens_tool_results_like_the_sdk_with_its_notice():
    pair = Pair(SdkSliding(), fr.SlidingWindowConversationManager(truncation_notice="sdk"), big_results())
    for _ in range(3):  # shorten the oldest, then trim (it is short already), then shorten the next
        pair.both(overflow)
        pair.assert_same()
    assert pair.ours.conversation_manager.removed_message_count == 4
    pair.assert_archived()


def test_overflow_shortens_tool_results_at_the_sdks_threshold_with_fullrecalls_notice():
    pair = Pair(SdkSliding(), fr.SlidingWindowConversationManager(), big_results())
    pair.both(overflow)
    sdk_text = pair.sdk.messages[2]["content"][0]["toolResult"]["content"][0]["text"]
    our_text = pair.ours.messages[2]["content"][0]["toolResult"]["content"][0]["text"]
    assert our_text[:200] == sdk_text[:200] == "A" * 200 and our_text[-200:] == sdk_text[-200:] == "B" * 200
    assert "fullrecall cut 200 characters" in our_text and "the full result is in the archive" in our_text
    assert len(pair.ours.messages) == len(pair.sdk.messages) == 8
    assert pair.archive.get(2, 2)[0].data["content"] == pair.original[2]["content"]


def test_images_in_tool_results_get_the_sdks_placeholder():
    image = {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "status": "success", "content": [
        {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo" * 10}}}]}}]}
    pair = Pair(SdkSliding(), fr.SlidingWindowConversationManager(truncation_notice="sdk"),
                [user("q"), call("t1"), image, assistant("a")])
    pair.both(overflow)
    pair.assert_same()


def test_no_valid_cut_raises_the_sdk_error_and_keeps_every_message():
    messages = [user("q"), call("t1"), result("t1"), assistant("done")]
    pair = Pair(SdkSliding(window_size=1, should_truncate_results=False),
                fr.SlidingWindowConversationManager(window_size=1, should_truncate_results=False), messages)
    sdk_exc, our_exc = pair.both(overflow)
    assert sdk_exc is not None and our_exc is not None
    pair.assert_same()


@pytest.mark.parametrize("per_turn", [True, 2, 3])
def test_per_turn_manages_inside_one_invocation(per_turn):
    replies = [("tool", "lookup", {"q": f"r{i}"}, f"c{i}") for i in range(7)] + ["all records collected"]
    pair = Pair(SdkSliding(window_size=4, per_turn=per_turn),
                fr.SlidingWindowConversationManager(window_size=4, per_turn=per_turn),
                model=lambda: ScriptedModel(list(replies)), tools=[lookup])
    pair.sdk("collect every record")
    pair.ours("collect every record")
    seen = [[plain(c["messages"]) for c in model.agent_calls] for model in pair.models]
    assert seen[1] == seen[0] and len(seen[0]) == 8
    assert len(seen[1][-1]) < 15  # managed before model calls, not only at the end of the invocation
    pair.assert_same()
    assert pair.ours.conversation_manager.get_state()["model_call_count"] == 8


def test_a_message_the_window_cannot_read_never_fails_a_finished_turn(caplog):
    """A tool's output holding a lone surrogate (``os.fsdecode`` of a non-UTF-8 file name) cannot be archived:
    each turn still returns its answer, as with the SDK's manager; the window keeps every message, and says why.
    """
    @tool
    def list_files() -> str:
        """List the files."""
        return "report.txt\n" + os.fsdecode(b"caf\xe9.txt")

    replies = [("tool", "list_files", {}, "c1"), "Two files."] + [f"ok {i}" for i in range(3)]
    pair = Pair(SdkSliding(window_size=4), fr.SlidingWindowConversationManager(window_size=4),
                model=lambda: ScriptedModel(list(replies)), tools=[list_files])
    for question in ("list my files", "thanks", "more"):
        assert str(pair.sdk(question)) == str(pair.ours(question))  # no error: the model's answer comes back
    assert "message 2: 'content[0].toolResult.content[0].text' is not valid UTF-8" in caplog.text
    assert len(pair.ours.messages) == 8 and pair.ours.conversation_manager.removed_message_count == 0
    with pytest.raises(ContextWindowOverflowException, match="not valid UTF-8"):  # on overflow: the SDK's error
        pair.ours.conversation_manager.reduce_context(pair.ours, OVERFLOW)


def test_null_manager_reraises_and_changes_nothing():
    pair = Pair(SdkNull(), fr.NullConversationManager(), chat(30))
    pair.both(apply)
    pair.assert_same()
    sdk_exc, our_exc = pair.both(overflow)
    assert sdk_exc is OVERFLOW and our_exc is OVERFLOW
    pair.both(lambda manager, agent: manager.reduce_context(agent))  # proactive: nothing, no error
    pair.assert_same()


def test_proactive_compression_trims_before_the_model_call():
    def model():
        scripted = ScriptedModel([f"answer {i}" for i in range(8)])
        scripted.update_config(context_window_limit=15)  # the new message alone passes the threshold
        return scripted

    pair = Pair(SdkSliding(window_size=40, proactive_compression={"compression_threshold": 0.5}),
                fr.SlidingWindowConversationManager(window_size=40, proactive_compression={"compression_threshold": 0.5}),
                model=model)
    for i in range(8):
        pair.sdk(f"question {i} about the records we keep")
        pair.ours(f"question {i} about the records we keep")
    assert [plain(c["messages"]) for c in pair.models[1].agent_calls] == [plain(c["messages"]) for c in pair.models[0].agent_calls]
    pair.assert_same()
    assert pair.ours.conversation_manager.removed_message_count > 0


# -- summarizing ----------------------------------------------------------------------------------------
def summary_model():
    return ScriptedModel(summary_reply=SUMMARY)


def side_requests(pair):
    return [[(c["system_prompt"], plain(c["messages"])) for c in model.side_calls] for model in pair.models]


@pytest.mark.parametrize("messages", [tool_loop(15), chat(12), reused_ids_chat(5)], ids=["tools", "chat", "reused-ids"])
def test_summarizing_summarizes_the_same_messages_as_the_sdk(messages):
    pair = Pair(SdkSummarizing(summary_ratio=0.3, preserve_recent_messages=4),
                fr.SummarizingConversationManager(summary_ratio=0.3, preserve_recent_messages=4, checked_summary=False),
                messages, model=summary_model)
    for _ in range(3):  # the second and third summaries fold the earlier one in
        pair.both(overflow)
        pair.assert_same()
    sdk_requests, our_requests = side_requests(pair)
    assert our_requests == sdk_requests and len(our_requests) == 3
    assert pair.ours.messages[0]["content"] == [{"text": SUMMARY}] and pair.ours.messages[0]["tracking_id"]
    assert pair.ours.messages[0] is pair.ours.conversation_manager.summary_message
    pair.assert_archived()


def test_summarizing_keeps_pinned_messages_before_the_summary():
    messages = chat(10)
    pin_message(messages, 4)
    pair = Pair(SdkSummarizing(summary_ratio=0.5, preserve_recent_messages=2, pin_first=1),
                fr.SummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2, pin_first=1,
                                                  checked_summary=False),
                messages, model=summary_model)
    for _ in range(2):
        pair.both(overflow)
        pair.assert_same()
    assert [m["content"] for m in pair.ours.messages[:2]] == [pair.original[0]["content"], pair.original[4]["content"]]
    pair.assert_archived()


def test_summarizing_with_too_few_messages_raises_like_the_sdk():
    pair = Pair(SdkSummarizing(preserve_recent_messages=10), fr.SummarizingConversationManager(preserve_recent_messages=10),
                chat(4), model=summary_model)
    sdk_exc, our_exc = pair.both(overflow)
    assert sdk_exc is not None and our_exc is not None
    pair.assert_same()


class Verdict(BaseModel):
    answer: str


@pytest.mark.parametrize("with_tools", [False, True])
def test_summarization_agent_gets_the_sdks_tool_specs_and_no_structured_output(with_tools):
    helpers = [ScriptedModel(summary_reply=SUMMARY) for _ in range(2)]

    def summarizer_agent(model):
        return Agent(model=model, system_prompt="Summarize.", callback_handler=None, tools=[lookup] if with_tools else [],
                     structured_output_model=Verdict)

    pair = Pair(SdkSummarizing(summary_ratio=0.5, preserve_recent_messages=2, summarization_agent=summarizer_agent(helpers[0])),
                fr.SummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2,
                                                  summarization_agent=summarizer_agent(helpers[1])),
                tool_loop(6))
    pair.both(overflow)
    pair.assert_same()
    sdk_call, our_call = (h.side_calls[-1] for h in helpers)
    assert our_call["tool_specs"] == sdk_call["tool_specs"]
    assert [s["name"] for s in our_call["tool_specs"]] == (["lookup"] if with_tools else ["noop"])
    assert plain(our_call["messages"]) == plain(sdk_call["messages"])
    agent = pair.ours.conversation_manager.summarization_agent
    assert agent.tool_names == (["lookup"] if with_tools else []) and agent.messages == []
    assert agent._default_structured_output_model is Verdict
    pair.assert_archived()


def test_proactive_compression_summarizes_before_the_model_call():
    def model():
        scripted = ScriptedModel([f"answer {i}" for i in range(8)], summary_reply=SUMMARY)
        scripted.update_config(context_window_limit=15)
        return scripted

    options = {"summary_ratio": 0.5, "preserve_recent_messages": 2, "proactive_compression": {"compression_threshold": 0.5}}
    pair = Pair(SdkSummarizing(**options), fr.SummarizingConversationManager(**options, checked_summary=False), model=model)
    for i in range(8):
        pair.sdk(f"question {i} about the records we keep")
        pair.ours(f"question {i} about the records we keep")
    assert [plain(c["messages"]) for c in pair.models[1].agent_calls] == [plain(c["messages"]) for c in pair.models[0].agent_calls]
    pair.assert_same()
    assert pair.ours.conversation_manager.removed_message_count > 0


# -- restore, in both directions --------------------------------------------------------------------------
MANAGERS = {
    "sliding": (lambda: SdkSliding(window_size=4, per_turn=True), lambda: fr.SlidingWindowConversationManager(window_size=4, per_turn=True)),
    "summarizing": (lambda: SdkSummarizing(summary_ratio=0.5, preserve_recent_messages=2),
                    lambda: fr.SummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2,
                                                              checked_summary=False)),
}


@pytest.mark.parametrize("kind", list(MANAGERS))
@pytest.mark.parametrize("writer", ["sdk", "fullrecall"])
def test_a_session_written_by_either_manager_restores_the_same_in_both(tmp_path, kind, writer):
    make_sdk, make_ours = MANAGERS[kind]
    model = ScriptedModel([f"answer {i}" for i in range(6)], summary_reply=SUMMARY, max_prompt_chars=400)
    session = FileSessionManager(session_id="s", storage_dir=str(tmp_path))
    talker = Agent(model=model, system_prompt=AGENT_PROMPT, callback_handler=None, session_manager=session,
                   conversation_manager=make_sdk() if writer == "sdk" else make_ours())
    for i in range(6):
        talker(f"question {i}: please tell me about record {i} and what it holds")
    assert talker.conversation_manager.removed_message_count > 0
    restored = [Agent(model=ScriptedModel(), system_prompt=AGENT_PROMPT, callback_handler=None, conversation_manager=cm,
                      session_manager=FileSessionManager(session_id="s", storage_dir=str(tmp_path)))
                for cm in (make_sdk(), make_ours())]
    assert plain(restored[1].messages) == plain(restored[0].messages) == plain(talker.messages)
    counts = {a.conversation_manager.removed_message_count for a in (*restored, talker)}
    assert len(counts) == 1

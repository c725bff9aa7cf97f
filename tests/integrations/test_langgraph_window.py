"""FullrecallWindow in real compiled LangGraph / LangChain agents with a scripted chat model, on every backend."""

from __future__ import annotations

import asyncio
import warnings

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from lg_helpers import ScriptedChatModel, tool_call

from fullrecall.integrations.langgraph_window import FullrecallWindow
from fullrecall.stores import Scope, open_store

HEADER = "---Previous Context---"
SECRET = "My locker code is 3141, please keep it in mind."
FILLER = [
    "How does a hash table handle collisions?",
    "What is the time complexity of a binary heap insert?",
    "Explain how a trie stores words.",
    "When is a linked list better than an array?",
    "What is a balanced binary search tree?",
    "How does a skip list find an element?",
]
QUESTION = "What is my locker code?"


@tool
def lookup(topic: str) -> str:
    """Look a data-structures topic up in the handbook."""
    return f"Handbook entry on {topic}: see chapter 7."


def script() -> list:
    """Replies for: the secret, a tool round trip, the fillers, the question."""
    return ["Noted, I will keep it in mind.", tool_call("lookup", {"topic": "hash tables"}, "call-1"),
            "Hash tables resolve collisions by chaining or open addressing."] + [
            f"Answer {n}: it depends on the data." for n in range(len(FILLER) - 1)] + ["Your locker code is 3141."]


@pytest.fixture
def store(store_url: str):
    s = open_store(store_url)
    yield s
    s.close()


@pytest.fixture
def make_window(store, default_embedder):
    def make(**options) -> FullrecallWindow:
        options.setdefault("max_history_turns", 3)
        options.setdefault("preserve_recent_messages", 2)
        return FullrecallWindow(store, embedding_model=default_embedder, **options)

    return make


def converse(agent, config: dict, questions: list[str]) -> list:
    state = None
    for question in questions:
        state = agent.invoke({"messages": [HumanMessage(question)]}, config)
    return state["messages"]


def react_agent(model: ScriptedChatModel, window: FullrecallWindow):
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in LangGraph 1.x, and still used
        return create_react_agent(model, [lookup], pre_model_hook=window.pre_model_hook, checkpointer=InMemorySaver())


def middleware_agent(model: ScriptedChatModel, window: FullrecallWindow):
    from langchain.agents import create_agent

    return create_agent(model, [lookup], middleware=[window.middleware()], checkpointer=InMemorySaver())


def texts(messages: list) -> list[str]:
    return [m.text if hasattr(m, "text") and not callable(m.text) else str(m.content) for m in messages]


def check_full_recall(model: ScriptedChatModel, state: list, store, scope: Scope) -> None:
    """The state keeps every message, verbatim; the model saw a bounded window, the question enriched."""
    humans = [m.content for m in state if isinstance(m, HumanMessage)]
    assert humans == [SECRET, *FILLER, QUESTION]
    assert not any(HEADER in str(m.content) for m in state)
    assert any(isinstance(m, ToolMessage) and "chapter 7" in m.content for m in state)
    last = model.calls[-1]
    assert len(last) < len(state)
    assert SECRET not in [m.content for m in last]  # the secret's turn left the window...
    asked = last[-1]
    assert isinstance(asked, HumanMessage) and HEADER in asked.content and "3141" in asked.content  # ...and came back
    assert asked.content.endswith(QUESTION)
    assert store.count(scope) > 0  # the archive holds what left the window
    for call in model.calls:  # every tool call the model saw came with its result, and every result with its call
        called = {c["id"] for m in call if isinstance(m, AIMessage) for c in m.tool_calls}
        answered = {m.tool_call_id for m in call if isinstance(m, ToolMessage)}
        assert answered <= called


@pytest.mark.parametrize("build", [react_agent, middleware_agent], ids=["create_react_agent", "create_agent"])
def test_the_model_sees_the_window_and_the_state_keeps_every_message(make_window, store, build) -> None:
    model = ScriptedChatModel(replies=script())
    window = make_window()
    agent = build(model, window)
    config = {"configurable": {"thread_id": "t1", "user_id": "ann"}}
    state = converse(agent, config, [SECRET, *FILLER, QUESTION])
    check_full_recall(model, state, store, Scope(user_id="ann", agent_id="", session_id="t1"))
    assert state[-1].content == "Your locker code is 3141."

    again = FullrecallWindow(store, max_history_turns=3, preserve_recent_messages=2)  # a restarted process
    assert again.embedder.name == window.embedder.name and again.embedder is again.embedder  # loaded once
    view, _ = again.view(state, config)  # records the final answer, which no model call has seen yet
    assert view[-1].content == "Your locker code is 3141."
    before = store.count(Scope(user_id="ann", agent_id="", session_id="t1"))
    first, _ = window.view(state, config)
    assert [(m.id, m.content) for m in view] == [(m.id, m.content) for m in first]
    assert store.count(Scope(user_id="ann", agent_id="", session_id="t1")) == before  # nothing recorded twice

    other = {"configurable": {"thread_id": "t2", "user_id": "ann"}}
    converse(agent, other, [QUESTION])
    assert "3141" not in model.calls[-1][-1].content  # another thread recalls nothing of this one


@pytest.mark.parametrize("build", [react_agent, middleware_agent], ids=["create_react_agent", "create_agent"])
def test_every_model_call_of_a_turn_with_a_tool_sees_what_was_recalled_for_its_question(make_window, build) -> None:
    """The question's turn calls a tool: the model call that answers from the tool's result sees the recalled
    context too (only the first call of the turn did: the newest message was then the tool's result)."""
    replies = script()[:-1] + [tool_call("lookup", {"topic": "lockers"}, "call-2"), "Your locker code is 3141."]
    model = ScriptedChatModel(replies=replies)
    agent = build(model, make_window())
    converse(agent, {"configurable": {"thread_id": "t1", "user_id": "ann"}}, [SECRET, *FILLER, QUESTION])
    first, second = model.calls[-2:]
    assert isinstance(second[-1], ToolMessage) and "lockers" in second[-1].content
    for call in (first, second):
        asked = [m for m in call if isinstance(m, HumanMessage)][-1]
        assert HEADER in asked.content and "3141" in asked.content and asked.content.endswith(QUESTION)


@pytest.mark.parametrize("build", [react_agent, middleware_agent], ids=["create_react_agent", "create_agent"])
def test_trim_state_makes_the_state_the_window(make_window, store, build) -> None:
    model = ScriptedChatModel(replies=script())
    agent = build(model, make_window(trim_state=True))
    config = {"configurable": {"thread_id": "trim", "user_id": "bob"}}
    sizes = []
    for question in [SECRET, *FILLER]:
        state = agent.invoke({"messages": [HumanMessage(question)]}, config)["messages"]
        sizes.append(len(state))
        assert not any(HEADER in str(m.content) for m in state)
        assert len({m.id for m in state}) == len(state)
    assert max(sizes) <= 12 and sizes[-1] < 2 * (len(FILLER) + 1)  # bounded, while the conversation grew
    assert SECRET not in [m.content for m in state]
    state = agent.invoke({"messages": [HumanMessage(QUESTION)]}, config)["messages"]
    asked = model.calls[-1][-1]
    assert HEADER in asked.content and "3141" in asked.content
    assert state[-1].content == "Your locker code is 3141." and QUESTION in [m.content for m in state]


def test_async_agent_with_middleware(make_window, store) -> None:
    from langchain.agents import create_agent

    model = ScriptedChatModel(replies=script())
    agent = create_agent(model, [lookup], middleware=[make_window().middleware()], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "async", "user_id": "cy"}}

    async def run() -> list:
        state = None
        for question in [SECRET, *FILLER, QUESTION]:
            state = await agent.ainvoke({"messages": [HumanMessage(question)]}, config)
        return state["messages"]

    state = asyncio.run(run())
    check_full_recall(model, state, store, Scope(user_id="cy", agent_id="", session_id="async"))


def test_view_records_each_message_once_and_reuses_unchanged_objects(make_window, store) -> None:
    window = make_window(max_history_turns=50)
    config = {"configurable": {"thread_id": "once"}}
    messages = [HumanMessage("hello", id="h1"), AIMessage("hi there", id="a1"), HumanMessage("bye", id="h2")]
    first, model_input = window.view(messages, config)
    assert all(a is b for a, b in zip(first, messages)) and len(first) == 3
    assert model_input[:2] == messages[:2]
    again, _ = window.view(messages, config)  # a retried model call: nothing is added twice
    assert [m.id for m in again] == ["h1", "a1", "h2"]
    more, _ = window.view([*messages, AIMessage("ciao", id="a2")], config)
    assert [m.id for m in more] == ["h1", "a1", "h2", "a2"]
    assert window.scope(config) == Scope(user_id="", agent_id="", session_id="once")
    # ids that are falsy are ids: user 0's thread 0 was the default owner's "default" thread, another user's memory
    assert window.scope({"configurable": {"user_id": 0, "thread_id": 0}}) == Scope(user_id="0", session_id="0")
    assert window.scope({"configurable": {"user_id": "", "thread_id": ""}}) == Scope(session_id="default")
    assert window.scope({"configurable": {"user_id": None}}) == Scope(session_id="default")

    bare = [HumanMessage("no id"), AIMessage("none here either"), HumanMessage("no id")]  # as a caller may pass
    config = {"configurable": {"thread_id": "bare"}}
    window.view(bare, config)
    seen, _ = window.view([*bare, AIMessage("and a reply")], config)
    assert [m.content for m in seen] == ["no id", "none here either", "no id", "and a reply"]


def test_a_window_of_only_a_summary_never_takes_back_what_it_summarized(store) -> None:
    from fullrecall import SummarizingConversationManager
    from fullrecall.errors import ContextWindowOverflowError

    window = FullrecallWindow(store, recall=False, manager=lambda scope: SummarizingConversationManager(
        summary_ratio=0.8, preserve_recent_messages=0, summarizer=lambda messages, previous: "Earlier talk."))
    config = {"configurable": {"thread_id": "summed"}}
    messages = [HumanMessage("q1", id="h1"), AIMessage("a1", id="a1"), HumanMessage("q2", id="h2"),
                AIMessage("a2", id="a2")]
    window.reduce(messages, config, RuntimeError("overflow"))
    shrunk, _ = window.reduce(messages, config, RuntimeError("overflow"))  # the window is now the summary alone
    assert [m.content for m in shrunk] == ["Earlier talk."]
    with pytest.raises(ContextWindowOverflowError):  # it cannot shrink further, and does not grow back either
        window.reduce(messages, config, RuntimeError("overflow"))
    seen, _ = window.view([*messages, HumanMessage("q3", id="h3")], config)
    assert [m.content for m in seen] == ["Earlier talk.", "q3"]
    scope = window.scope(config)
    assert [m.id for m in store.range(scope, 0, 100)] == ["h1", "a1", "h2", "a2", "h3"]  # each message stored once


def test_a_summary_in_a_trimmed_state_is_never_recorded_as_a_message(store) -> None:
    """With ``trim_state`` the state holds the window, summary included: the summary is not a new user message."""
    from langchain_core.messages import RemoveMessage
    from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages

    from fullrecall import SummarizingConversationManager

    window = FullrecallWindow(store, recall=False, trim_state=True, manager=lambda scope: SummarizingConversationManager(
        summary_ratio=0.8, preserve_recent_messages=0, summarizer=lambda messages, previous: "Earlier talk."))
    config = {"configurable": {"thread_id": "trimmed"}}
    state = [HumanMessage("q1", id="h1"), AIMessage("a1", id="a1"), HumanMessage("q2", id="h2"), AIMessage("a2", id="a2")]
    window.reduce(state, config, RuntimeError("overflow"))
    shrunk, _ = window.reduce(state, config, RuntimeError("overflow"))  # the window is the summary alone
    state = add_messages(state, [RemoveMessage(id=REMOVE_ALL_MESSAGES), *shrunk, HumanMessage("q3", id="h3")])
    seen, model_input = window.view(state, config)
    assert [m.content for m in seen] == [m.content for m in model_input] == ["Earlier talk.", "q3"]
    state = add_messages(state, [RemoveMessage(id=REMOVE_ALL_MESSAGES), *seen, AIMessage("a3", id="a3")])
    window.view(state, config)  # a3 recorded (a tool call's model turn, say)
    state = add_messages(state, [RemoveMessage(id="a3"), HumanMessage("q4", id="h4")])  # the reply deleted
    seen, _ = window.view(state, config)
    assert [m.content for m in seen] == ["Earlier talk.", "q3", "q4"]
    stored = store.range(window.scope(config), 0, 100)  # every message kept (q3 again, after the deleted reply)
    assert {"h1", "a1", "h2", "a2", "h3", "a3", "h4"} <= {m.id for m in stored}
    assert "Earlier talk." not in [m.data.get("content") for m in stored]


def test_a_plain_sliding_window_without_recall(store) -> None:
    from fullrecall import SlidingWindowConversationManager

    window = FullrecallWindow(store, manager=lambda scope: SlidingWindowConversationManager(window_size=4))
    model = ScriptedChatModel(replies=[f"reply {n}" for n in range(6)])
    agent = react_agent(model, window)
    state = converse(agent, {"configurable": {"thread_id": "slide"}}, [f"question {n}" for n in range(6)])
    assert len(state) == 12
    assert [m.content for m in model.calls[-1]] == ["question 4", "reply 4", "question 5"]


def test_create_agent_shrinks_the_window_when_the_model_overflows(make_window, store) -> None:
    from langchain.agents import create_agent

    from fullrecall.errors import ContextWindowOverflowError

    model = ScriptedChatModel(replies=script(), max_prompt_chars=600)
    window = make_window(max_history_turns=None, preserve_recent_messages=2,  # no proactive trigger: only overflow
                         summarizer=lambda messages, previous: f"Earlier: {len(messages)} messages on data structures.",
                         hook_options={"max_context_length": 200})
    agent = create_agent(model, [lookup], middleware=[window.middleware()], checkpointer=InMemorySaver())
    state = converse(agent, {"configurable": {"thread_id": "overflow", "user_id": "di"}}, [SECRET, *FILLER, QUESTION])
    assert model.overflows > 0
    assert all(sum(len(str(m.content)) for m in call) <= 600 for call in model.calls)
    check_full_recall(model, state, store, Scope(user_id="di", agent_id="", session_id="overflow"))

    tiny = ScriptedChatModel(replies=["never"], max_prompt_chars=5)  # nothing fits: the loop ends with an error
    agent = create_agent(tiny, [], middleware=[make_window().middleware()], checkpointer=InMemorySaver())
    with pytest.raises(ContextWindowOverflowError):
        agent.invoke({"messages": [HumanMessage("far too long for this model")]}, {"configurable": {"thread_id": "x"}})


def test_when_nothing_else_fits_the_model_gets_the_window_without_recall(make_window) -> None:
    from langchain.agents import create_agent

    # the recalled context (its budget 200 characters, with its header about 370) never fits 400 characters
    model = ScriptedChatModel(replies=script(), max_prompt_chars=400)
    window = make_window(max_history_turns=None, preserve_recent_messages=2,
                         summarizer=lambda messages, previous: f"Earlier: {len(messages)} messages on data structures.",
                         hook_options={"max_context_length": 200})
    agent = create_agent(model, [lookup], middleware=[window.middleware()], checkpointer=InMemorySaver())
    state = converse(agent, {"configurable": {"thread_id": "plain"}}, [SECRET, *FILLER])
    assert len([m for m in state if isinstance(m, HumanMessage)]) == len(FILLER) + 1
    assert model.overflows > 0
    assert HEADER not in model.calls[-1][-1].content  # the enriched question did not fit; the plain one did
    assert model.calls[-1][-1].content == FILLER[-1]


@pytest.mark.parametrize("build", [react_agent, middleware_agent], ids=["create_react_agent", "create_agent"])
def test_an_edited_question_or_a_deleted_reply_leaves_the_models_view(store, build) -> None:
    from langchain_core.messages import RemoveMessage

    from fullrecall import SlidingWindowConversationManager

    window = FullrecallWindow(store, recall=False, manager=lambda scope: SlidingWindowConversationManager(window_size=8))
    model = ScriptedChatModel(replies=["reply 0", "reply 1", "reply to the edit", "a new reply 2"])
    agent = build(model, window)
    config = {"configurable": {"thread_id": "forked"}}
    converse(agent, config, ["question 0", "question 1"])
    # the user edits "question 1": the thread forks from the checkpoint before it (as chat UIs do)
    before = next(s for s in agent.get_state_history(config)
                  if [m.content for m in s.values.get("messages", [])] == ["question 0", "reply 0"] and not s.next)
    forked = agent.invoke({"messages": [HumanMessage("question 1, edited")]}, before.config)
    assert [m.content for m in model.calls[-1]] == ["question 0", "reply 0", "question 1, edited"]
    assert [m.content for m in forked["messages"]] == ["question 0", "reply 0", "question 1, edited", "reply to the edit"]
    # the user deletes the last reply and asks again: the deleted reply is not shown to the model
    agent.update_state(forked_config := {"configurable": {"thread_id": "forked"}},
                       {"messages": [RemoveMessage(id=forked["messages"][-1].id)]})
    agent.invoke({"messages": [HumanMessage("question 2")]}, forked_config)
    assert [m.content for m in model.calls[-1]] == ["question 0", "reply 0", "question 1, edited", "question 2"]


@pytest.mark.parametrize("build", [react_agent, middleware_agent], ids=["create_react_agent", "create_agent"])
def test_a_message_edited_in_place_reaches_the_model_as_edited(store, build) -> None:
    """A message replaced in the state under its own id (``update_state``, as a human in the loop corrects an
    earlier question) reached the model as it was first recorded; a message the window shortened itself (a long
    tool result cut) stays as the window has it."""
    from fullrecall import SlidingWindowConversationManager

    window = FullrecallWindow(store, recall=False, manager=lambda scope: SlidingWindowConversationManager(window_size=8))
    model = ScriptedChatModel(replies=["reply 0", "reply 1", "reply 2"])
    agent = build(model, window)
    config = {"configurable": {"thread_id": "edited"}}
    said = converse(agent, config, ["question 0", "question 1"])
    agent.update_state(config, {"messages": [HumanMessage("question 0, corrected", id=said[0].id)]})
    agent.invoke({"messages": [HumanMessage("question 2")]}, config)
    assert [m.content for m in model.calls[-1]] == ["question 0, corrected", "reply 0", "question 1", "reply 1",
                                                    "question 2"]


@pytest.mark.parametrize("build", [react_agent, middleware_agent], ids=["create_react_agent", "create_agent"])
def test_messages_removed_from_the_state_leave_the_window_and_its_budget(make_window, store, build) -> None:
    """Messages the graph removed (``RemoveMessage``, one by one or ``REMOVE_ALL_MESSAGES``) still counted toward
    the window's budget: it summarized them (the summary showing the removed words) while the state was small.
    Now they leave the window for the archive: not shown, not counted, and still recallable."""
    from langchain_core.messages import RemoveMessage
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    summarized: list = []
    model = ScriptedChatModel(replies=[f"Answer {n}." for n in range(len(FILLER))])
    window = make_window(summarizer=lambda messages, previous: summarized.append(messages) or "Earlier talk.")
    agent = build(model, window)
    config = {"configurable": {"thread_id": "pruned", "user_id": "bo"}}
    for question in [SECRET, *FILLER[:-1]]:  # the graph keeps only the newest exchange in its state
        said = agent.invoke({"messages": [HumanMessage(question)]}, config)["messages"]
        asked = model.calls[-1]  # what the state held: the exchange before, and the question
        assert [m.content for m in asked[:-1]] == [m.content for m in said[:-2]] and asked[-1].content.endswith(question)
        agent.update_state(config, {"messages": [RemoveMessage(id=m.id) for m in said[:-2]]})
    agent.invoke({"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), HumanMessage(QUESTION)]}, config)  # a new start
    asked = model.calls[-1]
    assert len(asked) == 1 and asked[0].content.endswith(QUESTION)
    assert summarized == []  # never over budget: the removed messages did not count
    assert HEADER in asked[0].content and "3141" in asked[0].content  # removed from the state, still recallable
    scope = Scope(user_id="bo", agent_id="", session_id="pruned")
    assert SECRET in [m.data["content"] for m in store.range(scope, 0, 100)]  # archived, never deleted


@pytest.mark.parametrize("build", [react_agent, middleware_agent], ids=["create_react_agent", "create_agent"])
def test_a_message_inserted_before_the_newest_is_recorded_and_shown_in_the_states_order(store, build) -> None:
    """A message put into the middle of the state (the graph's messages rewritten with one inserted, not
    appended) was never recorded: only messages after the newest recorded one were, so it was lost from the
    archive once it left the state or the window."""
    from langchain_core.messages import RemoveMessage
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    from fullrecall import SlidingWindowConversationManager

    window = FullrecallWindow(store, recall=False, manager=lambda scope: SlidingWindowConversationManager(window_size=20))
    model = ScriptedChatModel(replies=["reply 0", "reply 1", "reply 2"])
    agent = build(model, window)
    config = {"configurable": {"thread_id": "inserted"}}
    said = converse(agent, config, ["question 0", "question 1"])
    note = HumanMessage("A note put in afterwards: the gate code is 7788.", id="note-1")
    agent.update_state(config, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *said[:2], note, *said[2:]]})
    agent.invoke({"messages": [HumanMessage("question 2")]}, config)
    assert [m.content for m in model.calls[-1]] == ["question 0", "reply 0", note.content, "question 1", "reply 1",
                                                    "question 2"]
    scope = Scope(user_id="", agent_id="", session_id="inserted")
    assert [m.data["content"] for m in store.get(scope, ["note-1"])] == [note.content]  # in the log, never lost
    agent.update_state(config, {"messages": [RemoveMessage(id="note-1")]})
    agent.invoke({"messages": [HumanMessage("question 3")]}, config)
    assert note.content not in [m.content for m in model.calls[-1]]
    assert [m.data["content"] for m in store.get(scope, ["note-1"])] == [note.content]  # left the window: archived


def exchange(n: int, start: int = 0) -> list:
    """``n`` messages with ids m<i>, a question then its answer."""
    return [HumanMessage(f"question {i}", id=f"m{i}") if i % 2 == 0 else AIMessage(f"answer {i}", id=f"m{i}")
            for i in range(start, start + n)]


def test_a_message_back_in_the_state_after_a_forget_by_another_path_is_recorded_again(store) -> None:
    """The window remembered, for ever, which messages the thread's log held: after the conversation was forgotten
    by another path (``fullrecall forget``, the memory's ``forget``, another process), a message that came back into
    the state before the newest recorded one was taken for recorded: never stored, never shown to the model."""
    from fullrecall import SlidingWindowConversationManager

    window = FullrecallWindow(store, recall=False, manager=lambda scope: SlidingWindowConversationManager(window_size=4))
    config = {"configurable": {"thread_id": "forgotten"}}
    state = exchange(8)
    window.view(state, config)  # m0..m3 leave the window for the archive
    window.view(state, config)  # and are known to be logged
    scope = window.scope(config)
    store.forget(scope)  # as `fullrecall forget` does, in this process or another
    window.view(state[6:] + exchange(1, 8), config)  # the graph goes on with what its state kept
    seen, _ = window.view([state[0], *state[6:], *exchange(2, 8)], config)  # m0 is back (a restored checkpoint)
    assert "question 0" in [m.content for m in seen]
    assert [m.data["content"] for m in store.get(scope, ["m0"])] == ["question 0"]  # recorded again


def test_a_long_running_window_keeps_a_bounded_memory_whatever_the_threads_and_their_states(tmp_path) -> None:
    """Each thread ever seen kept a lock and a set of every message id its log was seen to hold, for ever: a graph
    serving many threads, or one long thread, grew without bound. Now the window keeps ``max_threads`` threads
    (least recently used first out) and, for each, no more ids than its state holds."""
    import gc
    import tracemalloc

    from fullrecall import SlidingWindowConversationManager

    store = open_store(f"sqlite:///{tmp_path / 'threads.db'}")  # what this process keeps: one backend tells
    window = FullrecallWindow(store, recall=False, max_threads=4,
                              manager=lambda scope: SlidingWindowConversationManager(window_size=2))

    def serve(threads: range) -> int:
        for t in threads:
            config = {"configurable": {"thread_id": f"t{t}"}}
            state = exchange(40)
            window.view(state, config)
            window.view(state, config)  # the 38 ids before the window are looked up, and kept
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    try:
        serve(range(10))  # warm: caches of the store and of LangChain fill up
        before = serve(range(10, 20))
        after = serve(range(20, 60))
    finally:
        tracemalloc.stop()
        store.close()
    assert (after - before) / 40 < 1000, f"{(after - before) / 40:.0f} bytes kept per thread served"
    with pytest.raises(ValueError, match="max_threads"):
        FullrecallWindow("sqlite:///:memory:", max_threads=0)


def test_a_langchain_id_the_store_does_not_take_as_an_identifier_is_kept_under_a_digest(store) -> None:
    """LangChain takes any string as a message id; the window stored it as the store key, so an id over 256 bytes,
    with a NUL or a lone surrogate made every model call of the thread raise InvalidInput."""
    from fullrecall import SlidingWindowConversationManager

    window = FullrecallWindow(store, recall=False, manager=lambda scope: SlidingWindowConversationManager(window_size=4))
    config = {"configurable": {"thread_id": "odd-ids"}}
    odd = ["x" * 300, "a\x00b", "lone \ud800", "ok"]
    state = [HumanMessage(f"question {i}", id=i_d) if i % 2 == 0 else AIMessage(f"answer {i}", id=i_d)
             for i, i_d in enumerate(odd)]
    seen, _ = window.view(state, config)
    assert all(a is b for a, b in zip(seen, state))  # the state's own objects, their ids as they were
    count = store.count(window.scope(config))
    seen, _ = window.view([*state, HumanMessage("question 4", id="y" * 300)], config)  # a retry stores nothing twice
    assert [m.id for m in seen][-1] == "y" * 300 and store.count(window.scope(config)) == count + 1


def test_background_indexing_is_refused_rather_than_a_thread_leaked_at_every_model_call() -> None:
    """Each model call built the thread's manager afresh; with ``background_indexing=True`` each started an
    indexing thread that nothing stopped: 20 calls, 20 threads more."""
    from fullrecall.errors import InvalidInput

    with pytest.raises(InvalidInput, match="background_indexing"):
        FullrecallWindow("sqlite:///:memory:", background_indexing=True)

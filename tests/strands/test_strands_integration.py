"""fullrecall.strands with a real strands.Agent, a scripted offline model and a FileSessionManager."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from strands.memory import MemoryManager
from strands.session.file_session_manager import FileSessionManager
from strands.types.exceptions import ContextWindowOverflowException
from strands_scripted import AGENT_PROMPT, ScriptedModel

from fullrecall.archive.recall import CONTEXT_START, ENRICHMENT_HEADER
from fullrecall.strands import (
    ArchiveMemoryStore,
    SemanticMemoryHook,
    SemanticSummarizingConversationManager,
    SlidingWindowConversationManager,
    SummarizingConversationManager,
)
from strands import Agent, tool

SUMMARY = ("## Conversation Summary\n* The user and the assistant discussed arrays, linked lists, hash tables "
           "and trees, how each structure is stored in memory.")
TOPICS = ["arrays", "linked lists", "hash tables", "binary trees", "heaps", "graphs"]
QUESTIONS = ["Our project codename is bluefalcon; please remember the codename for later."] + [
    f"Tell me about {t} and how {t} are stored in memory, with their typical operations and costs." for t in TOPICS]
ANSWERS = ["Understood: the project codename is bluefalcon. I will remember it."] + [
    f"{t.capitalize()} are a data structure; the usual operations on {t} have well known costs in memory and time."
    for t in TOPICS]
LIMIT = 1400  # characters of message content the scripted model accepts before it overflows


def texts(messages):
    return [b["text"] for m in messages for b in m["content"] if "text" in b]


def session_messages(root: Path, session_id: str) -> list[dict]:
    files = sorted((root / f"session_{session_id}").rglob("message_*.json"), key=lambda p: int(p.stem.split("_")[1]))
    return [json.loads(p.read_text())["message"] for p in files]


def semantic_agent(tmp_path: Path, model: ScriptedModel, **hook_options) -> Agent:
    manager = SemanticSummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2,
                                                     store=f"sqlite:///{tmp_path / 'archive.db'}", session_id="s1")
    return Agent(model=model, system_prompt=AGENT_PROMPT, conversation_manager=manager, callback_handler=None,
                 hooks=[SemanticMemoryHook(max_context_length=400, **hook_options)],
                 session_manager=FileSessionManager(session_id="s1", storage_dir=str(tmp_path / "sessions")))


@pytest.fixture
def talked(tmp_path):
    """A conversation long enough to overflow twice, then a question about the archived codename."""
    model = ScriptedModel(ANSWERS + ["The codename is bluefalcon."], summary_reply=SUMMARY, max_prompt_chars=LIMIT)
    agent = semantic_agent(tmp_path, model)
    for question in QUESTIONS:
        agent(question)
    agent("What was our project codename?")
    return agent, model


def test_overflow_summarizes_with_the_agents_model_called_directly(talked):
    agent, model = talked
    manager = agent.conversation_manager
    assert any(c["overflow"] for c in model.calls), "the scripted model never overflowed"
    side = model.side_calls
    assert side, "no summary was asked for"
    for call in side:  # a direct model call: summarization prompt, no tools, one request message
        assert "summarizer" in call["system_prompt"] and call["tool_specs"] is None
        assert [m["role"] for m in call["messages"]] == ["user"]
    assert agent.messages[0]["content"][0]["text"].startswith(SUMMARY)
    assert manager.summary_message is agent.messages[0]
    # every original message is either still in the window or counted as removed (the summary is not)
    assert manager.removed_message_count + len(agent.messages) - 1 == 2 * (len(QUESTIONS) + 1)
    stats = manager.get_memory_usage_stats()
    assert stats["message_count"] == manager.removed_message_count
    assert stats["summary_count"] == len(side)
    archived = manager.archive.get(0, manager.removed_message_count - 1)
    assert [m.position for m in archived] == list(range(manager.removed_message_count))
    assert texts([archived[0].data]) == [QUESTIONS[0]]  # verbatim, the user's words


def test_enrichment_reaches_the_model_but_not_the_history_or_session(talked, tmp_path):
    agent, model = talked
    last_call = model.agent_calls[-1]
    sent = texts(last_call["messages"][-1:])[0]
    assert sent.startswith(ENRICHMENT_HEADER) and CONTEXT_START in sent
    assert "bluefalcon" in sent and sent.endswith("What was our project codename?")
    assert agent.messages[-2]["content"] == [{"text": "What was our project codename?"}]
    assert not any(ENRICHMENT_HEADER in t for t in texts(agent.messages))
    assert not any(ENRICHMENT_HEADER in t for t in texts(session_messages(tmp_path / "sessions", "s1")))
    archived_texts = [t for m in agent.conversation_manager.archive.get(0, 10**6) for t in texts([m.data])]
    assert not any(ENRICHMENT_HEADER in t for t in archived_texts)


def test_restored_session_keeps_summary_count_and_archive(talked, tmp_path):
    agent, _ = talked
    before = agent.conversation_manager
    model = ScriptedModel(["It is bluefalcon."], summary_reply=SUMMARY, max_prompt_chars=LIMIT)
    again = semantic_agent(tmp_path, model)  # a new manager, store handle and session manager: as a new process
    restored = again.conversation_manager
    assert restored.removed_message_count == before.removed_message_count
    assert again.messages[0]["content"] == agent.messages[0]["content"]
    assert [m["content"] for m in again.messages] == [m["content"] for m in agent.messages]
    assert restored.get_memory_usage_stats()["message_count"] == before.removed_message_count
    assert "bluefalcon" in " ".join(m.text for m in restored.recall("project codename").messages)
    again("Remind me of the project codename?")
    sent = texts(model.agent_calls[-1]["messages"][-1:])[0]
    assert sent.startswith(ENRICHMENT_HEADER) and "bluefalcon" in sent
    assert again.messages[-2]["content"] == [{"text": "Remind me of the project codename?"}]


@tool
def lookup(key: str) -> str:
    """Look a key up in the catalogue."""
    return f"catalogue entry for {key}: shelf 7, row {len(key)}, reference XR-{len(key) * 111}"


def test_tool_pairs_stay_whole_and_results_are_archived_verbatim(tmp_path):
    replies = []
    for i, topic in enumerate(TOPICS[:5]):
        replies += [("tool", "lookup", {"key": topic}, f"use-{i}"), f"Found {topic} in the catalogue; it is on shelf 7."]
    model = ScriptedModel(replies, summary_reply=SUMMARY + " The lookup tool found catalogue entries.",
                          max_prompt_chars=LIMIT)
    manager = SemanticSummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2)
    agent = Agent(model=model, system_prompt=AGENT_PROMPT, tools=[lookup], conversation_manager=manager,
                  callback_handler=None)
    for topic in TOPICS[:5]:
        agent(f"Please look up {topic} in the catalogue and tell me where the {topic} books are kept.")
    assert manager.removed_message_count > 0
    window = agent.messages[1:]  # after the summary
    uses = [b["toolUse"]["toolUseId"] for m in window for b in m["content"] if "toolUse" in b]
    results = [b["toolResult"]["toolUseId"] for m in window for b in m["content"] if "toolResult" in b]
    assert uses == results
    assert not any("toolResult" in b for b in window[0]["content"])
    archived = manager.archive.get(0, manager.removed_message_count - 1)
    tool_results = [b["toolResult"] for m in archived for b in m.data["content"] if "toolResult" in b]
    assert tool_results and "catalogue entry for arrays: shelf 7" in tool_results[0]["content"][0]["text"]
    assert len(archived) == manager.removed_message_count


def test_sliding_window_trims_counts_and_restores(tmp_path):
    sessions = str(tmp_path / "sessions")
    manager = SlidingWindowConversationManager(window_size=4)
    agent = Agent(model=ScriptedModel(ANSWERS), system_prompt=AGENT_PROMPT, conversation_manager=manager,
                  callback_handler=None, session_manager=FileSessionManager(session_id="w", storage_dir=sessions))
    for question in QUESTIONS[:4]:
        agent(question)
    assert len(agent.messages) == 4 and manager.removed_message_count == 4
    assert texts(agent.messages[:1]) == [QUESTIONS[2]]
    again = Agent(model=ScriptedModel(), system_prompt=AGENT_PROMPT, callback_handler=None,
                  conversation_manager=SlidingWindowConversationManager(window_size=4),
                  session_manager=FileSessionManager(session_id="w", storage_dir=sessions))
    assert again.conversation_manager.removed_message_count == 4
    assert [m["content"] for m in again.messages] == [m["content"] for m in agent.messages]


def test_sliding_window_reduce_context_on_overflow(tmp_path):
    model = ScriptedModel(ANSWERS, max_prompt_chars=LIMIT)
    manager = SlidingWindowConversationManager(window_size=40)
    agent = Agent(model=model, system_prompt=AGENT_PROMPT, conversation_manager=manager, callback_handler=None)
    for question in QUESTIONS:
        agent(question)
    assert any(c["overflow"] for c in model.calls)
    assert manager.removed_message_count + len(agent.messages) == 2 * len(QUESTIONS)
    assert agent.messages[0]["role"] == "user"


def test_summarization_agent_is_used_instead_of_the_main_model():
    helper_model = ScriptedModel(summary_reply="unused")
    helper_model.replies = [SUMMARY]
    helper = Agent(model=helper_model, system_prompt=AGENT_PROMPT, callback_handler=None)
    model = ScriptedModel(ANSWERS, max_prompt_chars=LIMIT)
    manager = SummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2, summarization_agent=helper)
    agent = Agent(model=model, system_prompt=AGENT_PROMPT, conversation_manager=manager, callback_handler=None)
    for question in QUESTIONS:
        agent(question)
    assert manager.removed_message_count > 0 and not model.side_calls
    assert helper_model.agent_calls and agent.messages[0]["content"][0]["text"].startswith(SUMMARY)
    assert helper.messages == []  # its own history is left as it was


def test_unsummarizable_overflow_raises_the_sdk_error():
    model = ScriptedModel(ANSWERS, summary_reply=SUMMARY, max_prompt_chars=50)
    agent = Agent(model=model, system_prompt=AGENT_PROMPT, callback_handler=None,
                  conversation_manager=SummarizingConversationManager(preserve_recent_messages=2))
    with pytest.raises(ContextWindowOverflowException):
        agent(QUESTIONS[1])
    assert agent.conversation_manager.removed_message_count == 0


def test_state_of_another_manager_is_refused():
    state = SlidingWindowConversationManager().get_state()
    with pytest.raises(ValueError):
        SummarizingConversationManager().restore_from_session(state)


def test_archive_as_a_strands_memory_store(talked):
    agent, _ = talked
    store = ArchiveMemoryStore(agent.conversation_manager)
    entries = asyncio.run(store.search("project codename"))
    assert entries and "bluefalcon" in entries[0].content
    assert entries[0].metadata["session_id"] == "s1" and entries[0].content.startswith("[Message 0, user]")
    memory = MemoryManager(stores=[store], injection=False)
    found = asyncio.run(memory.search("project codename"))
    assert found[0].store_name == "fullrecall-archive" and "bluefalcon" in found[0].content


def test_disabled_hook_leaves_the_model_input_alone(tmp_path):
    model = ScriptedModel(ANSWERS + ["?"], summary_reply=SUMMARY, max_prompt_chars=LIMIT)
    agent = semantic_agent(tmp_path, model, enabled=False)
    for question in QUESTIONS + ["What was our project codename?"]:
        agent(question)
    assert agent.conversation_manager.removed_message_count > 0
    assert not any(ENRICHMENT_HEADER in t for c in model.agent_calls for t in texts(c["messages"]))


def test_summary_comes_from_aux_model_with_the_given_prompt():
    prompt = "You are a terse summarizer. Write bullet points about the conversation."
    aux = ScriptedModel(summary_reply=SUMMARY)
    model = ScriptedModel(ANSWERS, max_prompt_chars=LIMIT)
    manager = SummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2,
                                             summarization_system_prompt=prompt)
    agent = Agent(model=model, aux_model=aux, system_prompt=AGENT_PROMPT, conversation_manager=manager,
                  callback_handler=None)
    for question in QUESTIONS:
        agent(question)
    assert manager.removed_message_count > 0 and not model.side_calls
    assert aux.side_calls and all(c["system_prompt"] == prompt for c in aux.side_calls)
    assert agent.messages[0]["content"][0]["text"].startswith(SUMMARY)


def test_memory_manager_search_tool_answers_from_the_archive(talked):
    agent, _ = talked
    store = ArchiveMemoryStore(agent.conversation_manager.archive)  # a bare archive: everything archived
    model = ScriptedModel([("tool", "search_memory", {"query": "project codename"}, "mem-1"), "It is bluefalcon."])
    reader = Agent(model=model, system_prompt=AGENT_PROMPT, callback_handler=None,
                   memory_manager=MemoryManager(stores=[store], injection=False))
    reader("Search your memory: what was the project codename?")
    result = next(b["toolResult"] for m in reader.messages for b in m["content"] if "toolResult" in b)
    assert result["status"] == "success" and "bluefalcon" in json.dumps(result["content"])


def test_the_memory_managers_search_result_is_archived_but_never_found_as_a_new_copy(talked, store_url):
    """The SDK's search_memory answer quotes archived messages; the reader's own window archives it with the turn:
    kept word for word, it is not indexed as what it quotes, so recall finds the quoted words where they were said."""
    from fullrecall.archive import Archive
    from fullrecall.stores import Scope

    agent, _ = talked
    store = ArchiveMemoryStore(agent.conversation_manager.archive)
    archive = Archive(store_url, Scope(session_id="reader"))
    model = ScriptedModel([("tool", "search_memory", {"query": "project codename"}, "mem-1"), "It is in the notes."])
    reader = Agent(model=model, system_prompt=AGENT_PROMPT, callback_handler=None,
                   conversation_manager=SlidingWindowConversationManager(window_size=40, on_remove=archive),
                   memory_manager=MemoryManager(stores=[store], injection=False))
    reader("Search your memory: what was the project codename?")
    turn = list(reader.messages)
    assert "bluefalcon" in json.dumps(turn)  # the tool result quotes it
    reader.conversation_manager.clear(reader.messages)  # the whole turn goes to the reader's archive
    assert [m.data for m in archive.get(0, 100)] == turn  # word for word
    found = archive.recall("bluefalcon codename", top_k=1, radius=0).messages  # the best hit alone
    assert found and all("bluefalcon" not in json.dumps(m.data) for m in found)


def test_without_a_store_the_archive_follows_the_session_into_a_new_process(tmp_path):
    def agent(model):
        return Agent(model=model, system_prompt=AGENT_PROMPT, callback_handler=None,
                     conversation_manager=SemanticSummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2),
                     hooks=[SemanticMemoryHook(max_context_length=400)],
                     session_manager=FileSessionManager(session_id="u7", storage_dir=str(tmp_path / "sessions")))

    first = agent(ScriptedModel(ANSWERS, summary_reply=SUMMARY, max_prompt_chars=LIMIT))
    for question in QUESTIONS:
        first(question)
    before = first.conversation_manager
    assert before.archive.scope.session_id == "u7" and before.removed_message_count > 0

    model = ScriptedModel(["It is bluefalcon."], summary_reply=SUMMARY, max_prompt_chars=LIMIT)
    again = agent(model)  # a new manager with a new in-memory archive, as in a new process
    restored = again.conversation_manager
    assert restored.archive.scope.session_id == "u7"
    assert restored.removed_message_count == before.removed_message_count
    assert [m["content"] for m in again.messages] == [m["content"] for m in first.messages]
    last = before.removed_message_count - 1
    assert [m.data["content"] for m in restored.archive.get(0, last)] == [m.data["content"] for m in before.archive.get(0, last)]
    assert "bluefalcon" in " ".join(m.text for m in restored.recall("project codename").messages)
    again("Remind me of the project codename?")
    sent = texts(model.agent_calls[-1]["messages"][-1:])[0]
    assert sent.startswith(ENRICHMENT_HEADER) and "bluefalcon" in sent


def test_two_agents_of_one_session_sharing_a_store_keep_their_archives_apart(tmp_path):
    def agent(agent_id, codename):
        manager = SemanticSummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2,
                                                         store=f"sqlite:///{tmp_path / 'archive.db'}")
        answers = [a.replace("bluefalcon", codename) for a in ANSWERS]
        return Agent(model=ScriptedModel(answers, summary_reply=SUMMARY, max_prompt_chars=LIMIT), agent_id=agent_id,
                     system_prompt=AGENT_PROMPT, conversation_manager=manager, callback_handler=None,
                     session_manager=FileSessionManager(session_id="team", storage_dir=str(tmp_path / "sessions")))

    alice, bob = agent("alice", "bluefalcon"), agent("bob", "redowl")
    for question in QUESTIONS:
        alice(question)
        bob(question.replace("bluefalcon", "redowl"))
    for who, codename, other in ((alice, "bluefalcon", "redowl"), (bob, "redowl", "bluefalcon")):
        manager = who.conversation_manager
        assert manager.archive.scope.session_id == "team" and manager.removed_message_count > 0
        archived = manager.archive.get(0, manager.removed_message_count - 1)
        assert len(archived) == manager.removed_message_count and codename in archived[0].text  # its own, all of them
        recalled = " ".join(m.text for m in manager.recall("project codename").messages)
        assert codename in recalled and other not in recalled  # never the other agent's words


def test_agents_without_a_session_sharing_a_store_keep_their_archives_apart(tmp_path):
    """The README's agent (a store, no session manager, no session_id), one per user: nothing lost, nothing shared."""
    def agent(codename):
        manager = SemanticSummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2,
                                                         store=f"sqlite:///{tmp_path / 'archive.db'}")
        answers = [a.replace("bluefalcon", codename) for a in ANSWERS]
        return Agent(model=ScriptedModel(answers, summary_reply=SUMMARY, max_prompt_chars=LIMIT),
                     system_prompt=AGENT_PROMPT, conversation_manager=manager, callback_handler=None)

    alice, bob = agent("bluefalcon"), agent("redowl")
    for question in QUESTIONS:
        alice(question)
    for question in QUESTIONS:
        bob(question.replace("bluefalcon", "redowl"))
    for who, codename, other in ((alice, "bluefalcon", "redowl"), (bob, "redowl", "bluefalcon")):
        manager = who.conversation_manager
        archived = manager.archive.get(0, manager.removed_message_count - 1)
        assert manager.removed_message_count > 0 and len(archived) == manager.removed_message_count
        assert codename in archived[0].text and other not in " ".join(m.text for m in archived)
        assert other not in " ".join(m.text for m in manager.recall("project codename").messages)
    # an agent restored from a snapshot (a new manager, no id given) reads the archive its state names
    restored = Agent(model=ScriptedModel(), conversation_manager=SemanticSummarizingConversationManager(
        store=f"sqlite:///{tmp_path / 'archive.db'}"), callback_handler=None)
    restored.load_snapshot(bob.take_snapshot(preset="session"))
    assert restored.conversation_manager.archive.scope == bob.conversation_manager.archive.scope
    assert "redowl" in " ".join(m.text for m in restored.conversation_manager.recall("project codename").messages)


def test_without_a_session_manager_the_archive_is_in_memory_under_the_given_id():
    manager = SemanticSummarizingConversationManager(session_id="mine")
    Agent(model=ScriptedModel(), conversation_manager=manager, callback_handler=None)
    assert manager.archive.scope.session_id == "mine" and manager.archive.store.count(manager.archive.scope) == 0


def test_an_object_that_merely_has_a_model_is_not_taken_for_an_agent():
    from fullrecall.summarizers.chat_models.strands import StrandsChatModel

    class Holder:
        model = ScriptedModel()

    with pytest.raises(TypeError, match="Strands Model or Agent"):
        StrandsChatModel(Holder())
    model = ScriptedModel()
    model.model = ScriptedModel()  # a Model with a ``.model`` of its own is still that Model
    assert StrandsChatModel(model).model is model
    agent = Agent(model=model, system_prompt=AGENT_PROMPT, callback_handler=None)
    assert StrandsChatModel(agent).model is model and StrandsChatModel(agent).system_prompt == AGENT_PROMPT
    with pytest.raises(TypeError, match="must be a strands Agent"):
        SummarizingConversationManager(summarization_agent=Holder())


def test_a_tool_input_with_nan_stops_the_reduction_naming_the_field_and_keeps_the_window():
    """The model's tool input holds NaN (Python's JSON reader takes it): the archive cannot keep it, so the
    overflow is raised naming the message and field, no summary is asked for and nothing leaves the window."""
    @tool
    def scale(factor: float) -> str:
        """Scale the catalogue by a factor."""
        return f"scaled by {factor}"

    model = ScriptedModel([("tool", "scale", {"factor": float("nan")}, "t-1"), "Scaled."] + ANSWERS,
                          summary_reply=SUMMARY, max_prompt_chars=LIMIT)
    manager = SemanticSummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2)
    agent = Agent(model=model, system_prompt=AGENT_PROMPT, tools=[scale], conversation_manager=manager,
                  callback_handler=None)
    agent("Scale the catalogue, please.")
    assert agent.messages[1]["content"][0]["toolUse"]["input"]["factor"] != 0  # NaN, as the model sent it
    with pytest.raises(ContextWindowOverflowException,
                       match=r"cannot archive message 1: 'content\[0\]\.toolUse\.input\.factor' is nan"):
        for question in QUESTIONS:
            before = list(agent.messages)
            agent(question)
    assert agent.messages[: len(before)] == before and len(agent.messages) == len(before) + 1
    assert manager.removed_message_count == 0 and manager.summary_message is None and model.side_calls == []
    assert manager.archive.store.count(manager.archive.scope) == 0


def test_a_message_the_user_puts_before_the_summary_is_archived_in_a_place_of_its_own(store_url):
    """Between invocations the user puts a note first in ``agent.messages``, before the summary: the agent goes
    on, and when the note leaves the window it is archived once, beside the rest, never over an earlier message."""
    model = ScriptedModel(ANSWERS * 3, summary_reply=SUMMARY, max_prompt_chars=LIMIT)
    manager = SemanticSummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2, store=store_url,
                                                     session_id="edited")
    agent = Agent(model=model, system_prompt=AGENT_PROMPT, conversation_manager=manager, callback_handler=None)
    for question in QUESTIONS:
        agent(question)
    assert manager.removed_message_count > 0
    note = {"role": "user", "content": [{"text": "Note from the user: the invoice number is INV-4417."}]}
    agent.messages.insert(0, note)
    for question in QUESTIONS:
        agent(question)
    archived = manager.archive.get(0, manager.removed_message_count + 10)
    assert [m.position for m in archived] == list(range(manager.removed_message_count))
    assert [texts([m.data]) for m in archived].count([note["content"][0]["text"]]) == 1
    assert texts([m.data for m in archived]).count(QUESTIONS[0]) == 2  # asked twice, archived twice
    assert "INV-4417" in " ".join(m.text for m in manager.recall("invoice number").messages)


def _five_questions_with_a_pinned_opening(store_url, session_id):
    """(archive, agent): a sliding window of 4 keeping the first message pinned, after five questions."""
    from fullrecall.archive import Archive
    from fullrecall.stores import Scope

    archive = Archive(store_url, Scope(session_id=session_id))
    manager = SlidingWindowConversationManager(window_size=4, pin_first=1, on_remove=archive)
    agent = Agent(model=ScriptedModel(ANSWERS * 2), system_prompt=AGENT_PROMPT, conversation_manager=manager,
                  callback_handler=None)
    for question in QUESTIONS[:5]:
        agent(question)
    return archive, agent


def test_a_pinned_message_unpinned_later_leaves_the_sliding_window_into_its_own_place(store_url):
    """``pin_first=1`` keeps the opening request while the window slides; the user unpins it later: the window
    goes on sliding as the SDK's does, and the request is archived once, at its own place (0), beside the rest."""
    from strands.agent.conversation_manager.compression.pin_message import unpin_message

    archive, agent = _five_questions_with_a_pinned_opening(store_url, "pins")
    manager = agent.conversation_manager
    assert texts(agent.messages[:1]) == [QUESTIONS[0]]
    unpin_message(agent.messages, 0)
    for question in QUESTIONS[5:]:
        agent(question)
    assert len(agent.messages) == 4 and manager.removed_message_count == 2 * len(QUESTIONS) - 4
    archived = archive.get(0, 100)
    assert [m.position for m in archived] == list(range(manager.removed_message_count))
    assert [texts([m.data])[0] for m in archived] == [text for q, a in zip(QUESTIONS, ANSWERS, strict=True)
                                                     for text in (q, a)][: manager.removed_message_count]


def test_a_prompt_without_text_leaves_every_earlier_message_as_it_was(talked):
    """An image alone as the prompt: nothing to recall for; the previous question must not be enriched instead."""
    agent, model = talked
    model.replies = ["A chart of sales."]
    agent([{"image": {"format": "png", "source": {"bytes": b"\x89PNG\r\n\x1a\n" + bytes(64)}}}])
    sent = model.agent_calls[-1]["messages"]
    assert "image" in sent[-1]["content"][0]
    assert not any(ENRICHMENT_HEADER in t for t in texts(sent))


def test_a_pinned_opening_dropped_by_a_session_restore_is_archived_and_recalled(tmp_path, store_url):
    """With ``pin_first=1`` the opening request stays in the window, never archived; a session restore (new
    process) reloads the window from ``removed_message_count`` without it, as the SDK does: it is archived then,
    so recall still finds it."""
    def agent(model):
        return Agent(model=model, system_prompt=AGENT_PROMPT, callback_handler=None,
                     conversation_manager=SemanticSummarizingConversationManager(
                         summary_ratio=0.5, preserve_recent_messages=2, pin_first=1, store=store_url),
                     session_manager=FileSessionManager(session_id="p1", storage_dir=str(tmp_path / "sessions")))

    first = agent(ScriptedModel(ANSWERS, summary_reply=SUMMARY, max_prompt_chars=LIMIT))
    for question in QUESTIONS:
        first(question)
    assert texts(first.messages[:1]) == [QUESTIONS[0]] and first.conversation_manager.removed_message_count > 0
    again = agent(ScriptedModel(["It is bluefalcon."], summary_reply=SUMMARY, max_prompt_chars=LIMIT))
    restored = again.conversation_manager
    assert QUESTIONS[0] not in texts(again.messages)
    assert [texts([m.data]) for m in restored.archive.get(0, 0)] == [[QUESTIONS[0]]]
    assert "bluefalcon" in " ".join(m.text for m in restored.recall("project codename").messages)
    again("Remind me of the project codename?")
    assert [texts([m.data]) for m in restored.archive.get(0, 0)] == [[QUESTIONS[0]]]


@pytest.mark.parametrize("kind", ["sliding", "summarizing"])
def test_a_pinned_opening_a_session_restore_does_not_reload_is_archived_by_the_drop_in_managers(
        tmp_path, store_url, kind):
    """The drop-in managers with ``pin_first=1`` and ``on_remove`` (an archive): the opening request stays in the
    window, never archived; a session restore reloads the window from ``removed_message_count`` without it, as
    it does for the SDK's managers: the restored agent archives it from the session's log, at its own place."""
    from fullrecall.archive import Archive
    from fullrecall.stores import Scope
    from fullrecall.summarizers import ExtractiveSummarizer

    def agent(replies):
        archive = Archive(store_url, Scope(session_id="pinned-restore"))
        manager = (SlidingWindowConversationManager(window_size=4, pin_first=1, on_remove=archive)
                   if kind == "sliding" else
                   SummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2, pin_first=1,
                                                  max_history_turns=2, summarizer=ExtractiveSummarizer(),
                                                  on_remove=archive))
        return archive, Agent(model=ScriptedModel(replies), system_prompt=AGENT_PROMPT, conversation_manager=manager,
                              callback_handler=None, session_manager=FileSessionManager(
                                  session_id="pinned-restore", storage_dir=str(tmp_path / "sessions")))

    archive, first = agent(ANSWERS[:5])
    for question in QUESTIONS[:5]:
        first(question)
    assert texts(first.messages[:1]) == [QUESTIONS[0]] and first.conversation_manager.removed_message_count > 0
    assert not archive.get(0, 0)
    archive, again = agent(["It is bluefalcon."])
    assert QUESTIONS[0] not in texts(again.messages)
    assert [texts([m.data]) for m in archive.get(0, 0)] == [[QUESTIONS[0]]]
    again("Remind me of the project codename?")
    held = archive.get(0, 10**6)
    assert [m.position for m in held] == list(range(len(held)))  # every place once, none taken twice
    assert [texts([m.data]) for m in archive.get(0, 0)] == [[QUESTIONS[0]]]
    assert texts([m.data for m in held]).count(QUESTIONS[0]) == 1


def test_a_sliding_window_with_a_pinned_opening_goes_on_after_the_user_empties_the_history(store_url):
    """``agent.messages = []`` (start over) with ``pin_first=1``: the window goes on sliding, each message that
    leaves is archived once, and nothing is written over an archived message."""
    archive, agent = _five_questions_with_a_pinned_opening(store_url, "reset")
    manager = agent.conversation_manager
    agent.messages = []
    for question in QUESTIONS:
        agent(question)
    assert len(agent.messages) == 4
    archived = archive.get(0, 100)
    assert sorted(m.position for m in archived) == list(range(manager.removed_message_count))
    assert len(archived) == 2 * 5 - 4 + 2 * len(QUESTIONS) - 4  # all but the windows: the pinned opening too
    assert texts([m.data for m in archived]).count(QUESTIONS[0]) == 2  # the opening, once, and the question again


def _summarized_with_a_pinned_opening(store_url, session_id):
    """(archive, agent, manager): a summarizing window keeping the first message pinned, after every question."""
    from fullrecall.archive import Archive
    from fullrecall.stores import Scope

    archive = Archive(store_url, Scope(session_id=session_id))
    manager = SummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2, pin_first=1,
                                             on_remove=archive, summarizer=lambda messages, previous=None: SUMMARY)
    agent = Agent(model=ScriptedModel(ANSWERS * 3, max_prompt_chars=LIMIT), system_prompt=AGENT_PROMPT,
                  conversation_manager=manager, callback_handler=None)
    for question in QUESTIONS:
        agent(question)
    return archive, agent, manager


def test_a_summarizing_window_with_a_pinned_opening_goes_on_after_the_user_empties_the_history(store_url):
    """``agent.messages = []`` after a summary, with ``pin_first=1``: the next overflows summarize again, each
    message that leaves is archived once, and nothing is written over an archived message."""
    archive, agent, manager = _summarized_with_a_pinned_opening(store_url, "reset")
    assert texts(agent.messages[:1]) == [QUESTIONS[0]] and manager.summary_message is not None
    before = manager.removed_message_count
    agent.messages = []
    for question in QUESTIONS * 2:
        agent(question)
    assert manager.removed_message_count > before
    archived = archive.get(0, 100)
    assert sorted(m.position for m in archived) == list(range(manager.removed_message_count))


def test_the_pinned_opening_popped_beside_a_summary_is_archived_and_the_agent_goes_on(store_url):
    """``pin_first=1`` keeps the opening request before the summary of the turns after it; the user pops it from
    ``agent.messages``: it was lost (never archived), and the next summary was written over an archived place, so
    the agent stopped with an overflow. It is archived at its own place now, and the window goes on summarizing."""
    archive, agent, manager = _summarized_with_a_pinned_opening(store_url, "popped")
    assert texts(agent.messages[:2]) == [QUESTIONS[0], SUMMARY]  # the pinned opening, then the summary
    agent.messages.pop(0)
    for question in QUESTIONS[1:]:
        agent(question)
    assert texts(agent.messages[:1]) == [SUMMARY] and QUESTIONS[0] not in texts(agent.messages)
    archived = archive.get(0, 100)
    assert [m.position for m in archived] == list(range(manager.removed_message_count))  # each place once, no gap
    assert texts([m.data for m in archived]).count(QUESTIONS[0]) == 1 and archived[0].position == 0
    assert "bluefalcon" in " ".join(m.text for m in archive.recall("project codename").messages)


def test_the_pinned_opening_popped_from_a_sliding_window_is_archived_at_its_own_place(store_url):
    """``pin_first=1`` with a sliding window; the user pops the pinned opening: it was lost (never archived), and
    the next message to leave was archived in its place (position 0). Now each message keeps its own place."""
    archive, agent = _five_questions_with_a_pinned_opening(store_url, "popped-sliding")
    manager = agent.conversation_manager
    assert texts(agent.messages[:1]) == [QUESTIONS[0]]
    agent.messages.pop(0)
    for question in QUESTIONS[5:]:
        agent(question)
    archived = archive.get(0, 100)
    assert [m.position for m in archived] == list(range(manager.removed_message_count))
    spoken = [text for q, a in zip(QUESTIONS, ANSWERS, strict=True) for text in (q, a)]
    assert [texts([m.data])[0] for m in archived] == spoken[: manager.removed_message_count]

"""fullrecall's memories as MassGen's agents use them: the contract of MassGen's ``MemoryBase`` and
``PersistentMemoryBase``, and its calling conventions (the chat loop, the context compressor).

MassGen itself is not needed: the agent and the compressor below call the memories exactly as
MassGen's ``chat_agent`` and context compressor do. ``test_massgen_base_classes_agree`` also checks
against MassGen's own base classes, and runs only where the ``massgen`` package is installed.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from typing import Any

import pytest

from fullrecall.errors import MemoryInputError
from fullrecall.massgen import ConversationMemory, PersistentMemory, memories

run = asyncio.run

# MassGen's MemoryBase: coroutines, and two plain methods; PersistentMemoryBase: coroutines.
MEMORY_BASE_ASYNC = ("add", "delete", "retrieve", "size", "clear", "get_messages")
MEMORY_BASE_SYNC = ("state_dict", "load_state_dict")
PERSISTENT_BASE_ASYNC = ("record", "retrieve", "save_to_memory", "recall_from_memory")


class Agent:
    """A chat loop that uses its memories the way MassGen's ``SingleAgent.chat`` does."""

    def __init__(self, conversation_memory: Any = None, persistent_memory: Any = None) -> None:
        self.conversation_memory, self.persistent_memory = conversation_memory, persistent_memory
        self.seen_context: list[str] = []

    async def chat(self, messages: list[dict[str, Any]], clear_history: bool = False, reset_chat: bool = False,
                   answer: str = "ok") -> None:
        if self.conversation_memory and (clear_history or reset_chat):
            await self.conversation_memory.clear()  # reset_chat: clear, then add the messages given (below)
        if self.persistent_memory:
            self.seen_context.append(await self.persistent_memory.retrieve(
                messages, limit=5, previous_winners=[{"agent_id": "agent_b", "turn": 1}]))
        reply = [*messages, {"role": "assistant", "content": answer}]
        if self.conversation_memory:
            await self.conversation_memory.add(reply)
        if self.persistent_memory:
            await self.persistent_memory.record(reply, metadata={"turn": 2})

    async def reset(self) -> None:
        if self.conversation_memory:
            await self.conversation_memory.clear()


async def compress(memory: Any, keep_recent: int) -> None:
    """What MassGen's context compressor does: keep the system message and the recent ones."""
    messages = await memory.get_messages()
    kept = [m for m in messages if m.get("role") == "system"] + [m for m in messages if m.get("role") != "system"][
        -keep_recent:]
    await memory.clear()
    await memory.add(kept)


def test_the_api_has_massgen_shapes():
    for cls, coroutines in ((ConversationMemory, MEMORY_BASE_ASYNC), (PersistentMemory, PERSISTENT_BASE_ASYNC)):
        for name in coroutines:
            assert inspect.iscoroutinefunction(getattr(cls, name)), f"{cls.__name__}.{name}"
    for name in MEMORY_BASE_SYNC:
        assert callable(getattr(ConversationMemory, name))
        assert not inspect.iscoroutinefunction(getattr(ConversationMemory, name))
    for name in ("get_last_message", "get_messages_by_role", "truncate_to_size"):
        assert inspect.iscoroutinefunction(getattr(ConversationMemory, name))


def test_an_agent_chats_across_a_restart(tmp_path, default_embedder):
    url = f"sqlite:///{tmp_path / 'massgen.db'}"
    options = {"persistent_options": {"embedder": default_embedder}}
    conversation, persistent = memories(url, user_id="ann", agent_id="agent_a", session_id="task", **options)
    agent = Agent(conversation, persistent)
    run(agent.chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "My locker code is 4417."}]))
    run(agent.chat([{"role": "user", "content": "What's the weather?"}], answer="sunny"))
    assert [m["content"] for m in run(conversation.get_messages())] == [
        "Be brief.", "My locker code is 4417.", "ok", "What's the weather?", "sunny"]

    conversation, persistent = memories(url, user_id="ann", agent_id="agent_a", session_id="task", **options)
    agent = Agent(conversation, persistent)
    assert run(conversation.size()) == 5  # the conversation survived the restart
    run(agent.chat([{"role": "user", "content": "What is my locker code?"}], clear_history=True))
    assert "4417" in agent.seen_context[-1]  # long-term memory found it
    assert any("4417" in m["content"] for m in run(conversation.retrieve("locker code")))  # and the archive has it
    assert [m["content"] for m in run(conversation.get_messages())] == [
        "Be brief.", "What is my locker code?", "ok"]  # clear_history kept only the pinned system message

    other, _ = memories(url, user_id="bob", agent_id="agent_a", session_id="task", **options)
    assert run(other.get_messages()) == [] and run(other.retrieve("locker code")) == []  # nothing leaks


def test_the_compressor_clear_then_add_keeps_what_it_kept(store_url):
    conversation = ConversationMemory(store_url, uuid.uuid4().hex, user_id="ann", summarizer=lambda m, p: "summary",
                                      max_history_turns=100)
    agent = Agent(conversation)
    run(agent.chat([{"role": "system", "content": "rules"}, {"role": "user", "content": "q0"}], answer="a0"))
    for i in range(1, 5):
        run(agent.chat([{"role": "user", "content": f"q{i}"}], answer=f"a{i}"))
    run(compress(conversation, keep_recent=2))
    assert [m["content"] for m in run(conversation.get_messages())] == ["rules", "q4", "a4"]
    run(agent.chat([{"role": "user", "content": "q5"}], answer="a5"))
    assert [m["content"] for m in run(conversation.get_messages())] == ["rules", "q4", "a4", "q5", "a5"]
    assert "q1" in [m["content"] for m in run(conversation.retrieve("q1"))]  # compressed away, still recallable
    run(agent.reset())
    assert run(conversation.size()) == 1  # the pinned system message stays (see docs/memory.md)


def test_reset_chat_with_a_new_system_message_replaces_the_pinned_one(store_url):
    session = uuid.uuid4().hex
    conversation = ConversationMemory(store_url, session, user_id="ann")
    agent = Agent(conversation)
    run(agent.chat([{"role": "system", "content": "You are the planner."}, {"role": "user", "content": "q0"}],
                   answer="a0"))
    run(agent.chat([{"role": "system", "content": "You are the judge."}, {"role": "user", "content": "q1"}],
                   reset_chat=True, answer="a1"))
    window = ["You are the judge.", "q1", "a1"]  # what MassGen's own memory holds after reset_chat
    assert [m["content"] for m in run(conversation.get_messages())] == window
    run(agent.chat([{"role": "user", "content": "q2"}], clear_history=True, answer="a2"))
    assert [m["content"] for m in run(conversation.get_messages())] == ["You are the judge.", "q2", "a2"]
    assert "You are the planner." in [m["content"] for m in run(conversation.retrieve("planner"))]  # archived
    run(agent.chat([{"role": "system", "content": "You are the judge."}, {"role": "user", "content": "q3"}],
                   reset_chat=True, answer="a3"))  # the same prompt again: kept once
    assert [m["content"] for m in run(conversation.get_messages())] == ["You are the judge.", "q3", "a3"]
    conversation.close()
    again = ConversationMemory(store_url, session, user_id="ann")  # a restart reads the same window
    assert [m["content"] for m in run(again.get_messages())] == ["You are the judge.", "q3", "a3"]
    assert {"q0", "a0", "q1", "a1", "q2", "a2"} <= {m["content"] for m in run(again.retrieve("q0 a0 q1 a1 q2 a2",
                                                                                               limit=50))}
    again.close()


# What MassGen's agents hand their memory: chat-completions messages with Claude's content blocks, and the
# OpenAI Responses API's output items (no role; a "type" each).
CLAUDE_TURN = [
    {"role": "system", "content": "You are the planner."},
    {"role": "user", "content": "What is the weather in Oslo?"},
    {"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
                                      {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "drizzle, 9 degrees"}]},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "umbrella advice", "signature": "s1"},
                                      {"type": "text", "text": "Take an umbrella."}]},
]
RESPONSES_TURN = [
    {"role": "system", "content": "You are the planner."},
    {"role": "user", "content": "What is the weather in Bergen?"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "look up the forecast"}]},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather",
     "arguments": "{\"city\": \"Bergen\"}", "status": "completed"},
    {"type": "function_call_output", "call_id": "call_1", "output": "hail, 4 degrees"},
    {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "Expect hail in Bergen.", "annotations": []}]},
]


@pytest.mark.parametrize("turn,words", [(CLAUDE_TURN, ("drizzle", "umbrella", "Oslo")),
                                        (RESPONSES_TURN, ("hail", "forecast", "Bergen"))])
def test_massgen_backends_message_shapes_are_kept_verbatim_and_searchable(store_url, turn, words):
    session = uuid.uuid4().hex
    messages = [{**m, "id": f"m{i}"} for i, m in enumerate(turn)]
    conversation = ConversationMemory(store_url, session, user_id="ann")
    run(conversation.add(messages))
    assert run(conversation.get_messages()) == messages  # stored and returned exactly as given
    run(conversation.clear())
    conversation.close()
    again = ConversationMemory(store_url, session, user_id="ann")
    for word in words:
        assert any(word in json.dumps(m) for m in run(again.retrieve(word))), word  # their text is indexed
    found = run(again.retrieve(" ".join(words), limit=50))
    assert all(m in messages for m in found)  # verbatim from the archive too
    again.close()


def test_massgen_base_classes_agree():
    """Runs only where MassGen is installed (it is not a dependency of fullrecall)."""
    base = pytest.importorskip("massgen.memory._base", reason="the massgen package is not installed")
    for cls, ours in ((base.MemoryBase, ConversationMemory), (base.PersistentMemoryBase, PersistentMemory)):
        for name, member in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_"):
                continue
            assert hasattr(ours, name), f"{ours.__name__} lacks {name}"
            assert inspect.iscoroutinefunction(getattr(ours, name)) == inspect.iscoroutinefunction(member), name


def test_memories_close_the_store_they_opened(store_url, default_embedder, open_handles):
    options = {"persistent_options": {"embedder": default_embedder, "extract_facts": False}}
    with memories(store_url, user_id="ann", session_id="task", **options) as (conversation, persistent):
        run(conversation.add({"role": "user", "content": "warm up the store's connections"}))
        run(persistent.record([{"role": "user", "content": "My locker code is 4417."}]))
    before = open_handles()
    pair = memories(store_url, user_id="ann", session_id="task", **options)
    conversation, persistent = pair
    assert pair.conversation is conversation and pair.persistent is persistent
    assert run(conversation.size()) == 1 and "4417" in run(persistent.retrieve("locker code"))
    opened = open_handles() - before
    assert opened  # the store holds a file or a connection
    pair.close()
    pair.close()  # idempotent
    assert not opened & open_handles()  # none left behind


def test_memories_leave_a_store_passed_in_open(tmp_path, default_embedder):
    from fullrecall.stores import open_store

    with open_store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        with memories(store, user_id="ann", persistent_options={"embedder": default_embedder}) as (conversation, _):
            run(conversation.add({"role": "user", "content": "hi"}))
        assert store.count(conversation.scope) == 1  # still open: the caller's to close


def test_closing_memories_finishes_the_windows_background_indexing_first(store_url, default_embedder):
    """With ``background_indexing`` the conversation embeds what leaves its window on a worker thread: closing
    the pair lets it finish before the store closes (it failed on the closed store, leaving them unembedded).
    """
    import time

    from fullrecall.stores import Scope, open_store

    class SlowEmbedder:
        name, dimension = default_embedder.name, default_embedder.dimension

        def embed(self, texts: list[str]) -> Any:
            time.sleep(0.2)
            return default_embedder.embed(texts)

    session = uuid.uuid4().hex
    window = {"background_indexing": True, "max_history_turns": 1, "preserve_recent_messages": 1,
              "summarizer": lambda messages, previous: "summary", "embedding_model": SlowEmbedder()}
    with memories(store_url, user_id="ann", session_id=session, conversation_options=window,
                  persistent_options={"embedder": default_embedder}) as (conversation, _):
        for i in range(4):
            run(conversation.add([{"role": "user", "content": f"question {i}"},
                                  {"role": "assistant", "content": f"answer {i}"}]))
        archived = conversation.manager.removed_message_count
    assert archived > 0
    with open_store(store_url) as store:
        assert store.stats(Scope(user_id="ann", session_id=session))["vector_count"] == archived


def test_persistent_retrieve_takes_massgen_keyword_query(store_url, default_embedder):
    """MassGen's ``PersistentMemory.retrieve(query, limit=5, previous_winners=None)``: called by keyword, as its
    signature names it, it answers as called by position (it raised TypeError: a missing argument).
    """
    memory = PersistentMemory(user_name="ann", agent_name="agent_a", store=store_url, embedder=default_embedder)
    run(memory.record([{"role": "user", "content": "My locker code is 4417."}]))
    by_position = run(memory.retrieve("locker code", limit=3))
    assert "4417" in by_position
    assert run(memory.retrieve(query="locker code", limit=3)) == by_position
    assert run(memory.retrieve(query={"role": "user", "content": "locker code"})) == run(
        memory.retrieve({"role": "user", "content": "locker code"}))
    assert run(memory.retrieve(query_or_messages="locker code", limit=3)) == by_position  # fullrecall's own name
    with pytest.raises(MemoryInputError, match="query"):
        run(memory.retrieve("locker code", query="weather"))  # two different queries: which one?
    with pytest.raises(TypeError, match="query"):
        run(memory.retrieve())


def test_persistent_memory_takes_massgens_constructor_as_written(store_url, default_embedder, caplog):
    """MassGen's ``PersistentMemory`` is built with mem0's configuration (``llm_backend``/``llm_config``,
    ``embedding_backend``/``embedding_config``, ``on_disk``, ...), which every MassGen user passes: ours takes
    that call as written (it raised TypeError), says once which of them it does not need, and works.
    """
    import logging

    with caplog.at_level(logging.WARNING, logger="fullrecall.memory"):
        memory = PersistentMemory(agent_name="agent_1", user_name="alice", store=store_url, embedder=default_embedder,
                                  llm_config={"provider": "openai", "model": "gpt-4.1-nano-2025-04-14"},
                                  embedding_config={"provider": "openai", "model": "text-embedding-3-small"},
                                  llm_backend=object(), embedding_backend=object(), vector_store_config=None,
                                  mem0_config=None, memory_type=None, qdrant_client=None, debug=False, on_disk=True)
    warned = [r.getMessage() for r in caplog.records if "PersistentMemory" in r.getMessage()]
    assert len(warned) == 1 and "embedding_config" in warned[0] and "llm_config" in warned[0]
    assert "vector_store_config" not in warned[0]  # None: nothing was asked of it
    run(memory.record([{"role": "user", "content": "My locker code is 4417."}]))
    assert "4417" in run(memory.retrieve("locker code"))
    with pytest.raises(TypeError, match="embeder"):
        PersistentMemory(agent_name="agent_1", store=store_url, embeder=default_embedder)  # a typo is still one


def test_a_session_id_too_long_for_the_long_term_memorys_session_is_refused_by_its_own_name(tmp_path):
    """The long-term memory writes to ``session_id + "-memory"``: a 250-byte id passed the check and was refused
    after, naming a 257-byte 'session_id' the caller never gave."""
    from fullrecall.errors import InvalidInput

    url = f"sqlite:///{tmp_path / 'm.db'}"
    with pytest.raises(InvalidInput, match=r"^memories: 'session_id' is 250 bytes long; .* at most 249$"):
        memories(url, user_id="ann", session_id="s" * 250)
    assert not (tmp_path / "m.db").exists()  # refused before the store is opened
    with memories(url, user_id="ann", session_id="s" * 249) as (conversation, persistent):
        assert persistent.session_id == "s" * 249 + "-memory"

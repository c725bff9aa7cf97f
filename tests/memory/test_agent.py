"""MemoryAgent: a streaming chat loop that remembers the user across sessions, over real chat model clients."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from fullrecall import MemoryAgent, MemoryInputError, MessageFormatError, ProceduralMemory
from fullrecall.stores import open_store

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from summarizer_peers import Reply, ScriptedServer, completion, scripted_model  # noqa: E402


def chat(agent: MemoryAgent, messages: Any, **kw: Any) -> list[str]:
    async def go() -> list[str]:
        return [chunk async for chunk in agent.chat(messages, **kw)]

    return asyncio.run(go())


def system_of(request: dict[str, Any]) -> str:
    return request["messages"][0]["content"] if request["messages"][0]["role"] == "system" else ""


def test_a_new_session_knows_the_user_and_another_user_does_not(store_url, server, default_embedder):
    server.script(*[completion(t) for t in ("Noted, 4417.", "Your locker code is 4417.", "I do not know.")])
    store = open_store(store_url)
    try:
        monday = MemoryAgent(scripted_model(server), store=store, user_id="alice", agent_id="bot", session_id="monday",
                             embedder=default_embedder)
        assert "".join(chat(monday, "My locker code is 4417.")) == "Noted, 4417."
        tuesday = MemoryAgent(scripted_model(server), store=store, user_id="alice", agent_id="bot", session_id="tuesday",
                              embedder=default_embedder)
        assert chat(tuesday, [{"role": "user", "content": "What is my locker code?"}]) == ["Your locker code is 4417."]
        bob = MemoryAgent(scripted_model(server), store=store, user_id="bob", agent_id="bot", embedder=default_embedder)
        chat(bob, "What is my locker code?")
        stats = tuesday.stats()
    finally:
        store.close()
    first, second, third = server.requests  # one call a turn: memory itself called no LLM
    assert "4417" not in system_of(first)
    assert "4417" in system_of(second) and [m["content"] for m in second["messages"][1:]] == ["What is my locker code?"]
    assert "4417" not in json.dumps(third)
    assert stats["messages"] == 2 and stats["recalls"] == 1 and stats["facts"] == 1
    assert stats["llm_calls"] == 0 and stats["failures"] == 0
    assert stats["bytes"] == len("What is my locker code?") + len("Your locker code is 4417.")


def test_the_window_clear_history_and_reset(server, default_embedder):
    server.script(*[completion(f"a{i}") for i in range(4)])
    agent = MemoryAgent(scripted_model(server), store="sqlite:///:memory:", user_id="u", embedder=default_embedder,
                        system_prompt="Be brief.")
    chat(agent, "I am planning a trip to Kyoto.")
    chat(agent, "Which month is best?")
    chat(agent, "Unrelated: what is 2 + 2?", clear_history=True)
    assert [m["content"] for m in server.requests[1]["messages"][1:]] == [
        "I am planning a trip to Kyoto.", "a0", "Which month is best?"]
    assert system_of(server.requests[1]).startswith("Be brief.")
    assert [m["content"] for m in server.requests[2]["messages"][1:]] == ["Unrelated: what is 2 + 2?"]
    assert len(agent.conversation.messages) == 6  # clear_history kept the conversation

    asyncio.run(agent.reset())
    assert agent.conversation.messages == []
    chat(agent, "Where am I travelling to?", reset_chat=True)
    last = server.requests[3]
    (question,) = last["messages"][1:]  # the window was emptied: its messages went to the archive ...
    assert question["content"].endswith("Where am I travelling to?") and "Kyoto" in question["content"]
    assert "Kyoto" in system_of(last)  # ... and long-term memory outlives a reset
    assert agent.stats()["failures"] == 0


def test_tokens_saved_when_the_window_is_trimmed(server, default_embedder):
    server.script(*[completion(f"answer number {i} " * 5) for i in range(6)])
    agent = MemoryAgent(scripted_model(server), store="sqlite:///:memory:", embedder=default_embedder,
                        window_options={"preserve_recent_messages": 2, "max_history_turns": 2})
    for i in range(6):
        chat(agent, f"question number {i} about the topic {i} " * 3)
    stats = agent.stats()
    assert stats["messages"] == 12 and len(agent.conversation.messages) < 12
    assert stats["tokens_saved"] > 0


@pytest.mark.parametrize("errors", ["log", "raise", "silent"])
def test_memory_failures_follow_the_errors_mode(errors, server, default_embedder, caplog, tmp_path):
    server.script(completion("still here"))
    agent = MemoryAgent(scripted_model(server), store=f"sqlite:///{tmp_path / 'm.db'}", embedder=default_embedder,
                        errors=errors)
    agent.memory.store.close()  # every memory step now fails
    caplog.set_level(logging.WARNING, logger="fullrecall.memory")
    if errors == "raise":
        with pytest.raises(Exception):
            chat(agent, "hello")
        assert server.requests == [] and agent.stats()["failures"] == 1
        return
    assert chat(agent, "hello") == ["still here"]
    assert [m["content"] for m in server.requests[0]["messages"][1:]] == ["hello"]
    failures = agent.stats()["failures"]
    assert failures >= 3  # add, retrieve, recall, answer, record: each counted
    warned = [r for r in caplog.records if "memory could not" in r.getMessage()]
    assert len(warned) == (failures if errors == "log" else 0)


def test_procedures_reach_the_model_and_are_counted(server, default_embedder):
    server.script(completion("Use the plan."))
    store = open_store("sqlite:///:memory:")
    procedural = ProceduralMemory(store, user_id="u", agent_id="a", embedder=default_embedder)
    procedural.store_pattern("quote the flight price in euros", ["lookup_price", "convert_currency"], 0.9, 100.0)
    agent = MemoryAgent(scripted_model(server), store=store, user_id="u", agent_id="a", procedural=procedural,
                        embedder=default_embedder)
    chat(agent, "Quote the hotel price in euros")
    assert "lookup_price, convert_currency" in system_of(server.requests[0])
    assert agent.stats()["patterns"] == 1 and agent.stats()["recalls"] == 1


def test_the_memory_model_calls_are_counted(server, default_embedder):
    extraction = json.dumps([{"source": 0, "attribute": "city", "value": "Lyon", "text": "The user lives in Lyon."}])
    server.script(completion(extraction))
    answers = ScriptedServer()
    try:
        answers.script(completion("Nice city."))
        agent = MemoryAgent(scripted_model(answers), store="sqlite:///:memory:", embedder=default_embedder,
                            memory_model=scripted_model(server))
        chat(agent, "Lyon is where I have lived since May.")
    finally:
        answers.close()
    assert len(server.requests) == 1 and agent.stats()["llm_calls"] == 1
    assert [f.text for f in agent.memory.facts.current()] == ["The user lives in Lyon."]


def test_memory_work_leaves_the_event_loop_free(server, default_embedder, beating):
    """The memory steps of a turn (the store, embeddings, the memory model's fact extraction) ran on the event
    loop: a memory model taking a second stopped every other coroutine of the process for that second. They
    run on a worker thread; the answer still streams on the loop.
    """
    extraction = json.dumps([{"source": 0, "attribute": "city", "value": "Lyon", "text": "The user lives in Lyon."}])
    slow = completion(extraction)
    slow.delay = 1.0
    server.script(slow)
    answers = ScriptedServer()
    try:
        answers.script(completion("Nice city."))
        agent = MemoryAgent(scripted_model(answers), store="sqlite:///:memory:", embedder=default_embedder,
                            memory_model=scripted_model(server))

        async def turn() -> list[str]:
            said = [chunk async for chunk in agent.chat("Lyon is where I have lived since May.")]
            await agent.reset()
            return said

        said, longest_pause = beating(turn)
    finally:
        answers.close()
    assert said == ["Nice city."] and [f.text for f in agent.memory.facts.current()] == ["The user lives in Lyon."]
    assert longest_pause < 0.5  # the memory model took a second: the loop went on


def test_a_strands_model_is_streamed(default_embedder):
    pytest.importorskip("strands")
    sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
    from test_summarizer_strands import ScriptedModel

    reply = "A long answer that the Strands model streams in several chunks, forty characters each."
    scripted = ScriptedModel(reply)
    agent = MemoryAgent(scripted, store="sqlite:///:memory:", embedder=default_embedder)
    chunks = chat(agent, "Tell me something.")
    assert len(chunks) > 1 and "".join(chunks) == reply
    assert scripted.calls[0]["messages"] == [{"role": "user", "content": [{"text": "Tell me something."}]}]
    assert agent.conversation.messages[-1]["content"] == reply


@pytest.mark.parametrize("bad", [[], [{"content": "no role"}], ["text"], [{"role": "user", "content": 42}]])
def test_bad_input_is_refused_before_anything_is_written(bad, server, default_embedder):
    server.script()
    agent = MemoryAgent(scripted_model(server), store="sqlite:///:memory:", embedder=default_embedder)
    with pytest.raises((MemoryInputError, MessageFormatError), match="chat: |message 0"):
        chat(agent, bad)
    assert server.requests == [] and agent.conversation.messages == [] and agent.memory.messages() == []


def test_an_unknown_errors_mode_is_refused(server):
    with pytest.raises(ValueError, match="errors"):
        MemoryAgent(scripted_model(server), store="sqlite:///:memory:", errors="ignore")


def _alice_on_two_days(server: ScriptedServer, store: Any, embedder: Any) -> list[MemoryAgent]:
    """Two agents of user alice, sessions "mon" and "tue", each told a locker code (one turn each)."""
    agents = [MemoryAgent(scripted_model(server), store=store, user_id="alice", agent_id="bot", session_id=s,
                          embedder=embedder) for s in ("mon", "tue")]
    for agent in agents:
        chat(agent, f"My locker code is 44-{agent.session_id}.")
    return agents


def test_erasing_a_user_as_documented_leaves_no_word_of_any_session(server, default_embedder):
    """``agent.memory.clear()`` leaves the window logs (another owner: ``<agent>#window``); the documented call
    erases them too, every session's, and the conversation writes none of its old words back.
    """
    from dataclasses import replace

    from fullrecall.stores import Scope

    store = open_store("sqlite:///:memory:")
    server.script(*[completion(f"a{i}") for i in range(3)])
    agents = _alice_on_two_days(server, store, default_embedder)
    alice = Scope(user_id="alice", agent_id=Scope.everyone().agent_id)
    agent = agents[-1]
    agent.memory.clear()
    assert store.stats(alice)["message_count"] == 4  # the two sessions' window logs
    agent.memory.store.forget(replace(agent.conversation.scope, session_id=None))
    assert store.stats(alice)["message_count"] == 0
    chat(agent, "Hello again.")
    kept = json.dumps([m.data for s in store.sessions(alice) for m in store.range(s, 0, 2**62)])
    assert "Hello again." in kept and "44-" not in kept
    for agent in agents:
        agent.close()
    store.close()


def test_the_window_log_lives_in_the_memorys_tenant(server, default_embedder):
    """A long-term memory of tenant "acme" passed in: the window's log went to the default tenant all the same."""
    from fullrecall import PersistentMemory
    from fullrecall.stores import Scope

    store = open_store("sqlite:///:memory:")
    server.script(completion("noted"))
    memory = PersistentMemory("ann", "bot", "s1", store=store, tenant="acme", embedder=default_embedder)
    agent = MemoryAgent(scripted_model(server), memory=memory, embedder=default_embedder)
    chat(agent, "My acme badge is 7.")
    assert agent.conversation.scope.tenant == "acme"
    assert store.stats(Scope(user_id="ann", agent_id=Scope.everyone().agent_id)).get("message_count") == 0
    assert store.stats(Scope(tenant="acme", user_id="ann", agent_id=Scope.everyone().agent_id))["message_count"] >= 2
    store.close()


def test_close_closes_what_the_agent_opened_and_nothing_passed_in(server, default_embedder, tmp_path, open_handles,
                                                                 monkeypatch):
    """A store opened from a URL is closed by ``close()`` (its files released at once, not when the agent is
    collected); a memory passed in stays open and usable, and no store is opened for it from the default URL.
    """
    from fullrecall import PersistentMemory

    server.script(completion("noted"), completion("again"))
    monkeypatch.chdir(tmp_path)
    before = open_handles()
    agent = MemoryAgent(scripted_model(server), store=f"sqlite:///{tmp_path / 'own.db'}", user_id="u",
                        embedder=default_embedder)
    chat(agent, "My city is Lyon.")
    agent.close()
    agent.close()  # twice: harmless
    assert not [h for h in open_handles() - before if "own.db" in h]

    memory = PersistentMemory("u", store=f"sqlite:///{tmp_path / 'theirs.db'}", embedder=default_embedder)
    agent = MemoryAgent(scripted_model(server), memory=memory, embedder=default_embedder)
    chat(agent, "My dog is Rex.")
    agent.close()
    assert [f.text for f in memory.facts.current()] == ["My dog is Rex."]  # the caller's memory: still open
    assert not (tmp_path / "fullrecall_memory.db").exists()  # nothing opened from the default URL
    memory.close()


def test_a_turn_with_both_kinds_of_recall_counts_once(server, default_embedder):
    """``recalls`` counts turns whose model call got remembered context: long-term memory and the window's
    archive recalling in one turn counted it twice.
    """
    server.script(*[completion("noted") for _ in range(4)])
    agent = MemoryAgent(scripted_model(server), store="sqlite:///:memory:", user_id="u", embedder=default_embedder,
                        window_options={"max_history_turns": 1, "preserve_recent_messages": 1,
                                        "summarizer": lambda messages, previous: "earlier talk"})
    for text in ("My locker code is 4417.", "The weather is nice today.", "What is my locker code?",
                 "Tell me my locker code again."):
        chat(agent, text)
    long_term = ["Memory (" in system_of(r) for r in server.requests]
    archive = ["Previous Context" in r["messages"][-1]["content"] for r in server.requests]
    assert any(a and b for a, b in zip(long_term, archive))  # a turn got both
    assert agent.stats()["recalls"] == sum(a or b for a, b in zip(long_term, archive))


def test_forget_erases_every_word_of_the_user_and_the_window_starts_empty(server, default_embedder):
    from fullrecall.stores import Scope

    store = open_store("sqlite:///:memory:")
    server.script(*[completion(f"a{i}") for i in range(4)])
    agents = _alice_on_two_days(server, store, default_embedder)
    bob = MemoryAgent(scripted_model(server), store=store, user_id="bob", agent_id="bot", session_id="mon",
                      embedder=default_embedder)
    chat(bob, "My locker code is 55-bob.")
    agent = agents[-1]
    counts = asyncio.run(agent.forget())
    alice = Scope(user_id="alice", agent_id=Scope.everyone().agent_id)
    assert store.stats(alice)["message_count"] == 0 and counts["messages"] >= 8  # 2 sessions x (memory + window)
    assert agent.conversation.messages == [] and agent.memory.facts.current() == []
    chat(agent, "Hello again.")
    kept = json.dumps([m.data for s in store.sessions(alice) for m in store.range(s, 0, 2**62)])
    assert "Hello again." in kept and "44-" not in kept
    assert "55-bob" in json.dumps(bob.conversation.messages)  # another user's memory is untouched
    assert bob.memory.facts.current()
    for a in (*agents, bob):
        a.close()
    store.close()


def test_forget_leaves_no_tokens_counted_as_saved(server, default_embedder):
    # tokens_saved is what summaries and trimming keep out of the window; erased words were not saved by them
    store = open_store("sqlite:///:memory:")
    server.script(*[completion(f"answer {i}") for i in range(2)])
    agent = MemoryAgent(scripted_model(server), store=store, user_id="alice", agent_id="bot", embedder=default_embedder)
    chat(agent, "My locker code is 4417 and I like long walks by the river.")
    asyncio.run(agent.forget())
    assert agent.stats()["tokens_saved"] == 0
    chat(agent, "Hello again.")
    assert agent.stats()["tokens_saved"] == 0  # the window holds every word recorded since
    agent.close()
    store.close()


def test_an_answer_holding_a_lone_surrogate_is_recorded(server, default_embedder):
    """Half a surrogate pair in the model's answer (JSON may escape one) made the answer unstorable: the user saw it,
    memory counted a failure and the turn's answer was never recorded. It comes with U+FFFD in its place now."""
    server.script(Reply(body=completion("Paris @ is lovely.").body.replace(b"@", b"\\ud83d")))
    agent = MemoryAgent(scripted_model(server), store="sqlite:///:memory:", embedder=default_embedder)
    assert "".join(chat(agent, "Where should I travel?")) == "Paris \ufffd is lovely."
    assert agent.stats()["failures"] == 0
    assert agent.conversation.messages[-1]["content"] == "Paris \ufffd is lovely."


def test_a_strands_answer_holding_a_lone_surrogate_is_recorded(default_embedder):
    pytest.importorskip("strands")
    from test_summarizer_strands import ScriptedModel

    agent = MemoryAgent(ScriptedModel("Paris \ud83d is lovely."), store="sqlite:///:memory:", embedder=default_embedder)
    assert "".join(chat(agent, "Where should I travel?")) == "Paris \ufffd is lovely."
    assert agent.stats()["failures"] == 0 and agent.conversation.messages[-1]["content"] == "Paris \ufffd is lovely."


def test_the_memory_models_failures_and_summary_fallbacks_are_counted(server, default_embedder, caplog):
    """The memory model failing went uncounted: a fact extraction that raised was logged inside long-term memory,
    and a window summary whose model kept failing fell back to the extractive one, while ``stats()`` showed no
    failure at all. ``llm_failures`` counts the memory model's calls that failed, ``summary_fallbacks`` the
    window summaries written without it."""
    from fullrecall.memory.facts import EXTRACTION_PROMPT

    def memory_model_reply(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"] == EXTRACTION_PROMPT:
            return Reply(status=500, body=b'{"error": "down"}')
        return completion("")  # a summary: an empty answer, asked again, then the extractive summary

    server.script(*[completion(f"answer {i} about the topic") for i in range(4)])
    answers, memory_server = server, ScriptedServer()
    try:
        memory_server.script(*[memory_model_reply] * 40)
        agent = MemoryAgent(scripted_model(answers), store="sqlite:///:memory:", embedder=default_embedder,
                            memory_model=scripted_model(memory_server),
                            window_options={"max_history_turns": 1, "preserve_recent_messages": 1})
        for i in range(4):
            chat(agent, f"question {i}: what do you know about topic {i}?")
        extractions = sum(r["messages"][0]["content"] == EXTRACTION_PROMPT for r in memory_server.requests)
        summaries = len(memory_server.requests) - extractions
    finally:
        memory_server.close()
    stats = agent.stats()
    assert extractions == 4 and summaries >= 2 and stats["llm_calls"] == 4 + summaries
    assert stats["llm_failures"] == 4 and stats["summary_fallbacks"] == summaries // 2 >= 1
    assert stats["messages"] == 8  # every word recorded
    assert stats["extraction_failures"] == stats["failures"] == 4  # each failed extraction is a failed memory step


def test_a_strands_model_trickling_its_answer_ends_at_the_deadline(default_embedder, monkeypatch):
    """The agent streamed a Strands model's answer with no deadline: a provider that trickled (or never ended) its
    stream held the turn for as long as it liked. The stream now ends at the model's deadline (default 120 s, or
    FULLRECALL_LLM_DEADLINE) as the other clients' requests do, in a ChatModelError; the turn is not recorded."""
    pytest.importorskip("strands")
    import time

    from test_summarizer_strands import TricklingModel

    from fullrecall.summarizers import ChatModelError

    monkeypatch.setenv("FULLRECALL_LLM_DEADLINE", "0.5")
    agent = MemoryAgent(TricklingModel("a word every tenth of a second " * 20, pause=0.1), store="sqlite:///:memory:",
                        embedder=default_embedder)
    chunks: list[str] = []

    async def go() -> None:
        async for chunk in agent.chat("Tell me a story."):
            chunks.append(chunk)

    started = time.monotonic()
    with pytest.raises(ChatModelError, match=r"deadline of 0\.5 s"):
        asyncio.run(go())
    assert time.monotonic() - started < 2.0 and 0 < len(chunks) < 10
    assert [m["role"] for m in agent.conversation.messages] == ["user"]


def test_a_strands_model_streaming_without_end_stops_at_the_size_limit(default_embedder, monkeypatch):
    """The agent gathered a Strands model's streamed answer whole, however long, until the deadline; the stream now
    ends at max_response_bytes (FULLRECALL_LLM_MAX_RESPONSE_BYTES here), closed, in a ChatModelError naming the
    limit, as every client's answer does; the turn is not recorded."""
    pytest.importorskip("strands")
    from test_summarizer_strands import FloodingModel

    from fullrecall.summarizers import ChatModelError

    monkeypatch.setenv("FULLRECALL_LLM_MAX_RESPONSE_BYTES", "50000")
    FloodingModel.closed = False
    agent = MemoryAgent(FloodingModel(), store="sqlite:///:memory:", embedder=default_embedder)
    with pytest.raises(ChatModelError, match="over the limit of 50000 bytes"):
        chat(agent, "Tell me everything.")
    assert FloodingModel.closed and [m["role"] for m in agent.conversation.messages] == ["user"]


def test_a_strands_answer_cut_short_or_refused_by_the_provider_is_a_model_error_and_not_recorded(default_embedder):
    """A Strands stream that ended without its messageStop (a dropped connection) was taken as a whole answer and
    recorded ('Your locker code is 31'); a provider's own error (throttling, a server error) came out raw."""
    pytest.importorskip("strands")
    from strands.types.exceptions import ModelThrottledException
    from test_summarizer_strands import CutModel, ScriptedModel

    from fullrecall.summarizers import ChatModelError, StrandsChatModel

    agent = MemoryAgent(CutModel("Your locker code is 31..."), store="sqlite:///:memory:", embedder=default_embedder)
    with pytest.raises(ChatModelError, match="ended without its stop"):
        chat(agent, "What is my locker code?")
    assert [m["role"] for m in agent.conversation.messages] == ["user"]
    throttled = MemoryAgent(StrandsChatModel(ScriptedModel(ModelThrottledException("slow down")), max_retries=0),
                            store="sqlite:///:memory:", embedder=default_embedder)
    with pytest.raises(ChatModelError, match="ModelThrottledException: slow down") as failed:
        chat(throttled, "Hello?")
    assert failed.value.retryable


def _strands_failures() -> list[Any]:
    """Provider errors as Strands models raise them (Strands' own, Python's, botocore's as Bedrock's model lets them
    out), each with whether the other chat models would try again."""
    from botocore.exceptions import ClientError, EndpointConnectionError
    from strands.types.exceptions import ModelThrottledException

    def aws(code: str, status: int) -> ClientError:
        return ClientError({"Error": {"Code": code, "Message": "try later"},
                            "ResponseMetadata": {"HTTPStatusCode": status}}, "ConverseStream")

    return [(ModelThrottledException("slow down"), True), (TimeoutError("the read timed out"), True),
            (ConnectionResetError("reset by peer"), True), (ValueError("no such model"), False), ("cut short", True),
            (aws("InternalServerException", 500), True), (aws("ModelNotReadyException", 429), True),
            (aws("ValidationException", 400), False), (EndpointConnectionError(endpoint_url="http://bedrock"), True)]


@pytest.mark.parametrize("case", range(9), ids=["throttled", "timeout", "connection", "refused", "cut short",
                                                 "aws 5xx", "aws not ready", "aws refused", "aws unreachable"])
def test_a_strands_models_errors_are_the_same_on_the_agent_and_the_summarizer(case, default_embedder):
    """The agent streaming a Strands model and the summarizer's StrandsChatModel each mapped a provider's errors
    (and a stream cut short) with a rule of their own: a provider's TimeoutError was worth a retry to one only.
    One rule serves both: the same error, the same ChatModelError, equally retryable."""
    pytest.importorskip("strands")
    from test_summarizer_strands import CutModel, ScriptedModel

    from fullrecall.summarizers import ChatModelError, StrandsChatModel
    from fullrecall.summarizers.chat_models.base import ChatRequest

    error, retryable = _strands_failures()[case]

    def model() -> Any:
        return CutModel("Your locker code is 31...") if error == "cut short" else ScriptedModel(error)

    request = ChatRequest(system="s", messages=({"role": "user", "content": "Hello?"},))
    with pytest.raises(ChatModelError) as summarizing:
        StrandsChatModel(model(), max_retries=0).complete(request)
    agent = MemoryAgent(StrandsChatModel(model(), max_retries=0), store="sqlite:///:memory:",
                        embedder=default_embedder)  # streamed, as a Strands model is, with these settings
    with pytest.raises(ChatModelError) as chatting:
        chat(agent, "Hello?")
    assert (str(chatting.value), chatting.value.retryable) == (str(summarizing.value), retryable)
    assert summarizing.value.retryable == retryable


def test_a_strands_model_is_retried_as_the_summarizer_retries_it(default_embedder):
    """The agent gave a Strands provider's retryable error (throttling, a timeout, a stream cut short) at once,
    where every other chat model it takes tries again. A try that fails before any of its text reached the caller
    is now tried again with the model's own settings (StrandsChatModel's: 2 retries, backoff 0.5 s unless given);
    once text has gone out, a retry would repeat it, and the error is raised."""
    pytest.importorskip("strands")
    from strands.types.exceptions import ModelThrottledException
    from test_summarizer_strands import CutModel, ScriptedModel

    from fullrecall.summarizers import ChatModelError, StrandsChatModel

    scripted = ScriptedModel(ModelThrottledException("slow down"), "Hello again!")
    agent = MemoryAgent(scripted, store="sqlite:///:memory:", embedder=default_embedder)
    assert "".join(chat(agent, "Hello?")) == "Hello again!" and len(scripted.calls) == 2
    assert agent.conversation.messages[-1] == {"role": "assistant", "content": "Hello again!"}

    throttled = ScriptedModel(*[TimeoutError("the read timed out")] * 3)
    agent = MemoryAgent(StrandsChatModel(throttled, max_retries=1, backoff=0.01), store="sqlite:///:memory:",
                        embedder=default_embedder)
    with pytest.raises(ChatModelError, match="TimeoutError: the read timed out"):
        chat(agent, "Hello?")
    assert len(throttled.calls) == 2  # the settings of the model given

    for model in (ScriptedModel(ValueError("no such model"), "unused"), CutModel("Your locker code is 31...", "x")):
        agent = MemoryAgent(StrandsChatModel(model, backoff=0.01), store="sqlite:///:memory:",
                            embedder=default_embedder)
        with pytest.raises(ChatModelError):
            chat(agent, "Hello?")
        assert len(model.calls) == 1  # refused as it is; or cut short after its text went out

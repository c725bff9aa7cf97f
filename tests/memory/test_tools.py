"""MemoryTools: the agent's memory tools, as OpenAI-style schemas with a dispatcher and as Strands tools."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from fullrecall import (
    MemoryTools,
    PersistentMemory,
    ProceduralMemory,
    SyncConversationMemory,
)
from fullrecall.stores import open_store


@pytest.fixture
def tools(default_embedder):
    store = open_store("sqlite:///:memory:")
    memory = PersistentMemory("u", "a", "s1", store=store, embedder=default_embedder)
    procedural = ProceduralMemory(store, user_id="u", agent_id="a", embedder=default_embedder)
    procedural.store_pattern("Analyze my weight trends over time", ["search_records", "aggregate", "trend"], 0.9, 900)
    asyncio.run(memory.record([{"role": "user", "content": "My locker code is 4417."},
                               {"role": "assistant", "content": "Noted, locker code 4417."}]))
    return MemoryTools(memory, procedural)


def tool_call(name, args, i=0):
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def test_schemas_are_openai_function_tools(tools, default_embedder):
    schemas = tools.schemas()
    assert [s["function"]["name"] for s in schemas] == ["search_memory", "expand", "remember", "forget", "recall_patterns"]
    for s in schemas:
        params = s["function"]["parameters"]
        assert s["type"] == "function" and params["type"] == "object" and set(params["required"]) <= set(params["properties"])
        assert s["function"]["description"]
    without = MemoryTools(tools.memory)  # no procedural memory: no pattern tool
    assert "recall_patterns" not in [s["function"]["name"] for s in without.schemas()]


def test_search_expand_remember_forget_through_the_dispatcher(tools):
    (reply,) = tools.handle([tool_call("search_memory", {"query": "locker code"})])
    assert reply["role"] == "tool" and reply["tool_call_id"] == "call_0"
    results = json.loads(reply["content"])["results"]
    fact = next(r for r in results if r["kind"] == "fact")
    message = next(r for r in results if r["kind"] == "message" and r["role"] == "user")
    assert fact["text"] == "My locker code is 4417." and message["session_id"] == "s1"

    expanded = tools.call("expand", {"id": fact["id"]})  # a fact expands to the message it came from, verbatim
    assert [m["message"] for m in expanded["messages"]] == [{"role": "user", "content": "My locker code is 4417."}]
    assert tools.call("expand", json.dumps({"id": message["id"], "session_id": "s1"}))["messages"][0]["id"] == message["id"]

    new = tools.call("remember", {"fact": "My locker code is 9001"})
    assert (new["attribute"], new["value"]) == ("locker code", "9001")
    current = [f.value for f in tools.memory.facts.current(attribute="locker code")]
    assert current == ["9001"] and len(tools.memory.facts.history(attribute="locker code")) == 2

    assert tools.call("forget", {"id": message["id"]}) == {"deleted": 1, "messages": 1, "summaries": 0, "facts": 0}
    after = tools.call("search_memory", {"query": "locker code", "limit": 5})["results"]
    assert message["id"] not in [r["id"] for r in after]
    assert "error" in tools.call("forget", {"id": message["id"]})


def test_recall_patterns_suggests_the_stored_order(tools):
    found = tools.call("recall_patterns", {"task": "how has my weight changed?"})
    assert found["plan"]["suggested_tools"] == ["search_records", "aggregate", "trend"]
    assert found["patterns"][0]["success_score"] == pytest.approx(0.9)
    unrelated = tools.call("recall_patterns", {"task": "write a limerick about cheese"})
    assert unrelated["patterns"] == [] and unrelated["plan"]["confidence"] < found["plan"]["confidence"]
    assert tools.call("forget", {"id": found["patterns"][0]["id"]})["patterns"] == 1


@pytest.mark.parametrize("name, args, error", [
    ("search_memory", {}, "'query' is missing"),
    ("search_memory", {"query": 3}, "'query' must be a non-empty string"),
    ("search_memory", {"query": "x", "limit": 0}, "'limit' must be a positive integer"),
    ("search_memory", {"query": "x", "deep": True}, "unknown argument 'deep'"),
    ("remember", "{not json", "arguments must be a JSON object"),
    ("remember", "[1, 2]", "arguments must be a JSON object"),
    ("remember", {"fact": "  "}, "'fact' must be a non-empty string"),
    ("drop_tables", {}, "unknown tool 'drop_tables'"),
])
def test_bad_calls_answer_an_error_the_model_can_read(tools, name, args, error):
    assert error in tools.call(name, args)["error"]
    assert tools.memory.stats()["fact_count"] == 1  # nothing was written


def test_arguments_nested_past_any_parser_are_an_error_not_a_crash(tools):
    """A model's (or an injected prompt's) arguments nested a hundred thousand deep raised RecursionError out of
    call and handle, ending the agent loop, where every other unreadable argument string is an error it reads."""
    for deep in ("[" * 100_000, '{"query": ' + "[" * 100_000 + "]" * 100_000 + "}"):
        assert "arguments must be a JSON object" in tools.call("search_memory", deep)["error"]
        (reply,) = tools.handle([{"id": "c", "function": {"name": "search_memory", "arguments": deep}}])
        assert "arguments must be a JSON object" in json.loads(reply["content"])["error"]


@pytest.mark.parametrize("name, args", [
    ("search_memory", {"query": "x\ud800"}), ("expand", {"id": "x\ud800"}), ("expand", {"id": "m", "session_id": "x\ud800"}),
    ("remember", {"fact": "x\ud800"}), ("forget", {"id": "x\ud800"}), ("recall_patterns", {"task": "x\ud800"}),
])
def test_a_lone_surrogate_is_named_by_the_tools_own_argument(tools, name, args):
    """A lone surrogate was named by whatever refused it inside: "recall_patterns: retrieve_patterns: 'query' ...",
    "remember: fact: 'text' ...", "forget: id 0 ...": arguments the model never gave."""
    given = next(k for k, v in args.items() if "\ud800" in v)
    assert tools.call(name, args) == {"error": f"{name}: {given!r} is not valid Unicode (a lone surrogate at character 1)"}
    assert tools.memory.stats()["fact_count"] == 1  # nothing was written


def test_handle_leaves_other_tools_calls_alone(tools):
    replies = tools.handle([tool_call("get_weather", {"city": "Lyon"}, 0), tool_call("remember", {"fact": "I like tea"}, 1)])
    assert [r["tool_call_id"] for r in replies] == ["call_1"]


def test_handle_passes_over_entries_that_are_no_tool_call(tools):
    """A model's malformed ``tool_calls`` (a string, a list, a call whose ``function`` is not an object) raised
    ValueError or AttributeError out of the loop; they are no memory tool's call and are left out.
    """
    odd = ["x", ["id", "function"], None, 5, {"id": "c", "function": "remember"}, {"id": "d"}]
    replies = tools.handle([*odd, tool_call("remember", {"fact": "I like tea"}, 7)])
    assert [r["tool_call_id"] for r in replies] == ["call_7"]


def _summarized_chat(store, embedder, session: str = "chat") -> dict:
    """Conversation ``session`` of user u and agent a, five turns, its oldest summarized: that summary."""
    chat = SyncConversationMemory(store, session, user_id="u", agent_id="a", summarizer=lambda m, p: "summary",
                                  max_history_turns=2, preserve_recent_messages=2, embedding_model=embedder)
    for i in range(5):
        chat.add([{"role": "user", "content": f"{session} question {i}"},
                  {"role": "assistant", "content": f"answer {i}"}])
    return chat.manager.archive.summaries()[0]


def test_expand_a_summary_gives_the_messages_it_covers(default_embedder):
    store = open_store("sqlite:///:memory:")
    summary = _summarized_chat(store, default_embedder)
    tools = MemoryTools(PersistentMemory("u", "a", store=store, embedder=default_embedder))
    expanded = tools.call("expand", {"id": summary["id"], "session_id": "chat"})
    start, end = summary["covers"]
    assert [m["position"] for m in expanded["messages"]] == list(range(start, end + 1))
    assert expanded["messages"][0]["message"] == {"role": "user", "content": "chat question 0"}


def test_expand_a_summary_id_every_conversation_holds_gives_each_ones_messages(store_url, default_embedder):
    """A window manager's summary ids repeat in every conversation (``summary-0``, ...): expand without a
    session_id answered the first conversation's alone."""
    store = open_store(store_url)
    first, second = _summarized_chat(store, default_embedder, "c1"), _summarized_chat(store, default_embedder, "c2")
    assert first["id"] == second["id"]
    tools = MemoryTools(PersistentMemory("u", "a", store=store, embedder=default_embedder))
    expanded = tools.call("expand", {"id": first["id"]})["messages"]
    assert sorted({m["session_id"] for m in expanded}) == ["c1", "c2"]
    assert [m["session_id"] for m in tools.call("expand", {"id": first["id"], "session_id": "c2"})["messages"]] == [
        "c2"] * (second["covers"][1] - second["covers"][0] + 1)
    store.close()


def test_an_empty_session_id_looks_in_every_session(store_url, default_embedder):
    """expand with ``session_id: ""`` (a model fills an optional argument with "") was 'this write needs a
    session: Scope(session_id=...) is missing' for a summary's id or an unknown one, while a message's id was
    found: "" now means every session, as leaving it out does (and as a store's scope reads it)."""
    store = open_store(store_url)
    summary = _summarized_chat(store, default_embedder)
    tools = MemoryTools(PersistentMemory("u", "a", store=store, embedder=default_embedder))
    whole = tools.call("expand", {"id": summary["id"]})
    assert whole["messages"] and tools.call("expand", json.dumps({"id": summary["id"], "session_id": ""})) == whole
    assert tools.call("expand", {"id": "nope", "session_id": ""}) == {"error": "nothing in memory has the id 'nope'"}
    store.close()


def test_forget_deletes_one_sessions_message_when_its_id_repeats(store_url, default_embedder):
    """Message ids are the application's own ("1", "2", ... in each conversation): forget(id) deleted every
    message of the owner with that id, in every session, though the search hit named one. An id held in several
    sessions now needs the hit's session_id (an error naming the sessions, nothing deleted), and forget takes it."""
    store = open_store(store_url)
    for session, text in (("trip", "My passport number is X123"), ("work", "The deploy key rotates on Monday")):
        SyncConversationMemory(store, session, user_id="u", agent_id="a", embedding_model=default_embedder).add(
            [{"role": "user", "content": text, "id": "1"}])
    tools = MemoryTools(PersistentMemory("u", "a", store=store, embedder=default_embedder))
    hit = next(h for h in tools.call("search_memory", {"query": "passport number"})["results"] if h["id"] == "1")
    assert hit["session_id"] == "trip"
    refused = tools.call("forget", {"id": "1"})
    assert refused == {"error": "forget: the id '1' names messages in 2 sessions ('trip', 'work'): give the hit's "
                                "session_id"}
    assert tools.call("forget", {"id": "1", "session_id": "trip"}) == {"deleted": 1, "messages": 1, "summaries": 0, "facts": 0}
    kept = tools.call("expand", {"id": "1"})["messages"]
    assert [(m["session_id"], m["message"]["content"]) for m in kept] == [("work", "The deploy key rotates on Monday")]
    assert tools.call("forget", {"id": "1", "session_id": "trip"}) == {"error": "nothing in memory has the id '1'"}
    assert tools.call("forget", {"id": "1"}) == {"deleted": 1, "messages": 1, "summaries": 0, "facts": 0}  # one session holds it now
    store.close()


def test_expand_of_a_fact_or_pattern_without_messages_is_no_unknown_id(store_url, default_embedder):
    """expand of a fact search_memory had just returned said "nothing in memory has the id" when no archived message
    was behind it (a remembered fact, or one whose messages were forgotten), and so did a pattern's id from
    recall_patterns: the model was told what it had just found did not exist. Such an id has no messages; only an
    id memory does not hold is an error."""
    store = open_store(store_url)
    memory = PersistentMemory("u", "a", "s1", store=store, embedder=default_embedder)
    procedural = ProceduralMemory(store, user_id="u", agent_id="a", embedder=default_embedder)
    pattern = procedural.store_pattern("Analyze my weight trends", ["search", "trend"], 0.9, 100)
    tools = MemoryTools(memory, procedural)
    remembered = tools.call("remember", {"fact": "My city is Lyon"})["id"]
    memory.record_sync([{"role": "user", "content": "My dog is called Rex"}])
    hits = tools.call("search_memory", {"query": "my dog"})["results"]
    fact, message = (next(h for h in hits if h["kind"] == kind) for kind in ("fact", "message"))
    assert [m["id"] for m in tools.call("expand", {"id": fact["id"]})["messages"]] == [message["id"]]
    tools.call("forget", {"id": message["id"], "session_id": "s1"})
    for held in (remembered, fact["id"], pattern):
        assert tools.call("expand", {"id": held}) == {"recalled_from_memory": True, "id": held, "messages": []}, held
    tools.call("forget", {"id": remembered})
    assert tools.call("expand", {"id": remembered}) == {"error": f"nothing in memory has the id {remembered!r}"}
    store.close()


def test_a_strands_agent_calls_the_memory_tools(tools):
    pytest.importorskip("strands")
    from strands import Agent

    sys.path.insert(0, str(Path(__file__).parents[1] / "strands"))
    from strands_scripted import AGENT_PROMPT, ScriptedModel

    model = ScriptedModel([("tool", "remember", {"fact": "My city is Lyon"}),
                           ("tool", "search_memory", {"query": "which city do I live in?"}),
                           "You live in Lyon."])
    agent = Agent(model=model, system_prompt=AGENT_PROMPT, tools=tools.strands_tools(), callback_handler=None)
    agent("Remember my city is Lyon, then tell me where I live.")
    assert [f.value for f in tools.memory.facts.current(attribute="city")] == ["Lyon"]
    specs = {s["name"] for s in model.agent_calls[0]["tool_specs"]}
    assert specs == {"search_memory", "expand", "remember", "forget", "recall_patterns"}
    last = model.agent_calls[-1]["messages"][-1]
    (result,) = [b["toolResult"] for b in last["content"] if "toolResult" in b]
    assert result["status"] == "success"
    assert json.loads(result["content"][0]["text"])["results"][0]["text"] == "My city is Lyon"


def test_the_strands_tools_refuse_a_misspelled_argument_as_the_dispatcher_does(tools):
    """A Strands tool took only the arguments of its Python signature: ``forget`` with ``sesion_id`` (a typo)
    dropped it and deleted the message from whichever session held the id. Now the model's input goes through
    the dispatcher's checks: the call is an error result, and nothing is deleted."""
    pytest.importorskip("strands")
    from strands import Agent

    sys.path.insert(0, str(Path(__file__).parents[1] / "strands"))
    from strands_scripted import AGENT_PROMPT, ScriptedModel

    remembered = tools.call("remember", {"fact": "My locker code is 4417"})["id"]
    model = ScriptedModel([("tool", "forget", {"id": remembered, "sesion_id": "c2"}),
                           ("tool", "search_memory", {"query": "locker", "limit": "2"}), "Done."])
    agent = Agent(model=model, system_prompt=AGENT_PROMPT, tools=tools.strands_tools(), callback_handler=None)
    agent("Forget my locker code from the other conversation.")
    results = [b["toolResult"] for call in model.agent_calls for m in call["messages"][-1:] for b in m["content"]
               if "toolResult" in b]
    assert [r["status"] for r in results] == ["error", "error"]
    assert json.loads(results[0]["content"][0]["text"]) == tools.call("forget", {"id": remembered, "sesion_id": "c2"})
    assert "unknown argument 'sesion_id'" in results[0]["content"][0]["text"]
    assert "'limit' must be a positive integer" in results[1]["content"][0]["text"]
    assert tools.call("expand", {"id": remembered})["id"] == remembered  # still remembered


def test_a_search_result_recorded_with_its_turn_is_never_found_as_a_new_copy(store_url, default_embedder):
    """The agent's turn, the search_memory tool result included, is recorded: the result (which quotes old
    messages) is stored verbatim, but it is not indexed as what it quotes, so a later search finds each old
    message once, not again as the tool result."""
    memory = PersistentMemory("u", "a", "s1", store=store_url, embedder=default_embedder)
    try:
        tools = MemoryTools(memory)
        asyncio.run(memory.record([{"role": "user", "content": "My locker code is 4417."},
                                   {"role": "assistant", "content": "Noted."}]))
        call = tool_call("search_memory", {"query": "locker code"})
        (reply,) = tools.handle([call])
        assert "4417" in reply["content"]
        turn = [{"role": "user", "content": "Which locker is mine?"},
                {"role": "assistant", "content": None, "tool_calls": [call]}, reply,
                {"role": "assistant", "content": "Your locker code is on file."}]
        asyncio.run(memory.record(turn))
        assert reply in [m.data for m in memory.messages()]  # recorded, word for word
        hits = tools.call("search_memory", {"query": "locker code 4417", "limit": 3})["results"]
        assert [h["role"] for h in hits if h["kind"] == "message" and "4417" in h["text"]] == ["user"]
        expanded = tools.call("expand", {"id": next(h["id"] for h in hits if h["role"] == "user")})
        asyncio.run(memory.record([{"role": "tool", "tool_call_id": "call_9", "content": json.dumps(expanded)}]))
        again = tools.call("search_memory", {"query": "locker code 4417", "limit": 3})["results"]
        assert [h["role"] for h in again if h["kind"] == "message" and "4417" in h["text"]] == ["user"]
    finally:
        memory.close()

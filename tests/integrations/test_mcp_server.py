"""``fullrecall mcp``: a real MCP client lists and calls every tool, in process, over stdio and over HTTP."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

mcp = pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

from fullrecall.integrations.mcp_server import create_server  # noqa: E402
from fullrecall.memory import PersistentMemory, ProceduralMemory  # noqa: E402
from fullrecall.stores import Scope, open_store  # noqa: E402
from fullrecall.stores._servers import free_port  # noqa: E402

TOOLS = {"search_memory", "expand", "remember", "forget", "recall_patterns", "append_messages", "get_context"}
SRC = str(Path(__file__).resolve().parents[2] / "src")


def run(client_factory: Callable[[], Client], scenario: Callable[[Client], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with client_factory() as client:
            return await scenario(client)

    return asyncio.run(main())


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """A tool's structured result (the call must succeed)."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, (tool, args, result.content)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def error(client: Client, tool: str, args: Any) -> str:
    """A tool call that must come back as a tool error; its text."""
    result = await client.call_tool(tool, args)
    assert result.is_error, (tool, args, result)
    return " ".join(getattr(c, "text", "") for c in result.content)


def seed_pattern(store: Any, user: str = "u", agent: str = "a") -> None:
    procedural = ProceduralMemory(store, user_id=user, agent_id=agent)
    procedural.store_pattern("Analyze my weight trends over time", ["search_records", "aggregate", "trend"], 0.9, 900)


async def every_tool(client: Client) -> None:
    """List the tools and call each one; their answers fit together (what is written is read back, then gone)."""
    listed = {t.name: t for t in (await client.list_tools()).tools}
    assert set(listed) == TOOLS
    assert all(t.description and t.input_schema["type"] == "object" for t in listed.values())

    turn = [{"role": "user", "content": "My locker code is 4417.", "id": "m1"},
            {"role": "assistant", "content": "Noted: locker 4417.", "id": "m2"}]
    assert (await call(client, "append_messages", {"session_id": "s1", "messages": turn}))["received"] == 2
    await call(client, "append_messages", {"session_id": "s1", "messages": turn})  # a retry stores nothing new
    context = await call(client, "get_context", {"session_id": "s1"})
    assert [m["content"] for m in context["messages"]] == [m["content"] for m in turn]
    assert context["tokens"] > 0 and context["left_out"] == 0

    fact = await call(client, "remember", {"fact": "My city is Lyon"})
    assert (fact["attribute"], fact["value"]) == ("city", "Lyon")

    hits = (await call(client, "search_memory", {"query": "locker code", "limit": 3}))["results"]
    message = next(h for h in hits if h["kind"] == "message" and "4417" in h["text"])
    expanded = await call(client, "expand", {"id": message["id"], "session_id": message["session_id"]})
    assert any(m["message"]["content"] == "My locker code is 4417." for m in expanded["messages"])
    assert any(h["id"] == fact["id"] for h in (await call(client, "search_memory", {"query": "which city"}))["results"])

    plan = await call(client, "recall_patterns", {"task": "analyze my weight trend"})
    assert plan["patterns"] and plan["plan"]["suggested_tools"] == ["search_records", "aggregate", "trend"]

    assert (await call(client, "forget", {"id": fact["id"]}))["deleted"] >= 1
    after = (await call(client, "search_memory", {"query": "which city"}))["results"]
    assert fact["id"] not in [h["id"] for h in after]


# -- in process, on every backend ----------------------------------------------------------------
def test_every_tool_on_every_backend(store_url: str, default_embedder: Any) -> None:
    store = open_store(store_url)
    seed_pattern(store)
    server = create_server(store, user_id="u", agent_id="a", embedder=default_embedder)
    run(lambda: Client(server), every_tool)


BAD_CALLS = [
    ("search_memory", {}, "query"),
    ("search_memory", {"query": 3}, "query"),
    ("search_memory", {"query": "   "}, "query"),
    ("search_memory", {"query": "x", "limit": 0}, "limit"),
    ("search_memory", {"query": "x", "limit": "many"}, "limit"),
    ("expand", {"id": "no-such-id"}, "no-such-id"),
    ("remember", {"fact": ""}, "fact"),
    ("remember", {"fact": ["a"]}, "fact"),
    ("forget", {"id": "no-such-id"}, "no-such-id"),
    ("recall_patterns", {}, "task"),
    ("append_messages", {"session_id": "s", "messages": "hello"}, "messages"),
    ("append_messages", {"session_id": "", "messages": [{"role": "user", "content": "x"}]}, "session_id"),
    ("append_messages", {"session_id": "s", "messages": [{"role": "user", "content": "fine"}, {"role": "bogus"}]},
     "message 1"),
    ("append_messages", {"session_id": "s\x00", "messages": [{"role": "user", "content": "x"}]}, "session_id"),
    ("append_messages", {"session_id": "s", "messages": [{"role": "user", "content": "one", "id": "x"},
                                                         {"role": "user", "content": "two", "id": "x"}]},
     "message 1: 'id' 'x' is also message 0's"),
    ("append_messages", {"session_id": "s", "messages": []}, "messages"),
    ("append_messages", {"session_id": "s", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call-9", "content": "42"}]}, "message 1: tool result 'call-9' answers no tool call"),
    ("get_context", {"session_id": "s", "max_tokens": 0}, "max_tokens"),
    ("get_context", {"session_id": "s\x00"}, "session_id"),
    ("expand", {"id": "m1", "session_id": "s\x00"}, "session_id"),
    ("no_such_tool", {}, "no_such_tool"),
]


def test_bad_arguments_are_tool_errors_and_write_nothing(default_embedder: Any) -> None:
    store = open_store("sqlite:///:memory:")
    server = create_server(store, user_id="u", embedder=default_embedder)

    async def scenario(client: Client) -> None:
        for tool, args, named in BAD_CALLS:
            assert named in await error(client, tool, args)
        assert (await call(client, "get_context", {"session_id": "s"}))["messages"] == []  # nothing partial
        assert (await call(client, "search_memory", {"query": "fine"}))["results"] == []  # the server still serves

    run(lambda: Client(server), scenario)


def test_a_tool_result_answers_a_call_of_the_same_append_or_of_the_window(default_embedder: Any) -> None:
    """An orphaned tool result was stored (the service's route refuses it): every later context then held a
    result no tool call asked for, which model providers refuse."""
    server = create_server(open_store("sqlite:///:memory:"), user_id="u", embedder=default_embedder)
    ask = {"role": "assistant", "content": None,
           "tool_calls": [{"id": "call-1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}

    async def scenario(client: Client) -> None:
        await call(client, "append_messages", {"session_id": "s", "messages": [{"role": "user", "content": "2+2?"}, ask]})
        answer = {"role": "tool", "tool_call_id": "call-1", "content": "4"}
        await call(client, "append_messages", {"session_id": "s", "messages": [answer]})  # its call is in the window
        assert "call-2" in await error(client, "append_messages", {"session_id": "s", "messages": [
            {"role": "tool", "tool_call_id": "call-2", "content": "5"}]})
        assert len((await call(client, "get_context", {"session_id": "s"}))["messages"]) == 3  # nothing partial

    run(lambda: Client(server), scenario)


def test_get_context_keeps_to_the_token_budget(default_embedder: Any) -> None:
    server = create_server("sqlite:///:memory:", user_id="u", embedder=default_embedder)
    turns = [m for i in range(6) for m in ({"role": "user", "content": f"question {i} " + "word " * 40},
                                           {"role": "assistant", "content": f"answer {i}"})]
    messages = [{"role": "system", "content": "Be brief."}, *turns]

    async def scenario(client: Client) -> None:
        await call(client, "append_messages", {"session_id": "s", "messages": messages})
        whole = await call(client, "get_context", {"session_id": "s"})
        budget = whole["tokens"] // 2
        part = await call(client, "get_context", {"session_id": "s", "max_tokens": budget})
        kept = part["messages"]
        assert part["tokens"] <= budget < whole["tokens"] and part["left_out"] > 0
        assert kept[0] == whole["messages"][0] and kept[1]["role"] == "user"  # the system prompt stays; whole turns
        assert kept[1:] == whole["messages"][1 + part["left_out"]:]  # the newest messages, in order
        assert "max_tokens" in await error(client, "get_context", {"session_id": "s", "max_tokens": 5})

    run(lambda: Client(server), scenario)


@pytest.fixture(scope="module")
def budget_server(default_embedder: Any) -> Any:
    return create_server("sqlite:///:memory:", user_id="u", embedder=default_embedder)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(system=st.booleans(), turns=st.lists(st.tuples(st.integers(1, 60), st.integers(0, 3)), min_size=1, max_size=6),
       budget=st.integers(1, 600))
def test_get_context_is_the_newest_whole_turns_that_fit(budget_server: Any, system: bool,
                                                        turns: list[tuple[int, int]], budget: int) -> None:
    messages = [{"role": "system", "content": "Be brief."}] if system else []
    for i, (words, replies) in enumerate(turns):
        messages.append({"role": "user", "content": f"q{i} " + "word " * words})
        messages += [{"role": "assistant", "content": f"a{i}.{j}"} for j in range(replies)]
    session = f"s{uuid.uuid4().hex}"

    async def scenario(client: Client) -> None:
        await call(client, "append_messages", {"session_id": session, "messages": messages})
        whole = await call(client, "get_context", {"session_id": session})
        result = await client.call_tool("get_context", {"session_id": session, "max_tokens": budget})
        last_user = max(i for i, m in enumerate(whole["messages"]) if m["role"] == "user")
        if result.is_error:  # only when not even the newest turn fits: it names what would
            text = result.content[0].text
            needed = int(re.search(r"newest turn's (\d+) tokens", text).group(1))
            newest = await call(client, "get_context", {"session_id": session, "max_tokens": needed})
            assert "max_tokens" in text and needed > budget and newest["tokens"] == needed
            assert newest["left_out"] == last_user - int(system)
            return
        part = result.structured_content
        assert part is not None and part["tokens"] <= budget
        pinned = whole["messages"][:1] if system else []
        kept = part["messages"][len(pinned):]
        assert part["messages"][:len(pinned)] == pinned
        assert kept == whole["messages"][len(pinned) + part["left_out"]:] and kept[0]["role"] == "user"
        more = await call(client, "get_context", {"session_id": session, "max_tokens": budget * 2})
        assert more["left_out"] <= part["left_out"]  # a larger budget never leaves out more

    run(lambda: Client(budget_server), scenario)


def test_one_users_memory_never_reaches_another(default_embedder: Any) -> None:
    store = open_store("sqlite:///:memory:")
    alice = create_server(store, user_id="alice", embedder=default_embedder)
    bob = create_server(store, user_id="bob", embedder=default_embedder)
    fact = run(lambda: Client(alice), lambda c: call(c, "remember", {"fact": "My city is Lyon"}))
    run(lambda: Client(alice), lambda c: call(c, "append_messages", {
        "session_id": "s", "messages": [{"role": "user", "content": "my locker code is 4417"}]}))

    async def as_bob(client: Client) -> None:
        assert (await call(client, "search_memory", {"query": "city Lyon locker code"}))["results"] == []
        assert (await call(client, "get_context", {"session_id": "s"}))["messages"] == []
        await error(client, "expand", {"id": fact["id"]})
        await error(client, "forget", {"id": fact["id"]})

    run(lambda: Client(bob), as_bob)
    found = run(lambda: Client(alice), lambda c: call(c, "search_memory", {"query": "city"}))
    assert fact["id"] in [h["id"] for h in found["results"]]  # bob's forget deleted nothing


def test_the_owner_hook_decides_or_refuses_each_call(default_embedder: Any) -> None:
    store = open_store("sqlite:///:memory:")
    chosen = create_server(store, user_id="alice", embedder=default_embedder, owner=lambda request: Scope(user_id="bob", agent_id="x"))
    fact = run(lambda: Client(chosen), lambda c: call(c, "remember", {"fact": "My city is Lyon"}))
    bob = create_server(store, user_id="bob", agent_id="x", embedder=default_embedder)
    found = run(lambda: Client(bob), lambda c: call(c, "search_memory", {"query": "city"}))
    assert fact["id"] in [h["id"] for h in found["results"]]

    def refuse(request: Any) -> Scope:
        raise PermissionError("this caller may not act for anyone")

    refused = create_server(store, user_id="bob", agent_id="x", embedder=default_embedder, owner=refuse)

    async def scenario(client: Client) -> None:
        for tool, args in [("search_memory", {"query": "city"}), ("forget", {"id": fact["id"]}),
                           ("get_context", {"session_id": "s"})]:
            assert "may not act" in await error(client, tool, args)

    run(lambda: Client(refused), scenario)
    assert fact["id"] in [h["id"] for h in run(lambda: Client(bob), lambda c: call(c, "search_memory",
                                                                                   {"query": "city"}))["results"]]


# -- over stdio and over HTTP: the ``fullrecall mcp`` command ------------------------------------
def command(db: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "fullrecall.cli.main", "mcp", "--store", f"sqlite:///{db}", "--user", "u",
            "--agent", "a", *extra]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}


def test_every_tool_over_stdio(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    seed_pattern(f"sqlite:///{db}")
    cmd = command(db)
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=environment())
    run(lambda: Client(params, read_timeout_seconds=60), every_tool)


def test_the_command_uses_the_store_every_command_uses(tmp_path: Path, default_embedder: Any) -> None:
    """Without ``--store``, ``fullrecall mcp`` opens ``$FULLRECALL_STORE``, as every command does."""
    db = tmp_path / "env.db"
    cmd = [c for c in command(db) if c not in ("--store", f"sqlite:///{db}")]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:],
                                   env={**environment(), "FULLRECALL_STORE": f"sqlite:///{db}"})
    fact = run(lambda: Client(params, read_timeout_seconds=60),
               lambda c: call(c, "remember", {"fact": "My locker code is 4417"}))
    memory = PersistentMemory(user_id="u", agent_id="a", store=f"sqlite:///{db}", embedder=default_embedder)
    try:
        assert fact["id"] in [hit.id for hit in memory.search("locker code", 5)]
    finally:
        memory.close()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    """``fullrecall mcp --transport http`` on a free port; its endpoint URL."""
    db, port, log = tmp_path / "memory.db", free_port(), tmp_path / "server.log"
    seed_pattern(f"sqlite:///{db}")
    with log.open("wb") as out:
        proc = subprocess.Popen(command(db, "--transport", "http", "--port", str(port)), env=environment(),
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"fullrecall mcp did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_every_tool_over_http_with_the_scope_of_the_request(http_server: str) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    run(lambda: Client(http_server, read_timeout_seconds=60), every_tool)

    def as_user(user: str) -> Client:
        http = httpx2.AsyncClient(headers={"X-Fullrecall-User": user, "X-Fullrecall-Agent": "a"}, timeout=60)
        return Client(streamable_http_client(http_server, http_client=http))

    fact = run(lambda: as_user("carol"), lambda c: call(c, "remember", {"fact": "My city is Oslo"}))
    carol = run(lambda: as_user("carol"), lambda c: call(c, "search_memory", {"query": "city"}))
    assert fact["id"] in [h["id"] for h in carol["results"]]
    default = run(lambda: Client(http_server), lambda c: call(c, "search_memory", {"query": "city Oslo"}))
    assert fact["id"] not in [h["id"] for h in default["results"]]  # the command line's user "u" does not see it


def test_forget_deletes_a_message_search_memory_found(store_url: str, default_embedder: Any) -> None:
    """append_messages keeps a conversation; search_memory finds its messages, so forget must delete them by id
    (it answered "nothing in memory has the id": it looked only in the sessions long-term memory had recorded into).
    """
    store = open_store(store_url)
    server = create_server(store, user_id="u", embedder=default_embedder)
    other = create_server(store, user_id="someone-else", embedder=default_embedder)

    async def scenario(client: Client) -> None:
        said = [{"role": "user", "content": "My bank PIN is 8812.", "id": "pin"},
                {"role": "assistant", "content": "Noted.", "id": "ack"}]
        await call(client, "append_messages", {"session_id": "chat", "messages": said})
        hit = next(h for h in (await call(client, "search_memory", {"query": "bank PIN"}))["results"] if h["id"] == "pin")
        assert hit["session_id"] == "chat"
        gone = await call(client, "forget", {"id": "pin"})
        assert gone["deleted"] == 1 and gone["messages"] == 1
        assert "pin" not in [h["id"] for h in (await call(client, "search_memory", {"query": "bank PIN"}))["results"]]
        assert [m["id"] for m in (await call(client, "get_context", {"session_id": "chat"}))["messages"]] == ["ack"]

    async def stranger(client: Client) -> None:  # another owner's forget reaches nothing of u's
        await error(client, "forget", {"id": "ack"})

    run(lambda: Client(server), scenario)
    run(lambda: Client(other), stranger)
    assert [m.id for m in store.range(Scope(user_id="u", session_id="chat"), 0, 10)] == ["ack"]
    store.close()


def test_the_tool_schemas_say_what_the_tools_accept(default_embedder: Any) -> None:
    """search_memory's schema let any integer be a limit (the tool refused one below 1), and a limit or budget of
    true, "2" or 1.0 was taken as a number (true as a budget of 1 token), which the same tools' OpenAI schemas and
    dispatcher refuse: each is now a tool error naming the argument, and the schema says so."""
    from fullrecall.memory import MemoryTools

    store = open_store("sqlite:///:memory:")
    openai = {s["function"]["name"]: s["function"]["parameters"]
              for s in MemoryTools(PersistentMemory("u", store=store, embedder=default_embedder),
                                   ProceduralMemory(store, embedder=default_embedder)).schemas()}
    server = create_server(store, user_id="u", embedder=default_embedder)

    def accepted(prop: dict[str, Any]) -> dict[str, Any]:  # the non-null branch of an optional argument
        branch = next((b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"), prop)
        return {k: v for k, v in branch.items() if k in ("type", "minimum")}

    async def scenario(client: Client) -> None:
        listed = {t.name: t.input_schema for t in (await client.list_tools()).tools}
        for name, params in openai.items():
            assert set(listed[name]["required"]) == set(params["required"]), name
            assert {k: accepted(v) for k, v in listed[name]["properties"].items()} == \
                {k: accepted(v) for k, v in params["properties"].items()}, name
        await call(client, "append_messages", {"session_id": "s", "messages": [{"role": "user", "content": "hi"}]})
        for tool, args, named in [("search_memory", {"query": "x", "limit": value}, "limit")
                                  for value in (True, "2", 1.0, 0)] + [
                ("get_context", {"session_id": "s", "max_tokens": value}, "max_tokens") for value in (True, "100")]:
            assert named in await error(client, tool, args), (tool, args)
        assert (await call(client, "get_context", {"session_id": "s", "max_tokens": 100}))["tokens"] > 0

    run(lambda: Client(server), scenario)


TOOL_EXCHANGES = {  # a question, a tool call, its result in a user message (Anthropic, Bedrock), the answer
    "anthropic": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "calc", "input": {"x": 6}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]}],
    "bedrock": [{"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "calc", "input": {"x": 6}}}]},
                {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "42"}]}}]}],
}


@pytest.mark.parametrize("shape", sorted(TOOL_EXCHANGES))
def test_get_context_never_starts_at_a_tool_result(store_url: str, default_embedder: Any, shape: str) -> None:
    """A tool result in a user message (Anthropic, Bedrock) was taken for a turn's start: a budget could leave its
    tool call out and begin the context at the orphaned result, which no model provider accepts."""
    store = open_store(store_url)
    server = create_server(store, user_id="u", embedder=default_embedder)
    text = [{"type": "text", "text": "What is 6 times 7? " + "please " * 30}] if shape == "anthropic" else \
        [{"text": "What is 6 times 7? " + "please " * 30}]
    answer = [{"type": "text", "text": "It is 42."}] if shape == "anthropic" else [{"text": "It is 42."}]
    conversation = [{"role": "user", "content": text}, *TOOL_EXCHANGES[shape], {"role": "assistant", "content": answer},
                    {"role": "user", "content": text}]

    async def scenario(client: Client) -> None:
        await call(client, "append_messages", {"session_id": "s", "messages": conversation})
        whole = await call(client, "get_context", {"session_id": "s"})
        assert whole["messages"] == conversation
        for budget in range(1, whole["tokens"] + 1):
            result = await client.call_tool("get_context", {"session_id": "s", "max_tokens": budget})
            if not result.is_error:
                assert result.structured_content is not None
                first = result.structured_content["messages"][0]
                assert first["role"] == "user" and first["content"] == text, (budget, first)

    run(lambda: Client(server), scenario)
    store.close()


@pytest.mark.parametrize("extra, named", [(["--transport", "http", "--port", "70000"], "argument --port: 70000 is no port"),
                                          (["--transport", "http", "--port", "0"], "argument --port: 0 is no port"),
                                          (["--user", "x" * 300], "'user_id' is 300 bytes long")])
def test_the_command_refuses_a_port_or_owner_it_cannot_serve(tmp_path: Path, extra: list[str], named: str) -> None:
    """--port 70000 ended in a traceback (bind(): port must be 0-65535); a --user no store keeps served a memory
    whose every call was then a tool error. Each is refused at once, naming the option (exit code 2)."""
    done = subprocess.run(command(tmp_path / "memory.db", *extra), env=environment(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert done.returncode == 2 and named in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "memory.db").exists()  # refused before the store was opened


def test_the_server_refuses_what_the_services_mcp_refuses(store_url: str, default_embedder: Any) -> None:
    """``fullrecall mcp`` stored a NUL in a fact, a query or a message (the service's ``/mcp`` refuses each, naming
    it) and wrote a conversation under a blank session id; both servers now refuse the same calls, writing nothing."""
    store = open_store(store_url)
    server = create_server(store, user_id="u", embedder=default_embedder)
    hi = [{"role": "user", "content": "hi"}]
    refused = [("remember", {"fact": "My PIN is 12\x0034"}, "fact"), ("search_memory", {"query": "PIN\x00"}, "query"),
               ("recall_patterns", {"task": "book\x00"}, "task"),
               ("append_messages", {"session_id": "s", "messages": [{"role": "user", "content": "h\x00i"}]},
                "messages[0].content"),
               ("append_messages", {"session_id": "s", "messages": [{"role": "user", "content": "\ud800"}]},
                "messages[0].content"),
               ("append_messages", {"session_id": "  ", "messages": hi}, "session_id"),
               ("append_messages", {"session_id": "\t\n", "messages": hi}, "session_id"),
               ("get_context", {"session_id": " "}, "session_id")]

    async def scenario(client: Client) -> None:
        for tool, args, named in refused:
            text = await error(client, tool, args)
            assert named in text, (tool, args, text)
        assert (await call(client, "remember", {"fact": "My PIN is 1234"}))["value"]  # the server still serves

    run(lambda: Client(server), scenario)
    owner = Scope(user_id="u", agent_id="")
    assert [store.count(Scope(user_id="u", agent_id="", session_id=s)) for s in ("s", "  ", "\t\n", " ")] == [0] * 4
    assert [r.text for r in store.get_records(owner, "facts")] == ["My PIN is 1234"]


def test_forget_and_expand_refuse_a_blank_session_id_and_take_an_empty_one_for_none(store_url: str,
                                                                                     default_embedder: Any) -> None:
    """A ``session_id`` of whitespace or invisible characters names no conversation (the docs refuse it on every
    tool): ``"   "`` and a zero-width space were read as sessions' names ("nothing in memory has the id"). An empty
    one is none, as the memory tools take it (a model fills an optional argument with ""): ``expand`` with it found
    nothing for a message's id, though it looks in every session."""
    store = open_store(store_url)
    server = create_server(store, user_id="u", embedder=default_embedder)
    badge = [{"role": "user", "content": "my badge is 88231", "id": "m1"}]

    async def scenario(client: Client) -> None:
        for session in ("c1", "c2"):
            await call(client, "append_messages", {"session_id": session, "messages": badge})
        for tool in ("forget", "expand"):
            for blank in ("   ", "\u200b"):
                text = await error(client, tool, {"id": "m1", "session_id": blank})
                assert "'session_id'" in text and "blank" in text, (tool, blank, text)
        whole = await call(client, "expand", {"id": "m1"})
        assert sorted(m["session_id"] for m in whole["messages"]) == ["c1", "c2"]
        assert await call(client, "expand", {"id": "m1", "session_id": ""}) == whole
        assert "2 sessions" in await error(client, "forget", {"id": "m1", "session_id": ""})

    run(lambda: Client(server), scenario)
    assert [store.count(Scope(user_id="u", agent_id="", session_id=s)) for s in ("c1", "c2")] == [1, 1]
    store.close()


def test_an_unknown_argument_is_refused_naming_it_and_nothing_is_done(default_embedder: Any) -> None:
    """The SDK dropped an argument a tool does not take: ``forget`` with a misspelled ``sesion_id`` deleted the
    message by its id alone, ``append_messages`` with an extra argument wrote. Every tool now refuses an unknown
    argument as the memory tools' own dispatcher does, in its words, and the schemas say so."""
    from fullrecall.memory import MemoryTools
    from fullrecall.memory.facts import NAMESPACE as FACTS

    store = open_store("sqlite:///:memory:")
    server = create_server(store, user_id="u", embedder=default_embedder)
    tools = MemoryTools(PersistentMemory("u", store=store, embedder=default_embedder),
                        ProceduralMemory(store, embedder=default_embedder))
    said = [{"role": "user", "content": "My bank PIN is 8812.", "id": "pin"}]
    calls = [("forget", {"id": "pin", "sesion_id": "other"}, "sesion_id"),
             ("search_memory", {"query": "PIN", "limt": 2}, "limt"),
             ("expand", {"id": "pin", "session": "chat"}, "session"),
             ("remember", {"fact": "My city is Lyon", "user_id": "bob"}, "user_id"),
             ("recall_patterns", {"task": "x", "top_k": 1}, "top_k"),
             ("append_messages", {"session_id": "chat", "messages": said, "sessionid": "x"}, "sessionid"),
             ("get_context", {"session_id": "chat", "max_token": 10}, "max_token")]

    async def scenario(client: Client) -> None:
        assert all(t.input_schema["additionalProperties"] is False for t in (await client.list_tools()).tools)
        await call(client, "append_messages", {"session_id": "chat", "messages": said})
        for tool, args, named in calls:
            text = await error(client, tool, args)
            assert f"unknown argument {named!r}" in text, (tool, text)
            if tool in tools.names:  # the memory tools' own words
                assert text == f"Error executing tool {tools.call(tool, args)['error']}", (tool, text)

    run(lambda: Client(server), scenario)
    assert [m.id for m in store.range(Scope(user_id="u", session_id="chat"), 0, 10)] == ["pin"]
    assert not any("Lyon" in r.text for r in store.get_records(Scope(user_id="u"), FACTS))  # remember kept nothing


def test_a_blank_user_or_agent_is_refused_by_create_server_and_by_the_command(tmp_path: Path,
                                                                              default_embedder: Any) -> None:
    """An owner nobody can see or type (``" "``, a zero-width space) is refused as the library refuses it: by
    ``create_server`` and by ``fullrecall mcp --user`` before the store is made."""
    from fullrecall.cli.main import main
    from fullrecall.errors import InvalidInput

    said = "'{}' {!r} is blank (whitespace or invisible characters only): name an owner, or leave it out for none"
    store = open_store(f"sqlite:///{tmp_path / 'memory.db'}")
    for field in ("user_id", "agent_id"):
        with pytest.raises(InvalidInput) as refused:
            create_server(store, embedder=default_embedder, **{field: "\u200b"})
        assert str(refused.value) == said.format(field, "\u200b")
    store.close()
    db = tmp_path / "cli.db"
    assert main(["mcp", "--user", " ", "--store", f"sqlite:///{db}"]) == 2 and not db.exists()


def test_a_call_whose_header_names_a_blank_user_is_refused(http_server: str) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    def as_user(user: str) -> Client:  # sent as UTF-8, as a client writes it
        http = httpx2.AsyncClient(headers={"X-Fullrecall-User": user.encode()}, timeout=60)
        return Client(streamable_http_client(http_server, http_client=http))

    text = run(lambda: as_user("\u200b"), lambda c: error(c, "remember", {"fact": "My city is Oslo"}))
    assert text.endswith("'user_id' '\\u200b' is blank (whitespace or invisible characters only): name an owner, or "
                         "leave it out for none"), text

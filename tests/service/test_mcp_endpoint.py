"""``/mcp`` in the service: a real MCP client over HTTP, the tenant from the API key, the key's users enforced."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("mcp")
pytest.importorskip("uvicorn")

import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402


@pytest.fixture
def served(live: tuple[str, Any]) -> tuple[str, Any]:
    """The service under uvicorn on a free port: its /mcp URL and its Service."""
    return f"{live[0]}/mcp", live[1]


def client(url: str, key: str, user: str | None = None) -> Client:
    headers = {"Authorization": f"Bearer {key}", **({"X-Fullrecall-User": user} if user else {})}
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=60)))


async def structured(c: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await c.call_tool(tool, args)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def test_mcp_in_the_service_keeps_tenants_and_users_apart(served: tuple[str, Any]) -> None:
    url, service = served
    for headers in ({}, {"Authorization": "Bearer not-a-key"}):  # no key, no MCP
        response = httpx2.post(url, headers={**headers, "Accept": "application/json, text/event-stream"},
                               json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert response.status_code == 401 and response.json()["error"]["type"] == "unauthorized"
    key_a, _ = service.keys.create("tenant-a")
    key_b, _ = service.keys.create("tenant-b")
    key_ann, _ = service.keys.create("tenant-a", users=["ann"])
    turn = [{"role": "user", "content": "My locker code is 4417.", "id": "m1"},
            {"role": "assistant", "content": "Noted.", "id": "m2"}]

    async def scenario() -> None:
        async with client(url, key_a, "ann") as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert {"search_memory", "expand", "remember", "forget", "recall_patterns", "append_messages",
                    "get_context"} <= names
            fact = await structured(c, "remember", {"fact": "My city is Lyon"})
            await structured(c, "append_messages", {"session_id": "s1", "messages": turn})
            await structured(c, "append_messages", {"session_id": "s1", "messages": turn})  # a retry stores once
            context = await structured(c, "get_context", {"session_id": "s1"})
            assert [m["content"] for m in context["messages"]] == [m["content"] for m in turn]
            tiny = await c.call_tool("get_context", {"session_id": "s1", "max_tokens": 1})  # as /context: an error
            assert tiny.is_error and "'max_tokens' 1 is below the newest message's" in tiny.content[0].text
            assert fact["id"] in [h["id"] for h in (await structured(c, "search_memory", {"query": "city"}))["results"]]
            assert "message 0" in " ".join(x.text for x in (await c.call_tool(
                "append_messages", {"session_id": "s1", "messages": [{"role": "bogus"}]})).content)
        async with client(url, key_ann, "ann") as c:  # the same tenant and user through a key limited to ann
            assert fact["id"] in [h["id"] for h in (await structured(c, "search_memory", {"query": "city"}))["results"]]
        async with client(url, key_ann, "bob") as c:  # a key limited to ann may not act for bob
            refused = await c.call_tool("search_memory", {"query": "city"})
            assert refused.is_error and "bob" in refused.content[0].text
        async with client(url, key_b, "ann") as c:  # another tenant's "ann" sees nothing of tenant-a's
            assert (await structured(c, "search_memory", {"query": "city Lyon"}))["results"] == []
            unknown = await c.call_tool("get_context", {"session_id": "s1"})
            assert unknown.is_error and "not found" in unknown.content[0].text
            assert (await c.call_tool("forget", {"id": fact["id"]})).is_error

    asyncio.run(scenario())
    # what went through /mcp is the service's own conversation
    ok = service.conversations.window(_scope("tenant-a", "ann", "s1"))
    assert [(m["id"], m["message"]["content"]) for m in ok] == [(m["id"], m["content"]) for m in turn]


def _scope(tenant: str, user: str, session: str) -> Any:
    from fullrecall.stores import Scope

    return Scope(tenant=tenant, user_id=user, session_id=session)


def test_mcp_conversations_are_ones_the_routes_can_reach(served: tuple[str, Any]) -> None:
    url, service = served
    key, _ = service.keys.create("tenant-a")
    long_id = "x" * 201  # over the 200 characters of /v1/conversations/{id}: no route could read or forget it

    async def scenario() -> None:
        async with client(url, key) as c:
            for session in (long_id, "..", "a/./b"):  # a dot segment: no URL carries it to the routes
                for tool, args in (("append_messages", {"session_id": session, "messages": [
                        {"role": "user", "content": "hi"}]}), ("get_context", {"session_id": session})):
                    refused = await c.call_tool(tool, args)
                    assert refused.is_error and "session_id" in refused.content[0].text, refused.content

    asyncio.run(scenario())
    from fullrecall.stores import Scope

    assert service.store.stats(Scope(tenant="tenant-a"))["message_count"] == 0


def test_mcp_refuses_nul_in_long_term_memory_as_the_routes_do(served: tuple[str, Any]) -> None:
    url, service = served
    key, _ = service.keys.create("tenant-a")

    async def scenario() -> None:
        async with client(url, key) as c:
            for tool, args, name in (("remember", {"fact": "My PIN is 12\x0034"}, "fact"),
                                     ("search_memory", {"query": "PIN\x00"}, "query")):
                refused = await c.call_tool(tool, args)
                assert refused.is_error and name in refused.content[0].text, refused.content
                assert "NUL" in refused.content[0].text, refused.content
            await structured(c, "remember", {"fact": "My PIN is 1234"})  # and the owner's memory goes on

    asyncio.run(scenario())
    from fullrecall.stores import Scope

    facts = service.store.get_records(Scope(tenant="tenant-a", user_id="", agent_id=""), "facts")
    assert [r.text for r in facts] == ["My PIN is 1234"]


def test_mcp_refuses_two_messages_under_one_id(served: tuple[str, Any]) -> None:
    url, service = served
    key, _ = service.keys.create("tenant-a")
    turn = [{"role": "user", "content": "a", "id": "m1"}, {"role": "user", "content": "b", "id": "m1"}]

    async def scenario() -> None:
        async with client(url, key) as c:
            refused = await c.call_tool("append_messages", {"session_id": "s1", "messages": turn})
            assert refused.is_error and "message 1: 'id'" in refused.content[0].text, refused.content

    asyncio.run(scenario())
    assert service.store.count(_scope("tenant-a", "", "s1")) == 0


def test_mcp_refuses_a_blank_session_id_as_fullrecall_mcp_does(served: tuple[str, Any]) -> None:
    """A whitespace-only session id wrote a conversation no one meant to name over ``/mcp``; it is refused, naming
    session_id, as ``fullrecall mcp`` refuses it, and nothing is written."""
    url, service = served
    key, _ = service.keys.create("tenant-a")

    async def scenario() -> None:
        async with client(url, key) as c:
            for tool, args in (("append_messages", {"session_id": "  ", "messages": [{"role": "user", "content": "hi"}]}),
                               ("get_context", {"session_id": "\t"})):
                refused = await c.call_tool(tool, args)
                assert refused.is_error and "session_id" in refused.content[0].text, refused.content

    asyncio.run(scenario())
    from fullrecall.stores import Scope

    assert service.store.stats(Scope(tenant="tenant-a"))["message_count"] == 0


def test_an_owner_named_in_utf8_headers_is_the_owner_the_routes_name(served: tuple[str, Any]) -> None:
    """``X-Fullrecall-User: josé`` sent in UTF-8 was read as Latin-1, ``josÃ©``: a key limited to josé was refused
    over ``/mcp``, and an unlimited key wrote to an owner no route names. UTF-8 is read as UTF-8 now, and Latin-1
    (which some clients send) as before."""
    url, service = served
    key, _ = service.keys.create("tenant-a", users=["josé"])

    async def append(user: bytes, mid: str) -> None:
        headers = {"Authorization": f"Bearer {key}", "X-Fullrecall-User": user}
        async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=60))) as c:
            await structured(c, "append_messages", {"session_id": "s1", "messages": [
                {"role": "user", "content": f"Hola ({mid})", "id": mid}]})

    asyncio.run(append("josé".encode(), "utf8"))
    asyncio.run(append("josé".encode("latin-1"), "latin1"))
    r = httpx2.get(f"{url.removesuffix('/mcp')}/v1/conversations/s1/messages", params={"user_id": "josé"},
                   headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200 and [m["id"] for m in r.json()["messages"]] == ["utf8", "latin1"], r.text

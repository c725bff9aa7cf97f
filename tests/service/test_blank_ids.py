"""A conversation id that shows nothing (whitespace, zero-width characters) or names long-term memory's change log
is refused by every route of a running service, by ``/mcp`` and by the library, in the same words.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from fullrecall.errors import InvalidInput
from fullrecall.memory import ConversationMemory, SyncConversationMemory
from fullrecall.stores import Scope
from fullrecall.stores.base import ANY

GOOD = {"role": "user", "content": "fine"}
BLANK = [" ", "\t\r", "\u3000", "\u200b", "\u200d\ufeff", " \u2060\u00a0", "\u3164", "\ufe0f", "_log.facts"]


def _library_words(conv: str) -> str:
    """What the library says of ``conv`` as a session id, without the name of the argument."""
    with pytest.raises(InvalidInput) as refused:
        ConversationMemory("sqlite:///:memory:", conv)
    return str(refused.value).removeprefix("ConversationMemory: 'session_id' ")


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_blank_or_reserved_conversation_id_is_refused_on_every_route_as_the_library_refuses_it(live):
    base, service = live
    key, _ = service.keys.create("tenant-a")
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=auth, timeout=30) as http:
        for conv in BLANK:
            words = _library_words(conv)
            assert ("blank" in words) != conv.startswith("_log."), words
            sent = quote(conv, safe="")
            line = json.dumps({"conversation_id": conv, "id": "m0", "message": GOOD})
            for method, url, kwargs, field in (
                ("POST", f"/v1/conversations/{sent}/messages", {"json": {"messages": [GOOD]}}, "conversation_id"),
                ("GET", f"/v1/conversations/{sent}/messages", {}, "conversation_id"),
                ("GET", f"/v1/conversations/{sent}/context", {}, "conversation_id"),
                ("GET", f"/v1/conversations/{sent}/summaries", {}, "conversation_id"),
                ("DELETE", f"/v1/conversations/{sent}", {}, "conversation_id"),
                ("POST", "/v1/search", {"json": {"query": "x", "scope": {"conversation_id": conv}}}, "conversation_id"),
                ("POST", "/v1/export", {"json": {"conversation_id": conv}}, "conversation_id"),
                ("GET", "/v1/stats", {"params": {"conversation_id": conv}}, "conversation_id"),
                ("POST", "/v1/memories/record", {"json": {"messages": [GOOD], "session_id": conv}}, "session_id"),
            ):
                r = http.request(method, url, **kwargs)
                assert r.status_code == 422, (conv, url, r.status_code, r.text)
                error = r.json()["error"]
                assert error["type"] == "invalid" and error["field"] == field, (conv, url, error)
                assert error["message"] == f"'{field}' {words}", (conv, url, error)
            r = http.post("/v1/import", content=line, headers={"content-type": "application/x-ndjson"})
            assert r.status_code == 422 and r.json()["error"]["message"] == f"line 1: 'conversation_id' {words}", r.text
    assert asyncio.run(_mcp_refusals(f"{base}/mcp", key)) == [f"'session_id' {_library_words(c)}" for c in BLANK]
    assert service.store.stats(Scope(tenant="tenant-a", user_id=ANY, agent_id=ANY))["message_count"] == 0


async def _mcp_refusals(url: str, key: str) -> list[Any]:
    """The text of each tool error ``/mcp`` answers to ``append_messages`` into each blank id."""
    pytest.importorskip("mcp")
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    out = []
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    async with Client(streamable_http_client(url, http_client=http)) as c:
        for conv in BLANK:
            for tool, args in (("append_messages", {"session_id": conv, "messages": [GOOD]}),
                               ("get_context", {"session_id": conv})):
                result = await c.call_tool(tool, args)
                assert result.is_error, (conv, tool, result.content)
                text = result.content[0].text.removeprefix(f"Error executing tool {tool}: ")
                if tool == "append_messages":
                    out.append(text)
                else:
                    assert text == out[-1], (conv, text)
    return out


def test_the_library_refuses_a_blank_session_id_and_takes_a_visible_one(tmp_path):
    for conv in BLANK:
        assert _library_words(conv)
    for conv in ("a", " a ", "\u200ba", "日本", "\U0001f600", ".hidden"):
        memory = SyncConversationMemory(f"sqlite:///{tmp_path / 'm.db'}", conv)
        memory.add([{"role": "user", "content": "hi"}])
        assert [m["content"] for m in memory.messages] == ["hi"]
        memory.close()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_conversation_id_holding_a_line_break_is_refused_where_it_could_be_written(live):
    """``a\\nb`` was written by an import, ``/mcp`` or a long-term record, but no route's path matches a line break:
    ``/v1/conversations/a%0Ab/messages`` is a 404 of no route, so the conversation could not be read or forgotten.
    """
    base, service = live
    key, _ = service.keys.create("tenant-a")
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        assert http.get("/v1/conversations/a%0Ab/messages").status_code == 404
        line = json.dumps({"conversation_id": "a\nb", "id": "m0", "message": GOOD})
        r = http.post("/v1/import", content=line, headers={"content-type": "application/x-ndjson"})
        assert r.status_code == 422 and "line break" in r.json()["error"]["message"], r.text
        r = http.post("/v1/memories/record", json={"messages": [GOOD], "session_id": "a\nb"})
        assert r.status_code == 422 and r.json()["error"]["field"] == "session_id", r.text
        r = http.post("/v1/conversations/a%0Db/messages", json={"messages": [GOOD]})  # a carriage return is carried
        assert r.status_code == 201 and http.get("/v1/conversations/a%0Db/messages").status_code == 200, r.text
    assert service.store.stats(Scope(tenant="tenant-a", user_id=ANY, agent_id=ANY))["message_count"] == 1

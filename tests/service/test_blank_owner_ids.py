"""A user or agent id that shows nothing (whitespace, zero-width characters) names no owner: the library, every
route of the service and ``/mcp`` refuse it in the same words, naming the field, and write nothing. Absent (None)
still means no owner. A conversation named as long-term memory's change log is refused in one set of words too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fullrecall.errors import InvalidInput
from fullrecall.memory import ConversationMemory, PersistentMemory, SyncConversationMemory
from fullrecall.stores import Scope
from fullrecall.stores.base import ANY

BLANK = [" ", "\t", "\u3000", "\u200b", "\ufeff\u200e", "\u3164"]
GOOD = {"role": "user", "content": "fine"}


def words(field: str, value: str) -> str:
    return f"'{field}' {value!r} is blank (whitespace or invisible characters only): name an owner, or leave it out " \
           "for none"


def test_the_library_refuses_a_blank_user_or_agent_and_writes_nothing(tmp_path, default_embedder):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    for value in BLANK:
        for field in ("user_id", "agent_id"):
            owner = {field: value}
            for make, args in ((PersistentMemory, {"store": url, "embedder": default_embedder}),
                               (SyncConversationMemory, {"store": url, "session_id": "s"}),
                               (ConversationMemory, {"store": url, "session_id": "s"})):
                with pytest.raises(InvalidInput) as refused:
                    make(**args, **owner)
                assert str(refused.value) == words(field, value)
    assert not (tmp_path / "m.db").exists()
    with SyncConversationMemory(url, "s", user_id=None, agent_id=" a") as memory:  # absent: no owner; visible: kept
        memory.add([GOOD])
        assert len(memory) == 1


def test_a_change_log_session_is_refused_in_the_same_words_by_both_memories(tmp_path, default_embedder):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with pytest.raises(InvalidInput) as long_term:
        PersistentMemory(session_id="_log.facts", store=url, embedder=default_embedder)
    with pytest.raises(InvalidInput) as conversation:
        ConversationMemory(url, "_log.facts")
    assert str(long_term.value).removeprefix("PersistentMemory: ") == \
        str(conversation.value).removeprefix("ConversationMemory: ") == \
        "'session_id' '_log.facts' is reserved (a session id starting with '_log.' is long-term memory's own change log)"


@pytest.mark.parametrize("backend", ["sqlite"])
def test_every_route_refuses_a_blank_user_or_agent_as_the_library_does(api):
    for value in BLANK:
        for field in ("user_id", "agent_id"):
            for method, url, kwargs in (
                ("POST", "/v1/conversations/c/messages", {"json": {"messages": [GOOD]}, "params": {field: value}}),
                ("GET", "/v1/conversations/c/messages", {"params": {field: value}}),
                ("POST", "/v1/search", {"json": {"query": "x", "scope": {field: value}}}),
                ("POST", "/v1/memories/record", {"json": {"messages": [GOOD], "session_id": "s", field: value}}),
            ):
                r = api.client.request(method, url, headers=api.a, **kwargs)
                assert r.status_code == 422, (value, url, r.status_code, r.text)
                error = r.json()["error"]
                assert error["type"] == "invalid" and error["field"] == field, (value, url, error)
                assert error["message"] == words(field, value), (value, url, error)
    assert api.store.stats(Scope(tenant="tenant-a", user_id=ANY, agent_id=ANY))["message_count"] == 0


@pytest.mark.parametrize("backend", ["sqlite"])
def test_mcp_refuses_a_blank_user_header_as_the_library_does(live):
    pytest.importorskip("mcp")
    base, service = live
    key, _ = service.keys.create("tenant-a")
    texts = asyncio.run(_append_as(f"{base}/mcp", key, "\u200b"))
    assert texts == [words("user_id", "\u200b")]
    assert service.store.stats(Scope(tenant="tenant-a", user_id=ANY, agent_id=ANY))["message_count"] == 0


async def _append_as(url: str, key: str, user: str) -> list[Any]:
    """The tool error ``append_messages`` answers with ``X-Fullrecall-User: <user>`` (sent as UTF-8)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}", "X-Fullrecall-User": user.encode()},
                              timeout=60)
    async with Client(streamable_http_client(url, http_client=http)) as c:
        result = await c.call_tool("append_messages", {"session_id": "s", "messages": [GOOD]})
    assert result.is_error, result.content
    return [result.content[0].text.removeprefix("Error executing tool append_messages: ")]



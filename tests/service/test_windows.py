"""Conversations kept within a budget by the configured manager: summaries expand to exactly what they cover."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from summarizer_peers import ScriptedServer, completion  # noqa: E402


def _turns(n: int, offset: int = 0) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "id": f"m{i}",
             "content": f"turn {i}: the parcel code is PX-{1000 + i} and the colour is shade{i}"}
            for i in range(offset, offset + n)]


def _metric(text: str, name: str, tenant: str) -> float:
    found = re.search(rf'^{name}{{tenant="{tenant}"}} ([0-9.e+]+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _expanded(api, summaries: list[dict]) -> list[dict]:
    out = []
    for s in summaries:
        r = api.client.get(f"/v1/summaries/{s['id']}/messages", headers=api.a)
        assert r.status_code == 200
        messages = r.json()["messages"]
        assert [m["position"] for m in messages] == list(range(s["covers"][0], s["covers"][1] + 1))
        out += messages
    return out


def test_a_long_conversation_is_summarized_and_every_word_stays_expandable(make_api):
    api = make_api(window_messages=6, window_tokens=100_000)
    admin, _ = api.service.keys.create("admin")
    sent = _turns(40)
    for i in range(0, 40, 4):  # in requests of four, each sent twice: a retry stores once
        for _ in range(2):
            r = api.client.post("/v1/conversations/c/messages", json={"messages": sent[i:i + 4]}, headers=api.a)
            assert r.status_code == 201
            assert [m["position"] for m in r.json()["messages"]] == list(range(i, i + 4))
    window = api.client.get("/v1/conversations/c/messages", headers=api.a).json()["messages"]
    summaries = api.client.get("/v1/conversations/c/summaries", headers=api.a).json()["summaries"]
    assert summaries and window[0]["kind"] == "summary" and window[0]["id"] == summaries[-1]["id"]
    kept = [m["position"] for m in window[1:]]
    assert 0 < len(kept) <= 6 and kept == list(range(40 - len(kept), 40))  # the newest, within the budget
    # the summaries cover, in order and without overlap, exactly the messages that left the window, verbatim
    expanded = _expanded(api, summaries)
    assert [m["position"] for m in expanded] == list(range(kept[0]))
    assert [m["message"] for m in expanded] == sent[:kept[0]]
    assert [m["message"] for m in window[1:]] == sent[kept[0]:]
    # recall brings back the exact words a summary stands for
    ctx = api.client.get("/v1/conversations/c/context", params={"query": "PX-1003 parcel code"}, headers=api.a).json()
    assert 3 in [m["position"] for m in ctx["recalled"]] and ctx["first_position"] == kept[0]
    assert ctx["messages"][0]["content"] == window[0]["message"]["content"]
    metrics = api.client.get("/metrics", headers=api.headers(admin)).text
    assert _metric(metrics, "fullrecall_summaries_made_total", "tenant-a") == len(summaries)
    assert _metric(metrics, "fullrecall_llm_calls_total", "tenant-a") == 0  # extractive: no LLM
    # forgetting the conversation forgets its summaries too
    assert api.client.delete("/v1/conversations/c", headers=api.a).status_code == 200
    assert api.client.get(f"/v1/summaries/{summaries[0]['id']}/messages", headers=api.a).status_code == 404
    assert api.client.post("/v1/conversations/c/messages", json={"messages": _turns(2)}, headers=api.a
                           ).json()["messages"] == [{"id": "m0", "position": 0}, {"id": "m1", "position": 1}]
    assert [m["position"] for m in api.client.get("/v1/conversations/c/messages", headers=api.a).json()["messages"]
            ] == [0, 1]


def test_concurrent_writers_to_a_summarized_conversation_all_land(make_api):
    api = make_api(window_messages=4, window_tokens=100_000)

    def writer(n: int) -> None:
        for i in range(8):
            msg = {"role": "user", "content": f"writer {n} says {i}", "id": f"w{n}-{i}"}
            assert api.client.post("/v1/conversations/shared/messages", json={"messages": [msg]}, headers=api.a
                                   ).status_code == 201

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    window = api.client.get("/v1/conversations/shared/messages", headers=api.a).json()["messages"]
    summaries = api.client.get("/v1/conversations/shared/summaries", headers=api.a).json()["summaries"]
    kept = [m for m in window if m["kind"] != "summary"]
    expanded = _expanded(api, summaries)
    assert [m["position"] for m in expanded + kept] == list(range(32))  # nothing lost, nothing twice
    assert sorted(m["id"] for m in expanded + kept) == sorted(f"w{n}-{i}" for n in range(4) for i in range(8))


@pytest.mark.parametrize("backend", ["sqlite"])
def test_an_llm_summarizer_is_used_only_when_configured_and_its_calls_counted(make_api, monkeypatch):
    server = ScriptedServer()
    server.script(*[lambda body: completion("The user and the assistant exchanged parcel codes and colours.")] * 50)
    monkeypatch.setenv("FULLRECALL_LLM_MODEL", "scripted")
    monkeypatch.setenv("FULLRECALL_LLM_BASE_URL", server.base_url)
    try:
        plain = make_api(window_messages=4)  # extractive by default: the configured LLM is not called
        assert plain.client.post("/v1/conversations/c/messages", json={"messages": _turns(12)}, headers=plain.a
                                 ).status_code == 201
        assert plain.client.get("/v1/conversations/c/summaries", headers=plain.a).json()["summaries"]
        assert server.requests == []
        api = make_api(window_messages=4, summarizer="llm")
        admin, _ = api.service.keys.create("admin")
        for i in range(0, 12, 2):
            assert api.client.post("/v1/conversations/d/messages", json={"messages": _turns(2, i)}, headers=api.a
                                   ).status_code == 201
        summaries = api.client.get("/v1/conversations/d/summaries", headers=api.a).json()["summaries"]
        assert summaries and server.requests
        metrics = api.client.get("/metrics", headers=api.headers(admin)).text
        assert _metric(metrics, "fullrecall_llm_calls_total", "tenant-a") == len(server.requests)
        assert _metric(metrics, "fullrecall_summaries_made_total", "tenant-a") == len(summaries)
        assert _metric(metrics, "fullrecall_llm_calls_total", "tenant-b") == 0
    finally:
        server.close()


def test_two_servers_on_one_store_keep_the_window_within_budget(make_api):
    one, two = make_api(window_messages=6), make_api(window_messages=6)  # two servers, one store
    key = one.key_a  # both read their keys from the store
    one.client.post("/v1/conversations/c/messages", json={"messages": _turns(2)}, headers=one.a)
    for i in range(2, 20, 2):  # the other server writes most of it
        assert two.client.post("/v1/conversations/c/messages", json={"messages": _turns(2, i)},
                               headers=two.headers(key)).status_code == 201
    for api in (one, two):
        window = api.client.get("/v1/conversations/c/messages", headers=api.headers(key)).json()["messages"]
        assert window[0]["kind"] == "summary" and len(window) - 1 <= 6
        assert [m["position"] for m in window[1:]] == list(range(20 - len(window) + 1, 20))
        summaries = api.client.get("/v1/conversations/c/summaries", headers=api.headers(key)).json()["summaries"]
        assert [m["position"] for m in _expanded(api, summaries)] == list(range(window[1]["position"]))


def test_a_message_of_another_shape_than_the_conversations_is_refused_before_it_is_written(make_api):
    """An OpenAI chat message, then a Converse one: both were stored, and the managed window, read whole in one
    shape, answered 422 to every read for good. The second is refused naming it, nothing written; messages that
    read in the conversation's shape (Claude's content blocks beside chat messages) are taken, in any process."""
    api = make_api()
    url = "/v1/conversations/c1/messages"
    assert api.client.post(url, headers=api.a, json={"messages": [{"role": "user", "content": "code 4471"}]}
                           ).status_code == 201
    refused = api.client.post(url, headers=api.a, json={"messages": [{"role": "assistant", "content": [{"text": "ok"}]}]})
    assert refused.status_code == 422
    assert refused.json()["error"]["message"].startswith("message 0: it does not read in this conversation's shape")
    blocks = {"role": "assistant", "content": [{"type": "text", "text": "noted, 4471"}]}
    assert api.client.post(url, headers=api.a, json={"messages": [blocks]}).status_code == 201
    other = make_api()  # another server on the store: it reads the window's shape first
    converse = {"role": "user", "content": [{"text": "and now?"}]}
    refused = other.client.post(url, headers=api.a, json={"messages": [converse]})
    assert refused.status_code == 422 and "conversation's shape (openai)" in refused.json()["error"]["message"]
    window = api.client.get(url, headers=api.a)
    assert window.status_code == 200 and [m["message"] for m in window.json()["messages"]] == [
        {"role": "user", "content": "code 4471"}, blocks]
    assert api.client.get("/v1/conversations/c1/context", headers=api.a).status_code == 200

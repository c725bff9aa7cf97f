"""The inspector's read routes on every backend: listing, paging by position, memory over time, tenancy."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fullrecall.archive.archive import archived_summaries  # noqa: E402
from fullrecall.stores import Scope  # noqa: E402

N = 150  # three pages of 60, the last one partial
PAGE = 60


@pytest.fixture
def api(request, store_url, default_embedder):
    """A served app (the manager ``request.param``, default summarizing) over a seeded store, with three keys."""
    from fastapi.testclient import TestClient

    from fullrecall.service.app import create_app
    from fullrecall.service.config import Settings

    manager = getattr(request, "param", "summarizing")
    app = create_app(Settings(store=store_url, rate_limit=0, window_messages=20, manager=manager),
                     embedder=default_embedder)
    with TestClient(app, raise_server_exceptions=False) as client:
        service = app.state.service
        keys = {name: service.keys.create(tenant)[0] for name, tenant in (("a", "tenant-a"), ("b", "tenant-b"))}
        keys["ann"] = service.keys.create("tenant-a", users=["ann"])[0]
        client.keys = keys
        client.service = service
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i}", "id": f"m{i}"}
                for i in range(N)]
        for user, upto in (("ann", N), ("bob", 3)):
            for start in range(0, upto, 30):  # in several requests: a summarizing manager summarizes in between
                r = client.post("/v1/conversations/long/messages", params={"user_id": user},
                                json={"messages": msgs[start:min(upto, start + 30)]}, headers=auth(keys["a"]))
                assert r.status_code == 201, r.text
        r = client.post("/v1/conversations/short/messages", params={"user_id": "ann", "agent_id": "helper"},
                        json={"messages": msgs[:3]}, headers=auth(keys["a"]))
        assert r.status_code == 201
        yield client


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_lists_the_tenants_conversations_and_keeps_tenants_apart(api):
    listed = api.get("/v1/inspector/conversations", headers=auth(api.keys["a"])).json()
    assert listed["tenant"] == "tenant-a"
    assert [(c["user_id"], c["agent_id"], c["conversation_id"], c["messages"]) for c in listed["conversations"]] == [
        ("ann", None, "long", N), ("ann", "helper", "short", 3), ("bob", None, "long", 3)]
    assert listed["truncated"] is False
    # a key limited to ann sees ann's only; another tenant sees nothing
    ann = api.get("/v1/inspector/conversations", headers=auth(api.keys["ann"])).json()["conversations"]
    assert {c["user_id"] for c in ann} == {"ann"} and len(ann) == 2
    assert api.get("/v1/inspector/conversations", headers=auth(api.keys["b"])).json()["conversations"] == []
    # a forgotten conversation leaves the list
    assert api.delete("/v1/conversations/long", params={"user_id": "bob"}, headers=auth(api.keys["a"])).status_code == 200
    listed = api.get("/v1/inspector/conversations", headers=auth(api.keys["a"])).json()["conversations"]
    assert ("bob", "long") not in {(c["user_id"], c["conversation_id"]) for c in listed}
    check_bad_requests_and_other_tenants(api)


@pytest.mark.parametrize("api", ["summarizing", "sliding"], indirect=True)
def test_pages_the_archive_by_position_and_shows_memory_over_time(api):
    seen = []
    offset = 0
    while True:
        page = api.get("/v1/inspector/conversations/long/archive", params={"user_id": "ann", "offset": offset,
                                                                           "limit": PAGE}, headers=auth(api.keys["a"]))
        assert page.status_code == 200, page.text
        body = page.json()
        assert body["total"] == N and body["last_position"] == N - 1 and body["offset"] == offset
        if not body["messages"]:
            break
        assert [m["position"] for m in body["messages"]] == list(range(offset, min(N, offset + PAGE)))
        seen += [m["message"]["content"] for m in body["messages"]]
        offset += PAGE
    assert seen == [f"message number {i}" for i in range(N)]  # every message once, verbatim, in order
    check_any_page(api)
    check_memory_over_time(api)


@settings(max_examples=15, deadline=None)
@given(offset=st.integers(0, N + 20), limit=st.integers(1, 500))
def check_any_page(api, offset, limit):
    """A page is exactly the positions asked for."""
    body = api.get("/v1/inspector/conversations/long/archive", params={"user_id": "ann", "offset": offset,
                                                                       "limit": limit}, headers=auth(api.keys["ann"])).json()
    assert [m["position"] for m in body["messages"]] == list(range(offset, min(N, offset + limit)))


def check_memory_over_time(api):
    scope = Scope(tenant="tenant-a", user_id="ann", session_id="long")
    made = archived_summaries(api.service.store, scope)
    managed = api.service.conversations.windows is not None
    assert bool(made) == managed  # the summarizing manager summarized as the conversation grew; sliding did not
    body = api.get("/v1/inspector/conversations/long/timeline", params={"user_id": "ann", "points": 12},
                   headers=auth(api.keys["a"])).json()
    series = body["series"]
    assert body["total"] == N and body["summaries"] == len(made) and body["window_messages"] == 20
    assert 2 <= len(series) <= 12 and series[0]["position"] == 0 and series[-1]["position"] == N - 1
    assert series[-1]["archived"] == N
    for a, b in zip(series, series[1:]):
        assert a["t"] <= b["t"] and a["archived"] < b["archived"]
    for p in series[:-1]:
        summarized = max((s["covers"][1] + 1 for s in made if s["created_at"] <= p["t"]), default=0)
        assert p["summarized"] == summarized
        assert p["window"] == (p["archived"] - summarized + (summarized > 0) if managed else min(p["archived"], 20))
    # the newest sample is now: every summary made (one made just after the newest message too), and the window
    # exactly as the Active window panel shows it
    window = api.get("/v1/conversations/long/messages", params={"user_id": "ann"},
                     headers=auth(api.keys["a"])).json()["messages"]
    assert series[-1]["summarized"] == max((s["covers"][1] + 1 for s in made), default=0)
    assert series[-1]["window"] == body["window"] == len(window)
    assert (series[-1]["summarized"] > 0) == managed


def check_bad_requests_and_other_tenants(api):
    a, b = auth(api.keys["a"]), auth(api.keys["b"])
    for path in ("archive", "timeline"):
        url = f"/v1/inspector/conversations/long/{path}"
        assert api.get(url, params={"user_id": "ann"}, headers=b).status_code == 404  # ids are not confirmed
        assert api.get(url, headers=a).status_code == 404  # the default owner has no such conversation
        assert api.get(url, params={"user_id": "bob"}, headers=auth(api.keys["ann"])).status_code == 403
        assert api.get(url, params={"user_id": "ann"}).status_code == 401
    r = api.get("/v1/inspector/conversations/long/archive", params={"user_id": "ann", "limit": 501}, headers=a)
    assert r.status_code == 422 and r.json()["error"]["field"] == "limit"
    r = api.get("/v1/inspector/conversations/long/archive", params={"user_id": "ann", "offset": -1}, headers=a)
    assert r.status_code == 422 and r.json()["error"]["field"] == "offset"


def test_the_page_is_served_with_headers_that_keep_it_to_itself(api):
    for path in ("/ui/", "/ui/app.js", "/ui/style.css"):
        r = api.get(path)  # no key: the page asks for one
        assert r.status_code == 200 and r.headers["x-frame-options"] == "DENY", path
        assert "default-src 'self'" in r.headers["content-security-policy"]
    assert "<title>fullrecall inspector</title>" in api.get("/ui/").text
    assert api.get("/ui", follow_redirects=False).status_code in (307, 308)
    assert api.get("/ui/nothing.js").status_code == 404


def test_lists_the_conversations_the_command_line_wrote(api):
    """``fullrecall import`` and ``chat`` keep the service's conversation list, but without the owner the tenant-wide
    listing needs: what an operator imported never showed in the inspector.
    """
    import io
    import json

    from fullrecall.transfer import openai

    said = [{"role": "user", "content": "imported hello"}, {"role": "assistant", "content": "hi"}]
    openai.import_openai(api.service.store, Scope(tenant="tenant-a", user_id="cli", agent_id="bot",
                                                  session_id="imported"), io.StringIO(json.dumps(said)))
    listed = api.get("/v1/inspector/conversations", headers=auth(api.keys["a"])).json()["conversations"]
    assert ("cli", "bot", "imported", 2) in [(c["user_id"], c["agent_id"], c["conversation_id"], c["messages"])
                                             for c in listed]
    assert api.get("/v1/inspector/conversations", headers=auth(api.keys["b"])).json()["conversations"] == []


def test_an_archive_page_reads_a_page_whatever_gaps_deletions_left(api, monkeypatch):
    """``last_position`` read from position ``count - 1`` to the end: with deleted messages before it, every
    message past it (the whole conversation, at worst) for each page, where the page promises to read a page.
    """
    from fullrecall.stores.base import StoredMessage
    from fullrecall.transfer._common import register

    store = api.service.store
    own = Scope(tenant="tenant-a", user_id="gap", session_id="gappy")
    store.append(own, [StoredMessage(id=f"g{i}", role="user", text=f"t{i}", data={"role": "user", "content": f"t{i}"})
                       for i in range(1000)])
    register(store, own)
    store.delete(own, [f"g{i}" for i in range(900)])  # 100 left, at positions 900 to 999
    read: list[int] = []
    real = store.range

    def counted(scope, start, end):
        found = real(scope, start, end)
        if scope.session_id == "gappy":  # the service's background work reads the seeded conversations meanwhile
            read.append(len(found))
        return found

    monkeypatch.setattr(store, "range", counted)
    page = api.get("/v1/inspector/conversations/gappy/archive", params={"user_id": "gap", "offset": 990, "limit": 5},
                   headers=auth(api.keys["a"])).json()
    assert page["total"] == 100 and page["last_position"] == 999
    assert [m["id"] for m in page["messages"]] == [f"g{i}" for i in range(990, 995)]
    assert sum(read) <= 5, read


def test_the_timeline_samples_the_messages_held_whatever_gaps_deletions_left(api, monkeypatch):
    """Samples at positions since deleted were dropped: a conversation whose positions are mostly deleted showed
    its newest message only. Each sample is now the first message held from its position on, read a few at a time.
    """
    from fullrecall.stores.base import StoredMessage
    from fullrecall.transfer._common import register

    store = api.service.store
    own = Scope(tenant="tenant-a", user_id="gap", session_id="sparse")
    store.append(own, [StoredMessage(id=f"s{i}", role="user", text=f"t{i}", data={"role": "user", "content": f"t{i}"})
                       for i in range(1000)])
    register(store, own)
    kept = [p for p in range(1000) if p % 50 == 7] + [999]  # 21 of 1000; no sampled position but the last
    store.delete(own, [f"s{i}" for i in range(1000) if i not in kept])
    read: list[int] = []
    real, window = store.ranges, api.service.conversations.window
    reading_window = []

    def counted(scope, spans):
        found = real(scope, spans)
        # the service's background work reads the seeded conversations meanwhile; the active window (the
        # newest sample's) is read as the window route reads it, its newest messages only
        if scope.session_id == "sparse" and not reading_window:
            read.append(sum(len(f) for f in found))
        return found

    def the_window(scope):
        reading_window.append(True)
        try:
            return window(scope)
        finally:
            reading_window.pop()

    monkeypatch.setattr(store, "ranges", counted)
    monkeypatch.setattr(api.service.conversations, "window", the_window)
    body = api.get("/v1/inspector/conversations/sparse/timeline", params={"user_id": "gap", "points": 12},
                   headers=auth(api.keys["a"])).json()
    positions = [p["position"] for p in body["series"]]
    assert positions == [7, 107, 207, 307, 407, 457, 557, 657, 757, 857, 957, 999], positions
    assert [p["archived"] for p in body["series"]] == [p + 1 for p in positions] and body["total"] == 21
    assert sum(read) <= 2 * len(positions) and len(read) <= 8, read  # a few rounds, never the spans' every message


def test_lists_the_sessions_long_term_memory_recorded_and_forgets_them(api):
    """``POST /v1/memories/record`` writes a session of the owner's long-term memory: it was never listed, so the
    inspector could neither show nor forget it.
    """
    a = auth(api.keys["a"])
    said = [{"role": "user", "content": "I live in Lyon"}, {"role": "assistant", "content": "Noted."}]
    for session in ("rec1", "rec1", "rec2"):  # twice to one session: listed once
        r = api.post("/v1/memories/record", json={"messages": said, "session_id": session, "user_id": "dora"},
                     headers=a)
        assert r.status_code == 201, r.text
    r = api.post("/v1/memories/record", json={"messages": said, "user_id": "eve", "agent_id": "bot"}, headers=a)
    assert r.status_code == 201, r.text
    listed = api.get("/v1/inspector/conversations", headers=a).json()["conversations"]
    owned = [(c["user_id"], c["agent_id"], c["conversation_id"], c["messages"]) for c in listed]
    assert [c for c in owned if c[0] in ("dora", "eve")] == [
        ("dora", None, "rec1", 4), ("dora", None, "rec2", 2), ("eve", "bot", "default", 2)]
    assert api.get("/v1/inspector/conversations", headers=auth(api.keys["ann"])).json()["conversations"] == [
        c for c in listed if c["user_id"] == "ann"]  # a key limited to ann still sees ann's only
    assert api.get("/v1/inspector/conversations", headers=auth(api.keys["b"])).json()["conversations"] == []
    # the inspector's forget takes it off the list
    assert api.delete("/v1/conversations/rec1", params={"user_id": "dora"}, headers=a).status_code == 200
    listed = api.get("/v1/inspector/conversations", headers=a).json()["conversations"]
    assert [c["conversation_id"] for c in listed if c["user_id"] == "dora"] == ["rec2"]


def test_the_listing_is_cut_in_order_and_says_truncated_only_when_some_were_left_out(api, monkeypatch):
    """The listing was cut before it was sorted (the first found, not the first in order) and said ``truncated``
    as soon as it held the limit, though none was left out.
    """
    from fullrecall.service import inspector

    a = auth(api.keys["a"])
    r = api.post("/v1/conversations/z/messages", params={"user_id": "aaron"},
                 json={"messages": [{"role": "user", "content": "listed last, first in order"}]}, headers=a)
    assert r.status_code == 201
    everything = [("aaron", None, "z"), ("ann", None, "long"), ("ann", "helper", "short"), ("bob", None, "long")]

    def listed(limit: int) -> tuple[list[tuple], bool]:
        monkeypatch.setattr(inspector, "MAX_LISTED", limit)
        body = api.get("/v1/inspector/conversations", headers=a).json()
        return [(c["user_id"], c["agent_id"], c["conversation_id"]) for c in body["conversations"]], body["truncated"]

    assert listed(5) == (everything, False)
    assert listed(4) == (everything, False)  # exactly the limit: none left out
    assert listed(3) == (everything[:3], True)
    assert listed(1) == (everything[:1], True)
    # a forgotten conversation leaves nothing out
    assert api.delete("/v1/conversations/long", params={"user_id": "bob"}, headers=a).status_code == 200
    assert listed(3) == (everything[:3], False)

"""No key reaches another tenant's data: a matrix over every route of the OpenAPI schema.

For every route, a key of tenant B uses tenant A's conversation, summary, message, fact and
pattern ids. A route that names an id answers 404 (never 403: ids are not confirmed); a route
that writes under a client-chosen id writes into B's own tenant and leaves A untouched; a
tenant-wide route (search, stats, export, import) and a long-term memory route (record,
retrieve, facts, patterns) see only B's data. A route added later
that this table does not classify fails the test, so it gets a tenant check before it ships.
"""

from __future__ import annotations

import json

import pytest

from fullrecall.stores import Scope

SECRET = "zanzibar quokka hovercraft"  # words only tenant A's conversation holds

# (method, path) -> how the matrix checks it
ID_ROUTES = {
    ("GET", "/v1/conversations/{conversation_id}/messages"),
    ("GET", "/v1/conversations/{conversation_id}/context"),
    ("GET", "/v1/conversations/{conversation_id}/summaries"),
    ("DELETE", "/v1/conversations/{conversation_id}"),
    ("GET", "/v1/summaries/{summary_id}/messages"),
    ("DELETE", "/v1/facts/{fact_id}"),
    ("DELETE", "/v1/patterns/{pattern_id}"),
    ("GET", "/v1/inspector/conversations/{conversation_id}/archive"),
    ("GET", "/v1/inspector/conversations/{conversation_id}/timeline"),
}
WRITE_UNDER_ID = {("POST", "/v1/conversations/{conversation_id}/messages")}
TENANT_WIDE = {("POST", "/v1/search"), ("GET", "/v1/stats"), ("POST", "/v1/export"), ("POST", "/v1/import"),
               ("GET", "/metrics"), ("GET", "/v1/inspector/conversations")}
OWN_MEMORY = {("POST", "/v1/memories/record"), ("POST", "/v1/memories/retrieve"), ("POST", "/v1/facts"),
              ("GET", "/v1/facts"), ("POST", "/v1/patterns"), ("GET", "/v1/patterns"),
              ("POST", "/v1/patterns/search"), ("POST", "/v1/patterns/plan")}
PUBLIC = {("GET", "/healthz"), ("GET", "/readyz")}


def _routes(api) -> set[tuple[str, str]]:
    schema = api.client.get("/openapi.json").json()
    return {(method.upper(), path) for path, ops in schema["paths"].items() for method in ops}


def _seed_a(api) -> dict[str, str]:
    """Tenant A's conversation (with a summary), as a client of A sees it."""
    msgs = [{"role": "user", "content": f"remember {SECRET}", "id": "a-0"},
            {"role": "assistant", "content": "I will remember it", "id": "a-1"},
            {"role": "user", "content": "thanks", "id": "a-2"}]
    r = api.client.post("/v1/conversations/conv-a/messages", json={"messages": msgs}, headers=api.a)
    assert r.status_code == 201, r.text
    # a summarizing manager on the same store records its summaries like this (Archive._save_summary)
    scope = Scope(tenant="tenant-a", session_id="conv-a")
    api.store.put_state(scope, "summaries", {"items": [
        {"id": "summary-1", "text": "they talked", "covers": [0, 1], "folds": None, "created_at": 0.0}]})
    api.service.indexer.flush()
    summaries = api.client.get("/v1/conversations/conv-a/summaries", headers=api.a).json()["summaries"]
    assert len(summaries) == 1
    expanded = api.client.get(f"/v1/summaries/{summaries[0]['id']}/messages", headers=api.a).json()["messages"]
    assert [m["id"] for m in expanded] == ["a-0", "a-1"]
    # and long-term memory: a recorded turn, a fact, a pattern
    assert api.client.post("/v1/memories/record", json={"messages": [{"role": "user", "content": f"I saw a {SECRET}"}]},
                           headers=api.a).status_code == 201
    fact = api.client.post("/v1/facts", json={"text": f"My password is {SECRET}"}, headers=api.a).json()["fact"]
    pattern = api.client.post("/v1/patterns", json={"query": f"find the {SECRET}", "tools_used": ["look"],
                                                     "success_score": 1.0, "execution_time_ms": 5}, headers=api.a).json()
    assert pattern["stored"]
    return {"conversation_id": "conv-a", "summary_id": summaries[0]["id"], "message_id": "a-0", "fact_id": fact["id"],
            "pattern_id": pattern["pattern_id"]}


def _a_memory(api) -> tuple[list, list, list]:
    """Tenant A's facts, patterns and retrieved context lines (their order may vary with scores), as A sees them."""
    facts = api.client.get("/v1/facts", params={"history": True}, headers=api.a).json()["facts"]
    patterns = api.client.get("/v1/patterns", headers=api.a).json()["patterns"]
    context = api.client.post("/v1/memories/retrieve", json={"query": SECRET}, headers=api.a).json()["context"]
    return facts, patterns, sorted(context.split("\n"))


def _a_unchanged(api, before: dict) -> None:
    assert api.client.get("/v1/conversations/conv-a/messages", headers=api.a).json() == before
    assert api.store.count(Scope(tenant="tenant-a", session_id="conv-a")) == 3


def test_every_route_keeps_tenants_apart(make_api):
    api = make_api(failed_auth_limit=0)  # every route asked without a key: over the limit of failed authentications
    routes = _routes(api)
    unclassified = routes - ID_ROUTES - WRITE_UNDER_ID - TENANT_WIDE - OWN_MEMORY - PUBLIC
    assert not unclassified, f"routes without a tenant check in this matrix: {sorted(unclassified)}"
    ids = _seed_a(api)
    before = api.client.get("/v1/conversations/conv-a/messages", headers=api.a).json()
    memory_before = _a_memory(api)
    assert any(SECRET in line for line in memory_before[2]) and len(memory_before[0]) == 1 and len(memory_before[1]) == 1
    for method, path in sorted(routes - PUBLIC):
        # without a key, or with a wrong one: 401
        url = path.format(**ids)
        assert api.client.request(method, url).status_code == 401, (method, path)
        assert api.client.request(method, url, headers=api.headers("fr_nope_nope")).status_code == 401
        if (method, path) in ID_ROUTES:
            for owner in ({}, {"user_id": "u1"}):  # whoever B claims to act for
                r = api.client.request(method, url, params={**owner, "query": SECRET} if "context" in path else owner,
                                       headers=api.b)
                assert r.status_code == 404, (method, path, r.status_code, r.text)
                assert SECRET not in r.text
    # writing under A's conversation id lands in B's tenant and changes nothing of A's
    r = api.client.post("/v1/conversations/conv-a/messages", json={"messages": [
        {"role": "user", "content": "b writes here", "id": "a-0"}]}, headers=api.b)
    assert r.status_code == 201 and r.json()["messages"] == [{"id": "a-0", "position": 0}]
    b_window = api.client.get("/v1/conversations/conv-a/messages", headers=api.b).json()["messages"]
    assert [m["message"]["content"] for m in b_window] == ["b writes here"]
    _a_unchanged(api, before)
    # tenant-wide routes see only B's data
    api.service.indexer.flush()
    for query in (SECRET, "remember", "thanks"):
        hits = api.client.post("/v1/search", json={"query": query, "top_k": 50}, headers=api.b).json()["hits"]
        assert all(h["message"]["content"] == "b writes here" for h in hits), hits
    stats = api.client.get("/v1/stats", headers=api.b).json()
    assert stats["tenant"] == "tenant-b" and stats["store"]["message_count"] == 1
    assert api.client.get("/v1/stats", params={"everyone": True}, headers=api.b).json()["store"]["message_count"] == 1
    exported = api.client.post("/v1/export", json={}, headers=api.b).text
    assert SECRET not in exported and len(exported.strip().split("\n")) == 3  # the header, B's one message, the end
    assert api.client.post("/v1/export", json={"conversation_id": "conv-x"}, headers=api.b).status_code == 404
    line = json.dumps({"conversation_id": "conv-a", "id": "a-9", "message": {"role": "user", "content": "imported"}})
    r = api.client.post("/v1/import", content=line, headers={**api.b, "content-type": "application/x-ndjson"})
    assert r.status_code == 200 and r.json()["messages"] == 1
    _a_unchanged(api, before)
    assert api.client.get("/metrics", headers=api.b).status_code == 404  # it names every tenant
    listed = api.client.get("/v1/inspector/conversations", headers=api.b).json()["conversations"]
    assert [(c["conversation_id"], c["messages"]) for c in listed] == [("conv-a", 2)]  # B's own, after its import
    # long-term memory: B's reads find nothing of A's, B's writes land in B's own memory
    for owner in ({}, {"user_id": "u1"}):
        assert api.client.post("/v1/memories/record", json={"messages": [{"role": "user", "content": "My city is Oslo"}],
                                                            **owner}, headers=api.b).status_code == 201
        assert api.client.post("/v1/facts", json={"text": "My password is open", **owner}, headers=api.b
                               ).status_code == 201
        assert api.client.post("/v1/patterns", json={"query": f"find the {SECRET}", "tools_used": ["other"],
                                                     "success_score": 1.0, "execution_time_ms": 5, **owner},
                               headers=api.b).json()["stored"]
        for method, path, kwargs in (
                ("POST", "/v1/memories/retrieve", {"json": {"query": SECRET, "limit": 50, **owner}}),
                ("GET", "/v1/facts", {"params": {"history": True, **owner}}),
                ("GET", "/v1/patterns", {"params": owner}),
                ("POST", "/v1/patterns/search", {"json": {"query": SECRET, "top_k": 50, **owner}}),
                ("POST", "/v1/patterns/plan", {"json": {"query": SECRET, **owner}})):
            r = api.client.request(method, path, headers=api.b, **kwargs)
            assert r.status_code == 200 and ids["fact_id"] not in r.text and ids["pattern_id"] not in r.text, r.text
            assert "look" not in r.text and SECRET not in r.text.replace(f"find the {SECRET}", ""), r.text
    assert _a_memory(api) == memory_before
    # and A, deleting its conversation, deletes nothing of B's
    assert api.client.delete("/v1/conversations/conv-a", headers=api.a).json()["deleted"]["messages"] == 3
    assert len(api.client.get("/v1/conversations/conv-a/messages", headers=api.b).json()["messages"]) == 2


def test_a_key_limited_to_users_acts_for_them_only(api):
    key, _ = api.service.keys.create("tenant-a", users=["alice"])
    h = api.headers(key)
    msg = {"messages": [{"role": "user", "content": "hello"}]}
    assert api.client.post("/v1/conversations/c/messages", params={"user_id": "alice"}, json=msg, headers=h
                           ).status_code == 201
    for params in ({"user_id": "bob"}, {}):
        r = api.client.post("/v1/conversations/c/messages", params=params, json=msg, headers=h)
        assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden"
        assert api.client.get("/v1/conversations/c/messages", params=params, headers=h).status_code == 403
    assert api.client.post("/v1/search", json={"query": "hello", "scope": {"user_id": "bob"}}, headers=h
                           ).status_code == 403
    assert api.client.get("/v1/stats", params={"everyone": True}, headers=h).status_code == 403
    # the conversation is alice's: her default-owner twin does not exist
    assert api.client.get("/v1/conversations/c/messages", headers=api.a).status_code == 404


def test_metrics_are_read_only_by_an_unrestricted_key_of_the_operators_tenant(api):
    """``/metrics`` names every tenant and counts their requests: a key of the operators' tenant limited to some
    users or agents read it all the same. Such a key is now refused (403, naming why); the unrestricted one reads it."""
    api.client.get("/v1/stats", headers=api.b)  # tenant-b shows in the metrics
    full, _ = api.service.keys.create("admin")
    r = api.client.get("/metrics", headers=api.headers(full))
    assert r.status_code == 200 and 'tenant="tenant-b"' in r.text
    for limit in ({"users": ["alice"]}, {"agents": ["bot"]}, {"users": ["alice"], "agents": ["bot"]}):
        key, _ = api.service.keys.create("admin", **limit)
        r = api.client.get("/metrics", headers=api.headers(key))
        assert r.status_code == 403 and "tenant-b" not in r.text, r.text
        assert r.json()["error"]["type"] == "forbidden" and "limited to some users or agents" in r.json()["error"]["message"]


def test_revoked_and_reserved(api):
    key, p = api.service.keys.create("tenant-c")
    h = api.headers(key)
    assert api.client.get("/v1/stats", headers=h).status_code == 200
    assert [k["id"] for k in api.service.keys.list("tenant-c")] == [p.key_id]
    assert key not in json.dumps(api.service.keys.list()) and key.split("_", 2)[2] not in str(api.store.get_records(
        Scope(tenant="__keys__"), "api-keys"))
    assert api.service.keys.revoke(p.key_id)
    assert api.client.get("/v1/stats", headers=h).status_code == 401
    with pytest.raises(ValueError, match="tenant"):
        api.service.keys.create("__keys__")


def test_an_empty_limit_never_means_any(api):
    """A key limited to an empty list of users or agents is refused at creation, and one stored so acts for no one."""
    from fullrecall.stores import Record

    for limit in ({"users": []}, {"agents": []}):
        with pytest.raises(ValueError, match="no one"):
            api.service.keys.create("tenant-a", **limit)
    key, p = api.service.keys.create("tenant-a", users=["alice"])
    record = next(r for r in api.store.get_records(Scope(tenant="__keys__"), "api-keys") if r.id == p.key_id)
    record.data = {**record.data, "users": []}
    api.store.put_record(Scope(tenant="__keys__"), Record(id=record.id, namespace=record.namespace, text=record.text,
                                                          data=record.data))
    api.service.keys._cache.clear()
    for params in ({"user_id": "bob"}, {}):
        assert api.client.get("/v1/stats", params=params, headers=api.headers(key)).status_code == 403


def test_stats_and_readiness_say_nothing_of_another_tenants_writes(store_url, gated):
    """``/v1/stats`` gave every tenant the process's embedding queue and searchable delay (its ``samples`` one up
    for each batch another tenant wrote), and the unauthenticated ``/readyz`` the queue: anyone could watch
    another tenant's activity. Each tenant now sees its own; the operators' ``/metrics`` keeps the whole queue.
    """
    from fastapi.testclient import TestClient

    from fullrecall.service.app import create_app
    from fullrecall.service.config import Settings

    gate = gated.gate
    app = create_app(Settings(store=store_url), embedder=gated)
    with TestClient(app, raise_server_exceptions=False) as client:
        keys = app.state.service.keys
        a, b, admin = ({"Authorization": f"Bearer {keys.create(t)[0]}"} for t in ("tenant-a", "tenant-b", "admin"))
        for i in range(3):
            r = client.post(f"/v1/conversations/c{i}/messages", json={"messages": [{"role": "user", "content": "hi"}]},
                            headers=a)
            assert r.status_code == 201, r.text
        mine, theirs = (client.get("/v1/stats", headers=h).json() for h in (a, b))
        assert mine["embedding_queue"] >= 2 and theirs["embedding_queue"] == 0, (mine, theirs)
        assert "embedding_queue" not in client.get("/readyz").json()
        assert "fullrecall_embedding_queue" in client.get("/metrics", headers=admin).text
        gate.set()
        assert app.state.service.indexer.flush()
        mine, theirs = (client.get("/v1/stats", headers=h).json() for h in (a, b))
        assert mine["embedding_queue"] == 0 and mine["searchable_delay"]["samples"] >= 1
        assert theirs["searchable_delay"] == {"p50_ms": None, "p95_ms": None, "samples": 0}, theirs

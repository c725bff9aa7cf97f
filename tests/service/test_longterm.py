"""Long-term memory over HTTP (/v1/memories, /v1/facts, /v1/patterns) on every backend, as a client sees it."""

from __future__ import annotations

import json
import time


def test_record_and_retrieve_keep_every_word_and_the_facts_stated(api):
    c, h = api.client, api.a
    turn = [{"role": "user", "content": "My city is Lyon. I like jazz."}, {"role": "assistant", "content": "Noted!"}]
    first = c.post("/v1/memories/record", json={"messages": turn, "metadata": {"turn": 1}, "session_id": "s1"},
                   headers=h)
    assert first.status_code == 201 and first.json()["session_id"] == "s1" and len(first.json()["ids"]) == 2
    retry = c.post("/v1/memories/record", json={"messages": turn, "metadata": {"turn": 1}, "session_id": "s1"},
                   headers=h)
    assert retry.json()["ids"] == first.json()["ids"]  # a retry stores once
    moved = c.post("/v1/memories/record", json={"messages": [{"role": "user", "content": "My city is Paris now."}]},
                   headers=h).json()
    assert moved["session_id"] == "default"

    hits = c.post("/v1/memories/retrieve", json={"query": "which music does the user like", "limit": 10},
                  headers=h).json()
    messages = {x["id"]: x for x in hits["hits"] if x["kind"] == "message"}
    assert set(messages) == {*first.json()["ids"], *moved["ids"]}  # every message once, from both sessions
    assert messages[first.json()["ids"][0]]["text"] == "My city is Lyon. I like jazz."
    facts = [x for x in hits["hits"] if x["kind"] == "fact"]
    assert facts and all(x["text"] != "My city is Lyon." for x in facts)  # only current facts are recalled
    assert "[fact] I like jazz." in hits["context"].split("\n")
    only = c.post("/v1/memories/retrieve", json={"query": "jazz", "kinds": ["message"]}, headers=h).json()["hits"]
    assert only and {x["kind"] for x in only} == {"message"}

    current = c.get("/v1/facts", headers=h).json()["facts"]
    assert sorted(f["text"] for f in current) == ["I like jazz.", "My city is Paris now."]
    history = c.get("/v1/facts", params={"history": "true"}, headers=h).json()["facts"]
    old = next(f for f in history if f["value"] == "Lyon")
    new = next(f for f in history if f["text"] == "My city is Paris now.")
    assert (old["current"], new["current"]) == (False, True) and old["superseded_by"] == new["id"]
    assert old["valid"] == {"from": old["valid_from"], "to": new["valid_from"]} and new["valid"]["to"] is None
    assert old["sources"] == [{"session_id": "s1", "id": first.json()["ids"][0]}]
    city = c.get("/v1/facts", params={"history": True, "attribute": "city"}, headers=h).json()["facts"]
    assert [f["id"] for f in city] == [old["id"], new["id"]]


def test_facts_remember_list_forget_per_owner(api):
    c, h = api.client, api.a
    made = c.post("/v1/facts", json={"text": "My employer is Acme", "user_id": "u1", "valid_from": time.time() - 100},
                  headers=h)  # Globex since, 10 s later (a fact dated in the future is not current yet)
    assert made.status_code == 201
    fact = made.json()["fact"]
    assert (fact["attribute"], fact["value"], fact["current"]) == ("employer", "Acme", True)
    again = c.post("/v1/facts", json={"text": "my employer is acme!", "user_id": "u1"}, headers=h).json()["fact"]
    assert again["id"] == fact["id"] and again["mentions"] == 2  # a repeat merges
    later = c.post("/v1/facts", json={"text": "I moved", "attribute": "employer", "value": "Globex",
                                      "valid_from": fact["valid_from"] + 10, "user_id": "u1"}, headers=h).json()["fact"]
    assert c.get("/v1/facts", params={"user_id": "u1"}, headers=h).json()["facts"] == [
        {**later, "mentions": 1}]
    assert c.get("/v1/facts", headers=h).json()["facts"] == []  # the default owner is another owner
    assert c.delete(f"/v1/facts/{later['id']}", headers=h).status_code == 404
    gone = c.delete(f"/v1/facts/{later['id']}", params={"user_id": "u1"}, headers=h)
    assert gone.json() == {"id": later["id"], "deleted": True}
    left = c.get("/v1/facts", params={"user_id": "u1", "history": True}, headers=h).json()["facts"]
    assert [f["id"] for f in left] == [fact["id"]]


def test_patterns_learn_plan_and_forget(api):
    c, h = api.client, api.a
    fallback = c.post("/v1/patterns/plan", json={"query": "book a flight to Rome"}, headers=h).json()
    assert fallback["pattern_id"] is None and fallback["suggested_tools"] == [] and fallback["confidence"] < 0.5
    good = {"query": "book a flight to Rome", "tools_used": ["search_flights", "book"], "success_score": 0.9,
            "execution_time_ms": 1200}
    stored = c.post("/v1/patterns", json=good, headers=h).json()
    assert stored["stored"] and stored["pattern_id"]
    weak = c.post("/v1/patterns", json={**good, "tools_used": ["guess"], "success_score": 0.2}, headers=h).json()
    assert weak == {"pattern_id": None, "stored": False, "min_success_score": weak["min_success_score"]}
    assert c.post("/v1/patterns", json={**good, "execution_time_ms": 800}, headers=h).json()["pattern_id"] == \
        stored["pattern_id"]  # the same workflow again: one pattern, counted twice
    listed = c.get("/v1/patterns", headers=h).json()["patterns"]
    assert [(p["id"], p["success_count"], p["avg_execution_time_ms"]) for p in listed] == [
        (stored["pattern_id"], 2, 1000.0)]
    found = c.post("/v1/patterns/search", json={"query": "book a flight to Paris"}, headers=h).json()["patterns"]
    assert [p["id"] for p in found] == [stored["pattern_id"]] and 0 < found[0]["similarity"] <= 1
    plan = c.post("/v1/patterns/plan", json={"query": "book a flight to Paris"}, headers=h).json()
    assert plan["suggested_tools"] == ["search_flights", "book"] and plan["pattern_id"] == stored["pattern_id"]
    assert plan["confidence"] > fallback["confidence"]
    assert c.get("/v1/patterns", params={"agent_id": "other"}, headers=h).json()["patterns"] == []
    assert c.delete(f"/v1/patterns/{stored['pattern_id']}", headers=h).json()["deleted"] is True
    assert c.get("/v1/patterns", headers=h).json()["patterns"] == []


def test_a_key_limited_to_users_keeps_to_them_in_long_term_memory(api):
    key, _ = api.service.keys.create("tenant-a", users=["alice"])
    h = api.headers(key)
    assert api.client.post("/v1/facts", json={"text": "My city is Oslo", "user_id": "alice"}, headers=h
                           ).status_code == 201
    for owner in ({"user_id": "bob"}, {}):
        for method, url, kwargs in (
                ("POST", "/v1/facts", {"json": {"text": "My city is Rome", **owner}}),
                ("GET", "/v1/facts", {"params": owner}),
                ("POST", "/v1/memories/record", {"json": {"messages": [{"role": "user", "content": "hi"}], **owner}}),
                ("POST", "/v1/memories/retrieve", {"json": {"query": "city", **owner}}),
                ("POST", "/v1/patterns/plan", {"json": {"query": "city", **owner}})):
            r = api.client.request(method, url, headers=h, **kwargs)
            assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden", (method, url, r.text)
    assert api.client.get("/v1/facts", params={"user_id": "bob"}, headers=api.a).json()["facts"] == []
    assert [f["value"] for f in api.client.get("/v1/facts", params={"user_id": "alice"}, headers=h).json()["facts"]
            ] == ["Oslo"]


def test_stats_count_the_change_logs_as_records_as_the_cli_does(api, store_url, capsys):
    """A user who only stated a fact, then deleted it, holds no message: ``/v1/stats`` counted long-term memory's
    change-log entries (bookkeeping) as messages and their log as a session, where ``fullrecall stats`` and
    ``forget`` count them as records."""
    from fullrecall.cli.main import main

    c, h = api.client, api.a
    fact = c.post("/v1/facts", json={"text": "My employer is Acme", "user_id": "u1"}, headers=h).json()["fact"]
    assert c.delete(f"/v1/facts/{fact['id']}", params={"user_id": "u1"}, headers=h).json()["deleted"] is True
    stats = c.get("/v1/stats", params={"user_id": "u1"}, headers=h).json()["store"]
    assert (stats["message_count"], stats["session_count"]) == (0, 0)
    assert stats["record_count"] >= 2  # the change log's two events, at least
    tenant = c.get("/v1/stats", params={"everyone": True}, headers=h).json()["store"]
    assert (tenant["message_count"], tenant["session_count"]) == (0, 0)
    assert main(["stats", "--store", store_url, "--tenant", "tenant-a", "--user", "u1", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)  # what the CLI reports for the same owner
    assert {k: cli[k] for k in ("message_count", "session_count", "record_count")} == \
        {k: stats[k] for k in ("message_count", "session_count", "record_count")}

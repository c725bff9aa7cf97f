"""/v1/export and /v1/import carry an owner's long-term memory (facts, patterns) with its conversations."""

from __future__ import annotations

import base64
import json

import numpy as np


def _lines(text: str) -> list[dict]:
    return [json.loads(x) for x in text.split("\n") if x][1:-1]  # between the format header and the end line


def test_export_import_carries_facts_and_patterns_to_the_callers_owner(api):
    c, owner = api.client, {"user_id": "u1"}
    for text in ("My city is Lyon.", "My city is Paris."):
        assert c.post("/v1/facts", json={"text": text, **owner}, headers=api.a).status_code in (200, 201)
    pattern = {"query": "book a flight to Rome", "tools_used": ["search_flights", "book"], "success_score": 0.9,
               "execution_time_ms": 1200, **owner}
    assert c.post("/v1/patterns", json=pattern, headers=api.a).json()["stored"]
    r = c.post("/v1/conversations/c1/messages", json={"messages": [{"role": "user", "content": "hi"}]},
               params=owner, headers=api.a)
    assert r.status_code == 201, r.text

    exported = c.post("/v1/export", json=owner, headers=api.a).text
    body = _lines(exported)
    assert [x["type"] for x in body] == ["message", "fact", "fact", "pattern"]
    assert not any(str(x.get("conversation_id", "")).startswith("_log.") for x in body)
    one = _lines(c.post("/v1/export", json={**owner, "conversation_id": "c1"}, headers=api.a).text)
    assert [x["type"] for x in one] == ["message"]  # one conversation: no long-term memory

    first = c.post("/v1/import", content=exported.encode(), params=owner, headers=api.b).json()
    assert first == {"conversations": 1, "messages": 1, "written": 1, "records": 3}
    again = c.post("/v1/import", content=exported.encode(), params=owner, headers=api.b).json()
    assert again["records"] == 0  # idempotent
    back = _lines(c.post("/v1/export", json=owner, headers=api.b).text)
    # every record as it was (messages are appended anew, with the service's times), but the pattern takes the id
    # its new owner (another tenant's u1) gives the same task and steps, so that owner's own runs update it
    assert back[1:3] == body[1:3] and {**back[3], "id": body[3]["id"]} == body[3] and back[3]["id"] != body[3]["id"]
    assert c.post("/v1/patterns", json=pattern, headers=api.b).json()["stored"]
    (learned,) = [x for x in _lines(c.post("/v1/export", json=owner, headers=api.b).text) if x["type"] == "pattern"]
    assert learned["id"] == back[3]["id"] and learned["data"]["success_count"] == 2
    history = {"history": "true", **owner}
    assert c.get("/v1/facts", params=history, headers=api.b).json() == \
        c.get("/v1/facts", params=history, headers=api.a).json()
    assert c.get("/v1/facts", params={"history": "true"}, headers=api.b).json()["facts"] == []  # only u1's


def test_import_embeds_records_again_with_the_services_model(api):
    c, owner = api.client, {"user_id": "u1"}
    assert c.post("/v1/facts", json={"text": "My city is Lyon.", **owner}, headers=api.a).status_code == 201
    pattern = {"query": "book a flight to Rome", "tools_used": ["search_flights", "book"], "success_score": 0.9,
               "execution_time_ms": 1200, **owner}
    assert c.post("/v1/patterns", json=pattern, headers=api.a).json()["stored"]
    exported = c.post("/v1/export", json=owner, headers=api.a).text.split("\n")
    other_model = {"dim": 3, "b64": base64.b64encode(np.array([1, 0, 0], dtype="<f4").tobytes()).decode()}
    lines = [json.dumps({**json.loads(x), "vector": other_model}) if '"type": "fact"' in x or '"type": "pattern"' in x
             else x for x in exported]  # as the export of a service with another embedding model carries them
    assert c.post("/v1/import", content="\n".join(lines).encode(), params=owner, headers=api.b).json()["records"] == 2
    r = c.post("/v1/memories/retrieve", json={"query": "which city", "kinds": ["fact"], **owner}, headers=api.b)
    assert r.status_code == 200, r.text
    assert [h["text"] for h in r.json()["hits"]] == ["My city is Lyon."]
    r = c.post("/v1/patterns/search", json={"query": "book a flight to Rome", **owner}, headers=api.b)
    assert r.status_code == 200, r.text
    assert [p["tools_used"] for p in r.json()["patterns"]] == [["search_flights", "book"]]

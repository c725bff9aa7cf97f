"""Bad input on every route: a 4xx with a JSON error naming the field, never a 500, nothing partially written."""

from __future__ import annotations

import json

import pytest

from fullrecall.stores import Scope
from fullrecall.stores.base import ANY

GOOD = {"role": "user", "content": "fine"}
SCOPE = Scope(tenant="tenant-a", session_id="c")

BAD_APPENDS = [
    ({}, "messages"),  # missing field
    ({"messages": []}, "messages"),
    ({"messages": "hello"}, "messages"),  # wrong type
    ({"messages": [GOOD, 7]}, "messages"),
    ({"messages": [GOOD, {"content": "no role"}]}, "message 1"),
    ({"messages": [GOOD, {"role": "user", "content": 5}]}, "message 1"),
    ({"messages": [GOOD, {"role": "user", "content": "nul \u0000 here"}]}, "NUL"),
    ({"messages": [GOOD, {"role": "tool", "tool_call_id": "t9", "content": "orphan result"}]}, "t9"),
    ({"messages": [GOOD, {"role": "user", "content": "x", "id": 5.5}]}, "'id'"),
    ({"messages": [GOOD], "extra": 1}, "extra"),
]


def _error(r, status_range=(400, 499)) -> dict:
    assert status_range[0] <= r.status_code <= status_range[1], (r.status_code, r.text)
    body = r.json()["error"]
    assert body["message"] and body["type"]
    return body


@pytest.mark.parametrize("body, names", BAD_APPENDS)
def test_bad_appends_write_nothing(api, body, names):
    r = api.client.post("/v1/conversations/c/messages", json=body, headers=api.a)
    error = _error(r)
    assert names in error["message"] or names == error["field"], error
    assert api.store.count(SCOPE) == 0


def test_bad_bytes_and_sizes(make_api):
    api = make_api(max_body_bytes=4096)
    url = "/v1/conversations/c/messages"
    h = {**api.a, "content-type": "application/json"}
    for raw in (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', b'{"messages": [', b"\x00\x01", b""):
        assert _error(api.client.post(url, content=raw, headers=h))["field"] in ("body", "messages")
    huge = {"messages": [{"role": "user", "content": "x" * 10_000}]}
    assert _error(api.client.post(url, json=huge, headers=api.a))["type"] == "too_large"

    def chunks():  # no Content-Length: the limit is counted as the body arrives
        for _ in range(10):
            yield b"x" * 1000

    assert api.client.post(url, content=chunks(), headers=h).status_code == 413
    assert api.store.count(SCOPE) == 0
    # a valid append still works afterwards, and the tool pair across requests is accepted
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    assert api.client.post(url, json={"messages": [GOOD, call]}, headers=api.a).status_code == 201
    result = {"role": "tool", "tool_call_id": "t1", "content": "42"}
    assert api.client.post(url, json={"messages": [result]}, headers=api.a).status_code == 201
    assert api.store.count(SCOPE) == 3


def test_every_other_route(api):
    assert api.client.post("/v1/conversations/c/messages", json={"messages": [GOOD]}, headers=api.a).status_code == 201
    h = api.a
    cases = [
        ("GET", "/v1/conversations/c/context", {"params": {"max_tokens": "lots"}}, "max_tokens"),
        ("GET", "/v1/conversations/c/context", {"params": {"max_tokens": 0}}, "max_tokens"),
        ("GET", "/v1/conversations/c/context", {"params": {"query": "a\x00b"}}, "query"),
        ("GET", "/v1/conversations/c/messages", {"params": {"user_id": "x" * 500}}, "user_id"),
        ("GET", "/v1/conversations/a%00b/messages", {}, "conversation_id"),
        ("GET", "/v1/summaries/not-a-summary/messages", {}, None),
        ("POST", "/v1/search", {"json": {}}, "query"),
        ("POST", "/v1/search", {"json": {"query": ""}}, "query"),
        ("POST", "/v1/search", {"json": {"query": "x", "top_k": "many"}}, "top_k"),
        ("POST", "/v1/search", {"json": {"query": "x", "top_k": 0}}, "top_k"),
        ("POST", "/v1/search", {"json": {"query": "x", "scope": {"tenant": "tenant-b"}}}, "scope.tenant"),
        ("POST", "/v1/search", {"json": {"query": "x", "filters": {"roles": "user"}}}, "filters.roles"),
        # no role at all searched every role (as if the filter were left out)
        ("POST", "/v1/search", {"json": {"query": "x", "filters": {"roles": []}}}, "filters.roles"),
        # a NUL in a filter matched 'user' on SQLite (vectors) and Redis, and on PostgreSQL was "a value refused"
        ("POST", "/v1/search", {"json": {"query": "x", "filters": {"roles": ["user\x00"]}}},
         "filters 'roles'[0] contains a NUL character"),
        ("POST", "/v1/search", {"json": {"query": "x\x00"}}, "query"),
        ("POST", "/v1/export", {"json": {"conversation_id": 3}}, "conversation_id"),
        ("POST", "/v1/import", {"content": b"\xff\xfe"}, None),
        ("POST", "/v1/import", {"content": b'{"conversation_id": "d"}\nnot json'}, None),
        ("POST", "/v1/import", {"content": b'{"conversation_id": "d", "message": {"role": "user", "content": "ok"}}\n'
                                           b'{"conversation_id": "e", "message": {"role": "tool", "content": "x"}}'},
         None),
        # a line of a type misspelt was skipped, its message silently not imported
        ("POST", "/v1/import", {"content": b'{"conversation_id": "d", "message": {"role": "user", "content": "ok"}}\n'
                                           b'{"type": "mesage", "conversation_id": "d", "message": {"role": "user", '
                                           b'"content": "lost"}}'}, "line 2: unknown type 'mesage'"),
        ("GET", "/v1/stats", {"params": {"everyone": "perhaps"}}, "everyone"),
    ]
    for method, url, kwargs, field in cases:
        error = _error(api.client.request(method, url, headers=h, **kwargs))
        if field:
            assert field == error["field"] or field in error["message"], (url, kwargs, error)
    assert api.store.count(Scope(tenant="tenant-a", session_id="d")) == 0  # the import wrote nothing
    assert api.store.count(SCOPE) == 1


TURN = [{"role": "user", "content": "My city is Lyon"}]
PATTERN = {"query": "book a flight", "tools_used": ["search", "book"], "success_score": 0.9, "execution_time_ms": 10}
BAD_LONG_TERM = [
    ("/v1/memories/record", {}, "messages"),  # missing field
    ("/v1/memories/record", {"messages": "hello"}, "messages"),  # wrong type
    ("/v1/memories/record", {"messages": [*TURN, {"content": "no role"}]}, "message 1"),
    ("/v1/memories/record", {"messages": [*TURN, {"role": "user", "content": 5}]}, "message 1"),
    ("/v1/memories/record", {"messages": [*TURN, {"role": "user", "content": "a\u0000b"}]}, "messages"),
    ("/v1/memories/record", {"messages": TURN, "metadata": "turn 1"}, "metadata"),
    ("/v1/memories/record", {"messages": TURN, "metadata": {"note": "\u0000"}}, "metadata"),
    ("/v1/memories/record", {"messages": TURN, "session_id": ""}, "session_id"),
    ("/v1/memories/record", {"messages": TURN, "user_id": 7}, "user_id"),
    ("/v1/memories/record", {"messages": TURN, "tenant": "tenant-b"}, "tenant"),
    ("/v1/memories/retrieve", {}, "query"),
    ("/v1/memories/retrieve", {"query": "x", "limit": 0}, "limit"),
    ("/v1/memories/retrieve", {"query": "x", "kinds": ["secrets"]}, "kinds"),
    ("/v1/memories/retrieve", {"query": "x\u0000"}, "query"),
    ("/v1/memories/retrieve", {"query": "x" * 20_000}, "query"),
    ("/v1/facts", {}, "text"),
    ("/v1/facts", {"text": ""}, "text"),
    ("/v1/facts", {"text": 5}, "text"),
    ("/v1/facts", {"text": "My city is \u0000"}, "text"),
    ("/v1/facts", {"text": "My city is Lyon", "valid_from": "yesterday"}, "valid_from"),
    ("/v1/facts", {"text": "My city is Lyon", "agent_id": "x" * 500}, "agent_id"),
    ("/v1/patterns", {**PATTERN, "tools_used": "search"}, "tools_used"),
    ("/v1/patterns", {**PATTERN, "tools_used": ["search", ""]}, "tools_used"),
    ("/v1/patterns", {**PATTERN, "success_score": 1.5}, "success_score"),
    ("/v1/patterns", {**PATTERN, "execution_time_ms": -1}, "execution_time_ms"),
    ("/v1/patterns", {k: v for k, v in PATTERN.items() if k != "query"}, "query"),
    ("/v1/patterns", {**PATTERN, "query": "book\u0000"}, "query"),
    ("/v1/patterns/search", {"query": ""}, "query"),
    ("/v1/patterns/search", {"query": "x", "top_k": "all"}, "top_k"),
    ("/v1/patterns/plan", {"task": "x"}, "query"),
]


def test_bad_long_term_input_writes_nothing(api):
    for url, body, names in BAD_LONG_TERM:
        error = _error(api.client.post(url, json=body, headers=api.a))
        assert names in error["message"] or names == error["field"], (url, body, error)
    h = api.a
    assert api.client.get("/v1/facts", params={"history": True}, headers=h).json()["facts"] == []
    assert api.client.get("/v1/patterns", headers=h).json()["patterns"] == []
    assert api.client.post("/v1/memories/retrieve", json={"query": "city Lyon"}, headers=h).json()["hits"] == []
    assert api.store.stats(Scope(tenant="tenant-a"))["message_count"] == 0


def test_bad_long_term_bytes_and_ids(make_api):
    api = make_api(max_body_bytes=4096)
    h = {**api.a, "content-type": "application/json"}
    for url in ("/v1/memories/record", "/v1/facts", "/v1/patterns"):
        for raw in (b'{"text": "\xff\xfe"}', b'{"text": ', b""):
            assert _error(api.client.post(url, content=raw, headers=h))["field"] == "body"
        assert _error(api.client.post(url, json={"text": "x" * 10_000}, headers=api.a))["type"] == "too_large"
    for url in ("/v1/facts/nope", "/v1/patterns/nope"):
        assert _error(api.client.delete(url, headers=api.a))["type"] == "not_found"
    assert _error(api.client.get("/v1/facts", params={"history": "perhaps"}, headers=api.a))["field"] == "history"
    assert api.client.get("/v1/facts", params={"history": True}, headers=api.a).json()["facts"] == []


LONE_SURROGATE = [  # JSON may escape a lone surrogate; no backend stores one and no embedder reads one
    ("/v1/memories/retrieve", {"query": "city \ud800"}, "query"),
    ("/v1/memories/retrieve", {"query": [{"role": "user", "content": "city \ud800"}]}, "query"),
    ("/v1/memories/record", {"messages": [{"role": "user", "content": "hi", "note\ud800": 1}]}, "messages"),
    ("/v1/conversations/c/messages", {"messages": [{"role": "user", "content": "hi", "note\ud800": 1}]}, "messages"),
]


def test_lone_surrogates_are_bad_input(api):
    h = {**api.a, "content-type": "application/json"}
    for url, body, field in LONE_SURROGATE:
        error = _error(api.client.post(url, content=json.dumps(body).encode(), headers=h))
        assert field == error["field"] or field in error["message"], (url, body, error)
        assert "surrogate" in error["message"], (url, body, error)
    assert api.store.stats(Scope(tenant="tenant-a"))["message_count"] == 0


def _record_line(kind: str, **fields) -> dict:
    data = {"signature": "book a flight", "tools_used": ["search", "book"], "success_score": 0.9, "success_count": 1,
            "avg_execution_time_ms": 10.0} if kind == "pattern" else {}
    return {"type": kind, "id": "r1", "text": "My city is Lyon", "created_at": 1.0, "updated_at": 1.0, "data": data,
            **fields}


BAD_RECORD_LINES = [  # a fact or pattern line is checked as POST /v1/facts and /v1/patterns check their text
    (_record_line("fact", text="My city is Ly\u0000on"), "'text'"),
    (_record_line("fact", data={"value": "Ly\u0000on"}), "'data'"),
    (_record_line("pattern", text="book a\u0000flight"), "'text'"),
    (_record_line("fact", text="My city is \ud800"), "'text'"),
    # a fact long-term memory cannot read was imported, and then every read of the owner's facts was refused (and
    # every new fact a 500) until it was deleted
    (_record_line("fact", data={"sources": "chat"}), "'data.sources'"),
    (_record_line("fact", data={"sources": [{"session_id": "c"}]}), "'data.sources'"),
    (_record_line("fact", data={"valid_from": "yesterday"}), "'data.valid_from'"),
    (_record_line("fact", data={"valid_to": "never"}), "'data.valid_to'"),
    (_record_line("fact", data={"mentions": "many"}), "'data.mentions'"),
    (_record_line("fact", data={"attribute": ["city"]}), "'data.attribute'"),
    (_record_line("pattern", data={"signature": "book a flight", "tools_used": ["book"]}), "'data.success_score'"),
]


@pytest.mark.parametrize("line, field", BAD_RECORD_LINES)
def test_nul_in_an_imported_record_writes_nothing_of_the_file(api, line, field):
    message = {"type": "message", "conversation_id": "d", "id": "m1", "message": {"role": "user", "content": "ok"}}
    raw = "\n".join(json.dumps(x) for x in ({"format": "fullrecall", "version": 2}, message, line)).encode()
    error = _error(api.client.post("/v1/import", content=raw, headers=api.a))
    assert "line 3" in error["message"] and field in error["message"], error
    assert api.store.count(Scope(tenant="tenant-a", session_id="d")) == 0
    assert api.client.get("/v1/facts", params={"history": True}, headers=api.a).json()["facts"] == []
    assert api.client.get("/v1/patterns", headers=api.a).json()["patterns"] == []


def test_two_messages_under_one_id_in_a_request_write_nothing(api):
    url = "/v1/conversations/c/messages"
    a, b = {"role": "user", "content": "a", "id": "m1"}, {"role": "user", "content": "b", "id": "m1"}
    error = _error(api.client.post(url, json={"messages": [GOOD, a, b]}, headers=api.a))
    assert error["message"].startswith("message 2: 'id'") and "message 1" in error["message"], error
    assert api.store.count(SCOPE) == 0  # b was not acknowledged and lost: nothing of the request was written
    for _ in range(2):  # a repeat of one message in a request, and a retry of the whole request, store it once
        r = api.client.post(url, json={"messages": [a, a]}, headers=api.a)
        assert r.status_code == 201 and [m["position"] for m in r.json()["messages"]] == [0, 0], r.text
    r = api.client.post(url, json={"messages": [b]}, headers=api.a)  # across requests the first write wins
    assert r.status_code == 201 and r.json()["messages"] == [{"id": "m1", "position": 0}]
    assert [m.data for m in api.store.range(SCOPE, 0, 10)] == [a]


def test_a_message_id_is_taken_or_refused_as_the_library_takes_or_refuses_it(api):
    """The service had its own rule for a message's ``id``: it refused an integer id and one of 201 characters, which
    the library stores, and stored a blank id or ``null`` (as no id), which the library refuses; an id of 100 emoji
    was a 422 of type 'invalid' naming no field. The same message now meets the same rule and the same words.
    """
    from fullrecall.errors import MessageFormatError
    from fullrecall.memory import SyncConversationMemory

    library = SyncConversationMemory(api.store, "library", tenant="library")
    url = "/v1/conversations/c/messages"
    for bad in (None, "  ", "", "\U0001F600" * 100, "a\x00b", 5.5, True, [1]):
        msg = {"role": "user", "content": "x", "id": bad}
        with pytest.raises(MessageFormatError) as refused:
            library.add([GOOD, msg])
        error = _error(api.client.post(url, json={"messages": [GOOD, msg]}, headers=api.a))
        assert (error["type"], error["field"], error["message"]) == ("invalid_message", "messages", str(refused.value))
    assert api.store.count(SCOPE) == 0
    for taken in (5, "x" * 201):
        r = api.client.post(url, json={"messages": [{"role": "user", "content": "y", "id": taken}]}, headers=api.a)
        assert r.status_code == 201 and r.json()["messages"][0]["id"] == str(taken), r.text
    # an integer id is its digits, as the library keeps it: a retry under "5" is the same message
    r = api.client.post(url, json={"messages": [{"role": "user", "content": "y", "id": "5"}]}, headers=api.a)
    assert r.json()["messages"] == [{"id": "5", "position": 0}]
    assert api.store.count(SCOPE) == 2


def test_a_message_holding_nan_is_refused_as_the_library_refuses_it(api):
    """Python's JSON reads ``NaN`` and ``Infinity``; such a message was refused by the store, as a 422 of type
    'invalid' naming no field and the field as stored ("'data.meta'"), not as the library names it.
    """
    from fullrecall.errors import MessageFormatError
    from fullrecall.memory import SyncConversationMemory

    library = SyncConversationMemory(api.store, "library", tenant="library")
    for value, raw in ((float("nan"), b"NaN"), (float("inf"), b"Infinity")):
        with pytest.raises(MessageFormatError) as refused:
            library.add([GOOD, {"role": "user", "content": "x", "meta": value}])
        body = b'{"messages": [{"role": "user", "content": "fine"}, {"role": "user", "content": "x", "meta": ' + raw + b"}]}"
        error = _error(api.client.post("/v1/conversations/c/messages", content=body,
                                       headers={**api.a, "content-type": "application/json"}))
        assert (error["type"], error["field"], error["message"]) == ("invalid_message", "messages", str(refused.value))
    assert api.store.count(SCOPE) == 0


@pytest.mark.parametrize("url, body, field", [
    ("/v1/search", b'{"query": "x", "filters": {"since": NaN}}', "filters.since"),
    ("/v1/search", b'{"query": "x", "filters": {"until": Infinity}}', "filters.until"),
    ("/v1/facts", b'{"text": "My city is Oslo", "valid_from": NaN}', "valid_from"),
    ("/v1/patterns", b'{"query": "q", "tools_used": ["a"], "success_score": 1, "execution_time_ms": Infinity}',
     "execution_time_ms"),
])
def test_a_number_that_is_not_finite_is_named_by_its_field(api, url, body, field):
    """``NaN`` and ``Infinity`` (which Python's JSON reads) in a number field were refused deeper down, naming the
    field in the words only: the error's ``field`` was null.
    """
    error = _error(api.client.post(url, content=body, headers={**api.a, "content-type": "application/json"}))
    assert error["field"] == field and "finite" in error["message"], error
    assert api.client.get("/v1/facts", headers=api.a).json()["facts"] == []
    assert api.client.get("/v1/patterns", headers=api.a).json()["patterns"] == []


def test_a_forged_summary_id_is_not_found(api):
    """A summary id is opaque (base64 of its conversation and summary): one forged with an empty, NUL or over-long
    conversation was a 422 "this write needs a session" or "scope 'session_id' contains a NUL", naming no field,
    where every other id that is not a summary of the caller's is a 404.
    """
    import base64

    assert api.client.post("/v1/conversations/c/messages", json={"messages": [GOOD]}, headers=api.a).status_code == 201
    for session in ("", "a\x00b", "\ud800", "x" * 300):
        raw = json.dumps(["", "", session, "s1"]).encode()
        token = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        r = api.client.get(f"/v1/summaries/{token}/messages", headers=api.a)
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found", (session, r.text)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_json_body_sent_without_its_content_type_is_named_so(api):
    """``curl -d '{...}'`` sends form encoding, a client's raw bytes none: the answer was 'body: Input should be a
    valid dictionary', as if the JSON were wrong; it names the header the body needs.
    """
    body = json.dumps({"messages": [GOOD]}).encode()
    for headers in ({}, {"content-type": "application/x-www-form-urlencoded"}, {"content-type": "text/plain"}):
        for url in ("/v1/conversations/c/messages", "/v1/search", "/v1/facts"):
            error = _error(api.client.post(url, content=body, headers={**api.a, **headers}))
            assert error["field"] == "body" and "Content-Type: application/json" in error["message"], error
            if headers:
                assert headers["content-type"] in error["message"], error
    error = _error(api.client.post("/v1/search", json=["x"], headers=api.a))  # JSON, but not an object
    assert "Content-Type" not in error["message"] and error["field"] == "body", error
    assert api.store.count(SCOPE) == 0
    assert api.client.post("/v1/conversations/c/messages", content=body, headers={
        **api.a, "content-type": "application/json; charset=utf-8"}).status_code == 201


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_message_of_one_long_word_is_appended_in_seconds(api):
    """A message of one 50,000-letter word (a DNA sequence, a long number) took a write thread for over a minute:
    the window's token estimate searched for ids from every letter of the word to its end (quadratic). Eight such
    requests held every write thread of the service, for every tenant.
    """
    import time

    for word in ("a" * 50_000, "7" * 50_000):
        started = time.perf_counter()
        r = api.client.post("/v1/conversations/c/messages", json={"messages": [{"role": "user", "content": word}]},
                            headers=api.a)
        assert r.status_code == 201, r.text
        assert time.perf_counter() - started < 10
    assert api.store.count(SCOPE) == 2


@pytest.mark.parametrize("backend", ["sqlite"])
def test_an_import_names_the_lines_of_the_body_blank_ones_counted(api):
    """Blank lines were not counted: an error named line 2 for the body's fifth line, and a message without an id
    took its id from that count, not from its line as ``fullrecall import`` gives it (the same file imported both
    ways was stored twice).
    """
    ok = b'{"conversation_id": "d", "message": {"role": "user", "content": "ok"}}'
    for fifth, named in ((b'{"conversation_id": "d", "message": {"role": "bogus", "content": "x"}}', "line 5: 'role'"),
                         (b'{"conversation_id": "d", "mesage": {"role": "user", "content": "x"}}', "line 5: 'message'"),
                         (b'{"type": "fact", "id": "f", "text": "", "data": {}}', "line 5: 'text'")):
        error = _error(api.client.post("/v1/import", content=b"\n\n" + ok + b"\n\n" + fifth + b"\n", headers=api.a))
        assert named in error["message"], error
    assert api.store.count(Scope(tenant="tenant-a", session_id="d")) == 0
    assert api.client.post("/v1/import", content=b"\n\n" + ok + b"\n", headers=api.a).status_code == 200
    from fullrecall.transfer._common import stable_id

    [stored] = api.store.range(Scope(tenant="tenant-a", session_id="d"), 0, 9)
    assert stored.id == stable_id(3, {"role": "user", "content": "ok"})  # line 3, as the command names it


@pytest.mark.parametrize("backend", ["sqlite"])
def test_an_owner_or_conversation_refused_is_named_in_field(api):
    """The errors say 'a 4xx naming the field', but a bad user, agent or conversation id (and a NUL in a query, a
    user the key may not act for) came back with ``"field": null``; one of over 256 UTF-8 bytes was refused by the
    store, as "scope 'user_id'".
    """
    post = {"json": {"messages": [GOOD]}}
    cases = [
        ("POST", "/v1/conversations/c/messages", {**post, "params": {"user_id": "x" * 201}}, "user_id"),
        ("POST", "/v1/conversations/c/messages", {**post, "params": {"agent_id": "\U0001f600" * 100}}, "agent_id"),
        ("POST", "/v1/conversations/a%00b/messages", post, "conversation_id"),
        ("GET", "/v1/conversations/c/context", {"params": {"query": "a\x00b"}}, "query"),
        ("POST", "/v1/search", {"json": {"query": "x", "scope": {"user_id": "\U0001f600" * 100}}}, "user_id"),
        ("POST", "/v1/search", {"json": {"query": "x\x00"}}, "query"),
        ("POST", "/v1/export", {"json": {"conversation_id": "\U0001f600" * 100}}, "conversation_id"),
        ("POST", "/v1/memories/record", {"json": {"messages": [GOOD], "session_id": "\U0001f600" * 100}}, "session_id"),
    ]
    for method, url, kwargs, field in cases:
        error = _error(api.client.request(method, url, headers=api.a, **kwargs))
        assert error["field"] == field and field in error["message"], (url, kwargs, error)
    limited, _ = api.service.keys.create("tenant-a", users=["ann"])
    error = _error(api.client.post("/v1/conversations/c/messages", params={"user_id": "bob"}, json={"messages": [GOOD]},
                                   headers=api.headers(limited)))
    assert error["type"] == "forbidden" and error["field"] == "user_id", error
    assert api.store.stats(Scope(tenant="tenant-a", user_id=ANY, agent_id=ANY))["message_count"] == 0


def test_a_nul_in_a_fact_or_pattern_id_is_refused_alike_on_every_backend(api):
    """``DELETE /v1/patterns/a%00b`` was a 404 on SQLite and Redis, and on PostgreSQL a 422 quoting the driver."""
    for kind, field in (("facts", "fact_id"), ("patterns", "pattern_id")):
        error = _error(api.client.delete(f"/v1/{kind}/a%00b", headers=api.a))
        assert error["type"] == "invalid" and error["field"] == field and "NUL" in error["message"], error
        assert api.client.delete(f"/v1/{kind}/nope", headers=api.a).status_code == 404


DOT_IDS = [".", "..", "a/..", "../b", "a/./b", "a/../b"]


def test_a_conversation_id_a_url_cannot_carry_is_refused_on_write_and_read(api):
    """A conversation ``..`` (sent as %2E%2E, imported, or named in a search) was written, but no client could reach
    it again: every HTTP client and proxy resolves the dot segments of ``/v1/conversations/../messages`` before
    sending it. Each route now refuses such an id alike, naming ``conversation_id``, and writes nothing.
    """
    from urllib.parse import quote

    for conv in DOT_IDS:
        sent = quote(conv, safe="/").replace(".", "%2E")  # as a client that does not resolve them sends it
        for method, url, kwargs in (
            ("POST", f"/v1/conversations/{sent}/messages", {"json": {"messages": [GOOD]}}),
            ("GET", f"/v1/conversations/{sent}/messages", {}),
            ("GET", f"/v1/conversations/{sent}/context", {}),
            ("DELETE", f"/v1/conversations/{sent}", {}),
            ("POST", "/v1/search", {"json": {"query": "x", "scope": {"conversation_id": conv}}}),
            ("POST", "/v1/export", {"json": {"conversation_id": conv}}),
            ("GET", "/v1/stats", {"params": {"conversation_id": conv}}),
        ):
            error = _error(api.client.request(method, url, headers=api.a, **kwargs))
            assert error["type"] == "invalid" and error["field"] == "conversation_id", (conv, url, error)
            assert "'.' or '..'" in error["message"], (conv, url, error)
        error = _error(api.client.post("/v1/memories/record", json={"messages": [GOOD], "session_id": conv},
                                       headers=api.a))
        assert error["field"] == "session_id" and "'.' or '..'" in error["message"], (conv, error)
        line = json.dumps({"conversation_id": conv, "id": "m0", "message": GOOD})
        error = _error(api.client.post("/v1/import", content=line,
                                       headers={**api.a, "content-type": "application/x-ndjson"}))
        assert "line 1" in error["message"] and "'.' or '..'" in error["message"], (conv, error)
    assert api.store.stats(Scope(tenant="tenant-a", user_id=ANY, agent_id=ANY))["message_count"] == 0
    assert _append_ok(api, "a.b/..c/...", [GOOD])  # dots inside a segment are no dot segment


def _append_ok(api, conv, messages) -> bool:
    r = api.client.post(f"/v1/conversations/{conv}/messages", json={"messages": messages}, headers=api.a)
    assert r.status_code == 201, r.text
    return api.client.get(f"/v1/conversations/{conv}/messages", headers=api.a).json()["conversation_id"] == conv


def test_a_line_nested_past_any_parser_is_refused_by_the_import_naming_it(api):
    """A body line of 100,000 nested brackets (under the body limit) was a 500: Python's parser gives up with a
    RecursionError, which the import did not take for invalid JSON. It is now refused as such, naming the line.
    """
    deep = "[" * 100_000 + "]" * 100_000
    body = "\n".join([json.dumps({"conversation_id": "c", "id": "m0", "message": GOOD}),
                      '{"conversation_id": "c", "message": {"role": "user", "content": "x", "meta": ' + deep + "}}"])
    error = _error(api.client.post("/v1/import", content=body, headers={**api.a, "content-type": "application/x-ndjson"}))
    assert error["message"] == "line 2: not valid JSON (nested too deep)", error
    assert api.store.count(Scope(tenant="tenant-a", session_id="c")) == 0


@pytest.mark.parametrize("url, field", [
    ("/v1/conversations/%FF/messages", "path"),
    ("/v1/conversations/c/messages?user_id=%C0", "user_id"),
    ("/v1/conversations/c/messages?user_id=ok&agent_id=a%FEb", "agent_id"),
    ("/v1/conversations/c/messages?%FF=1", "query"),
])
def test_percent_escapes_of_no_utf8_are_refused_not_read_as_another_id(api, url, field):
    """``%FF`` was decoded to U+FFFD, as ``%FE`` was: two ids a client sent named one conversation (and one
    user), and one's messages were read back through the other. Refused on write and read, nothing written."""
    for method, body in (("post", {"json": {"messages": [GOOD]}}), ("get", {})):
        r = getattr(api.client, method)(url, headers=api.a, **body)
        assert r.status_code == 422 and _error(r)["field"] == field, (method, r.text)
    assert api.store.sessions(Scope(tenant="tenant-a", user_id=ANY, agent_id=ANY, session_id=ANY)) == []
    fine = api.client.post("/v1/conversations/%C3%A9t%C3%A9/messages?user_id=J%C3%BCrgen", headers=api.a,
                           json={"messages": [GOOD]})  # escapes of UTF-8 are fine
    assert fine.status_code == 201 and fine.json()["messages"][0]["position"] == 0


def test_every_refusal_names_its_field_and_a_json_value_of_another_type_is_refused(api):
    """Refusals the library words ("fact: 'text' must be ...") answered ``"field": null``; and ``"top_k": true``
    was taken as 1, ``"5"`` as 5. Each 422 names its field; a value of another JSON type is refused."""
    api.client.post("/v1/conversations/c1/messages", headers=api.a, json={"messages": [GOOD]})
    for r, field in [
        (api.client.get("/v1/conversations/c1/context?max_tokens=1", headers=api.a), "max_tokens"),
        (api.client.post("/v1/search", headers=api.a, json={"query": "a", "filters": {"roles": ["\x00"]}}), "roles"),
        (api.client.post("/v1/facts", headers=api.a, json={"text": " "}), "text"),
        (api.client.post("/v1/patterns", headers=api.a, json={"query": "q", "tools_used": [""], "success_score": 0.9,
                                                              "execution_time_ms": 1}), "tools_used"),
        (api.client.post("/v1/import", headers={**api.a, "content-type": "application/x-ndjson"}, content=b"\xff"),
         "body"),
        (api.client.post("/v1/search", headers=api.a, json={"query": "fine", "top_k": True}), "top_k"),
        (api.client.post("/v1/search", headers=api.a, json={"query": "fine", "radius": "2"}), "radius"),
        (api.client.post("/v1/facts", headers=api.a, json={"text": "I like tea", "user_id": 7}), "user_id"),
    ]:
        assert r.status_code == 422 and _error(r)["field"] == field, (field, r.text)
    assert api.client.post("/v1/search", headers=api.a, json={"query": "fine", "top_k": 2}).status_code == 200


def test_a_body_no_parser_reads_is_a_422_and_an_import_line_of_one_is_named(api):
    """JSON nested 5,000 deep, or an integer of 5,000 digits, got a 400 where any other bad body gets a 422; in an
    import line, the integer was refused in Python's words, naming no line."""
    json_body = {**api.a, "content-type": "application/json"}
    for url, body in [("/v1/conversations/c/messages", b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
                      ("/v1/search", b'{"query": "x", "top_k": ' + b"9" * 5000 + b"}")]:
        r = api.client.post(url, headers=json_body, content=body)
        assert r.status_code == 422 and _error(r)["field"] == "body", (url, r.text)
    good = json.dumps({"type": "message", "conversation_id": "c", "id": "m0", "position": 0, "role": "user",
                       "message": {"role": "user", "content": "fine"}})
    r = api.client.post("/v1/import", headers={**api.a, "content-type": "application/x-ndjson"},
                        content=(good + "\n" + '{"a": ' + "9" * 5000 + "}\n").encode())
    assert r.status_code == 422 and _error(r)["message"].startswith("line 2: not valid JSON"), r.text
    assert api.store.count(SCOPE) == 0

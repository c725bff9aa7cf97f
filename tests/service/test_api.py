"""The conversation, search, export/import, stats, metrics and limit routes, through HTTP, on every backend."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fullrecall.stores import Scope
from fullrecall.stores.sqlite import SQLiteStore


def _append(api, conv, messages, key=None, **params):
    r = api.client.post(f"/v1/conversations/{conv}/messages", json={"messages": messages}, params=params,
                        headers=api.headers(key or api.key_a))
    assert r.status_code == 201, r.text
    return r.json()["messages"]


def test_append_is_durable_idempotent_and_ordered(api):
    first = _append(api, "c", [{"role": "user", "content": "hi", "id": "u1"}, {"role": "assistant", "content": "hello"}])
    assert [m["position"] for m in first] == [0, 1] and first[0]["id"] == "u1"
    again = _append(api, "c", [{"role": "user", "content": "hi (retried)", "id": "u1"}])
    assert again == [{"id": "u1", "position": 0}]
    stored = api.store.get(Scope(tenant="tenant-a", session_id="c"), ["u1", first[1]["id"]])
    assert [m.data["content"] for m in stored] == ["hi", "hello"]  # durable when acknowledged; first write wins
    window = api.client.get("/v1/conversations/c/messages", headers=api.a).json()["messages"]
    assert [m["message"] for m in window] == [{"role": "user", "content": "hi", "id": "u1"},
                                              {"role": "assistant", "content": "hello"}]


def test_concurrent_appends_all_land(api):
    def writer(n):
        for i in range(10):
            _append(api, "shared", [{"role": "user", "content": f"w{n} m{i}", "id": f"w{n}-{i}"}])

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    exported = api.client.post("/v1/export", json={"conversation_id": "shared"}, headers=api.a).text.split("\n")
    rows = [json.loads(x) for x in exported if x][1:-1]  # between the format header and the end line
    assert sorted(r["id"] for r in rows) == sorted(f"w{n}-{i}" for n in range(4) for i in range(10))
    assert [r["position"] for r in rows] == list(range(40))


@pytest.mark.parametrize("manager", ["sliding", "summarizing"])
def test_window_context_and_recall(make_api, manager):
    api = make_api(window_messages=4, manager=manager)
    old = [{"role": "user", "content": "my locker code is 4471 at the gym"}, {"role": "assistant", "content": "noted"}]
    filler = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"talk about weather number {i}"}
              for i in range(6)]
    _append(api, "c", old + filler + [{"role": "user", "content": "what is my locker code?"}])
    api.service.indexer.flush()
    window = api.client.get("/v1/conversations/c/messages", headers=api.a).json()["messages"]
    summaries = api.client.get("/v1/conversations/c/summaries", headers=api.a).json()["summaries"]
    if manager == "sliding":  # the newest window_messages, nothing summarized
        assert [m["position"] for m in window] == [5, 6, 7, 8] and summaries == []
    else:  # the older messages summarized in the window's first message
        assert window[0]["kind"] == "summary" and window[0]["id"] == summaries[-1]["id"]
        assert [m["position"] for m in window[1:]] == [5, 6, 7, 8]
        assert "## Conversation Summary" in window[0]["message"]["content"]
        expanded = [m for s in summaries
                    for m in api.client.get(f"/v1/summaries/{s['id']}/messages", headers=api.a).json()["messages"]]
        assert [m["position"] for m in expanded] == [0, 1, 2, 3, 4]
    ctx = api.client.get("/v1/conversations/c/context", headers=api.a).json()
    assert ctx["first_position"] == 5
    assert 0 in [m["position"] for m in ctx["recalled"]]
    last = ctx["messages"][-1]["content"]
    assert "4471" in last and last.endswith("what is my locker code?")
    small = api.client.get("/v1/conversations/c/context", params={"max_tokens": 20, "query": "weather"},
                           headers=api.a).json()
    assert 0 < len(small["messages"]) < 4


def test_recall_never_repeats_the_pinned_system_message_the_window_holds(make_api):
    """A hit just after the pinned system message (position 0; the summarizing window keeps it) brought it back as a
    recalled neighbour, though the window holds it: the model was given the system prompt twice."""
    api = make_api(window_messages=4, manager="summarizing")
    said = [{"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "my locker code is 4471 at the gym"}, {"role": "assistant", "content": "noted"}]
    filler = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"talk about weather number {i}"}
              for i in range(6)]
    _append(api, "c", said + filler + [{"role": "user", "content": "what is my locker code at the gym?"}])
    api.service.indexer.flush()
    ctx = api.client.get("/v1/conversations/c/context", headers=api.a).json()
    assert ctx["messages"][0]["content"] == "You are a terse assistant."
    recalled = [m["position"] for m in ctx["recalled"]]
    assert 1 in recalled and 0 not in recalled, recalled


def test_recall_reaches_what_left_the_window_after_a_message_pinned_in_it(make_api):
    """A Converse message pinned by its flag stays in the window after those that left it: recall stopped at it,
    so nothing archived after it (the locker code at position 2) could be recalled."""
    api = make_api(window_messages=6, manager="summarizing")
    said = [{"role": "user", "content": [{"text": "hi"}]},
            {"role": "assistant", "content": [{"text": "hello there, I am Ann"}], "metadata": {"custom": {"pinned": True}}},
            {"role": "user", "content": [{"text": "my locker code is 4471 at the gym"}]},
            {"role": "assistant", "content": [{"text": "noted"}]}]
    filler = [{"role": "user" if i % 2 == 0 else "assistant", "content": [{"text": f"talk about weather number {i}"}]}
              for i in range(10)]
    _append(api, "c", said + filler + [{"role": "user", "content": [{"text": "what is my locker code at the gym?"}]}])
    api.service.indexer.flush()
    ctx = api.client.get("/v1/conversations/c/context", headers=api.a).json()
    assert any("I am Ann" in str(m["content"]) for m in ctx["messages"])  # the pinned message is in the window
    recalled = [m["position"] for m in ctx["recalled"]]
    assert 2 in recalled and 1 not in recalled, recalled


def test_context_with_a_budget_below_the_newest_message_is_refused_naming_the_budget(api):
    """Not an empty context (a model sent nothing of the conversation): an error naming ``max_tokens`` and what the
    newest message needs, as MCP's ``get_context`` answers; that budget gives the newest message."""
    _append(api, "c", [{"role": "user", "content": "an older question"}, {"role": "assistant", "content": "its answer"},
                       {"role": "user", "content": "the newest question, " + "long " * 40}])
    r = api.client.get("/v1/conversations/c/context", params={"max_tokens": 5}, headers=api.a)
    assert r.status_code == 422 and r.json()["error"]["type"] == "invalid", r.text
    message = r.json()["error"]["message"]
    assert message.startswith("'max_tokens' 5 is below the newest message's "), message
    needed = int(message.split("'s ")[1].split(" tokens")[0])
    fits = api.client.get("/v1/conversations/c/context", params={"max_tokens": needed}, headers=api.a)
    assert fits.status_code == 200, fits.text
    assert [m["content"] for m in fits.json()["messages"]] == ["the newest question, " + "long " * 40]


def test_the_sliding_window_reads_the_newest_messages_whatever_gaps_deletions_left(make_api, monkeypatch):
    """The window was read from position ``count - n`` on: with the older messages deleted, every message after it
    (here 1,000 for a window of 5). It steps back from the newest position held instead, over gaps too."""
    from fullrecall.stores.base import StoredMessage
    from fullrecall.transfer._common import register

    api = make_api(window_messages=5, manager="sliding")
    own = Scope(tenant="tenant-a", session_id="c")
    api.store.append(own, [StoredMessage(id=f"m{i}", role="user", text=f"t{i}", data={"role": "user",
                                                                                      "content": f"t{i}"})
                           for i in range(2000)])
    register(api.store, own)
    gone = [f"m{i}" for i in range(1000)] + [f"m{i}" for i in range(1500, 2000) if i not in (1500, 1700, 1999)]
    api.store.delete(own, gone)  # 503 left: 1000 to 1499, then 1500, 1700 and 1999 across gaps
    read: list[int] = []
    real = api.store.ranges

    def counted(scope, spans):
        found = real(scope, spans)
        if scope.session_id == "c":
            read.append(sum(len(f) for f in found))
        return found

    monkeypatch.setattr(api.store, "ranges", counted)
    window = api.client.get("/v1/conversations/c/messages", headers=api.a).json()["messages"]
    assert [m["position"] for m in window] == [1498, 1499, 1500, 1700, 1999]
    assert sum(read) <= 20 and len(read) <= 10, read  # a few reads across the gaps, not 503 messages


def test_search_scores_ranges_and_filters(api):
    _append(api, "c1", [{"role": "user", "content": "the invoice REF-48213 is overdue"},
                        {"role": "assistant", "content": "I will chase it"}, {"role": "user", "content": "thanks"}])
    _append(api, "c2", [{"role": "user", "content": "book a table for two"}], user_id="bob")
    api.service.indexer.flush()
    r = api.client.post("/v1/search", json={"query": "invoice REF-48213", "top_k": 2, "radius": 1}, headers=api.a)
    hits = r.json()["hits"]
    assert hits[0]["conversation_id"] == "c1" and hits[0]["position"] == 0
    assert {"dense", "lexical", "fused"} <= set(hits[0]["scores"])
    assert hits[0]["range"]["start"] == 0 and hits[0]["range"]["end"] == 1
    assert all(h["user_id"] is None for h in hits)  # bob's conversation is not the default owner's
    bob = api.client.post("/v1/search", json={"query": "table", "scope": {"user_id": "bob"}}, headers=api.a).json()
    assert [h["conversation_id"] for h in bob["hits"]] == ["c2"]
    only = api.client.post("/v1/search", json={"query": "invoice chase", "filters": {"roles": ["assistant"]}},
                           headers=api.a).json()["hits"]
    assert only and all(h["role"] == "assistant" for h in only)


@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=30),
                      min_size=1, max_size=5))
def test_export_import_round_trip(api, texts):
    conv = f"c-{uuid.uuid4().hex}"  # the app is shared by the examples; each its own conversation
    msgs = [{"role": "user", "content": t} for t in texts]
    _append(api, conv, msgs)
    exported = api.client.post("/v1/export", json={"conversation_id": conv}, headers=api.a).text
    r = api.client.post("/v1/import", content=exported.encode(), headers={**api.b, "content-type": "application/x-ndjson"})
    assert r.json() == {"conversations": 1, "messages": len(texts), "written": len(texts)}
    again = api.client.post("/v1/import", content=exported.encode(), headers=api.b)  # idempotent
    assert again.status_code == 200
    assert again.json() == {"conversations": 1, "messages": len(texts), "written": 0}  # a retry says it wrote none
    back = [json.loads(x) for x in api.client.post("/v1/export", json={"conversation_id": conv}, headers=api.b
                                                   ).text.split("\n") if x][1:-1]  # header, end line aside
    assert [b["message"] for b in back] == msgs


def test_an_export_of_a_message_holding_bytes_is_whole(api):
    """An image as bytes (a Strands agent writing to the same store) broke the export's stream after its header."""
    from fullrecall.stores import StoredMessage

    said = {"role": "user", "content": [{"image": {"format": "png", "source": {"bytes": b"\x89PNG\x00"}}}]}
    api.store.append(Scope(tenant="tenant-a", session_id="pics"), [StoredMessage(id="m0", role="user", text="a picture",
                                                                                 data=said)])
    lines = [json.loads(x) for x in api.client.post("/v1/export", json={"conversation_id": "pics"}, headers=api.a
                                                    ).text.split("\n") if x]
    assert lines[-1]["type"] == "end" and lines[1]["message"]["content"][0]["image"]["source"]["bytes"] == {
        "__bytes_encoded__": True, "data": "iVBORwA="}


class _FailingStore(SQLiteStore):
    """A real SQLite store whose reads of messages fail once ``armed`` rows have been read: a disk gone mid-export."""

    armed: int | None = None

    def range(self, scope, start, end):
        if self.armed is not None and self.armed <= 0:
            raise OSError("the disk is gone")
        rows = super().range(scope, start, end)
        if self.armed is not None:
            self.armed -= len(rows)
        return rows


def test_an_export_failing_part_way_has_no_end_line_and_its_import_says_it_is_cut_short(tmp_path, default_embedder):
    from fastapi.testclient import TestClient

    from fullrecall.service.app import create_app
    from fullrecall.service.config import Settings

    url = f"sqlite:///{tmp_path / 'f.db'}"
    store = _FailingStore(str(tmp_path / "f.db"))
    with TestClient(create_app(Settings(store=url), store=store, embedder=default_embedder),
                    raise_server_exceptions=False) as client:
        key, _ = client.app.state.service.keys.create("t")
        auth = {"Authorization": f"Bearer {key}"}
        for conv in ("c1", "c2"):
            r = client.post(f"/v1/conversations/{conv}/messages", headers=auth,
                            json={"messages": [{"role": "user", "content": f"{conv} {i}"} for i in range(3)]})
            assert r.status_code == 201, r.text
        whole = [json.loads(x) for x in client.post("/v1/export", json={}, headers=auth).text.split("\n") if x]
        assert whole[-1] == {"type": "end", "messages": 6, "records": 0, "states": 0}
        assert client.app.state.service.indexer.flush()  # its catch-up reads go through range too: done first
        store.armed = 3  # the first conversation is read, the second's read fails
        cut = client.post("/v1/export", json={}, headers=auth)
        body = [json.loads(x) for x in cut.text.split("\n") if x]
        assert body[1:] == whole[1:4] and cut.status_code == 200  # the header, c1's messages, then no end line
        store.armed = None
        r = client.post("/v1/import", content=cut.text.encode(), headers={**auth, "content-type": "application/x-ndjson"},
                        params={"user_id": "other"})
        assert r.status_code == 422 and "the body is cut short" in r.text, r.text
        assert client.get("/v1/conversations/c1/messages", headers=auth, params={"user_id": "other"}).status_code == 404


def test_importing_lines_without_ids_again_stores_them_once(api):
    """A line and message without an id got a fresh id at each import: a retried import stored the message again."""
    conv = f"c-{uuid.uuid4().hex}"
    body = "\n".join(json.dumps({"conversation_id": conv, "message": {"role": "user", "content": t}})
                     for t in ("no id here", "nor here"))
    for _ in range(2):
        r = api.client.post("/v1/import", content=body.encode(), headers={**api.a, "content-type": "application/x-ndjson"})
        assert r.status_code == 200, r.text
    window = api.client.get(f"/v1/conversations/{conv}/messages", headers=api.a).json()["messages"]
    assert [m["message"]["content"] for m in window] == ["no id here", "nor here"]


def test_a_conversation_whose_id_holds_a_slash_is_read_and_forgotten(api):
    """A conversation imported (or written over MCP or by the library) as "team/42" was listed by the inspector, but
    every route naming it answered 404 "Not Found": its slash, sent as %2F, split the path. It could not be read,
    nor forgotten.
    """
    line = json.dumps({"conversation_id": "team/42", "id": "m0", "message": {"role": "user", "content": "hello"}})
    r = api.client.post("/v1/import", content=line, headers={**api.a, "content-type": "application/x-ndjson"})
    assert r.status_code == 200, r.text
    assert _append(api, "team%2F42", [{"role": "assistant", "content": "hi", "id": "m1"}]) == [{"id": "m1", "position": 1}]
    window = api.client.get("/v1/conversations/team%2F42/messages", headers=api.a)
    assert window.status_code == 200, window.text
    assert [m["id"] for m in window.json()["messages"]] == ["m0", "m1"]
    assert window.json()["conversation_id"] == "team/42"
    for path in ("/v1/conversations/team%2F42/context", "/v1/conversations/team%2F42/summaries",
                 "/v1/inspector/conversations/team%2F42/archive", "/v1/inspector/conversations/team%2F42/timeline"):
        assert api.client.get(path, headers=api.a).status_code == 200, path
    page = api.client.get("/v1/inspector/conversations/team%2F42/archive", headers=api.a).json()
    assert [m["id"] for m in page["messages"]] == ["m0", "m1"]
    assert api.client.get("/v1/conversations/team/messages", headers=api.a).status_code == 404  # not a prefix of it
    assert api.client.get("/v1/conversations/team%2F42/messages", headers=api.b).status_code == 404  # A's own
    deleted = api.client.delete("/v1/conversations/team%2F42", headers=api.a)
    assert deleted.status_code == 200 and deleted.json()["deleted"]["messages"] == 2, deleted.text
    assert api.store.count(Scope(tenant="tenant-a", session_id="team/42")) == 0


def test_deleting_a_conversation_reports_every_record_it_deletes(api):
    """The conversation list's record naming a deleted conversation went, but ``deleted.records`` left it out: the
    owner's ``record_count`` dropped by one more than reported."""
    _append(api, "c", [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}])
    _append(api, "d", [{"role": "user", "content": "three"}])
    before = api.client.get("/v1/stats", headers=api.a).json()["store"]["record_count"]
    deleted = api.client.delete("/v1/conversations/c", headers=api.a).json()["deleted"]
    after = api.client.get("/v1/stats", headers=api.a).json()["store"]["record_count"]
    assert deleted["records"] >= 1 and before - after == deleted["records"], (before, after, deleted)


def test_forget_stats_and_metrics(make_api):
    api = make_api(rate_limit=5, burst=5)
    admin, _ = api.service.keys.create("admin")
    _append(api, "c", [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}])
    api.service.indexer.flush()
    stats = api.client.get("/v1/stats", headers=api.a).json()
    assert stats["store"]["message_count"] == 2 and stats["embedding_queue"] == 0
    assert stats["searchable_delay"]["samples"] >= 1
    deleted = api.client.delete("/v1/conversations/c", headers=api.a).json()["deleted"]
    assert deleted["messages"] == 2 and deleted["vectors"] == 2
    assert api.client.get("/v1/conversations/c/messages", headers=api.a).status_code == 404
    codes = [api.client.get("/v1/stats", headers=api.a).status_code for _ in range(8)]
    assert 429 in codes
    text = api.client.get("/metrics", headers=api.headers(admin)).text
    assert 'fullrecall_requests_total{method="POST",route="/v1/conversations/{conversation_id}/messages"' in text
    assert 'tenant="tenant-a"' in text and "fullrecall_searchable_delay_seconds_count" in text
    assert 'fullrecall_errors_total{route="/v1/stats",status="429",tenant="tenant-a"}' in text  # the key's tenant
    assert api.client.get("/healthz").json() == {"status": "ok"}
    assert api.client.get("/readyz").status_code == 200


def test_embeddings_lost_in_a_crash_are_caught_up(store_url, default_embedder):
    from fullrecall.service.conversations import Conversations
    from fullrecall.service.indexer import Indexer
    from fullrecall.stores import open_store

    store = open_store(store_url)
    scope = Scope(tenant="t", session_id="c")
    dead = Indexer(store, default_embedder)
    dead.close()  # its queue is never processed again: like a process killed after the commit
    lost = Conversations(store, dead).append(scope, [{"role": "user", "content": f"m{i}"} for i in range(5)])
    assert store.get_vectors(scope, [m["id"] for m in lost]) == {}
    indexer = Indexer(store, default_embedder)  # the next process
    Conversations(store, indexer).append(scope, [{"role": "user", "content": "one more"}])
    assert indexer.flush()
    assert set(store.get_vectors(scope, [m["id"] for m in lost])) == {m["id"] for m in lost}
    indexer.close()
    store.close()


def test_embeddings_a_crash_lost_are_caught_up_by_a_process_that_checked_before(store_url, default_embedder,
                                                                               monkeypatch):
    """Two processes serve one conversation; one dies with appends not yet embedded, more of them than a look at the
    recent messages reaches. The other had checked the conversation when it first wrote to it, and never looked
    again: those messages stayed without vectors for good. Its later writes compare the conversation's counters
    (at most every CATCH_UP_S) and embed what is missing, wherever it sits."""
    from fullrecall.service import indexer as I
    from fullrecall.service.conversations import Conversations
    from fullrecall.stores import open_store

    store = open_store(store_url)
    scope = Scope(tenant="t", session_id="shared")
    alive = I.Indexer(store, default_embedder)
    Conversations(store, alive).append(scope, [{"role": "user", "content": "first"}])
    assert alive.flush()
    dead = I.Indexer(store, default_embedder)
    dead.close()  # its queue is never processed again: like a process killed after the commits
    lost = [m["id"] for m in Conversations(store, dead).append(
        scope, [{"role": "user", "content": f"lost {i}"} for i in range(300)])]
    Conversations(store, alive).append(scope, [{"role": "user", "content": "soon after"}])
    assert alive.flush()
    assert len(store.get_vectors(scope, lost)) == 0  # checked a moment ago: not read again yet
    monkeypatch.setattr(I, "CATCH_UP_S", 0.0)
    Conversations(store, alive).append(scope, [{"role": "user", "content": "later"}])
    assert alive.flush()
    assert set(store.get_vectors(scope, lost)) == set(lost)
    counts = store.stats(scope)
    assert counts["vector_count"] == counts["message_count"] == 303
    alive.close()
    store.close()


def test_a_failed_vector_write_is_caught_up_by_the_next_write(store_url, default_embedder):
    """A store that refuses the vectors (down for a moment) is not taken for done: the next write embeds them."""
    from fullrecall.errors import StoreError
    from fullrecall.service.conversations import Conversations
    from fullrecall.service.indexer import Indexer
    from fullrecall.stores import open_store

    store = open_store(store_url)

    class Flaky:  # the real store, but its vector writes fail while ``down``
        down = True

        def __getattr__(self, name):
            return getattr(store, name)

        def set_vectors(self, *args, **kwargs):
            if self.down:
                raise StoreError("the store could not be reached")
            return store.set_vectors(*args, **kwargs)

    flaky = Flaky()
    scope = Scope(tenant="t", session_id="flaky")
    indexer = Indexer(flaky, default_embedder)
    conversations = Conversations(store, indexer)
    first = conversations.append(scope, [{"role": "user", "content": f"m{i}"} for i in range(3)])
    assert indexer.flush()
    assert store.get_vectors(scope, [m["id"] for m in first]) == {}
    flaky.down = False
    conversations.append(scope, [{"role": "user", "content": "one more"}])
    assert indexer.flush()
    assert set(store.get_vectors(scope, [m["id"] for m in first])) == {m["id"] for m in first}
    indexer.close()
    store.close()


def test_a_conversation_forgotten_by_another_process_and_begun_again_is_exported(store_url, default_embedder):
    """Two service processes on one store: one forgets a conversation the other had listed; the other writes to it
    again, and an owner-wide export still finds it."""
    from fullrecall.service.conversations import Conversations
    from fullrecall.service.indexer import Indexer
    from fullrecall.stores import open_store

    store = open_store(store_url)
    indexer = Indexer(store, default_embedder)
    one, other = Conversations(store, indexer), Conversations(store, indexer)
    scope = Scope(tenant="t", session_id="again")
    one.append(scope, [{"role": "user", "content": "before"}])
    other.forget(scope)
    one.append(scope, [{"role": "user", "content": "after"}])
    lines = list(one.export(Scope(tenant="t")))
    assert [line["message"]["content"] for line in lines if line.get("type", "message") == "message"
            and "message" in line] == ["after"]
    indexer.close()
    store.close()


def _listed(api) -> list[tuple[str, int]]:
    return [(c["conversation_id"], c["messages"]) for c in
            api.client.get("/v1/inspector/conversations", headers=api.a).json()["conversations"]]


@pytest.mark.parametrize("when", ["between forget's delete and its unlisting", "between listing and appending"])
def test_a_conversation_appended_to_while_another_process_forgets_it_stays_listed(make_api, when):
    """Two service processes on one store: one forgets a conversation while the other appends to it. The append
    could land between the forget's deletion and its taking the conversation off the owner's list, or after that
    forget but after its own listing: the conversation then held the new message but was missing from the list
    (the inspector no longer showed it; export still found it). Whatever the interleaving, a conversation that
    holds messages is listed."""
    forgetter, writer = make_api(), make_api()
    msg = {"messages": [{"role": "user", "content": "hello"}]}
    path = "/v1/conversations/c/messages"
    later = {"messages": [{"role": "user", "content": "written meanwhile"}]}
    if when == "between forget's delete and its unlisting":
        assert writer.client.post(path, json=msg, headers=writer.a).status_code == 201  # the writer has it listed
        store, real = forgetter.store, forgetter.store.forget

        def forget_then_append(scope):
            counts = real(scope)
            assert writer.client.post(path, json=later, headers=writer.a).status_code == 201
            return counts

        store.forget = forget_then_append
    else:  # the writer lists the conversation, the forgetter forgets it whole, then the writer appends
        assert forgetter.client.post(path, json=msg, headers=forgetter.a).status_code == 201
        store, real = writer.store, writer.store.append

        def forget_then_append(scope, records):
            assert forgetter.client.delete("/v1/conversations/c", headers=forgetter.a).status_code == 200
            return real(scope, records)

        store.append = forget_then_append
        assert writer.client.post(path, json=later, headers=writer.a).status_code == 201
        store.append = real
    if when == "between forget's delete and its unlisting":
        assert forgetter.client.delete("/v1/conversations/c", headers=forgetter.a).status_code == 200
        store.forget = real
    messages = writer.client.get(path, headers=writer.a).json()["messages"]
    assert [m["message"]["content"] for m in messages] == ["written meanwhile"]
    assert _listed(writer) == _listed(forgetter) == [("c", 1)]


def test_appends_wait_while_the_embedding_backlog_is_full(store_url, gated):
    """Over ``backlog`` messages awaiting embedding, an append is durable but waits for the indexer to catch up, so
    the searchable delay stays bounded; once the indexer moves, every message is embedded."""
    from fullrecall.service.conversations import Conversations
    from fullrecall.service.indexer import Indexer
    from fullrecall.stores import open_store

    gate = gated.gate
    store = open_store(store_url)
    scope = Scope(tenant="t", session_id="backlog")
    indexer = Indexer(store, gated, batch=1, backlog=2)
    conversations = Conversations(store, indexer)
    ids = [conversations.append(scope, [{"role": "user", "content": "first"}])[0]["id"]]
    while indexer.pending:  # the indexer took the first message and waits at the gate
        threading.Event().wait(0.01)
    ids += [conversations.append(scope, [{"role": "user", "content": f"m{i}"}])[0]["id"] for i in range(2)]
    late: list[str] = []
    writer = threading.Thread(target=lambda: late.extend(
        m["id"] for m in conversations.append(scope, [{"role": "user", "content": "over the backlog"}])))
    writer.start()
    writer.join(0.5)
    assert writer.is_alive() and indexer.pending == 3  # committed, but not acknowledged while 3 > 2 wait
    assert store.count(scope) == 4
    gate.set()
    writer.join(30)
    assert not writer.is_alive() and indexer.flush()
    assert set(store.get_vectors(scope, ids + late)) == set(ids + late)
    indexer.close()
    store.close()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_conversations_a_process_remembers_listing_stay_bounded(api):
    """Every conversation ever appended to stayed in a set of the process: a server that lives long grew without
    bound. Past the bound the set starts again, and the listing (idempotent) is written again when needed.
    """
    conversations = api.service.conversations
    conversations.max_registered = 2
    for n in range(5):
        assert api.client.post(f"/v1/conversations/c{n}/messages", json={"messages": [{"role": "user", "content": "hi"}]},
                               headers=api.a).status_code == 201
    assert len(conversations._registered) <= 2
    listed = api.client.get("/v1/inspector/conversations", headers=api.a).json()["conversations"]
    assert sorted(c["conversation_id"] for c in listed) == [f"c{n}" for n in range(5)]
    assert api.client.post("/v1/conversations/c0/messages", json={"messages": [{"role": "user", "content": "again"}]},
                           headers=api.a).status_code == 201


def test_a_retried_append_queued_beside_the_first_is_embedded(store_url, gated):
    """A client retries an append (the same message id) while the indexer is busy: both queue in one batch. The
    retry's record, made anew, took the place of the stored one and was taken for a message forgotten meanwhile:
    the message was never embedded, not even by the next write to its conversation."""
    from fullrecall.service.conversations import Conversations
    from fullrecall.service.indexer import Indexer
    from fullrecall.stores import open_store

    store = open_store(store_url)
    indexer = Indexer(store, gated)
    conversations = Conversations(store, indexer)
    busy = Scope(tenant="t", session_id="busy")
    conversations.append(busy, [{"role": "user", "content": "keeps the indexer busy"}])
    while indexer.pending:  # the indexer took it and waits at the gate
        threading.Event().wait(0.01)
    scope = Scope(tenant="t", session_id="retried")
    message = {"role": "user", "content": "the launch code is walrus", "id": "m-1"}
    first = conversations.append(scope, [message])
    assert conversations.append(scope, [message]) == first  # the retry: stored once
    gated.gate.set()
    assert indexer.flush()
    assert set(store.get_vectors(scope, ["m-1"])) == {"m-1"}
    indexer.close()
    store.close()


def test_on_a_store_whose_data_expires_keys_and_conversations_in_use_stay(store_url, default_embedder):
    """Redis keeps everything for ``ttl_seconds`` after its last write. API keys were written only when made or
    revoked, and a conversation's listing only once a process: keys in constant use stopped working (every
    tenant's at once) and a conversation in use fell off the inspector's list, once the time to live passed."""
    if not store_url.startswith("redis"):
        pytest.skip("only Redis lets data expire")
    from fastapi.testclient import TestClient

    from fullrecall.service.app import create_app
    from fullrecall.service.config import Settings

    app = create_app(Settings(store=store_url + "&ttl_seconds=3", key_cache_seconds=0.2), embedder=default_embedder)
    with TestClient(app) as client:
        key, _ = app.state.service.keys.create("acme")
        auth = {"Authorization": f"Bearer {key}"}
        started = time.monotonic()
        while time.monotonic() - started < 7:  # more than twice the time to live
            r = client.post("/v1/conversations/c/messages", headers=auth, json={"messages": [{"role": "user", "content": "in use"}]})
            assert r.status_code == 201, r.text
            listed = client.get("/v1/inspector/conversations", headers=auth)
            assert [c["conversation_id"] for c in listed.json()["conversations"]] == ["c"], listed.text
            time.sleep(0.5)


def test_no_answer_of_the_api_may_be_kept_by_a_browser_or_proxy(api):
    """Every answer under /v1 says ``Cache-Control: no-store`` (the inspector's pages of a forgotten conversation
    stayed in the browser's disk cache), refusals too; the inspector's static files may be cached."""
    _append(api, "cached", [{"role": "user", "content": "my bank PIN is platypus7731"}])
    answers = [api.client.get("/v1/conversations/cached/messages", headers=api.a),
               api.client.get("/v1/inspector/conversations/cached/archive?offset=0&limit=100", headers=api.a),
               api.client.get("/v1/conversations/cached/messages"),  # no key: 401
               api.client.get("/v1/conversations/%FF/messages", headers=api.a),  # 422 before any route
               api.client.post("/v1/conversations/cached/messages", headers=api.a, content=b"x" * (17 << 20))]
    assert [a.status_code for a in answers] == [200, 200, 401, 422, 413]
    assert all(a.headers.get("cache-control") == "no-store" for a in answers)
    assert api.client.get("/ui/").headers.get("cache-control") != "no-store"


def test_an_export_carrying_archived_summaries_imports_its_messages(api):
    """A library export carries a conversation's archived summaries (``summary`` lines): the service, which appends
    the messages at positions of its own, skips them as it skips states (an unknown type would refuse the file).
    """
    conv = f"c-{uuid.uuid4().hex}"
    body = "\n".join(json.dumps(line) for line in [
        {"format": "fullrecall", "version": 3},
        {"type": "message", "conversation_id": conv, "id": "m0", "message": {"role": "user", "content": "hello"}},
        {"type": "summary", "conversation_id": conv, "id": "s1", "text": "a greeting", "created_at": 1.7e9,
         "updated_at": 1.7e9, "data": {"covers": [0, 0], "folds_id": None, "folds": None}},
        {"type": "end", "messages": 1, "states": 1, "records": 0}])
    r = api.client.post("/v1/import", content=body.encode(), headers={**api.a, "content-type": "application/x-ndjson"})
    assert r.status_code == 200, r.text
    assert r.json() == {"conversations": 1, "messages": 1, "written": 1}

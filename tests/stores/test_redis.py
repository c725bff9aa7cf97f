"""Redis specifics: every key family expires, TTLs are per scope and refreshed on write."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import redis
from conformance_core import then_forget

from fullrecall.errors import InvalidInput, StoreError
from fullrecall.stores import ANY, Record, Scope, StoredMessage, open_store
from fullrecall.stores._servers import drop_namespace
from fullrecall.stores.redis import DEFAULT_TTL_SECONDS, RedisStore


@pytest.fixture
def redis_url(service_urls: dict[str, Callable[[], str]]) -> str:
    return service_urls["redis"]()


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    name = f"ttl{uuid.uuid4().hex[:8]}"
    yield name
    drop_namespace("redis", redis_url, name)


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _fill(store: RedisStore, scope: Scope) -> None:
    store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"hello {i}", data={"i": i}) for i in range(3)])
    store.set_vectors(scope, ["m0", "m1"], np.ones((2, 4), np.float32), "m")
    store.put_state(scope, "window", {"x": 1})
    store.put_record(Scope(user_id=scope.user_id), Record(id="r", namespace="facts", text="likes tea"))
    store.put_record(Scope(), Record(id="t", namespace="facts", text="tenant-wide"))


def _keys(raw: redis.Redis, prefix: str) -> list[bytes]:
    return sorted(raw.scan_iter(match=f"{prefix}:*"))


def test_every_key_family_has_the_default_ttl(redis_url: str, raw: redis.Redis, prefix: str) -> None:
    store = open_store(f"{redis_url}?prefix={prefix}")
    _fill(store, Scope(user_id="alice", agent_id="bot", session_id="s1"))
    keys = _keys(raw, prefix)
    families = {k.decode().rsplit(":", 1)[-1] for k in keys}
    assert {"meta", "msgs", "order", "vecs", "state", "sessions", "users", "facts", "record-namespaces"} <= families
    for k in keys:
        ttl = raw.ttl(k)
        assert DEFAULT_TTL_SECONDS - 60 < ttl <= DEFAULT_TTL_SECONDS, (k, ttl)
    assert any(b":user:alice:agent:bot:session:s1:" in k for k in keys)  # the seed's layout
    store.close()


def test_short_ttl_really_deletes_everything(redis_url: str, raw: redis.Redis, prefix: str) -> None:
    store = open_store(f"{redis_url}?prefix={prefix}&ttl_seconds=1")
    scope = Scope(user_id="bob", session_id="s1")
    _fill(store, scope)
    assert store.count(scope) == 3 and store.search_text(scope, ["hello"], 5)
    assert all(0 < raw.ttl(k) <= 1 for k in _keys(raw, prefix))
    time.sleep(2.2)
    assert _keys(raw, prefix) == []  # gone from the server, not hidden
    assert store.count(scope) == 0
    assert store.search_text(scope, ["hello"], 5) == [] and store.get_records(scope, "facts") == []
    store.close()


def test_ttl_per_session_and_refreshed_on_write(redis_url: str, raw: redis.Redis, prefix: str) -> None:
    store = open_store(f"{redis_url}?prefix={prefix}", ttl_seconds=1000)
    short, long_ = Scope(user_id="u", session_id="short"), Scope(user_id="u", session_id="long")
    for sc in (short, long_):
        store.append(sc, [StoredMessage(id="m0", role="user", text="x", data={})])
    store.set_ttl(short, 50)
    short_keys = [k for k in _keys(raw, prefix) if b":session:short:" in k]
    assert short_keys and all(40 < raw.ttl(k) <= 50 for k in short_keys)
    assert all(raw.ttl(k) > 900 for k in _keys(raw, prefix) if b":session:long:" in k)
    assert raw.ttl(f"{prefix}:user:u:sessions") > 900  # index sets are never shortened
    for k in short_keys:
        raw.expire(k, 5)
    store.append(short, [StoredMessage(id="m1", role="user", text="y", data={})])  # a write refreshes
    assert all(40 < raw.ttl(k) <= 50 for k in short_keys)
    with pytest.raises(ValueError):
        store.set_ttl(short, 0)
    with pytest.raises(ValueError):
        RedisStore(f"{redis_url}?prefix={prefix}", ttl_seconds=0)
    for bad in (1.5, True, "50", 2**53, 2**63):  # never truncated, never refused by the server as a StoreError
        with pytest.raises(InvalidInput, match="seconds must be an int from 1 to"):
            store.set_ttl(short, bad)  # type: ignore[arg-type]
    assert all(40 < raw.ttl(k) <= 50 for k in short_keys)
    store.set_ttl(short, 2**53 - 1)
    assert all(raw.ttl(k) > 2**52 for k in short_keys)
    store.close()


def test_unreachable_server_is_a_store_error() -> None:
    from fullrecall.stores._servers import free_port

    with pytest.raises(StoreError, match="Redis"):
        open_store(f"redis://127.0.0.1:{free_port()}/0")


def test_forget_leaves_no_key_of_the_user(redis_url: str, raw: redis.Redis, prefix: str) -> None:
    store = open_store(f"{redis_url}?prefix={prefix}")
    _fill(store, Scope(user_id="alice", agent_id="bot", session_id="s1"))
    _fill(store, Scope(user_id="alice", session_id="s2"))
    _fill(store, Scope(user_id="carol", session_id="s1"))
    counts = store.forget(Scope(user_id="alice", agent_id=ANY))  # alice, with every agent
    assert counts["messages"] == 6 and counts["facts"] == 1 and counts["sessions"] == 2
    left = [k.decode() for k in _keys(raw, prefix)]
    assert left and not [k for k in left if "alice" in k]
    assert b"alice" not in b"".join(raw.smembers(f"{prefix}:users"))
    assert store.count(Scope(user_id="carol")) == 3
    store.close()


def test_forget_of_records_alone_drops_the_user_whatever_the_prefix(redis_url: str, raw: redis.Redis, prefix: str) -> None:
    """A user with records and no conversation leaves the users index too, even under a prefix holding ":user:"."""
    odd = f"{prefix}:user:x"
    store = open_store(f"{redis_url}?prefix={odd}")
    store.put_record(Scope(user_id="dora"), Record(id="r", namespace="facts", text="likes tea"))
    store.put_record(Scope(user_id="erin"), Record(id="r", namespace="facts", text="likes coffee"))
    assert store.forget(Scope(user_id="dora"))["facts"] == 1
    assert b"dora" not in b"".join(raw.smembers(f"{odd}:users"))
    assert not [k for k in _keys(raw, prefix) if b"dora" in k]
    assert [r.text for r in store.get_records(Scope(user_id="erin"), "facts")] == ["likes coffee"]
    store.close()


def test_records_alone_get_ttls_too(redis_url: str, raw: redis.Redis, prefix: str) -> None:
    store = open_store(f"{redis_url}?prefix={prefix}&ttl_seconds=500")
    store.put_record(Scope(user_id="dora"), Record(id="r", namespace="facts", text="first write of this tenant"))
    keys = _keys(raw, prefix)
    assert len(keys) == 3 and all(400 < raw.ttl(k) <= 500 for k in keys), [(k, raw.ttl(k)) for k in keys]
    store.close()


def test_a_record_from_before_versions_is_at_version_1(redis_url: str, raw: redis.Redis, prefix: str) -> None:
    """A record stored before records had versions (its JSON without one) reads at 1, and a compare-and-set
    goes on from there.
    """
    store = open_store(f"{redis_url}?prefix={prefix}")
    owner = Scope(user_id="ann")
    store.put_record(owner, Record(id="r", namespace="facts", text="likes tea"))
    [(key, field, doc)] = [(k, f, d) for k in _keys(raw, prefix) if b":records:" in k for f, d in raw.hgetall(k).items()]
    assert doc.endswith(b', "version": 1}')
    raw.hset(key, field, doc.replace(b', "version": 1}', b"}"))  # as an older fullrecall wrote it
    assert [r.version for r in store.get_records(owner, "facts")] == [1]
    assert store.put_record(owner, Record(id="r", namespace="facts", text="likes green tea"), expected=1) == 2
    assert [(r.text, r.version) for r in store.get_records(owner, "facts")] == [("likes green tea", 2)]
    store.close()


def test_a_large_conversation_is_read_in_pages_with_the_same_results(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over _SCAN_ABOVE messages the search cache is filled by HSCAN pages, not one huge reply."""
    from fullrecall.stores import redis as redis_store

    scope = Scope(user_id="u", session_id="big")
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(120, 8)).astype(np.float32)
    writer = open_store(f"{redis_url}?prefix={prefix}")
    writer.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"note {i} kiwi{i % 7}", data={}) for i in range(120)])
    writer.set_vectors(scope, [f"m{i}" for i in range(120)], vecs, "m")
    whole = (writer.search_vectors(scope, vecs[5], 5), writer.search_text(scope, ["kiwi3"], 20))
    monkeypatch.setattr(redis_store, "_SCAN_ABOVE", 50)
    monkeypatch.setattr(redis_store, "_SCAN_PAGE", 16)
    paged_store = open_store(f"{redis_url}?prefix={prefix}")
    scans = []
    real_scan = paged_store._r.hscan_iter
    monkeypatch.setattr(paged_store._r, "hscan_iter", lambda *a, **kw: scans.append(a[0]) or real_scan(*a, **kw))
    paged = (paged_store.search_vectors(scope, vecs[5], 5), paged_store.search_text(scope, ["kiwi3"], 20))
    assert scans and paged == whole and paged[0][0][0] == "m5" and len(paged[1]) == 17
    writer.close()
    paged_store.close()


def test_a_conversation_from_before_counters_is_counted_once_then_kept(
    redis_url: str, prefix: str, raw: redis.Redis
) -> None:
    store = RedisStore(f"{redis_url}?prefix={prefix}")
    scope = Scope(user_id="old", session_id="s")
    _fill(store, scope)
    store.append(scope, [StoredMessage(id="sum", role="system", text="a summary é", data={}, kind="summary")])
    (meta,) = list(raw.scan_iter(f"{prefix}:*:meta"))
    raw.hdel(meta, "counted", "summary_count", "text_bytes", "index_bytes")  # as an earlier version left it
    store.append(scope, [StoredMessage(id="m9", role="user", text="later", data={"i": 9})])  # not counted yet
    store.delete(scope, ["m1"])
    held = store.range(scope, 0, 100)
    stats = store.stats(scope)  # counts the conversation once, in one script
    assert raw.hget(meta, "counted") == b"1"
    assert stats["message_count"] == len(held) == 4 and stats["summary_count"] == 1
    assert stats["text_bytes"] == sum(m.size_bytes() for m in held) and stats["vector_count"] == 1
    store.delete(scope, ["sum"])  # from now on every write keeps them
    after = store.stats(scope)
    assert after["summary_count"] == 0 and after["message_count"] == 3
    assert after["text_bytes"] == sum(m.size_bytes() for m in store.range(scope, 0, 100))
    store.close()


def test_a_conversation_from_before_births_is_still_read(redis_url: str, prefix: str, raw: redis.Redis) -> None:
    """A session an earlier version wrote has no ``born`` in its meta: ranges, keys and search still find it."""
    store = RedisStore(f"{redis_url}?prefix={prefix}")
    scope = Scope(user_id="old", session_id="s")
    _fill(store, scope)
    (meta,) = list(raw.scan_iter(f"{prefix}:*:meta"))
    raw.hdel(meta, "born")  # as an earlier version left it
    old = RedisStore(f"{redis_url}?prefix={prefix}")
    held = old.range(scope, 0, 100)
    assert [m.id for m in held] == ["m0", "m1", "m2"]
    assert [m.key for m in held] == [m.key for m in old.get(scope, ["m0", "m1", "m2"])]
    (hit,) = old.search_text(scope, ["hello", "1"], 1)
    assert [m.id for m in old.get_keys(scope, [hit.key])] == [hit.id]
    old.close()
    store.close()


def test_messages_from_before_serials_keep_their_keys(redis_url: str, prefix: str, raw: redis.Redis) -> None:
    """A message an earlier version stored has no serial: its key holds its creation time, as the keys handed
    out then did, and every read and search gives that key; one stored since is numbered, so added again under
    a deleted one's id and creation time it is another message.
    """
    store = RedisStore(f"{redis_url}?prefix={prefix}")
    scope = Scope(user_id="old", session_id="s")
    store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"hello {i}", data={}, created_at=100.0 + i)
                         for i in range(2)])
    (meta,) = list(raw.scan_iter(f"{prefix}:*:meta"))
    msgs = meta[: -len(b"meta")] + b"msgs"
    for field, body in raw.hgetall(msgs).items():  # as an earlier version wrote them
        raw.hset(msgs, field, b"{" + body.split(b",", 1)[1])
    raw.hdel(meta, "serial")
    base = msgs[: -len(b":msgs")].decode()
    born = raw.hget(meta, "born").decode()
    issued = f"{base}#{born}#100.0#m0"  # the key an earlier version handed out for m0
    old = RedisStore(f"{redis_url}?prefix={prefix}")
    (hit,) = old.search_text(scope, ["hello", "0"], 1)
    assert hit.key == issued and [m.key for m in old.range(scope, 0, 0)] == [issued]
    assert [m.text for m in old.get_keys(scope, [issued])] == ["hello 0"]
    assert old.delete(scope, ["m0"]) == 1
    old.append(scope, [StoredMessage(id="m0", role="assistant", text="hello again", data={}, created_at=100.0)])
    assert old.get_keys(scope, [issued]) == []
    (again,) = old.get(scope, ["m0"])
    assert again.key == f"{base}#{born}#n1#m0" and [m.text for m in old.get_keys(scope, [again.key])] == ["hello again"]
    assert [m.key for m in old.get(scope, ["m1"])] == [f"{base}#{born}#101.0#m1"]
    old.close()
    store.close()


def _hgetalls(raw: redis.Redis) -> int:
    return int(raw.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))


def test_a_write_after_a_search_loads_only_the_additions(redis_url: str, prefix: str, raw: redis.Redis) -> None:
    """The search cache reads a conversation whole once; appends and new vectors then come from its
    log of additions (HGETALL counts the whole reads), and a deletion rebuilds it.
    """
    store, scope = RedisStore(f"{redis_url}?prefix={prefix}"), Scope(user_id="inc", session_id="s")
    rng = np.random.default_rng(1)
    store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"walrus number {i} eats", data={})
                         for i in range(200)])
    store.set_vectors(scope, [f"m{i}" for i in range(200)], rng.normal(size=(200, 8)).astype(np.float32), "m")

    def search() -> tuple[list[object], list[object]]:
        return store.search_text(scope, ["walrus", "penguin"], 5), store.search_vectors(scope, query, 5)

    query = rng.normal(size=8).astype(np.float32)
    search()  # builds the cache: the conversation is read whole
    before = _hgetalls(raw)
    search()
    warm = _hgetalls(raw) - before  # what a search costs in whole-hash reads when nothing changed (meta)
    for n in range(3):
        store.append(scope, [StoredMessage(id=f"p{n}", role="user", text=f"penguin {n} walrus", data={})])
        store.set_vectors(scope, [f"p{n}"], query[None] * (n + 1), "m")
        before = _hgetalls(raw)
        text, dense = search()
        assert _hgetalls(raw) - before == warm, "a write after a search re-read the whole conversation"
        assert f"p{n}" in [h.id for h in text] and dense[0].id in {f"p{i}" for i in range(n + 1)}
    fresh = RedisStore(f"{redis_url}?prefix={prefix}")  # built from scratch: the same answers
    for mine, theirs in zip(search(), (fresh.search_text(scope, ["walrus", "penguin"], 5),
                                       fresh.search_vectors(scope, query, 5))):
        assert [h.key for h in mine] == [h.key for h in theirs]
        assert [h.score for h in mine] == pytest.approx([h.score for h in theirs])
    store.delete(scope, ["p0"])
    before = _hgetalls(raw)
    text, dense = search()
    assert _hgetalls(raw) - before > warm and "p0" not in {h.id for h in text} | {h.id for h in dense}
    store.set_vectors(scope, ["p1"], -query[None], "m")  # an overwrite rebuilds too
    before = _hgetalls(raw)
    assert "p1" not in {h.id for h in search()[1]} and _hgetalls(raw) - before > warm
    fresh.close()
    store.close()


def test_a_warm_of_what_is_kept_alone_reads_no_conversation_whole(redis_url: str, prefix: str, raw: redis.Redis
                                                                   ) -> None:
    """``warm(kept_only=True)`` (the warm after a write) loads a cached conversation's additions, and reads nothing
    of a conversation this process does not cache (HGETALL counts the whole reads); answers are unchanged.
    """
    store = RedisStore(f"{redis_url}?prefix={prefix}")
    kept, other = Scope(user_id="u", session_id="s"), Scope(user_id="v", session_id="s")
    rng = np.random.default_rng(2)
    for scope in (kept, other):
        store.append(scope, [StoredMessage(id=f"m{i}", role="user", text=f"walrus {i}", data={}) for i in range(20)])
        store.set_vectors(scope, [f"m{i}" for i in range(20)], rng.normal(size=(20, 8)).astype(np.float32), "m")
    try:
        store.search_text(kept, ["walrus"], 3)  # kept's conversation cached, other's not
        read = next(iter(store._cache.values()))
        query = rng.normal(size=8).astype(np.float32)
        for scope in (kept, other):
            store.append(scope, [StoredMessage(id="late", role="user", text="a penguin came", data={})])
            store.set_vectors(scope, ["late"], query[None], "m")
        before = _hgetalls(raw)
        store.warm(Scope(user_id="v"), kept_only=True)
        assert _hgetalls(raw) - before <= 1 and len(store._cache) == 1  # at most its meta: nothing of it cached
        store.warm(Scope(user_id="u"), kept_only=True)
        entry = next(iter(store._cache.values()))
        assert entry is not read and len(store._cache) == 1  # kept's additions loaded
        assert store.search_vectors(kept, query, 1)[0].id == "late" and next(iter(store._cache.values())) is entry
        assert [h.id for h in store.search_text(kept, ["penguin"], 3)] == ["late"]
        assert next(iter(store._cache.values())) is entry  # up to date: the searches read no addition
        assert store.search_vectors(other, query, 1)[0].id == "late"  # other's first search reads it, as it would
    finally:
        store.close()


def _commands(raw: redis.Redis) -> dict[str, int]:
    """Calls per command the server ran so far (those scripts run included), INFO itself left out."""
    return {k: int(v["calls"]) for k, v in raw.info("commandstats").items() if k != "cmdstat_info"}


def test_ranges_is_one_round_trip(redis_url: str, prefix: str, raw: redis.Redis) -> None:
    store, scope = RedisStore(f"{redis_url}?prefix={prefix}"), Scope(user_id="r", agent_id="a", session_id="s")
    _fill(store, scope)
    store.ranges(scope, [(0, 0)])  # the server learns the script (SCRIPT LOAD) once
    before = _commands(raw)
    got = store.ranges(scope, [(0, 0), (1, 2), (5, 9)])
    ran = {k: n - before.get(k, 0) for k, n in _commands(raw).items() if n != before.get(k, 0)}
    assert ran.pop("cmdstat_evalsha") == 1  # one script, and only what it runs inside:
    assert set(ran) <= {"cmdstat_hget", "cmdstat_zrangebyscore"}
    assert [[m.id for m in r] for r in got] == [["m0"], ["m1", "m2"], []]
    assert got[1][0].key == store.get(scope, ["m1"])[0].key and got[1][0].agent_id == "a"
    assert store.ranges(Scope(user_id="r", session_id="s"), [(0, 9)]) == [[]]  # another agent's: nothing
    store.close()


def test_lua_scripts_are_files_shipped_as_package_data() -> None:
    """Every script the store registers is a ``.lua`` file that the package data globs carry into the wheel."""
    import fnmatch
    import tomllib
    from importlib import resources
    from pathlib import Path

    from fullrecall.stores.redis import _lua_sources

    folder = resources.files("fullrecall.stores") / "lua"
    files = sorted(p.name for p in folder.iterdir() if p.name.endswith(".lua"))
    assert {f"{name}.lua" for name in _lua_sources()} | {"_prelude.lua"} == set(files)
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["fullrecall"]
    assert all(any(fnmatch.fnmatch(f"stores/lua/{name}", g) for g in globs) for name in files)
    assert all("redis.call" in src for src in _lua_sources().values())


def test_every_option_of_the_store_is_also_a_url_option(redis_url: str, prefix: str) -> None:
    separator = "&" if "?" in redis_url else "?"
    store = open_store(f"{redis_url}{separator}prefix={prefix}&ttl_days=3&cache_sessions=7&socket_timeout=5")
    try:
        assert (store.prefix, store.ttl_seconds, store._cache_sessions) == (prefix, 3 * 86400, 7)
        assert store.count(Scope(session_id="s")) == 0
    finally:
        store.close()


def test_a_conversation_read_while_its_user_is_forgotten_is_not_cached(redis_url: str, prefix: str) -> None:
    """A forget that comes while a search reads a conversation: what it read answers that search and is not
    cached.
    """
    store = open_store(f"{redis_url}?prefix={prefix}")
    _fill(store, Scope(user_id="u", agent_id="a", session_id="s"))
    store._rebuild = then_forget(store._rebuild, store, Scope(user_id="u", agent_id="a"))
    try:
        assert len(store.search_text(Scope(user_id="u", agent_id="a"), ["hello"], 5)) == 3
        assert not store._cache
        del store._rebuild
        assert store.search_text(Scope(user_id="u", agent_id="a"), ["hello"], 5) == []
    finally:
        store.close()


def test_ttl_days_and_ttl_seconds_are_one_option_as_keyword_or_in_the_url(redis_url: str, prefix: str) -> None:
    """Keywords and URL options are one set: ``ttl_days`` as a keyword too, and both ttl options given anywhere
    refused (a URL's ttl_days silently won over a keyword's ttl_seconds).
    """
    url = f"{redis_url}{'&' if '?' in redis_url else '?'}prefix={prefix}"
    with open_store(url, ttl_days=30) as store:
        assert store.ttl_seconds == 30 * 86400
    with open_store(f"{url}&ttl_seconds=60", ttl_seconds=1000) as store:  # the URL wins, as for every option
        assert store.ttl_seconds == 60
    for query, options in (("&ttl_days=1", {"ttl_seconds": 60}), ("&ttl_seconds=60", {"ttl_days": 1}),
                           ("", {"ttl_days": 1, "ttl_seconds": 60})):
        with pytest.raises(ValueError, match="^store options ttl_days and ttl_seconds both given"):
            open_store(url + query, **options)
    for options in ({"ttl_days": -1}, {"ttl_days": float("nan")}, {"ttl_days": "abc"}, {"ttl_seconds": 1.5}):
        with pytest.raises(ValueError, match=f"^store option {next(iter(options))} must"):
            open_store(url, **options)

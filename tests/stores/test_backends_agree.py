"""SQLite, PostgreSQL and Redis driven through the same random operations: the same answers, errors included.

A hypothesis state machine runs each public call (``append`` of odd text and metadata, ``get``, ``get_copies``, ``range``, ``count``,
``sessions``, ``search_text`` across scopes, ``delete``, ``forget`` by session, owner or tenant, ``put_state`` /
``get_versioned_state``, records) on the three backends, and compares what they give back: the messages in their
order (every field but the store-global ``key``), the hits' ids, owners and positions, the counts ``forget``
reports, or the refusal's class and text. Each example writes under a tenant of its own, so examples never meet.

Scores are not compared: each backend ranks with its own stemmed BM25-like score; the hits and their order are.
The divergences it found are pinned in ``conformance_input.py`` (run on every backend).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from fullrecall.stores import ANY, Record, Scope, Store, StoredMessage, open_store
from fullrecall.stores._servers import drop_namespace

# -- what the machine draws -------------------------------------------------------------------------------------

RTL, COMBINING = "\u202eשלום עולם مرحبا", "e\u0301 n\u0303o\u0308 ק\u05b8"
ODD = ["\x00", "", "\ud800", "\udfff", RTL, COMBINING, "\ufdd0", "\u2028", "🎉", "\r\n", " tea ", "running",
       "naïve café", "日本語のテキスト", "TEA", "x" * 70_000]
WORDS = ["tea", "run", "running", "café", "naïve", "שלום", "مرحبا", "日本語", "e\u0301", "x", "the", ""]
texts = st.lists(st.one_of(st.sampled_from(ODD), st.sampled_from(WORDS), st.text(max_size=5)), max_size=4).map(" ".join)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), texts,
              st.sampled_from([b"bytes", (1, 2), {1}])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=5,
)
IDS = st.one_of(st.sampled_from(["m0", "m1", "m2", "m3", "ü", "\u202em", "e\u0301", "m0@1", "ü@x@y", "m0@"]),
                st.sampled_from(["", "m\x00", "\ud800", "é" * 129]))  # the second line: refused ids
USERS = st.sampled_from(["u1", "", "ü\u202e"])
AGENTS = st.sampled_from(["", "a1"])
SESSIONS = st.sampled_from(["s1", "s2", "שיחה"])


@st.composite
def messages(draw: Any) -> StoredMessage:
    text = draw(texts)
    return StoredMessage(
        id=draw(IDS),
        role=draw(st.sampled_from(["user", "assistant", "Caroline", "ר"])),
        text=text,
        data=draw(st.one_of(st.just({"content": text}), st.dictionaries(texts, json_values, max_size=2))),
        metadata=draw(st.dictionaries(texts, json_values, max_size=2)),
        kind=draw(st.sampled_from(["message", "summary"])),
        position=draw(st.one_of(st.none(), st.none(), st.integers(0, 6))),
        created_at=1000.0,
        archived_at=2000.0,
    )


# -- comparing answers ------------------------------------------------------------------------------------------


def _message(m: StoredMessage) -> tuple[Any, ...]:
    """Everything a read gives back but the store-global key (each backend has its own kind of key)."""
    return (m.id, m.role, m.text, m.data, m.metadata, m.kind, m.position, m.created_at, m.archived_at,
            m.summary_id, m.session_id, m.user_id, m.agent_id)


def _answer(value: Any) -> Any:
    """An answer in a form the three can be compared by."""
    if isinstance(value, list):
        return [_answer(v) for v in value]
    if isinstance(value, StoredMessage):
        return _message(value)
    if isinstance(value, Record):
        return (value.id, value.namespace, value.text, value.data, value.created_at, value.updated_at, value.version)
    if isinstance(value, tuple) and hasattr(value, "_fields") and type(value).__name__ == "Hit":
        return (value.id, value.owner, value.position)
    if isinstance(value, dict) and "remaining" in value:
        return {k: v for k, v in value.items() if k != "remaining"}  # where a copy remains is each one's own
    return value


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", _answer(call())
    except Exception as exc:  # noqa: BLE001 - the class and text of a refusal are what is compared
        return type(exc).__name__, str(exc)


# -- the machine ------------------------------------------------------------------------------------------------


class BackendsAgree(RuleBasedStateMachine):
    stores: dict[str, Store] = {}  # set by the test before it runs

    def __init__(self) -> None:
        super().__init__()
        self.tenant = f"t{uuid.uuid4().hex[:12]}"

    def scope(self, user: Any, agent: Any, session: Any) -> Scope:
        return Scope(tenant=self.tenant, user_id=user, agent_id=agent, session_id=session)

    def same(self, call: Callable[[Store], Any]) -> tuple[str, Any]:
        """Run ``call`` on every store; assert they answer alike; the answer."""
        answers = {name: _outcome(lambda s=store: call(s)) for name, store in self.stores.items()}
        first, *others = answers
        for name in others:
            assert answers[name] == answers[first], f"{name} answered otherwise than {first}"
        return answers[first]

    @rule(user=USERS, agent=AGENTS, session=SESSIONS, batch=st.lists(messages(), max_size=4))
    def append(self, user: str, agent: str, session: str, batch: list[StoredMessage]) -> None:
        self.same(lambda s: s.append(self.scope(user, agent, session), batch))

    @rule(user=st.one_of(USERS, st.just(ANY)), agent=st.one_of(AGENTS, st.just(ANY)),
          session=st.one_of(SESSIONS, st.none()), ids=st.lists(IDS, max_size=4))
    def get(self, user: Any, agent: Any, session: str | None, ids: list[str]) -> None:
        self.same(lambda s: s.get(self.scope(user, agent, session), ids))

    @rule(user=st.one_of(USERS, st.just(ANY)), agent=st.one_of(AGENTS, st.just(ANY)),
          session=st.one_of(SESSIONS, st.none()), ids=st.lists(IDS, max_size=4))
    def get_copies(self, user: Any, agent: Any, session: str | None, ids: list[str]) -> None:
        self.same(lambda s: s.get_copies(self.scope(user, agent, session), ids))

    @rule(user=USERS, agent=AGENTS, session=SESSIONS, start=st.integers(-1, 8), end=st.integers(-1, 8))
    def range(self, user: str, agent: str, session: str, start: int, end: int) -> None:
        self.same(lambda s: s.range(self.scope(user, agent, session), start, end))

    @rule(user=st.one_of(USERS, st.just(ANY)), agent=st.one_of(AGENTS, st.just(ANY)),
          session=st.one_of(SESSIONS, st.none()))
    def count_and_sessions(self, user: Any, agent: Any, session: str | None) -> None:
        self.same(lambda s: s.count(self.scope(user, agent, session)))
        self.same(lambda s: [(x.user_id, x.agent_id, x.session_id) for x in s.sessions(self.scope(user, agent, session))])

    @rule(user=st.one_of(USERS, st.just(ANY)), agent=st.one_of(AGENTS, st.just(ANY)),
          session=st.one_of(SESSIONS, st.none()), terms=st.lists(st.one_of(st.sampled_from(WORDS), texts), max_size=3))
    def search_text(self, user: Any, agent: Any, session: str | None, terms: list[str]) -> None:
        self.same(lambda s: s.search_text(self.scope(user, agent, session), terms, 50))

    @rule(user=USERS, agent=AGENTS, session=SESSIONS, ids=st.lists(IDS, max_size=3))
    def delete(self, user: str, agent: str, session: str, ids: list[str]) -> None:
        self.same(lambda s: s.delete(self.scope(user, agent, session), ids))

    @rule(user=st.one_of(USERS, st.just(ANY)), agent=st.one_of(AGENTS, st.just(ANY)),
          session=st.one_of(SESSIONS, st.none()))
    def forget(self, user: Any, agent: Any, session: str | None) -> None:
        self.same(lambda s: s.forget(self.scope(user, agent, session)))
        self.same(lambda s: s.count(self.scope(user, agent, session)))

    @rule(user=USERS, agent=AGENTS, session=SESSIONS, key=st.one_of(st.sampled_from(["window", "ü\u202e"]), IDS),
          value=st.one_of(st.dictionaries(texts, json_values, max_size=3), json_values),
          expected=st.one_of(st.none(), st.integers(-1, 3)))
    def put_state(self, user: str, agent: str, session: str, key: str, value: Any, expected: int | None) -> None:
        self.same(lambda s: s.put_state(self.scope(user, agent, session), key, value, expected=expected))

    @rule(user=st.one_of(USERS, st.just(ANY)), agent=AGENTS, session=st.one_of(SESSIONS, st.none()),
          key=st.one_of(st.sampled_from(["window", "ü\u202e"]), IDS))
    def get_state(self, user: Any, agent: str, session: str | None, key: str) -> None:
        self.same(lambda s: s.get_versioned_state(self.scope(user, agent, session), key))

    @rule(user=USERS, agent=AGENTS, session=st.one_of(SESSIONS, st.none()), rid=IDS,
          namespace=st.sampled_from(["facts", "procedures", "ü", "", "n\x00"]), text=texts,
          data=st.dictionaries(texts, json_values, max_size=2), expected=st.one_of(st.none(), st.integers(-1, 2)))
    def put_record(self, user: str, agent: str, session: str | None, rid: str, namespace: str, text: str,
                   data: dict[str, Any], expected: int | None) -> None:
        record = Record(id=rid, namespace=namespace, text=text, data=data, created_at=1.0, updated_at=2.0)
        self.same(lambda s: s.put_record(self.scope(user, agent, session), record, expected=expected))

    @rule(user=st.one_of(USERS, st.just(ANY)), agent=st.one_of(AGENTS, st.just(ANY)),
          session=st.one_of(SESSIONS, st.none()), rid=IDS,
          namespace=st.sampled_from(["facts", "procedures", "ü", "", "n\x00"]))
    def records(self, user: Any, agent: Any, session: str | None, rid: str, namespace: str) -> None:
        scope = self.scope(user, agent, session)
        self.same(lambda s: s.get_records(scope, namespace))
        self.same(lambda s: s.get_record(scope, namespace, rid))

    @rule(user=st.one_of(USERS, st.just(ANY)), agent=st.one_of(AGENTS, st.just(ANY)),
          session=st.one_of(SESSIONS, st.none()), rid=IDS, namespace=st.sampled_from(["facts", "ü", "", "n\x00"]))
    def delete_record(self, user: Any, agent: Any, session: str | None, rid: str, namespace: str) -> None:
        self.same(lambda s: s.delete_record(self.scope(user, agent, session), namespace, rid))

    def teardown(self) -> None:  # nothing of this example is left behind, on any backend
        everyone = Scope.everyone(self.tenant)
        for store in self.stores.values():
            store.forget(everyone)


# -- running it -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stores(service_urls: dict[str, Callable[[], str]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        dict[str, Store]]:
    """One store of each backend, in a namespace of their own (removed afterwards)."""
    name = f"t{uuid.uuid4().hex[:10]}"
    servers = {b: service_urls[b]() for b in ("postgres", "redis")}
    urls = {"sqlite": f"sqlite:///{tmp_path_factory.mktemp('agree') / 'memory.db'}"}
    for backend, base in servers.items():
        urls[backend] = f"{base}{'&' if '?' in base else '?'}{'schema' if backend == 'postgres' else 'prefix'}={name}"
    opened = {b: open_store(u) for b, u in urls.items()}
    yield opened
    for store in opened.values():
        store.close()
    for backend, base in servers.items():
        drop_namespace(backend, base, name)


def test_the_backends_answer_alike(stores: dict[str, Store]) -> None:
    BackendsAgree.stores = stores
    run_state_machine_as_test(BackendsAgree, settings=settings(
        max_examples=25, stateful_step_count=20, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))

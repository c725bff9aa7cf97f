"""A jsonl export is lossless across backends: any conversation the stores accept, exported from one backend,
imported into each (SQLite, PostgreSQL, Redis) and exported again, gives the same lines, and reads back the same
values (ids, positions with their gaps, exact float times, metadata types, bytes, vectors, states).

"Identical" means: every line but the header's ``exported_at``; times are floats, read back exactly (one given as
an int reads back as that float, and ``-0.0`` as ``0.0`` from SQLite); in data and metadata an ``int`` stays an
``int`` of any size, a ``float`` a ``float`` (``-0.0`` included), ``bytes`` stay ``bytes``.
"""

from __future__ import annotations

import io
import json
import math
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fullrecall.errors import InvalidInput
from fullrecall.stores import Store, open_store
from fullrecall.stores._servers import drop_namespace
from fullrecall.stores._validate import check_session_id
from fullrecall.stores.base import Scope, StoredMessage
from fullrecall.transfer import jsonl

BACKENDS = ("sqlite", "postgres", "redis")

# any valid Unicode: astral characters, NUL and other controls, U+2028 (a line break to str.splitlines)
TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=30) | st.sampled_from(
    ["", "\x00", "a\u2028b\r\nc", "\U0001f600\U00010348", "\ufeff", "\ufdd0\x00", "é" * 40_000 + "\U0001f600"])
IDS = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1, max_size=12)


def _nameable(value: str) -> bool:
    """Whether every entry point (an import among them) takes ``value`` as a conversation's or owner's name."""
    try:
        check_session_id(value, "id")
    except InvalidInput:
        return False
    return True


NAMES = IDS.filter(_nameable)  # an id that shows nothing, or a change log's, is refused by the import it would meet
LAST = math.nextafter(253402300800.0, 0)  # the last time before the year 10000: a store takes times of years 1-9999
TIMES = st.floats(min_value=-62135596800.0, max_value=LAST) | st.sampled_from(
    [0.0, -0.0, 1e-7, -1.5, 1.7e9 + 0.123456789, LAST, -62135596800.0])
KEYS = st.sampled_from(["a.b", "$x", "", "k", "\U0001f600", "$", "."]) | TEXT
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-2**100, max_value=2**100)
           | st.floats(allow_nan=False, allow_infinity=False) | TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                    max_leaves=8)
OBJECTS = st.dictionaries(KEYS, JSON, max_size=4)
PLAIN = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": TEXT})  # a message in a state


@st.composite
def chat_message(draw: st.DrawFn) -> dict[str, Any]:
    """A message as an agent gives it, in one of the shapes fullrecall reads (tool calls, parts, images)."""
    text = draw(TEXT)
    return draw(st.sampled_from([
        {"role": "user", "content": text},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "search", "arguments": json.dumps({"q": text})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": text},
        {"role": "user", "content": [{"type": "text", "text": text},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
        {"role": "user", "content": [{"text": text}, {"image": {"format": "png", "source": {"bytes": b"\x89PNG\x00\xff"}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "status": "success", "content": [
            {"json": {"hits": [text]}}, {"image": {"format": "png", "source": {"bytes": text.encode()}}}]}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "tu1", "name": "f", "input": {"x": text}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]},
    ]))


@st.composite
def conversation(draw: st.DrawFn) -> tuple[list[StoredMessage], np.ndarray | None, dict[str, Any]]:
    """Messages (with gaps in their positions, summaries among them), maybe their vectors, and state documents."""
    n = draw(st.integers(min_value=1, max_value=5))
    ids = draw(st.lists(IDS, min_size=n, max_size=n, unique=True))
    positions = sorted(draw(st.lists(st.integers(min_value=0, max_value=2**53 - 1), min_size=n, max_size=n,
                                     unique=True)))
    messages = []
    for mid, position in zip(ids, positions):
        data = draw(chat_message())
        summary = draw(st.booleans())
        messages.append(StoredMessage(
            id=mid, role=draw(st.sampled_from(["user", "assistant", "tool", "Caroline"])), text=draw(TEXT), data=data,
            position=position, kind="summary" if summary else "message", created_at=draw(TIMES),
            archived_at=draw(TIMES), summary_id=draw(IDS) if summary else None, metadata=draw(OBJECTS)))
    vectors = None
    if draw(st.booleans()):
        dim = draw(st.integers(min_value=1, max_value=6))
        vectors = np.asarray(draw(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=n * dim,
                                           max_size=n * dim)), dtype=np.float32).reshape(n, dim)
    states = draw(st.dictionaries(st.sampled_from(("archive",)), OBJECTS, max_size=1))
    if draw(st.booleans()):  # a window's state, of the shape its memory writes (an import checks it)
        states["window"] = {**draw(OBJECTS.filter(lambda o: not {"manager", "replaced", "version", "unpinned",
                                                                   "pinning", "messages"} & set(o))),
                            "manager": {"__name__": "SemanticSummarizingConversationManager",
                                        "removed_message_count": draw(st.integers(0, 2**53 - 1)),
                                        "summary_message": draw(st.none() | PLAIN)},
                            "replaced": draw(st.dictionaries(st.integers(0, 2**53 - 1).map(str), PLAIN,
                                                             max_size=2)),
                            "version": draw(st.integers(0, 2**53 - 1))}
    if draw(st.booleans()):
        states["summaries"] = {"items": draw(st.lists(st.fixed_dictionaries({"id": IDS, "text": TEXT}), max_size=2))}
    return messages, vectors, states


@pytest.fixture(scope="module")
def stores(service_urls: dict[str, Callable[[], str]], tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[dict[str, Store]]:
    """One store of each backend for the whole module (each example writes under a tenant of its own)."""
    opened: dict[str, Store] = {}
    made: list[tuple[str, str, str]] = []
    try:
        for backend in BACKENDS:
            if backend == "sqlite":
                opened[backend] = open_store(f"sqlite:///{tmp_path_factory.mktemp('rt') / 'memory.db'}")
                continue
            base, name = service_urls[backend](), f"t{uuid.uuid4().hex[:10]}"
            opened[backend] = open_store(f"{base}{'&' if '?' in base else '?'}"
                                         f"{'schema' if backend == 'postgres' else 'prefix'}={name}")
            made.append((backend, base, name))
        yield opened
    finally:
        for store in opened.values():
            store.close()
        for backend, base, name in made:
            drop_namespace(backend, base, name)


def _export(store: Store, owner: Scope) -> list[dict[str, Any]]:
    buf = io.StringIO()
    jsonl.export_jsonl(store, owner, buf)
    lines = [json.loads(x) for x in buf.getvalue().split("\n") if x]
    assert lines[0]["format"] == "fullrecall" and lines[-1]["type"] == "end"
    return lines[1:]


@pytest.mark.parametrize("source", BACKENDS)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conv=conversation(), user=st.none() | NAMES, agent=st.none() | NAMES, session=NAMES)
def test_a_jsonl_export_reads_back_identically_from_every_backend_into_every_backend(stores, source, conv, user,
                                                                                    agent, session):
    messages, vectors, states = conv
    own = Scope(tenant=f"t{uuid.uuid4().hex[:12]}", user_id=user, agent_id=agent, session_id=session)
    stores[source].append(own, messages)
    if vectors is not None:
        stores[source].set_vectors(own, [m.id for m in messages], vectors, "model")
    for key, value in states.items():
        stores[source].put_state(own, key, value)
    first = _export(stores[source], Scope(tenant=own.tenant, user_id=user, agent_id=agent))
    text = "\n".join(json.dumps(line, ensure_ascii=False) for line in [jsonl.header(), *first])
    assert sum(line["type"] == "message" for line in first) == len(messages)
    for target, store in stores.items():
        into = Scope(tenant=f"t{uuid.uuid4().hex[:12]}")
        counts = jsonl.import_jsonl(store, into, io.StringIO(text))
        assert counts["written"] == len(messages), target
        assert jsonl.import_jsonl(store, into, io.StringIO(text))["written"] == 0, target
        moved = Scope(tenant=into.tenant, user_id=user, agent_id=agent, session_id=session)
        got = store.range(moved, 0, 2**53)
        assert [(m.id, m.position, m.role, m.kind, m.summary_id, m.text) for m in got] == [
            (m.id, m.position, m.role, m.kind, m.summary_id, m.text) for m in messages], target
        assert [(m.created_at, m.archived_at) for m in got] == [(m.created_at, m.archived_at) for m in messages]
        assert all(type(t) is float for m in got for t in (m.created_at, m.archived_at)), target
        assert [(repr(m.data), repr(m.metadata)) for m in got] == [(repr(m.data), repr(m.metadata)) for m in messages]
        if vectors is not None:
            held = store.get_vectors(moved, [m.id for m in messages])
            assert np.array_equal(np.stack([held[m.id] for m in messages]), vectors), target
        assert {key: store.get_state(moved, key) for key in states} == states, target
        assert _export(store, Scope(tenant=into.tenant, user_id=user, agent_id=agent)) == first, target

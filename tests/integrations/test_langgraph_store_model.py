"""FullrecallStore against a plain dict (hypothesis), under concurrent writers, and inside a compiled graph."""

from __future__ import annotations

import threading
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp

from fullrecall.integrations.langgraph_store import FullrecallStore

NAMESPACES = st.sampled_from([("a",), ("a", "b"), ("a", "c"), ("b",), ("b", "a", "c")])
KEYS = st.sampled_from(["k1", "k2", "", "k.3", "ünï"])
VALUES = st.one_of(st.none(), st.fixed_dictionaries({"n": st.integers(0, 9)}))
PUTS = st.tuples(NAMESPACES, KEYS, VALUES).map(lambda t: PutOp(*t))
GETS = st.tuples(NAMESPACES, KEYS).map(lambda t: GetOp(*t))
OPS = st.lists(st.lists(st.one_of(PUTS, PUTS, GETS), min_size=1, max_size=6), min_size=1, max_size=5)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(batches=OPS)
def test_the_store_agrees_with_a_dict(make_store, batches: list[list]) -> None:
    store: FullrecallStore = make_store(tenant=f"t-{uuid.uuid4().hex[:8]}")  # a fresh owner per example
    model: dict[tuple, dict] = {}
    for ops in batches:
        results = store.batch(ops)
        for op, result in zip(ops, results):
            if isinstance(op, PutOp):
                assert result is None
                if op.value is None:
                    model.pop((op.namespace, op.key), None)
                else:
                    model[(op.namespace, op.key)] = op.value
            else:
                expected = model.get((op.namespace, op.key))
                assert (result.value if result else None) == expected
    held = sorted({ns for ns, _ in model})
    assert store.list_namespaces() == held
    assert store.list_namespaces(max_depth=1) == sorted({ns[:1] for ns in held})
    for prefix in [(), ("a",), ("b",), ("a", "b")]:
        found = store.batch([SearchOp(prefix, limit=100)])[0]
        assert sorted((i.namespace, i.key, i.value["n"]) for i in found) == sorted(
            (ns, k, v["n"]) for (ns, k), v in model.items() if ns[: len(prefix)] == prefix)
    assert store.batch([ListNamespacesOp(limit=2, offset=1)])[0] == held[1:3]


def test_concurrent_writers_and_deleters_all_land(make_store) -> None:
    """Four writers, each with its own FullrecallStore (as separate processes would), share namespaces;
    half of them delete what they wrote. Every surviving item is found, and every namespace holding one is listed."""
    stores = [make_store() for _ in range(4)]
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(12):
                namespace = ("shared", f"ns{i % 3}")
                stores[n].put(namespace, f"w{n}-{i}", {"n": n, "i": i})
                if n % 2:
                    stores[n].delete(namespace, f"w{n}-{i}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    reader = stores[0]
    keys = {i.key for i in reader.search(("shared",), limit=1000)}
    assert keys == {f"w{n}-{i}" for n in (0, 2) for i in range(12)}
    assert reader.list_namespaces(prefix=("shared",)) == [("shared", "ns0"), ("shared", "ns1"), ("shared", "ns2")]


def test_a_compiled_graph_uses_it_as_its_store(lg_store: FullrecallStore) -> None:
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.runtime import Runtime

    def remember(state: MessagesState, runtime: Runtime) -> dict:
        text = state["messages"][-1].content
        runtime.store.put(("memories", "ann"), str(len(text)), {"text": text})
        found = runtime.store.search(("memories", "ann"))
        return {"messages": [("ai", f"I remember {len(found)} things")]}

    graph = StateGraph(MessagesState).add_node(remember).add_edge(START, "remember").compile(store=lg_store)
    graph.invoke({"messages": [("user", "I like tea")]})
    out = graph.invoke({"messages": [("user", "I live in Lyon")]})
    assert out["messages"][-1].content == "I remember 2 things"
    assert sorted(i.value["text"] for i in lg_store.search(("memories",))) == ["I like tea", "I live in Lyon"]

"""Time FullrecallStore's get / put / search: one big namespace, and many small per-user ones.

PYTHONPATH=src python scripts/bench_langgraph_store.py [store URL]    (default: a new SQLite file)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

from langgraph.store.base import PutOp

from fullrecall.integrations.langgraph_store import FullrecallStore


def p50_ms(call, reps: int = 30) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    store = FullrecallStore(sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{tempfile.mkdtemp()}/bench.db")
    for n in (100, 1000):
        ns = ("bench", str(n))
        store.batch([PutOp(ns, f"k{i}", {"text": f"item {i}", "n": i}) for i in range(n)])
        put = p50_ms(lambda ns=ns: store.put(ns, "x", {"n": 1}))
        get = p50_ms(lambda ns=ns: store.get(ns, "k5"))
        search = p50_ms(lambda ns=ns: store.search(ns, filter={"n": {"$gt": 5}}))
        print(f"{n:>6} items in one namespace: put {put:.2f} ms, get {get:.2f} ms, "
              f"search (filter, limit 10) {search:.2f} ms (p50)")
    users = 10_000
    for start in range(0, users, 500):
        store.batch([PutOp(("memories", f"u{i}"), "k", {"text": f"fact {i}"}) for i in range(start, start + 500)])
    ns = ("memories", "u7")
    print(f"{users:>6} user namespaces: put {p50_ms(lambda: store.put(ns, 'x', {'n': 1})):.2f} ms, "
          f"get {p50_ms(lambda: store.get(ns, 'k')):.2f} ms, search {p50_ms(lambda: store.search(ns)):.2f} ms, "
          f"list_namespaces(prefix) {p50_ms(lambda: store.list_namespaces(prefix=ns)):.2f} ms (p50)")


if __name__ == "__main__":
    main()

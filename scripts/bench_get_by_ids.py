"""SQLite ``Store.get`` by many ids, with the read's ORDER BY (as before) and without (as now), alternating in one
process: 1,000 and 10,000 random ids of a 10,000- and a 100,000-message conversation (plus a small other one).

Usage: PYTHONPATH=src python scripts/bench_get_by_ids.py
"""

import random
import tempfile
import time

from fullrecall.stores.base import Scope, StoredMessage
from fullrecall.stores.sqlite import SQLiteStore

ROUNDS = 3


def main() -> None:
    store = SQLiteStore(f"{tempfile.mkdtemp()}/ids.db")
    now = SQLiteStore._select_messages

    def ordered(self, conn, where, params, ordered=True, by_key=False):  # the read as it was: always ORDER BY
        return now(self, conn, where, params, True, by_key)

    def fill(scope: Scope, n: int) -> None:
        for i in range(0, n, 5000):
            store.append(scope, [StoredMessage(id=f"m{j}", role="user", text=f"message {j}", data={"j": j})
                                 for j in range(i, min(n, i + 5000))])

    for n in (10_000, 100_000):
        scope = Scope(user_id="u", agent_id="a", session_id=f"s{n}")
        fill(scope, n)
        fill(Scope(user_id="u", agent_id="a", session_id=f"other{n}"), 1000)
        for k in (1000, 10_000):
            ids = [f"m{j}" for j in random.Random(k).sample(range(n), k)]
            best, got = {"before": 1e9, "after": 1e9}, {}
            for _ in range(ROUNDS):
                for name, read in (("before", ordered), ("after", now)):
                    SQLiteStore._select_messages = read  # type: ignore[method-assign]
                    t0 = time.perf_counter()
                    got[name] = store.get(scope, ids)
                    best[name] = min(best[name], time.perf_counter() - t0)
            SQLiteStore._select_messages = now  # type: ignore[method-assign]
            assert got["before"] == got["after"] and len(got["after"]) == k
            print(f"{n:>7,} messages, {k:>6,} ids: before {best['before'] * 1e3:7.1f} ms,"
                  f" after {best['after'] * 1e3:6.1f} ms (x{best['before'] / best['after']:.1f})", flush=True)
    store.close()


if __name__ == "__main__":
    main()

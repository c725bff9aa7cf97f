"""What ``forget`` costs: forget one user's 100-message conversation in a store of N messages.

Usage: ``python scripts/forget_cost.py [N] [sqlite,postgres,redis,postgres-full]`` (default
100000 and the first three; ``postgres-full`` opens PostgreSQL with ``forget_vacuum=full``).
Every message has a 384-d vector; PostgreSQL gets its HNSW index built after the load.
SQLite goes to a temporary file, PostgreSQL and Redis to throwaway servers
(``fullrecall.stores._servers``). Prints three forgets per backend and what each reported as
remaining.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time

import numpy as np

from fullrecall.stores import Scope, StoredMessage, open_store
from fullrecall.stores._servers import postgres_server, redis_server

PER_CONVERSATION, FORGOTTEN, DIM = 1000, 100, 384


def _messages(rng: np.random.Generator, words: list[str], n: int, prefix: str) -> list[StoredMessage]:
    return [
        StoredMessage(id=f"{prefix}{i}", role="user", text=" ".join(rng.choice(words, 25)), data={"i": i})
        for i in range(n)
    ]


def measure(store, n: int) -> list[tuple[float, list[str]]]:
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(5000)]
    for c in range(n // PER_CONVERSATION):
        scope = Scope(user_id=f"u{c}", agent_id="a", session_id=f"s{c}")
        msgs = _messages(rng, words, PER_CONVERSATION, "m")
        store.append(scope, msgs)
        store.set_vectors(scope, [m.id for m in msgs], rng.normal(size=(len(msgs), DIM)).astype(np.float32), "m")
    if hasattr(store, "build_indexes"):
        store.build_indexes()
    out = []
    for rep in range(3):
        scope = Scope(user_id=f"gone{rep}", agent_id="a", session_id="x")
        msgs = _messages(rng, words, FORGOTTEN, "g")
        store.append(scope, msgs)
        store.set_vectors(scope, [m.id for m in msgs], rng.normal(size=(len(msgs), DIM)).astype(np.float32), "m")
        store.search_text(scope, ["w1"], 5)  # indexed and cached before it is forgotten
        started = time.perf_counter()
        result = store.forget(Scope(user_id=f"gone{rep}", agent_id="a"))
        out.append((time.perf_counter() - started, [e["where"] for e in result["remaining"]]))
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    backends = sys.argv[2].split(",") if len(sys.argv) > 2 else ["sqlite", "postgres", "redis"]
    with contextlib.ExitStack() as stack:
        for backend in backends:
            if backend == "sqlite":
                url = f"sqlite:///{stack.enter_context(tempfile.TemporaryDirectory())}/forget.db"
                store = open_store(url)
            elif backend in ("postgres", "postgres-full"):  # postgres-full: forget_vacuum=full
                vacuum = "full" if backend == "postgres-full" else "plain"
                store = open_store(stack.enter_context(postgres_server()), hnsw_min_rows=10**9, forget_vacuum=vacuum)
            else:
                store = open_store(stack.enter_context(redis_server()))
            for seconds, remaining in measure(store, n):
                print(f"{backend} {n:,} messages: forget {seconds * 1000:.0f} ms, remaining {remaining}", flush=True)
            store.close()


if __name__ == "__main__":
    main()

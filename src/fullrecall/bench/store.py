"""Store throughput and hybrid-search latency for SQLite, PostgreSQL and Redis.

For each backend, layout (all messages in one conversation, or spread over many) and
size, a fresh store is loaded (vectors are random 384-d unit vectors), then it measures a hybrid query (one
``search_text`` + one ``search_vectors`` on the queried conversation) and bytes stored
per message. Append throughput is measured one message per call (the first 2,000) and
in batches (100 per call in one conversation, 10 per conversation otherwise). PostgreSQL
builds its HNSW index once after the load (timed separately). Servers are started
privately unless URLs are given.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from . import count, counts

DIM = 384
SINGLE_APPENDS = 2_000
BATCH = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backends", default="sqlite,postgres,redis", help="comma-separated: sqlite,postgres,redis")
    parser.add_argument(
        "--sizes", type=counts, default="1000,10000,100000", help="stored messages to measure at (add 1000000 for 1M)"
    )
    parser.add_argument("--layouts", default="one,many", help="one: one conversation; many: spread over conversations")
    parser.add_argument(
        "--conversations", type=int, default=10_000, help="conversations in the 'many' layout (at most size/10)"
    )
    parser.add_argument("--queries", type=count, default=50, help="hybrid queries per measurement")
    parser.add_argument("--postgres-url", default=os.environ.get("FULLRECALL_TEST_POSTGRES_URL"))
    parser.add_argument("--redis-url", default=os.environ.get("FULLRECALL_TEST_REDIS_URL"))
    parser.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    parser.add_argument("--seed", type=int, default=0)
    from . import archive as archive_path

    archive_path.add_arguments(parser)


@dataclass
class Row:
    backend: str
    layout: str
    size: int
    append_single_per_s: float | None
    append_batch_per_s: float | None
    index_build_s: float
    first_query_ms: float
    hybrid_p50_ms: float
    hybrid_p95_ms: float
    text_p50_ms: float
    vector_p50_ms: float
    bytes_per_message: float
    stats_p50_ms: float = 0.0  # one stats + count of the queried conversation: flat in its size


def run(args: argparse.Namespace) -> int:
    import numpy as np

    sizes = sorted(args.sizes)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    layouts = [layout.strip() for layout in args.layouts.split(",") if layout.strip()]
    unknown = set(backends) - {"sqlite", "postgres", "redis"} or set(layouts) - {"one", "many"}
    if unknown:
        raise ValueError(f"unknown backend or layout: {sorted(unknown)}")
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so the servers we started get stopped
    rng = np.random.default_rng(args.seed)
    corpus = _Corpus(rng)
    if getattr(args, "archive", False):  # the archive's write and recall path (bench/archive.py)
        from . import archive as archive_path

        return archive_path.run(args, corpus)
    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        for backend in backends:
            make_url = _url_factory(backend, args, stack)
            for layout in layouts:
                rows += _bench(backend, layout, make_url, sizes, args, corpus, rng)
                if not args.json:
                    print(f"  done: {backend} / {layout}", flush=True)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        print(_table(rows))
    return 0


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


class _Corpus:
    """Synthetic chat text: Zipf-distributed words plus the odd reference number."""

    def __init__(self, rng: Any) -> None:
        import numpy as np

        syllables = ["ka", "lo", "mi", "ren", "to", "sa", "vi", "dor", "pel", "qu", "ang", "ex", "ul", "bri", "mon"]
        words = {"".join(rng.choice(syllables, size=int(rng.integers(2, 4)))) for _ in range(20_000)}
        self.words = sorted(words)[:5_000]
        weights = 1.0 / np.arange(1, len(self.words) + 1) ** 1.1
        self.p = weights / weights.sum()
        self.rng = rng

    def texts(self, n: int) -> list[str]:
        lengths = self.rng.integers(8, 40, size=n)
        picks = self.rng.choice(len(self.words), size=int(lengths.sum()), p=self.p)
        out, at = [], 0
        for i, length in enumerate(lengths):
            text = " ".join(self.words[j] for j in picks[at : at + length])
            at += length
            out.append(text + (f" ref REF-{self.rng.integers(10_000, 99_999)}" if i % 50 == 0 else ""))
        return out

    def query(self) -> list[str]:
        return [self.words[int(j)] for j in self.rng.integers(20, 2_000, size=3)]


def _url_factory(backend: str, args: argparse.Namespace, stack: contextlib.ExitStack) -> Callable[[], str]:
    """A function giving a fresh, empty store URL for the backend (starting its server once)."""
    from ..stores._servers import postgres_server, redis_server

    if backend == "sqlite":
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="fullrecall-bench-"))
        return lambda: f"sqlite:///{tmp}/bench-{uuid.uuid4().hex[:8]}.db"
    if backend == "postgres":
        base = args.postgres_url or stack.enter_context(postgres_server(server_settings()))
        sep = "&" if "?" in base else "?"
        return lambda: f"{base}{sep}schema=bench_{uuid.uuid4().hex[:8]}&index_build_memory=4GB"
    base = args.redis_url or stack.enter_context(redis_server())
    sep = "&" if "?" in base else "?"
    return lambda: f"{base}{sep}prefix=bench{uuid.uuid4().hex[:8]}"


def server_settings() -> dict[str, str]:
    """The bench's own PostgreSQL gets what any server holding this much data is given:
    a quarter of RAM for ``shared_buffers`` (PostgreSQL's advice; its default is 128 MB).
    """
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    buffers_gb = max(1, min(8, ram // 4 // 2**30))
    return {
        "shared_buffers": f"{buffers_gb}GB",
        "effective_cache_size": f"{2 * buffers_gb}GB",
        "max_wal_size": "4GB",  # fewer checkpoints during the bulk load
        "random_page_cost": "1.1",  # SSD
    }


def _bench(
    backend: str,
    layout: str,
    make_url: Callable[[], str],
    sizes: list[int],
    args: argparse.Namespace,
    corpus: _Corpus,
    rng: Any,
) -> list[Row]:
    """One fresh store per size: load it, give every message a vector, measure."""
    import numpy as np

    from ..stores import Scope, StoredMessage, open_store

    def vectors(n: int) -> np.ndarray:
        v = rng.normal(size=(n, DIM)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    rows = []
    for size in sizes:
        # Bulk loads into PostgreSQL build the HNSW index once at the end (see build_indexes).
        url = make_url()
        store = open_store(url + ("&hnsw_min_rows=1000000000" if backend == "postgres" else ""))
        n_conv = 1 if layout == "one" else max(1, min(args.conversations, size // 10))
        scopes = [Scope(user_id=f"user{c % 100}", session_id=f"conv{c}") for c in range(n_conv)]

        def scope_of(n: int, scopes: list[Scope] = scopes, n_conv: int = n_conv) -> Any:
            return scopes[(n // 10) % n_conv]  # conversations take turns in blocks of 10 messages, like chats

        try:
            msgs = [
                StoredMessage(
                    id=f"m{i}",
                    role="user" if i % 2 else "assistant",
                    text=t,
                    data={"role": "user", "content": [{"text": t}]},
                )
                for i, t in enumerate(corpus.texts(size))
            ]
            n_single = min(SINGLE_APPENDS, size)
            t0 = time.perf_counter()
            for i in range(n_single):
                store.append(scope_of(i), [msgs[i]])
            single = n_single / (time.perf_counter() - t0)
            step = BATCH if layout == "one" else 10
            t0 = time.perf_counter()
            for start in range(n_single, size, step):
                store.append(scope_of(start), msgs[start : start + step])
            batch = (size - n_single) / (time.perf_counter() - t0) if size > n_single else None
            for start in range(0, size, step):  # not timed: embedding is not the store's job
                ids = [m.id for m in msgs[start : start + step]]
                store.set_vectors(scope_of(start), ids, vectors(len(ids)), "bench-random-384")
            t0 = time.perf_counter()
            if layout == "one" and hasattr(store, "build_indexes"):
                store.build_indexes()
            index_s = time.perf_counter() - t0
            rows.append(
                _measure(backend, layout, size, store, scopes[0], corpus, vectors, args.queries, single, batch, index_s)
            )
        finally:
            _drop(store)
    return rows


def _drop(store: Any) -> None:
    """Remove what the benchmark wrote (a PostgreSQL schema, Redis keys; SQLite files go with their folder)."""
    from ..stores import Scope

    with contextlib.suppress(Exception):
        if type(store).__name__ == "PostgresStore":
            with store._tx() as conn:
                conn.execute(f"DROP SCHEMA {store.schema} CASCADE")
        else:
            store.forget(Scope.everyone())
    store.close()


def _measure(
    backend: str,
    layout: str,
    size: int,
    store: Any,
    scope: Any,
    corpus: _Corpus,
    vectors: Callable[[int], Any],
    n_queries: int,
    single: float,
    batch: float | None,
    index_s: float,
) -> Row:
    import numpy as np

    t0 = time.perf_counter()
    store.search_text(scope, corpus.query(), 10)
    store.search_vectors(scope, vectors(1)[0], 10)
    first = (time.perf_counter() - t0) * 1000
    text_ms, vec_ms = [], []
    for _ in range(n_queries):
        terms, q = corpus.query(), vectors(1)[0]
        t1 = time.perf_counter()
        store.search_text(scope, terms, 10)
        t2 = time.perf_counter()
        store.search_vectors(scope, q, 10)
        t3 = time.perf_counter()
        text_ms.append((t2 - t1) * 1000)
        vec_ms.append((t3 - t2) * 1000)
    hybrid = np.array(text_ms) + np.array(vec_ms)
    return Row(
        backend,
        layout,
        size,
        single,
        batch,
        round(index_s, 1),
        round(first, 2),
        round(float(np.percentile(hybrid, 50)), 2),
        round(float(np.percentile(hybrid, 95)), 2),
        round(float(np.median(text_ms)), 2),
        round(float(np.median(vec_ms)), 2),
        round(_bytes_stored(store) / size, 1),
        _stats_cost(store, scope, n_queries),
    )


def _stats_cost(store: Any, scope: Any, n: int) -> float:
    """Median ms of ``stats`` plus ``count`` of one conversation (read from its counters: flat in its size)."""
    import numpy as np

    times = []
    for _ in range(max(3, n)):
        t0 = time.perf_counter()
        store.stats(scope)
        store.count(scope)
        times.append((time.perf_counter() - t0) * 1000)
    return round(float(np.median(times)), 3)


def _bytes_stored(store: Any) -> int:
    """What the backend really holds: file + WAL, relation sizes, or Redis memory of the keys."""
    name = type(store).__name__
    if name == "SQLiteStore":
        store._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")  # count pages once, not also in the WAL
        return sum(os.path.getsize(p) for p in (store.path, store.path + "-wal") if os.path.exists(p))
    if name == "PostgresStore":
        with store._tx() as conn:
            return int(
                conn.execute(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS b FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
                    (store.schema,),
                ).fetchone()["b"]
            )
    from ..stores import Scope

    return int(store.stats(Scope.everyone())["server_bytes"])


def _table(rows: list[Row]) -> str:
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:,.0f}"

    head = (
        "| backend | layout | messages | append msg/s (1 per call) | append msg/s (batches) | index build s"
        " | first query ms"
        " | hybrid p50 ms | hybrid p95 ms | text p50 ms | vector p50 ms | bytes/msg | stats p50 ms |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        lines.append(
            f"| {r.backend} | {r.layout} | {r.size:,} | {fmt(r.append_single_per_s)} | {fmt(r.append_batch_per_s)}"
            f" | {r.index_build_s} | {r.first_query_ms} | {r.hybrid_p50_ms} | {r.hybrid_p95_ms}"
            f" | {r.text_p50_ms} | {r.vector_p50_ms}"
            f" | {r.bytes_per_message:,.0f} | {r.stats_p50_ms} |"
        )
    return "\n".join(lines)

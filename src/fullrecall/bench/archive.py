"""The archive's write and recall path against the embedder it uses (``fullrecall bench store --archive``).

Every figure is a ratio taken in one run, since absolute times differ from machine to machine:

* **write**: ``Archive.write`` throughput (batches of ``--archive-batch`` removed messages, embedding
  included) against the same embedder embedding the same batches alone;
* **no wait**: how long a ``write`` takes to return with ``background_indexing=True`` (vectors follow on a
  worker thread) against a plain SQLite append of the same rows: one write a turn (the worker idle when the
  next write comes) and back to back (the worker embedding meanwhile), plus how long the vectors then took;
* **round trips**: store calls per ``write`` and per ``recall`` (counted by a wrapper);
* **recall**: ``Archive.recall`` p50 (embed the question, hybrid search, radius, read the ranges) at each
  of ``--archive-sizes`` archived messages (one conversation, SQLite), against embedding the question alone;
  and the same with one turn (two messages) archived before each question, as in an agent's loop (the turns are
  deleted afterwards, so a kept store holds what it held).
  The archived messages are loaded with vectors made cheaply but from the real embedder: each word of the
  corpus is embedded once, and a message's vector is the normalised sum of its words' vectors, so the
  vectors have the structure of the embedder's space (random unit vectors have none, and which messages a
  question finds, hence what the recall reads, would be arbitrary) and a question's words find their messages.
  Before the timed questions, ``WARM_QUESTIONS`` other questions are recalled untimed, so that the figures are
  those of a store in steady use (caches built; a PostgreSQL server started on a kept data folder has empty
  ``shared_buffers``, and a question then reads thousands of index and heap pages through the OS).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import count, counts

WARM_QUESTIONS = 300


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--archive", action="store_true",
                        help="measure the archive's write and recall path against its embedder instead of the stores")
    parser.add_argument("--archive-writes", type=count, default=2_000, help="messages archived for the write ratios")
    parser.add_argument("--archive-batch", type=count, default=32, help="messages per Archive.write")
    parser.add_argument("--archive-sizes", type=counts, default="10000,100000", help="archived messages to measure recall at")
    parser.add_argument("--embedding-model", default=None, help="embedder (default: the shipped MiniLM)")
    parser.add_argument("--archive-backend", choices=("sqlite", "postgres"), default="sqlite",
                        help="the store the recall figures are taken on (PostgreSQL: a private server, HNSW index)")
    parser.add_argument("--archive-keep", default=None, metavar="DIR",
                        help="keep the loaded recall stores in DIR (a PostgreSQL data folder or SQLite files) and "
                        "reuse them on the next run instead of loading again")


@dataclass
class ArchiveReport:
    embed_batch_per_s: float
    write_per_s: float
    write_ratio: float
    plain_append_ms: float
    no_wait_write_ms: float
    no_wait_ratio: float
    back_to_back_write_ms: float
    back_to_back_ratio: float
    vectors_done_after_s: float
    round_trips_per_write: dict[str, Any]
    round_trips_per_recall: dict[str, Any]
    recall: list[dict[str, Any]] = field(default_factory=list)


class CountingStore:
    """A real store that counts the calls made to it (each call is one round trip) and the messages read."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.read_messages = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            result = attr(*args, **kwargs)
            if name in ("range", "get", "get_keys"):
                self.read_messages += len(result)
            return result

        return counted

    def prepare_vector_search(self, scope: Any, filters: Any = None) -> Any:
        """Forwarded, and counted as the vector search it prepares (its one round trip). The search engine looks
        for it on the store's class (a store that checks what it keeps while the question is embedded): without
        it here, the bench would time a recall that no real store makes.
        """
        self.calls["search_vectors"] += 1
        return self.inner.prepare_vector_search(scope, filters)

    def reset(self) -> None:
        self.calls.clear()
        self.read_messages = 0


def run(args: argparse.Namespace, corpus: Any) -> int:
    """Measure and print (a markdown summary, or JSON with ``--json``)."""
    import json

    from ..embeddings import load_embedder

    embedder = load_embedder(args.embedding_model)
    embedder.embed(["warm up"])
    sizes = sorted(args.archive_sizes)
    with tempfile.TemporaryDirectory(prefix="fullrecall-bench-archive-") as tmp, contextlib.ExitStack() as stack:
        report = _writes(embedder, corpus, args.archive_writes, args.archive_batch, tmp)
        recall_url = _recall_urls(args.archive_backend, args.archive_keep or tmp, stack)
        report.recall = [_recall(embedder, corpus, size, args.queries, recall_url(size)) for size in sizes]
        report.round_trips_per_recall = report.recall[-1].pop("round_trips") if report.recall else {}
        for r in report.recall:
            r.pop("round_trips", None)
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    else:
        print(_table(report))
    return 0


def _events(corpus: Any, n: int, batch: int, start: int = 0) -> list[Any]:
    from dataclasses import replace

    from ..messages import parse_messages
    from ..window.base import RemovedMessages

    texts = corpus.texts(n)
    _, msgs = parse_messages([{"role": "user" if i % 2 == 0 else "assistant", "content": [{"text": t}]}
                              for i, t in enumerate(texts)])
    msgs = [replace(m, position=start + i, id=f"m{start + i}") for i, m in enumerate(msgs)]
    return [RemovedMessages(msgs[i:i + batch], reason="trimmed", shape="converse") for i in range(0, n, batch)]


def _writes(embedder: Any, corpus: Any, n: int, batch: int, tmp: str) -> ArchiveReport:
    """Write throughput with embedding, the no-wait write, and round trips per write."""
    from ..archive.archive import Archive, message_record
    from ..stores import Scope, open_store

    scope = Scope(session_id="bench")
    events = _events(corpus, n, batch)
    rows = [[message_record(m, e.shape, reason=e.reason) for m in e.messages] for e in events]  # what write stores
    texts = [[r.text for r in batch] for batch in rows]

    # Paired, batch by batch (a shared machine's load drifts): the embedder alone, then Archive.write.
    counting = CountingStore(open_store(f"sqlite:///{tmp}/write.db"))
    archive = Archive(counting, scope, embedding_model=embedder)
    archive.write(events[0])  # the first write of a process also records where the archive starts
    counting.reset()
    embed_s = write_s = 0.0
    for chunk, e in zip(texts[1:], events[1:]):
        t0 = time.perf_counter()
        embedder.embed(chunk)
        t1 = time.perf_counter()
        archive.write(e)
        t2 = time.perf_counter()
        embed_s, write_s = embed_s + t1 - t0, write_s + t2 - t1
    written = sum(len(e.messages) for e in events[1:])
    per_write = {k: round(v / max(1, len(events) - 1), 2) for k, v in counting.calls.items()}
    counting.inner.close()

    # Writes that do not wait for vectors, against a plain SQLite append of the same rows: the rows the
    # archive writes, appended in one transaction by the same store class to a file of its own with the same
    # settings (WAL, synchronous=NORMAL). One write a turn: each plain append is paired with the archive's
    # write of the same batch (a shared machine's load drifts), and the worker has embedded the last one.
    plain = open_store(f"sqlite:///{tmp}/plain.db")
    store = open_store(f"sqlite:///{tmp}/nowait.db")
    background = Archive(store, scope, embedding_model=embedder, background_indexing=True)
    write_ms, busy_ms, plain_ms_list = [], [], []
    half = len(events) // 2
    for e, r in zip(events[:half], rows[:half]):
        t0 = time.perf_counter()
        plain.append(scope, r)
        t1 = time.perf_counter()
        background.write(e)
        t2 = time.perf_counter()
        plain_ms_list.append((t1 - t0) * 1000)
        write_ms.append((t2 - t1) * 1000)
        background.flush()
    plain.close()
    t0 = time.perf_counter()
    for e in events[half:]:  # back to back: the worker embeds while the writer writes
        t1 = time.perf_counter()
        background.write(e)
        busy_ms.append((time.perf_counter() - t1) * 1000)
    background.flush()
    vectors_s = time.perf_counter() - t0
    background.close()
    store.close()
    no_wait, plain_ms = statistics.median(write_ms), statistics.median(plain_ms_list)
    return ArchiveReport(
        embed_batch_per_s=round(written / embed_s, 1),
        write_per_s=round(written / write_s, 1),
        write_ratio=round(embed_s / write_s, 3),
        plain_append_ms=round(plain_ms, 3),
        no_wait_write_ms=round(no_wait, 3),
        no_wait_ratio=round(no_wait / plain_ms, 2),
        back_to_back_write_ms=round(statistics.median(busy_ms), 3),
        back_to_back_ratio=round(statistics.median(busy_ms) / plain_ms, 2),
        vectors_done_after_s=round(vectors_s, 2),
        round_trips_per_write=per_write,
        round_trips_per_recall={},
    )


def _recall(embedder: Any, corpus: Any, size: int, n_queries: int, url: str) -> dict[str, Any]:
    """Recall p50 at ``size`` archived messages against embedding the question alone."""
    from ..archive.archive import Archive
    from ..stores import Scope, open_store

    scope = Scope(session_id=f"recall{size}")
    store = open_store(url)
    load_s = _load(store, scope, embedder, corpus, size)
    counting = CountingStore(store)
    archive = Archive(counting, scope, embedding_model=embedder)
    questions = [" ".join(corpus.query()) + "?" for _ in range(n_queries + 2)]
    for _ in range(WARM_QUESTIONS):  # untimed, other questions: a store in steady use
        archive.recall(" ".join(corpus.query()) + "?", before=size)
    embed = getattr(embedder, "embed_queries", None) or embedder.embed
    embed([questions[0]])
    recall_ms, embed_ms = [], []
    counting.reset()
    for q in questions[2:]:
        t0 = time.perf_counter()
        embed([q])
        t1 = time.perf_counter()
        archive.recall(q, before=size)
        t2 = time.perf_counter()
        embed_ms.append((t1 - t0) * 1000)
        recall_ms.append((t2 - t1) * 1000)
    trips = {k: round(v / max(1, len(questions) - 2), 1) for k, v in counting.calls.items()}
    looped, looped_embed_ms = [], []
    turns = _events(corpus, 2 * len(questions[2:]), 2, start=size)
    for n, (q, turn) in enumerate(zip(questions[2:], turns), 1):  # a turn archived, then a question
        archive.write(turn)
        t0 = time.perf_counter()
        embed([q])
        t1 = time.perf_counter()
        archive.recall(q, before=size + 2 * n)
        looped_embed_ms.append((t1 - t0) * 1000)
        looped.append((time.perf_counter() - t1) * 1000)
    store.delete(scope, [m.id for turn in turns for m in turn.messages])
    store.close()
    r50, e50 = statistics.median(recall_ms), statistics.median(embed_ms)
    l50, le50 = statistics.median(looped), statistics.median(looped_embed_ms)
    return {"size": size, "recall_p50_ms": round(r50, 2), "embed_question_p50_ms": round(e50, 2),
            "ratio": round(r50 / e50, 2), "after_write_recall_p50_ms": round(l50, 2),
            "after_write_ratio": round(l50 / le50, 2), "round_trips": trips, **load_s}


def _recall_urls(backend: str, where: str, stack: contextlib.ExitStack) -> Callable[[int], str]:
    """A store URL per archive size: a SQLite file in ``where``, or a schema of a private PostgreSQL whose
    data folder is ``where`` (kept there when it is ``--archive-keep``). The PostgreSQL URL defers the HNSW
    build until :func:`_load` asks for it once, after the load.
    """
    if backend == "sqlite":
        return lambda size: f"sqlite:///{where}/recall{size}.db"
    from ..stores._servers import postgres_server
    from .store import server_settings

    base = stack.enter_context(postgres_server(server_settings(), pgdata=os.path.join(where, "pgdata")))
    sep = "&" if "?" in base else "?"
    return lambda size: f"{base}{sep}schema=recall{size}&hnsw_min_rows=1000000000&index_build_memory=4GB"


def _load(store: Any, scope: Any, embedder: Any, corpus: Any, size: int) -> dict[str, float]:
    """Archive ``size`` messages in big batches with vectors built from their words' embeddings (see the
    module's docstring), unless the store (kept from an earlier run) holds them already; then build the search
    indexes once. Returns the seconds each took.
    """
    from ..archive.archive import message_record

    held = store.count(scope)
    if held not in (0, size):
        raise SystemExit(f"{store!r} holds {held} messages in {scope}, not 0 or {size}: remove the kept store")
    step = 10_000
    t0 = time.perf_counter()
    for start in range(0 if held == 0 else size, size, step):
        rows = [message_record(m, e.shape) for e in _events(corpus, min(step, size - start), step, start)
                for m in e.messages]
        store.append(scope, rows)
        store.set_vectors(scope, [r.id for r in rows], _word_vectors(embedder, corpus, [r.text for r in rows]),
                          embedder.name)
    t1 = time.perf_counter()
    build = getattr(store, "build_indexes", None)
    if build is not None:
        build()
        _warm_postgres(store)
    return {"load_s": round(t1 - t0, 1) if held == 0 else 0.0, "index_build_s": round(time.perf_counter() - t1, 1)}


def _word_vectors(embedder: Any, corpus: Any, texts: list[str]) -> Any:
    """Unit vectors for ``texts``: the normalised sum of the embedder's vectors of their corpus words (each
    word embedded once per corpus and embedder, in one batch).
    """
    import numpy as np

    words = corpus.__dict__.setdefault("_word_vectors", {})
    if embedder.name not in words:
        words[embedder.name] = ({w: i for i, w in enumerate(corpus.words)},
                                np.asarray(embedder.embed(corpus.words), dtype=np.float32))
    index, table = words[embedder.name]
    out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
    for i, text in enumerate(texts):
        picks = [index[w] for w in text.split() if w in index]
        if picks:
            out[i] = table[picks].sum(axis=0)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return out / norms


def _warm_postgres(store: Any) -> None:
    """Read the schema's files (tables and indexes) once, so that the measured queries find them in the
    page cache, as a server in steady use would (the private server has just been started, maybe on a
    kept data folder whose pages the machine's other work has evicted).
    """
    import psycopg

    from ..stores.postgres import split_url

    with psycopg.connect(split_url(store.url)[0], autocommit=True) as conn:
        rows = conn.execute(
            "SELECT current_setting('data_directory') || '/' || pg_relation_filepath(c.oid) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'i', 't')",
            (store.schema,),
        ).fetchall()
    for (path,) in rows:
        for segment in [path] + [f"{path}.{i}" for i in range(1, 1_000)]:
            if not os.path.exists(segment):
                break
            with open(segment, "rb") as f:
                while f.read(1 << 20):
                    pass


def _table(r: ArchiveReport) -> str:
    lines = [
        "| archive write path | figure | against | ratio |",
        "|---|---|---|---|",
        f"| Archive.write with embedding | {r.write_per_s:,.0f} msg/s | embedder alone {r.embed_batch_per_s:,.0f} msg/s"
        f" | {r.write_ratio:.3f}x |",
        f"| write returns (background indexing, one write a turn), p50 | {r.no_wait_write_ms:.3f} ms"
        f" | plain SQLite append, p50 {r.plain_append_ms:.3f} ms | {r.no_wait_ratio:.2f}x |",
        f"| write returns (background indexing, back to back, worker embedding), p50 | {r.back_to_back_write_ms:.3f} ms"
        f" | plain SQLite append, p50 {r.plain_append_ms:.3f} ms | {r.back_to_back_ratio:.2f}x |",
        "",
        f"Round trips per write: {_trips(r.round_trips_per_write)}; per recall: {_trips(r.round_trips_per_recall)}; "
        f"back-to-back writes all had their vectors {r.vectors_done_after_s:.2f} s after the first of them.",
        "",
        "| archived messages | recall p50 ms | embed the question p50 ms | ratio | a turn archived before each:"
        " recall p50 ms | ratio |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {x['size']:,} | {x['recall_p50_ms']} | {x['embed_question_p50_ms']} | {x['ratio']}x"
              f" | {x['after_write_recall_p50_ms']} | {x['after_write_ratio']}x |" for x in r.recall]
    return "\n".join(lines)


def _trips(calls: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(calls.items())) or "none"

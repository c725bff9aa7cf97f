"""Recall at 10,000 messages, two source trees taking turns: main-thread CPU after the embedding, and wall times.

    python scripts/recall_ab.py DB ROUNDS QUESTIONS NAME=SRC [NAME=SRC ...]

DB is the SQLite store ``fullrecall bench store --archive --archive-sizes 10000 --archive-keep DIR`` kept
(``DIR/recall10000.db``); each NAME=SRC is a ``src`` folder imported by a worker process of its own (the same
interpreter). Each worker recalls 300 questions untimed, then the workers take turns, ROUNDS rounds of QUESTIONS
questions each (the same questions for every tree, the order of the trees alternating), each question embedded
alone and then recalled, as the bench does. Printed per tree, p50 over every question: the recall's main-thread CPU
time after the embedding (``time.thread_time_ns``: what other processes' load moves least), the wall time after
the embedding, the recall, the question embedded alone, and their ratio.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time


def worker(db: str) -> None:
    import numpy as np

    from fullrecall.archive.archive import Archive
    from fullrecall.bench.store import _Corpus
    from fullrecall.embeddings import load_embedder
    from fullrecall.stores import Scope, open_store

    embedder = load_embedder(None)
    embedder.embed(["warm up"])
    corpus = _Corpus(np.random.default_rng(0))
    archive = Archive(open_store(f"sqlite:///{db}"), Scope(session_id="recall10000"), embedding_model=embedder)
    engine, marks = archive.search_engine, {}
    embed_query = engine.embed_query

    def timed_embed(query: str):  # when the recall's own embedding begins and ends, in CPU and wall time
        marks["cpu0"], marks["wall0"] = time.thread_time_ns(), time.perf_counter_ns()
        vector = embed_query(query)
        marks["cpu1"], marks["wall1"] = time.thread_time_ns(), time.perf_counter_ns()
        return vector

    engine.embed_query = timed_embed  # type: ignore[method-assign]
    for _ in range(300):
        archive.recall(" ".join(corpus.query()) + "?", before=10_000)
    embed = getattr(embedder, "embed_queries", None) or embedder.embed
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        rng = np.random.default_rng(command["seed"])
        out: dict[str, list[float]] = {"cpu_after": [], "wall_after": [], "recall": [], "embed": []}
        for _ in range(command["n"]):
            question = " ".join(corpus.words[int(j)] for j in rng.integers(20, 2_000, size=3)) + "?"
            t0 = time.perf_counter_ns()
            embed([question])
            t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
            archive.recall(question, before=10_000)
            c2, t2 = time.thread_time_ns(), time.perf_counter_ns()
            out["embed"].append((t1 - t0) / 1e6)
            out["recall"].append((t2 - t1) / 1e6)
            out["cpu_after"].append(((c2 - c1) - (marks["cpu1"] - marks["cpu0"])) / 1e6)
            out["wall_after"].append((t2 - marks["wall1"]) / 1e6)
        print(json.dumps(out), flush=True)


def main(db: str, rounds: int, n: int, trees: list[str]) -> None:
    procs = {}
    for tree in trees:
        name, src = tree.split("=", 1)
        env = dict(os.environ, PYTHONPATH=src)
        procs[name] = subprocess.Popen([sys.executable, __file__, "--worker", db], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, env=env)
    for p in procs.values():
        p.stdout.readline()  # type: ignore[union-attr]
    got: dict[str, dict[str, list[float]]] = {name: {} for name in procs}
    for r in range(rounds):
        for name in list(procs) if r % 2 == 0 else list(procs)[::-1]:
            p = procs[name]
            p.stdin.write(json.dumps({"seed": 1_000 + r, "n": n}) + "\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
            for key, values in json.loads(p.stdout.readline()).items():  # type: ignore[union-attr]
                got[name].setdefault(key, []).extend(values)
    for name, p in procs.items():
        p.stdin.close()  # type: ignore[union-attr]
        p.wait()
        m = {key: statistics.median(values) for key, values in got[name].items()}
        print(f"{name}: CPU after the embedding {m['cpu_after']:.3f} ms, wall after it {m['wall_after']:.3f} ms, "
              f"recall {m['recall']:.2f} ms, embedding alone {m['embed']:.2f} ms, {m['recall'] / m['embed']:.2f}x")


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])

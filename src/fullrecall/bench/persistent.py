"""Long-term memory latency: record and retrieve p50/p95, as ratios to embedding one turn.

Loads ``--users`` users x ``--turns`` turns (a user message and an answer each, 100 turns a
session) into :class:`~fullrecall.memory.persistent.PersistentMemory` on each backend, timing
``record``; then times ``retrieve`` for ``--queries`` questions of random users. Each timed call is awaited
inside one running event loop, as an agent's chat loop awaits them (a loop started and stopped around each
call, as ``asyncio.run`` does, adds its own 0.1-0.3 ms, which the library does not spend). Right before each
timed ``record`` the same run times the local embedder on that turn (its messages' contents, one
batch), and right before each ``retrieve`` on that question, so each ratio compares costs taken side
by side (the load of a shared machine drifts; a baseline timed at another moment would not hold).
Targets: record p50 at most 1.2x embedding the turn, retrieve p50 at most 1.5x embedding the
question. No LLM is called (memory is built with its defaults: facts by rules).

``--timed-turns K`` times only each user's last K turns: the turns before them are loaded first,
for every user, one ``record`` call a session (the same memory, facts included, built in far
fewer calls), so the timed turns land in a store that holds everyone's history. The loading memories
stand for earlier processes and do not warm; the timed ones warm as any memory does (``warm=True``), each
made before its user's timed turns. With
``--embedding-cache FILE`` the load reuses the vectors of earlier runs (the synthetic turns are the
same for the same ``--seed``); timed turns and questions are always embedded for real. The full
size is ``--users 100 --turns 1000 --timed-turns 20 --embedding-cache FILE``; ``--users 10 --turns
200`` is a quick run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import count
from .locomo import CachedEmbedder

TURNS_PER_SESSION = 100
RECORD_TARGET = 1.2
RETRIEVE_TARGET = 1.5

_TOPICS = ["hiking", "python", "jazz", "gardening", "chess", "cycling", "baking", "astronomy", "sailing", "poetry",
           "photography", "climbing", "pottery", "running", "knitting", "robotics", "birding", "surfing"]
_CITIES = ["Lyon", "Oslo", "Lima", "Kyoto", "Perth", "Quito", "Tunis", "Porto", "Accra", "Hanoi", "Bergen", "Cusco"]
_THINGS = ["budget", "deadline", "meeting", "invoice", "flight", "recipe", "report", "playlist", "garden", "bike"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backends", default="sqlite,postgres", help="comma-separated: sqlite,postgres,redis")
    parser.add_argument("--users", type=count, default=10, help="users (the full run: 100)")
    parser.add_argument("--turns", type=count, default=100, help="turns per user (the full run: 1000)")
    parser.add_argument("--queries", type=count, default=100, help="retrieve calls measured per backend")
    parser.add_argument("--limit", type=count, default=5, help="hits of each kind a retrieve returns")
    parser.add_argument("--postgres-url", default=os.environ.get("FULLRECALL_TEST_POSTGRES_URL"))
    parser.add_argument("--redis-url", default=os.environ.get("FULLRECALL_TEST_REDIS_URL"))
    parser.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timed-turns", type=count, default=None,
                        help="time only each user's last K turns; the earlier ones are loaded first, a session a call")
    parser.add_argument("--embedding-cache", type=Path, default=None,
                        help=".npz file keeping the loaded turns' vectors across runs (timed calls always embed)")


@dataclass
class Row:
    backend: str
    users: int
    turns: int
    embed_turn_p50_ms: float
    embed_query_p50_ms: float
    record_p50_ms: float
    record_p95_ms: float
    retrieve_p50_ms: float
    retrieve_p95_ms: float
    record_ratio: float
    retrieve_ratio: float
    llm_calls: int
    timed_records: int = 0
    # retrieve split by whether the process had searched that user's memory before (its caches are built
    # on the first question: a server in steady use answers mostly the second kind)
    retrieve_first_p50_ms: float = 0.0
    retrieve_again_p50_ms: float = 0.0
    retrieve_again_ratio: float = 0.0
    first_questions: int = 0
    load_s: float = 0.0
    load_average: float = 0.0  # the machine's 1-minute load average when the timed calls ended


class _Chat:
    """Synthetic turns: a user speaking of their life and interests, an assistant answering."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def turn(self, user: int, n: int) -> list[dict[str, Any]]:
        r = self.rng
        topic, city, thing = r.choice(_TOPICS), r.choice(_CITIES), r.choice(_THINGS)
        user_text = r.choice([
            f"I went {topic} near {city} last weekend and want to plan the next trip around my {thing}.",
            f"Can you remind me what we said about the {thing} for the {topic} club in {city}?",
            f"My {thing} for {topic} is due on day {n % 28 + 1}; the reference is REF-{user:03d}-{n:05d}.",
            f"I prefer {topic} to {r.choice(_TOPICS)} these days, especially when I am in {city}.",
        ])
        answer = r.choice([
            f"Noted: {topic} near {city}, with the {thing} in mind. Shall I draft a plan for the next outing?",
            f"Earlier we agreed the {thing} comes first, then {topic} in {city}; nothing else was decided.",
            f"I will keep REF-{user:03d}-{n:05d} with your {thing}. Anything else about {topic}?",
        ])
        return [{"role": "user", "content": user_text}, {"role": "assistant", "content": answer}]

    def question(self) -> str:
        r = self.rng
        return r.choice([
            f"What did I say about {r.choice(_TOPICS)} in {r.choice(_CITIES)}?",
            f"When is my {r.choice(_THINGS)} due?",
            f"Which hobby do I prefer these days, {r.choice(_TOPICS)}?",
        ])


def run(args: argparse.Namespace) -> int:
    from ..embeddings import load_embedder
    from .store import _exit_on_sigterm, _url_factory

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - {"sqlite", "postgres", "redis"}
    timed = args.turns if args.timed_turns is None else args.timed_turns
    if unknown:
        raise ValueError(f"unknown backend: {sorted(unknown)}; expected sqlite, postgres or redis")
    if timed > args.turns:
        raise ValueError(f"--timed-turns {timed} is above --turns {args.turns}")
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so the servers we started get stopped
    embedder = load_embedder()
    loader = CachedEmbedder(embedder, args.embedding_cache) if args.embedding_cache is not None else embedder
    rows = []
    try:
        with contextlib.ExitStack() as stack:
            for backend in backends:
                rows.append(_bench(backend, _url_factory(backend, args, stack)(), embedder, loader, args))
                if not args.json:
                    print(f"  done: {backend}", flush=True)
    finally:
        if isinstance(loader, CachedEmbedder):
            loader.save()
    print(json.dumps([asdict(r) for r in rows], indent=2) if args.json else _table(rows))
    return 0


def _bench(backend: str, url: str, embedder: Any, loader: Any, args: argparse.Namespace) -> Row:
    from ..memory.persistent import PersistentMemory
    from ..stores import open_store
    from .store import _drop

    chat = _Chat(args.seed)
    store = open_store(url)
    loop = asyncio.new_event_loop()
    timed = args.turns if args.timed_turns is None else args.timed_turns
    first_timed = args.turns - timed
    turns = [[chat.turn(user, n) for n in range(args.turns)] for user in range(args.users)]

    def memory_of(user: int, n: int, by: Any, warm: bool = True) -> PersistentMemory:
        return PersistentMemory(f"user{user}", "bench", f"session{n // TURNS_PER_SESSION}", store=store, embedder=by,
                                warm=warm)

    try:
        t0 = time.perf_counter()
        for user in range(args.users):  # the history before the timed turns, one record call a session
            for start in range(0, first_timed, TURNS_PER_SESSION):
                end = min(first_timed, start + TURNS_PER_SESSION)
                loop.run_until_complete(memory_of(user, start, loader, warm=False).record(  # past sessions
                    [m for n in range(start, end) for m in turns[user][n]], {"turn": f"load-{start}"}))
        if isinstance(loader, CachedEmbedder):
            loader.save()
        load_s = time.perf_counter() - t0
        memories = {user: memory_of(user, first_timed, embedder) for user in range(args.users)}
        record_ms: list[float] = []
        embed_turn_ms: list[float] = []
        retrieve_ms: list[float] = []
        embed_query_ms: list[float] = []
        asked: set[int] = set()
        first_ms: list[float] = []
        again_ms: list[tuple[float, float]] = []  # (retrieve, embedding the question)

        async def timed() -> None:  # awaited as an agent awaits them, inside its running event loop
            for n in range(first_timed, args.turns):  # every user's next turn, in turn
                for user in range(args.users):
                    if n % TURNS_PER_SESSION == 0:
                        memories[user] = memory_of(user, n, embedder)
                    turn = turns[user][n]
                    embed_turn_ms.append(_ms(embedder.embed, [m["content"] for m in turn]))
                    record_ms.append(await _awaited(memories[user].record(turn, {"turn": n})))
            for _ in range(args.queries):
                user = chat.rng.randrange(args.users)
                question = chat.question()
                embed_query_ms.append(_ms(embedder.embed, [question]))
                retrieve_ms.append(await _awaited(memories[user].retrieve(question, limit=args.limit)))
                if user in asked:
                    again_ms.append((retrieve_ms[-1], embed_query_ms[-1]))
                else:
                    first_ms.append(retrieve_ms[-1])
                    asked.add(user)

        loop.run_until_complete(timed())
        llm_calls = sum(getattr(m.facts.chat_model, "calls", 0) for m in memories.values()
                        if m.facts.chat_model is not None)
    finally:
        loop.close()
        _drop(store)
    turn_p50, query_p50 = _pct(embed_turn_ms, 50), _pct(embed_query_ms, 50)
    return Row(
        backend=backend, users=args.users, turns=args.turns,
        embed_turn_p50_ms=round(turn_p50, 3), embed_query_p50_ms=round(query_p50, 3),
        record_p50_ms=round(_pct(record_ms, 50), 3), record_p95_ms=round(_pct(record_ms, 95), 3),
        retrieve_p50_ms=round(_pct(retrieve_ms, 50), 3), retrieve_p95_ms=round(_pct(retrieve_ms, 95), 3),
        record_ratio=round(_pct(record_ms, 50) / turn_p50, 2), retrieve_ratio=round(_pct(retrieve_ms, 50) / query_p50, 2),
        llm_calls=llm_calls, timed_records=len(record_ms),
        retrieve_first_p50_ms=round(_pct(first_ms, 50), 3) if first_ms else 0.0,
        retrieve_again_p50_ms=round(_pct([r for r, _ in again_ms], 50), 3) if again_ms else 0.0,
        retrieve_again_ratio=round(_pct([r for r, _ in again_ms], 50) / _pct([e for _, e in again_ms], 50), 2)
        if again_ms else 0.0,
        first_questions=len(first_ms), load_s=round(load_s, 1),
        load_average=round(os.getloadavg()[0], 1),
    )


async def _awaited(call: Any) -> float:
    """Milliseconds the coroutine ``call`` takes to await."""
    t0 = time.perf_counter()
    await call
    return (time.perf_counter() - t0) * 1000


def _ms(call: Any, arg: Any) -> float:
    """Milliseconds ``call(arg)`` takes."""
    t0 = time.perf_counter()
    call(arg)
    return (time.perf_counter() - t0) * 1000


def _pct(values: list[float], q: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if q != 50 else statistics.median(values)


def _table(rows: list[Row]) -> str:
    head = ("| backend | users x turns | embed turn p50 | record p50 / p95 | record / embed (target <= "
            f"{RECORD_TARGET}) | embed query p50 | retrieve p50 / p95 | retrieve / embed (target <= "
            f"{RETRIEVE_TARGET}) | LLM calls | timed records |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r.backend} | {r.users} x {r.turns} | {r.embed_turn_p50_ms:.2f} ms | {r.record_p50_ms:.2f} / "
            f"{r.record_p95_ms:.2f} ms | {r.record_ratio:.2f}x {_mark(r.record_ratio, RECORD_TARGET)} | "
            f"{r.embed_query_p50_ms:.2f} ms | {r.retrieve_p50_ms:.2f} / {r.retrieve_p95_ms:.2f} ms | "
            f"{r.retrieve_ratio:.2f}x {_mark(r.retrieve_ratio, RETRIEVE_TARGET)} | {r.llm_calls} | "
            f"{r.timed_records} |")
    loads = ", ".join(f"{r.backend} {r.load_average}" for r in rows)
    split = "; ".join(
        f"{r.backend}: a user's first question {r.retrieve_first_p50_ms:.2f} ms (n={r.first_questions}), "
        f"later ones {r.retrieve_again_p50_ms:.2f} ms = {r.retrieve_again_ratio:.2f}x embedding the question"
        for r in rows)
    return ("\n".join(lines) + f"\n\nretrieve p50 by whether the process had searched the user before: {split}"
            f"\n\n1-minute load average when the timed calls ended: {loads}")


def _mark(ratio: float, target: float) -> str:
    return "(met)" if ratio <= target else "(missed)"

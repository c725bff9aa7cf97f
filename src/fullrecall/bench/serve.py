"""Load test of ``fullrecall serve``: N concurrent clients, two tenants, every count checked.

Starts the server on loopback (a private PostgreSQL too with ``--backend postgres``), then
``--clients`` concurrent clients (half per tenant) each append ``--messages`` messages to
their own conversations (every fifth one sent twice, as a client retrying would) and run
``--searches`` searches for words only their own messages hold. It then checks that
nothing was lost or duplicated (each tenant's export holds exactly the acknowledged ids)
and that no search hit crossed tenants, and reports p50/p95/p99 of append and search over
HTTP, the searchable delay p95 the server measured, and the same append and search
through the library in-process (same code, same kind of store) as the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import tempfile
import time
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", type=int, default=100, help="concurrent clients (default 100)")
    parser.add_argument("--messages", type=int, default=20, help="appends per client")
    parser.add_argument("--searches", type=int, default=5, help="searches per client")
    parser.add_argument("--conversations", type=int, default=2, help="conversations per client")
    parser.add_argument("--servers", type=int, default=1, help="server processes sharing the store (clients alternate)")
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--store", help="a store URL to use instead of a fresh one (its data is kept)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seed", type=int, default=0)


def _pct(values: list[float]) -> dict[str, float | None]:
    s = sorted(values)
    if not s:
        return {"p50": None, "p95": None, "p99": None}

    def pick(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 2)

    return {"p50": pick(0.5), "p95": pick(0.95), "p99": pick(0.99)}


def _word(tenant: int, client: int, i: int) -> str:
    letters = "bcdfghjklmnpqrstvwz"
    n, out = tenant * 10_000_000 + client * 10_000 + i, ""
    while n or not out:
        n, r = divmod(n, len(letters))
        out += letters[r]
    return "q" + out  # one word only this message holds


async def _client(http, key: str, tenant: int, n: int, args, acked: dict, appends: list, searches: list,
                  crossed: list, rng: random.Random) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    mine: list[str] = []
    for i in range(args.messages):
        conv = f"c{n}-{i % args.conversations}"
        mid = f"t{tenant}-c{n}-m{i}"
        word = _word(tenant, n, i)
        body = {"messages": [{"role": "user", "content": f"tenant {tenant} note {word} about item {i}", "id": mid}]}
        for attempt in range(2 if i % 5 == 0 else 1):  # a retry must store nothing twice
            started = time.perf_counter()
            r = await _send(http, f"/v1/conversations/{conv}/messages", body, headers)
            if attempt == 0:
                appends.append(time.perf_counter() - started)
        acked[tenant].add(mid)
        mine.append(word)
        if args.searches and i % max(1, args.messages // args.searches) == args.messages // args.searches - 1:
            word = rng.choice(mine)
            started = time.perf_counter()
            r = await _send(http, "/v1/search", {"query": f"note {word}", "top_k": 5}, headers)
            searches.append(time.perf_counter() - started)
            for hit in r.json()["hits"]:
                if not hit["id"].startswith(f"t{tenant}-"):
                    crossed.append(hit["id"])


async def _send(http, url: str, body: dict, headers: dict):
    """POST, retrying a request whose answer was lost on the way (what the message ids are for)."""
    import httpx

    for attempt in range(3):
        try:
            r = await http.post(url, json=body, headers=headers)
            r.raise_for_status()
            return r
        except httpx.TransportError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def _drive(urls: list[str], keys: list[str], args) -> dict[str, Any]:
    import httpx

    acked: dict[int, set[str]] = {0: set(), 1: set()}
    appends: list[float] = []
    searches: list[float] = []
    crossed: list[str] = []
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(httpx.AsyncClient(base_url=u, limits=limits, timeout=120))
                   for u in urls]
        http = clients[0]
        started = time.perf_counter()
        await asyncio.gather(*(  # client n talks to server n % servers: writes of one tenant land on every server
            _client(clients[n % len(clients)], keys[n % 2], n % 2, n, args, acked, appends, searches, crossed,
                    random.Random(args.seed + n))
            for n in range(args.clients)))
        elapsed = time.perf_counter() - started
        lost, duplicated = 0, 0
        for tenant, key in enumerate(keys):
            r = await http.post("/v1/export", json={}, headers={"Authorization": f"Bearer {key}"})
            r.raise_for_status()
            rows = [json.loads(line) for line in r.text.split("\n") if line]
            ids = [row["id"] for row in rows if row.get("type") == "message"]  # after the format header
            duplicated += len(ids) - len(set(ids))
            lost += len(acked[tenant] - set(ids))
            crossed += [i for i in ids if not i.startswith(f"t{tenant}-")]
        for _ in range(600):  # wait for the embedding queue, then read the searchable delay
            stats = (await http.get("/v1/stats", headers={"Authorization": f"Bearer {keys[0]}"})).json()
            if stats["embedding_queue"] == 0:
                break
            await asyncio.sleep(0.1)
    return {"appends": len(appends), "searches": len(searches), "elapsed_s": round(elapsed, 2),
            "append_ms": _pct(appends), "search_ms": _pct(searches),
            "searchable_delay_ms": stats["searchable_delay"], "lost": lost, "duplicated": duplicated,
            "cross_tenant": len(crossed)}


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) a process has used so far, from /proc (None where there is none)."""
    import os

    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _library_baseline(store_url: str, args) -> dict[str, Any]:
    """The same appends and searches in-process (the service's own code on the store, no HTTP), by as many
    concurrent threads as there were clients, so both sides queue for the store alike.
    """
    from concurrent.futures import ThreadPoolExecutor

    from ..service.app import Service
    from ..service.config import Settings
    from ..stores import Scope

    service = Service(Settings.load(store=store_url))  # the server's conversations, as configured, without HTTP
    conv = service.conversations
    appends: list[float] = []
    searches: list[float] = []

    def client(n: int) -> None:
        rng, words = random.Random(args.seed + n), []
        for i in range(args.messages):
            word = _word(2, n, i)
            started = time.perf_counter()
            conv.append(Scope(tenant="baseline", session_id=f"b{n}-{i % args.conversations}"),
                        [{"role": "user", "content": f"baseline note {word} about item {i}", "id": f"b{n}-{i}"}])
            appends.append(time.perf_counter() - started)
            words.append(word)
            if args.searches and i % max(1, args.messages // args.searches) == args.messages // args.searches - 1:
                started = time.perf_counter()
                conv.search(Scope(tenant="baseline"), f"note {rng.choice(words)}", 5, 0, None)
                searches.append(time.perf_counter() - started)

    with ThreadPoolExecutor(args.clients) as pool:
        list(pool.map(client, range(args.clients)))
    service.close()
    return {"append_ms": _pct(appends), "search_ms": _pct(searches)}


def run(args: argparse.Namespace) -> int:
    from ..service.auth import KeyStore
    from ..service.process import running_server
    from ..stores import open_store

    with contextlib.ExitStack() as stack:
        if args.store:
            url = args.store
        elif args.backend == "postgres":
            from ..stores._servers import postgres_server

            url = stack.enter_context(postgres_server())
        else:
            url = f"sqlite:///{stack.enter_context(tempfile.TemporaryDirectory())}/bench.db"
        store = open_store(url)
        keys = [KeyStore(store).create(f"bench-{t}")[0] for t in (0, 1)]
        store.close()
        servers = [stack.enter_context(running_server(url, rate_limit="0")) for _ in range(max(1, args.servers))]
        cpu_before = [_cpu_seconds(proc.pid) for proc, _ in servers]
        result = asyncio.run(_drive([base for _, base in servers], keys, args))
        cpu_after = [_cpu_seconds(proc.pid) for proc, _ in servers]
        spent = [a - b for a, b in zip(cpu_after, cpu_before) if a is not None and b is not None]
        if len(spent) == len(servers):  # the servers' own work, whatever the machine's load
            used = sum(spent)
            result["server_cpu_ms_per_request"] = round(used * 1000 / (result["appends"] + result["searches"]), 2)
            result["server_cpu_share"] = round(used / result["elapsed_s"], 2)
        result["library"] = _library_baseline(url, args)
    lib = result["library"]
    result["ratios"] = {
        "append_p50_http_over_library": round(result["append_ms"]["p50"] / lib["append_ms"]["p50"], 2),
        "search_p50_http_over_library": round(result["search_ms"]["p50"] / lib["search_ms"]["p50"], 2)
        if result["search_ms"]["p50"] else None,
    }
    result.update(backend=args.backend, clients=args.clients, servers=args.servers)
    ok = result["lost"] == 0 and result["duplicated"] == 0 and result["cross_tenant"] == 0
    result["ok"] = ok
    if args.json:
        print(json.dumps(result))
    else:
        r = result
        print(f"fullrecall bench serve: {args.backend}, {args.servers} server(s), {args.clients} clients, {r['appends']} appends, "
              f"{r['searches']} searches in {r['elapsed_s']} s")
        print(f"append ms  p50 {r['append_ms']['p50']}  p95 {r['append_ms']['p95']}  p99 {r['append_ms']['p99']}  "
              f"(library p50 {lib['append_ms']['p50']}; ratio {r['ratios']['append_p50_http_over_library']})")
        print(f"search ms  p50 {r['search_ms']['p50']}  p95 {r['search_ms']['p95']}  p99 {r['search_ms']['p99']}  "
              f"(library p50 {lib['search_ms']['p50']}; ratio {r['ratios']['search_p50_http_over_library']})")
        print(f"searchable delay p95 {r['searchable_delay_ms']['p95_ms']} ms")
        if "server_cpu_ms_per_request" in r:
            print(f"server CPU {r['server_cpu_ms_per_request']} ms a request (embedding included); the server(s) got "
                  f"{r['server_cpu_share']} of a core")
        print(f"lost {r['lost']}, duplicated {r['duplicated']}, cross-tenant {r['cross_tenant']}: "
              f"{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1

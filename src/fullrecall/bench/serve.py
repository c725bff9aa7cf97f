"""Load test of ``fullrecall serve``: N concurrent clients, two tenants, every count checked.

Starts the server on loopback (a private PostgreSQL too with ``--backend postgres``), then
``--clients`` concurrent clients (half per tenant) each append ``--messages`` messages to
their own conversations (every fifth one sent twice, as a client retrying would) and run
``--searches`` searches for words only their own messages hold. It then checks that
nothing was lost or duplicated (each tenant's export holds exactly the acknowledged ids, and ends
with its end line counting them)
and that no search hit crossed tenants, and reports p50/p95/p99 of append and search over
HTTP, the searchable delay p95 the server measured, and the same work in-process as the
baseline: the server's own ``Service`` (its indexer embedding every append, the same
settings) called by as many threads, with no HTTP. Each client holds one keep-alive
connection (a minimal asyncio HTTP/1.1 client, light enough not to be what is measured).
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


class _Connection:
    """One client's keep-alive HTTP/1.1 connection (asyncio streams): a load generator far lighter than a pooled
    client, so the server, not the bench's own event loop, is what the latencies measure. JSON bodies only.
    """

    def __init__(self, base_url: str) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def request(self, method: str, path: str, body: Any = None, key: str = "") -> tuple[int, bytes]:
        """Send one request; (status, body). Raises ``OSError`` (or ``asyncio.IncompleteReadError``) if the
        connection fails, after which the next request opens a new one.
        """
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode()
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self._streams
        try:
            writer.write(head + data)
            header = await reader.readuntil(b"\r\n\r\n")
            lines = header.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            if "content-length" in fields:
                payload = await reader.readexactly(int(fields["content-length"]))
            else:  # chunked (a streamed export)
                chunks = []
                while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                    chunks.append(await reader.readexactly(size))
                    await reader.readexactly(2)
                await reader.readexactly(2)
                payload = b"".join(chunks)
            if fields.get("connection", "").lower() == "close":
                self.close()
            return status, payload
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            self.close()
            raise

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None


def _searches_after(i: int, args: argparse.Namespace) -> bool:
    """Whether a client searches after its ``i``-th append (``--searches`` times, evenly spread)."""
    every = args.messages // args.searches if args.searches else 0
    return bool(args.searches) and i % max(1, every) == every - 1


async def _client(conn: _Connection, key: str, tenant: int, n: int, args: argparse.Namespace,
                  acked: dict[int, set[str]], appends: list[float], searches: list[float], crossed: list[str],
                  rng: random.Random) -> None:
    mine: list[str] = []
    for i in range(args.messages):
        conv = f"c{n}-{i % args.conversations}"
        mid = f"t{tenant}-c{n}-m{i}"
        word = _word(tenant, n, i)
        body = {"messages": [{"role": "user", "content": f"tenant {tenant} note {word} about item {i}", "id": mid}]}
        for attempt in range(2 if i % 5 == 0 else 1):  # a retry must store nothing twice
            started = time.perf_counter()
            await _send(conn, f"/v1/conversations/{conv}/messages", body, key)
            if attempt == 0:
                appends.append(time.perf_counter() - started)
        acked[tenant].add(mid)
        mine.append(word)
        if _searches_after(i, args):
            word = rng.choice(mine)
            started = time.perf_counter()
            answer = await _send(conn, "/v1/search", {"query": f"note {word}", "top_k": 5}, key)
            searches.append(time.perf_counter() - started)
            for hit in answer["hits"]:
                if not hit["id"].startswith(f"t{tenant}-"):
                    crossed.append(hit["id"])


async def _send(conn: _Connection, path: str, body: Any, key: str, method: str = "POST") -> Any:
    """One request, retried when its answer was lost on the way (what the message ids are for); the JSON answer
    (or the raw bytes of a non-JSON one).
    """
    for attempt in range(3):
        try:
            status, payload = await conn.request(method, path, body, key)
            break
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            if attempt == 2:
                raise
    if status >= 300:
        raise RuntimeError(f"{method} {path}: {status} {payload[:500]!r}")
    try:
        return json.loads(payload)
    except ValueError:
        return payload


async def _drive(urls: list[str], keys: list[str], args: argparse.Namespace) -> dict[str, Any]:
    acked: dict[int, set[str]] = {0: set(), 1: set()}
    appends: list[float] = []
    searches: list[float] = []
    crossed: list[str] = []
    conns = [_Connection(urls[n % len(urls)]) for n in range(args.clients)]  # client n talks to server n % servers
    cpu, started = time.process_time(), time.perf_counter()
    await asyncio.gather(*(
        _client(conns[n], keys[n % 2], n % 2, n, args, acked, appends, searches, crossed, random.Random(args.seed + n))
        for n in range(args.clients)))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    for c in conns:
        c.close()
    admin = _Connection(urls[0])
    lost, duplicated, cut = 0, 0, 0
    for tenant, key in enumerate(keys):  # writes of one tenant landed on every server: export sees them all
        exported = await _send(admin, "/v1/export", {}, key)
        text = exported.decode() if isinstance(exported, bytes) else json.dumps(exported)
        rows = [json.loads(line) for line in text.split("\n") if line]
        ids = [row["id"] for row in rows if row.get("type") == "message"]  # after the format header
        end = rows[-1] if rows else {}
        cut += end.get("type") != "end" or end.get("messages") != len(ids)  # an export proves itself whole
        duplicated += len(ids) - len(set(ids))
        lost += len(acked[tenant] - set(ids))
        crossed += [i for i in ids if not i.startswith(f"t{tenant}-")]
    for _ in range(600):  # wait for the embedding queue, then read the searchable delay
        stats = await _send(admin, "/v1/stats", None, keys[0], method="GET")
        if stats["embedding_queue"] == 0:
            break
        await asyncio.sleep(0.1)
    admin.close()
    return {"appends": len(appends), "searches": len(searches), "elapsed_s": round(elapsed, 2),
            "append_ms": _pct(appends), "search_ms": _pct(searches),
            "searchable_delay_ms": stats["searchable_delay"], "lost": lost, "duplicated": duplicated,
            "cut_exports": cut,
            "cross_tenant": len(crossed), "client_cpu_share": round(cpu / elapsed, 2)}


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) a process has used so far, from /proc (None where there is none)."""
    import os

    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _library_baseline(store_url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same appends and searches in-process: the server's own :class:`~fullrecall.service.app.Service`, built
    from the same settings (its indexer thread embedding every appended message, its window manager), called by as
    many threads as there were clients, each doing what an HTTP client does (two tenants, every fifth append sent
    twice, the same searches), with no HTTP. The indexer's queue is drained before the figures are read, so the
    in-process side has done all the work the server did; its CPU time a request is the process's own.
    """
    from concurrent.futures import ThreadPoolExecutor

    from ..service.app import Service
    from ..service.config import Settings
    from ..stores import Scope

    service = Service(Settings.load(store=store_url, rate_limit=0))  # what the server builds, without HTTP
    conv = service.conversations
    appends: list[float] = []
    searches: list[float] = []

    def client(n: int) -> None:
        rng, words, tenant = random.Random(args.seed + n), [], f"library-{n % 2}"
        for i in range(args.messages):
            word = _word(n % 2, n, i)
            message = {"role": "user", "content": f"tenant {n % 2} note {word} about item {i}", "id": f"c{n}-m{i}"}
            for attempt in range(2 if i % 5 == 0 else 1):
                started = time.perf_counter()
                conv.append(Scope(tenant=tenant, session_id=f"c{n}-{i % args.conversations}"), [message])
                if attempt == 0:
                    appends.append(time.perf_counter() - started)
            words.append(word)
            if _searches_after(i, args):
                started = time.perf_counter()
                conv.search(Scope(tenant=tenant), f"note {rng.choice(words)}", 5, 0, None)
                searches.append(time.perf_counter() - started)

    cpu, started = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(args.clients) as pool:
        list(pool.map(client, range(args.clients)))
    drained = service.indexer.flush(600)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    delay = service.indexer.delay_percentiles()
    service.close()
    return {"append_ms": _pct(appends), "search_ms": _pct(searches), "searchable_delay_ms": delay,
            "embedded_all": drained, "elapsed_s": round(elapsed, 2),
            "cpu_ms_per_request": round(cpu * 1000 / (len(appends) + len(searches)), 2)}


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
    ok = result["lost"] == result["duplicated"] == result["cross_tenant"] == result["cut_exports"] == 0
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
        print(f"searchable delay p95 {r['searchable_delay_ms']['p95_ms']} ms  (in-process "
              f"{lib['searchable_delay_ms']['p95_ms']} ms)")
        if "server_cpu_ms_per_request" in r:
            print(f"server CPU {r['server_cpu_ms_per_request']} ms a request (embedding included; in-process "
                  f"{lib['cpu_ms_per_request']} ms); the server(s) got {r['server_cpu_share']} of a core, the bench's "
                  f"clients {r['client_cpu_share']}")
        print(f"lost {r['lost']}, duplicated {r['duplicated']}, cross-tenant {r['cross_tenant']}, "
              f"exports cut short {r['cut_exports']}: "
              f"{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1

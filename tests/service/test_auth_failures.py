"""A client address that keeps failing the key check is answered 429 before any key is read; other addresses,
and a valid key it used a moment ago, are not affected (a real service, real sockets, two loopback addresses).
"""

from __future__ import annotations

import httpx
import pytest

from fullrecall.service.gate import client_address
from fullrecall.service.limits import RateLimiter

ACCEPT = {"Accept": "application/json, text/event-stream"}
TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def _from(address: str, base: str) -> httpx.Client:
    return httpx.Client(base_url=base, transport=httpx.HTTPTransport(local_address=address), timeout=30)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_failed_authentications_are_limited_per_client_address(make_live):
    base, service = make_live(failed_auth_limit=0.01, failed_auth_burst=3)  # 3 at once, then one each 100 s
    key, _ = service.keys.create("tenant-a")
    reads = []
    verify = service.keys.verify
    service.keys.verify = lambda k: reads.append(k) or verify(k)  # the real check, its calls counted
    bad = {"Authorization": "Bearer fr_0123456789abcdef_madeup"}
    with _from("127.0.0.1", base) as attacker, _from("127.0.0.2", base) as other:
        assert attacker.get("/v1/stats", headers={"Authorization": f"Bearer {key}"}).status_code == 200  # cached now
        for headers in (bad, {}, {"Authorization": "Basic abc"}):  # a refused key, none, another scheme: failures
            r = attacker.get("/v1/stats", headers=headers)
            assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized", r.text
        read = len(reads)
        for method, url, kwargs in (("GET", "/v1/stats", {"headers": bad}), ("POST", "/v1/search", {
                "headers": bad, "json": {"query": "x"}}), ("POST", "/mcp", {"headers": {**bad, **ACCEPT}, "json": TOOLS}),
                ("GET", "/v1/stats", {})):
            r = attacker.request(method, url, **kwargs)
            assert r.status_code == 429, (url, r.status_code, r.text)
            error = r.json()["error"]
            assert error["type"] == "rate_limited" and "failed authentications" in error["message"], error
            assert int(r.headers["Retry-After"]) >= 1, r.headers
        assert len(reads) == read  # no key was read for them
        assert attacker.get("/v1/stats", headers={"Authorization": f"Bearer {key}"}).status_code == 200  # cached key
        assert attacker.get("/healthz").status_code == 200
        # another address is not locked out: its failures are its own, and its valid key passes
        r = other.get("/v1/stats", headers=bad)
        assert r.status_code == 401, r.text
        service.keys._cache.clear()  # a key not in the cache: the other address's request reads it
        assert other.get("/v1/stats", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        r = other.post("/mcp", headers={"Authorization": f"Bearer {key}", **ACCEPT}, json=TOOLS)
        assert r.status_code == 200, r.text


def test_the_limit_keeps_a_bounded_number_of_addresses_and_counts_an_ipv6_client_by_its_network():
    failures = RateLimiter(0.01, 1, max_buckets=3)
    for n in range(10):
        failures.allow(f"10.0.0.{n}")
    assert len(failures) == 3 and failures.blocked("10.0.0.9") and not failures.blocked("10.0.0.0")
    one = client_address({"client": ("2001:db8:1:2:aaaa::1", 5000)})
    assert one == client_address({"client": ("2001:db8:1:2:bbbb::9", 5001)}) == "2001:db8:1:2::/64"
    assert client_address({"client": ("2001:db8:1:3::1", 5000)}) != one
    assert client_address({"client": ("::ffff:192.0.2.7", 1)}) == "192.0.2.7" == client_address({"client": (
        "192.0.2.7", 2)})
    assert client_address({"client": None}) == ""


def test_a_burst_below_one_is_refused_at_start():
    """``failed_auth_burst = 0`` gave every address an empty bucket for good: every key not yet cached, a valid one
    too, was answered 429 (and ``burst = 0`` refused every request)."""
    from fullrecall.service.config import Settings

    for name, rate in (("failed_auth_burst", "failed_auth_limit"), ("burst", "rate_limit")):
        with pytest.raises(ValueError, match=f"'{name}'"):
            Settings.load(env={}, **{name: 0})
        assert getattr(Settings.load(env={}, **{name: 0, rate: 0}), name) == 0  # the limit off: no bucket read


@pytest.mark.parametrize("backend", ["sqlite"])
def test_each_worker_allows_its_share_of_an_address_s_failed_authentications(make_live):
    """Each worker process counted an address's failures on its own: with 4 workers an address had 4 times
    ``failed_auth_burst`` tries. Each now allows its share (connections are spread over the workers)."""
    base, _ = make_live(failed_auth_limit=0.01, failed_auth_burst=8, workers=4)
    bad = {"Authorization": "Bearer fr_0123456789abcdef_madeup"}
    with _from("127.0.0.1", base) as client:
        codes = [client.get("/v1/stats", headers=bad).status_code for _ in range(4)]
    assert codes == [401, 401, 429, 429]


def test_the_workers_of_fullrecall_serve_share_the_failed_authentication_limit(tmp_path):
    """``fullrecall serve --workers 2``: an address whose requests (each on a new connection) carry made-up keys
    gets at most ``failed_auth_burst`` answers of 401 from all the workers together, then 429."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from fullrecall.stores._servers import free_port

    port = free_port()
    env = {**os.environ, "FULLRECALL_FAILED_AUTH_BURST": "4", "FULLRECALL_FAILED_AUTH_LIMIT": "0.01"}
    server = subprocess.Popen([sys.executable, "-m", "fullrecall", "serve", "--store", f"sqlite:///{tmp_path / 'm.db'}",
                               "--port", str(port), "--workers", "2", "--log-level", "warning"], env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, server.stderr and server.stderr.read()
            time.sleep(0.2)
        codes = []
        for _ in range(24):  # a new connection each: the kernel hands them to either worker
            with httpx.Client(base_url=base, timeout=30) as client:
                codes.append(client.get("/v1/stats", headers={"Authorization": "Bearer fr_0123456789abcdef_x"}
                                        ).status_code)
        assert set(codes) == {401, 429} and codes.count(401) <= 4, codes
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

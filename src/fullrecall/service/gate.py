"""Who a request acts for: its API key checked, its key's rate limit, and a client that keeps failing the check
slowed down.

Every route but ``/healthz`` and ``/readyz``, and ``/mcp``, pass through :func:`authenticate` and :func:`admit`.
A valid key recently verified costs nothing (the key cache); any other key costs a read of the key records. A request
whose key is missing or refused is a failure of its client address (an IPv6 address counts as its /64
network, which one client holds): ``failed_auth_limit`` failures a second per address, in bursts of
``failed_auth_burst``, shared by the workers (each allows its share). Once an address has none left, its
requests are answered 429 with ``Retry-After`` before any key is read (a valid key it used within
``key_cache_seconds`` still passes), so made-up keys cannot hammer the store; other addresses are not affected.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .auth import Principal

if TYPE_CHECKING:
    from .app import Service


class Refused(Exception):
    """A request not let through: its status, error type, message, field and headers."""

    def __init__(self, status: int, kind: str, message: str, field: str | None, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.field, self.headers = status, kind, message, field, headers


def client_address(scope: Mapping[str, Any]) -> str:
    """The address failures are counted by: the client's IPv4 address, or the /64 network of its IPv6 one."""
    host = (scope.get("client") or ("",))[0] or ""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host  # a Unix socket, a test client: its name
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped  # an IPv4 client of a dual-stack socket: its IPv4 address
        return str(mapped) if mapped is not None else str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


async def authenticate(service: Service, authorization: str, client: str) -> Principal:
    """The principal of ``Authorization: Bearer <key>``, or :class:`Refused` (401, or 429 when ``client`` failed
    too often); :func:`admit` then applies the key's own rate limit.
    """
    scheme, _, key = authorization.partition(" ")
    key = key.strip() if scheme.lower() == "bearer" else ""
    found = service.keys.cached(key) if key else None
    if found is None:
        failures = service.auth_failures
        if failures.blocked(client):
            raise _limited(failures.retry_after(client), "too many failed authentications from this address")
        if key:  # a new key is read off the event loop
            import anyio.to_thread

            found = await anyio.to_thread.run_sync(service.keys.verify, key)
        if found is None:
            failures.allow(client)  # one failure spent
            raise Refused(401, "unauthorized", "a valid 'Authorization: Bearer <key>' header is required",
                          "Authorization", {"WWW-Authenticate": "Bearer"})
    return found


def admit(service: Service, principal: Principal) -> None:
    """:class:`Refused` (429) when the key is over its rate limit; else one of its requests is counted."""
    if not service.limiter.allow(principal.key_id):
        raise _limited(service.limiter.retry_after(principal.key_id), "too many requests for this key")


def _limited(retry_after: float, message: str) -> Refused:
    return Refused(429, "rate_limited", message, None, {"Retry-After": str(max(1, math.ceil(retry_after)))})

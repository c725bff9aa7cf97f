"""API keys: created once, stored hashed in the store itself, checked in constant time.

A key reads ``fr_<id>_<secret>``: ``id`` names its record, ``secret`` is 256 random bits.
The store keeps ``HMAC-SHA256(salt, secret)`` and a random salt per key (never the key), as
records of the reserved tenant ``__keys__`` (namespace ``api-keys``), so every backend
works and every server process sharing a store shares its keys. A fast keyed hash is the
right tool for a 256-bit random secret (there is nothing to guess); verification compares
digests with :func:`hmac.compare_digest`. A key is checked by reading its own record (one lookup, however
many keys there are, for a refused key too). Valid keys are cached for a few seconds, so a
revocation reaches every process within ``cache_seconds``; a refused key is never cached, so
requests with made-up keys, however many, never push a valid key out of the cache.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, replace

from ..errors import InvalidInput, StateConflict
from ..stores.base import Record, Scope, Store
from . import renewal

KEYS_SCOPE = Scope(tenant="__keys__")
NAMESPACE = "api-keys"
PREFIX = "fr"


@dataclass(frozen=True)
class Principal:
    """Who a request acts for: a key's tenant and the users and agents it may act for (None: any)."""

    key_id: str
    tenant: str
    users: tuple[str, ...] | None = None
    agents: tuple[str, ...] | None = None


def _digest(salt: bytes, secret: str) -> str:
    return hmac.new(salt, secret.encode(), hashlib.sha256).hexdigest()


def check_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not tenant or tenant.startswith("__") or len(tenant) > 200:
        raise ValueError(f"tenant must be a non-empty name of at most 200 characters not starting with '__', "
                         f"got {tenant!r}")
    return tenant


class KeyStore:
    """Create, list, revoke and verify API keys kept in ``store``."""

    def __init__(self, store: Store, *, cache_seconds: float = 5.0) -> None:
        self.store = store
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, Principal]] = {}  # valid keys only: nobody else can fill it
        self._lock = threading.Lock()

    def create(self, tenant: str, users: list[str] | None = None, agents: list[str] | None = None,
               name: str = "") -> tuple[str, Principal]:
        """A new key (returned once, never stored) and what it may do."""
        check_tenant(tenant)
        for field, limit in (("users", users), ("agents", agents)):
            if limit is not None and not limit:
                raise ValueError(f"'{field}' limits the key to no one: name at least one, or leave it unset for any")
        key_id, secret, salt = secrets.token_hex(8), secrets.token_urlsafe(32), secrets.token_bytes(16)
        data = {"tenant": tenant, "users": users, "agents": agents, "salt": salt.hex(), "hash": _digest(salt, secret),
                "name": name, "revoked": False}
        self.store.put_record(KEYS_SCOPE, Record(id=key_id, namespace=NAMESPACE, text=name, data=data))
        return f"{PREFIX}_{key_id}_{secret}", _principal(key_id, data)

    def list(self, tenant: str | None = None) -> list[dict]:
        """Every key (never its secret or hash), optionally of one tenant."""
        out = []
        for r in self.store.get_records(KEYS_SCOPE, NAMESPACE):
            if tenant is None or r.data.get("tenant") == tenant:
                out.append({"id": r.id, "tenant": r.data["tenant"], "users": r.data.get("users"),
                            "agents": r.data.get("agents"), "name": r.data.get("name", ""),
                            "revoked": bool(r.data.get("revoked")), "created_at": r.created_at})
        return out

    def revoke(self, key_id: str) -> bool:
        """Mark a key revoked (kept for the record); False if there is no such key."""
        r = self._record(key_id)
        if r is None:
            return False
        r.data = {**r.data, "revoked": True}
        r.updated_at = time.time()
        self.store.put_record(KEYS_SCOPE, r)
        with self._lock:
            self._cache.clear()
        return True

    def _record(self, key_id: str) -> Record | None:
        """The record of ``key_id`` (one read, whatever the number of keys), or None: no key has that id."""
        try:
            return self.store.get_record(KEYS_SCOPE, NAMESPACE, key_id)
        except InvalidInput:  # an id no store keeps (empty, too long): no key of ours
            return None

    def cached(self, key: str) -> Principal | None:
        """The principal of a recently verified valid key, without touching the store (else None)."""
        with self._lock:
            found = self._cache.get(key)
        if found is not None and time.monotonic() - found[0] < self.cache_seconds:
            return found[1]
        return None

    def verify(self, key: str) -> Principal | None:
        """The key's principal, or None for a malformed, unknown or revoked key."""
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and now - cached[0] < self.cache_seconds:
            return cached[1]
        principal = self._check(key)
        if principal is not None:
            with self._lock:
                if len(self._cache) > 10_000:  # as many valid keys in use: start again
                    self._cache.clear()
                self._cache[key] = (now, principal)
        return principal

    def _check(self, key: str) -> Principal | None:
        parts = key.split("_", 2)
        if len(parts) != 3 or parts[0] != PREFIX:
            return None
        _, key_id, secret = parts
        record = self._record(key_id)
        if record is None or record.data.get("revoked"):
            hmac.compare_digest(_digest(b"x" * 16, secret), "0" * 64)  # the same work for unknown keys
            return None
        if not hmac.compare_digest(_digest(bytes.fromhex(record.data["salt"]), secret), record.data["hash"]):
            return None
        self._keep_alive(record)
        return _principal(key_id, record.data)

    def _keep_alive(self, record: Record) -> None:
        """On a store whose data expires (Redis, ``ttl_seconds``), a key in use is written again now and then
        (after a day, or half the time to live if that is shorter): the keys expired that long after the last
        one was made or revoked, however much they were used. Only if nothing wrote it meanwhile (a revoke).
        """
        if not renewal.due(self.store, record.updated_at):
            return
        try:
            self.store.put_record(KEYS_SCOPE, replace(record, updated_at=time.time()), expected=record.version)
        except StateConflict:  # written meanwhile: that write kept it alive (or revoked it)
            pass


def _principal(key_id: str, data: dict) -> Principal:
    users, agents = data.get("users"), data.get("agents")
    # an empty list limits the key to no one (never to anyone): a limit is only lifted by its absence
    return Principal(key_id=key_id, tenant=data["tenant"], users=tuple(users) if users is not None else None,
                     agents=tuple(agents) if agents is not None else None)

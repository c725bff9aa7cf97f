"""API keys on every backend: a key is checked by reading its own record, never every key."""

from __future__ import annotations

from collections import Counter
from typing import Any

from fullrecall.service.auth import KeyStore
from fullrecall.stores import open_store


class Reads:
    """The real store, each record read it answers counted by method."""

    def __init__(self, store: Any) -> None:
        self.store, self.calls = store, Counter[str]()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.store, name)
        if name in ("get_records", "get_record"):
            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls[name] += 1
                return attr(*args, **kwargs)

            return counted
        return attr


def test_a_refused_key_costs_one_record_read_however_many_keys_there_are(store_url):
    """Each request with an unknown key read every key record of the store (all tenants' keys, on every request
    of a flood of made-up keys); now a key costs one read of its own record, refused or not.
    """
    store = open_store(store_url)
    try:
        reads = Reads(store)
        keys = KeyStore(reads, cache_seconds=3600)  # type: ignore[arg-type]
        made = [keys.create(f"tenant-{i % 3}") for i in range(30)]
        key, principal = made[7]
        revoked, _ = made[8]
        assert keys.revoke(revoked.split("_")[1]) and not keys.revoke("0123456789abcdef")
        reads.calls.clear()
        secret = key.split("_", 2)[2]
        for refused in ("fr_0123456789abcdef_" + secret, f"fr_{key.split('_')[1]}_{'x' * 43}", revoked):
            assert keys.verify(refused) is None, refused
        assert reads.calls == {"get_record": 3}
        assert keys.verify(key) == principal and keys.verify(key) == principal  # the second from the cache
        assert reads.calls == {"get_record": 4}
        assert keys.revoke(key.split("_")[1]) and reads.calls["get_records"] == 0
        assert keys.verify(key) is None  # the cache was cleared by the revocation
        for malformed in ("fr__" + secret, "fr_" + "k" * 300 + "_" + secret, "fr_a\x00b_" + secret):
            assert keys.verify(malformed) is None and not keys.revoke(malformed.split("_")[1])
    finally:
        store.close()

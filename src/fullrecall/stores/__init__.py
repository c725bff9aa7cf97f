"""Where fullrecall keeps everything: one :class:`Store` interface, chosen by URL.

``open_store("sqlite:///memory.db")`` (the embedded default), ``open_store("postgresql://...")``
or ``open_store("redis://...")``. Backend modules are imported only when their scheme is
used, so ``import fullrecall`` never pulls in psycopg or redis.
"""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import urlsplit

from .._secrets import shown_url
from .base import ANY, Appended, Filters, Hit, KeptHits, Record, Scope, Store, StoredMessage

__all__ = ["ANY", "Store", "Scope", "StoredMessage", "Appended", "Hit", "KeptHits", "Filters", "Record", "open_store", "BACKENDS"]

# URL scheme -> (module, class, pip extra that provides its driver)
BACKENDS: dict[str, tuple[str, str, str | None]] = {
    "sqlite": ("fullrecall.stores.sqlite", "SQLiteStore", None),
    "postgresql": ("fullrecall.stores.postgres", "PostgresStore", "postgres"),
    "postgres": ("fullrecall.stores.postgres", "PostgresStore", "postgres"),
    "redis": ("fullrecall.stores.redis", "RedisStore", "redis"),
    "rediss": ("fullrecall.stores.redis", "RedisStore", "redis"),
}


def open_store(url: str, **options: Any) -> Store:
    """Open (and create or migrate, if needed) the store at ``url``.

    ``options`` go to the backend's constructor (e.g. ``synchronous="FULL"`` for SQLite,
    ``ttl_days=30`` for Redis). Raises ``ValueError`` for an unknown scheme and
    :class:`~fullrecall.errors.StoreError` when the store cannot be reached.
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme not in BACKENDS:
        raise ValueError(f"unknown store URL scheme {scheme!r} in {shown_url(url)!r}; "
                         f"expected one of {sorted(BACKENDS)}")
    module_name, class_name, extra = BACKENDS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if extra and exc.name and not exc.name.startswith("fullrecall"):
            raise ModuleNotFoundError(
                f"the {scheme} store needs {exc.name!r}: pip install 'fullrecall[{extra}]'", name=exc.name
            ) from exc
        raise
    return getattr(module, class_name)(url, **options)

"""Service settings: defaults, then a TOML file, then ``FULLRECALL_*`` environment variables, then flags."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

MANAGERS = ("summarizing", "sliding")
SUMMARIZERS = ("extractive", "llm")


@dataclass(frozen=True)
class Settings:
    """Everything ``fullrecall serve`` can be told; each field is also ``FULLRECALL_<NAME>`` in the environment."""

    store: str = "sqlite:///fullrecall.db"
    host: str = "127.0.0.1"
    port: int = 8080
    rate_limit: float = 200.0  # requests a second per key (0: no limit)
    burst: int = 400  # requests a key may make at once
    failed_auth_limit: float = 1.0  # requests with a missing or refused key a second per client address (0: no limit)
    failed_auth_burst: int = 20  # such requests an address may make at once
    max_body_bytes: int = 8 * 1024 * 1024
    search_threads: int = 2  # searches embed the query and rank: CPU work, run this many at once
    manager: str = "summarizing"  # "summarizing": older messages summarized; "sliding": the newest window_messages
    window_messages: int = 50  # the most messages the active window holds
    window_tokens: int = 8000  # the most tokens the active window holds ("summarizing")
    summarizer: str = "extractive"  # "extractive" (no LLM) or "llm" (the chat model FULLRECALL_LLM_* configures)
    embedding_model: str | None = None  # default: the shipped MiniLM (ONNX)
    embedding_batch: int = 8  # the most messages the indexer embeds at once (it takes what is queued when free)
    embedding_backlog: int = 32  # appends wait while more messages than this await embedding (0: never wait)
    key_cache_seconds: float = 5.0  # a revoked key stops working within this time
    workers: int = 1
    keep_alive_seconds: int = 30  # idle keep-alive connections are closed after this
    metrics_tenant: str = "admin"  # keys of this tenant, unless limited to users or agents, may read /metrics

    @classmethod
    def load(cls, path: str | None = None, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults < file (``path`` or ``$FULLRECALL_CONFIG``, TOML, a ``[serve]`` table or top level) < env < overrides."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        path = path or env.get("FULLRECALL_CONFIG")
        if path:
            with open(path, "rb") as fh:
                doc = tomllib.load(fh)
            values.update(doc.get("serve", doc))
        for f in fields(cls):
            name = f"FULLRECALL_{f.name.upper()}"
            if name in env:
                values[f.name] = env[name]
        values.update({k: v for k, v in overrides.items() if v is not None})
        unknown = set(values) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown setting(s) {sorted(unknown)}; known: {[f.name for f in fields(cls)]}")
        settings = cls()
        for f in fields(cls):
            if f.name in values:
                settings = replace(settings, **{f.name: _convert(f.name, values[f.name], getattr(cls(), f.name))})
        for name, least in _LEAST.items():
            _check_range(name, getattr(settings, name), least)
        for rate, burst in (("rate_limit", "burst"), ("failed_auth_limit", "failed_auth_burst")):
            if getattr(settings, rate) > 0 and getattr(settings, burst) < 1:  # no token ever: every request refused
                raise ValueError(f"setting {burst!r}: expected at least 1 while {rate!r} is on, got "
                                 f"{getattr(settings, burst)} (set {rate!r} to 0 to turn the limit off)")
        for name, known in (("manager", MANAGERS), ("summarizer", SUMMARIZERS)):
            if getattr(settings, name) not in known:
                raise ValueError(f"setting {name!r} must be one of {known}, got {getattr(settings, name)!r}")
        if settings.manager == "summarizing" and settings.window_messages < 2:
            raise ValueError(f"setting 'window_messages': expected at least 2 with the summarizing manager (a summary "
                             f"and the newest message), got {settings.window_messages}")
        if settings.workers > 1 and _in_memory(settings.store):  # each worker would serve an empty store of its own
            raise ValueError(f"setting 'workers': an in-memory store ({settings.store}) is one process's, so "
                             f"{settings.workers} workers would each answer from their own; use a file or a server "
                             "store, or 1 worker")
        if not 1 <= settings.port <= 65535:  # the socket layer would take it modulo 65536, another port than announced
            raise ValueError(f"setting 'port': expected a port from 1 to 65535, got {settings.port}")
        return settings


# The smallest value each numeric setting accepts (``port`` has its own range): below it the service starts and then
# fails every request or never works (``embedding_batch = 0``: nothing is ever embedded, and the drain on SIGTERM never
# ends; ``max_body_bytes = -1``: every request is answered 413), so it is refused at start instead.
_LEAST: dict[str, int] = {
    "workers": 1, "keep_alive_seconds": 0, "rate_limit": 0, "burst": 0, "failed_auth_limit": 0, "failed_auth_burst": 0,
    "max_body_bytes": 1, "search_threads": 1, "window_messages": 1, "window_tokens": 1, "embedding_batch": 1,
    "embedding_backlog": 0, "key_cache_seconds": 0,
}


_MOST = 2**53 - 1  # exact as a float: a count or a size no larger than any the service can hold


def _check_range(name: str, value: float, least: int) -> None:
    """A ValueError naming the setting and its range when ``value`` is below ``least`` or above ``_MOST`` (so, a
    float, not finite; an integer of hundreds of digits is no count either, and made ``math.isfinite`` overflow).
    """
    if not least <= value <= _MOST:  # NaN compares false
        kind = "a finite number" if isinstance(value, float) else "an integer"
        raise ValueError(f"setting {name!r}: expected {kind}, at least {least} and at most {_MOST}, got {value}")


def _in_memory(store: str) -> bool:
    from ..stores.sqlite import parse_url

    try:
        return store.lower().startswith("sqlite:") and parse_url(store)[0] == ":memory:"
    except ValueError:  # a bad URL is refused by the store that opens it, in its own words
        return False


def _convert(name: str, value: Any, default: Any) -> Any:
    if default is None or value is None:
        return value
    try:
        return type(default)(value)
    except (TypeError, ValueError):
        raise ValueError(f"setting {name!r}: expected {type(default).__name__}, got {value!r}") from None

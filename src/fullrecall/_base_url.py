"""The one rule for a remote client's ``base_url`` (chat models, embedders): an http(s) URL with a host."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from .errors import InvalidInput


def checked(base_url: Any) -> str:
    """``base_url`` without its trailing slash, if it is an http(s) URL with a host (else a clear error, at once)."""
    try:
        parts = urlsplit(base_url) if isinstance(base_url, str) else None
    except ValueError:  # e.g. an unclosed IPv6 bracket
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInput(f"base_url must be an http:// or https:// URL with a host, got {base_url!r}")
    return base_url.rstrip("/")

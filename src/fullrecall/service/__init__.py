"""fullrecall as a service: an HTTP API (FastAPI) over any store, with API keys, tenants, limits and metrics.

``fullrecall serve --store URL`` runs it; :func:`create_app` builds the app in-process.
Needs ``pip install 'fullrecall[service]'``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def create_app(*args: Any, **kwargs: Any):
    from .app import create_app as _create

    return _create(*args, **kwargs)

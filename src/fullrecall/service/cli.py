"""``fullrecall serve`` (the HTTP API under uvicorn) and ``fullrecall keys`` (create, list, revoke API keys)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:  # ``fullrecall serve``
    parser.add_argument("--store", help="store URL (env FULLRECALL_STORE; default sqlite:///fullrecall.db)")
    parser.add_argument("--host", help="address to listen on (env FULLRECALL_HOST; default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (env FULLRECALL_PORT; default 8080)")
    parser.add_argument("--config", help="a TOML settings file (env FULLRECALL_CONFIG)")
    parser.add_argument("--workers", type=int, help="worker processes (env FULLRECALL_WORKERS; default 1)")
    parser.add_argument("--log-level", default="info", help="uvicorn's log level (default info)")
    parser.add_argument("--access-log", action="store_true", help="log every request (off by default: it costs CPU "
                        "on every request)")


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from .._secrets import shown_url
    from .config import Settings

    settings = Settings.load(args.config, store=args.store, host=args.host, port=args.port, workers=args.workers)
    print(f"fullrecall serving {shown_url(settings.store)} on http://{settings.host}:{settings.port}", flush=True)
    if settings.workers > 1:  # each worker builds its own app from the environment
        import os

        os.environ.update({"FULLRECALL_STORE": settings.store, "FULLRECALL_WORKERS": str(settings.workers),
                           **({"FULLRECALL_CONFIG": args.config} if args.config else {})})
        uvicorn.run("fullrecall.service.cli:app_from_env", factory=True, host=settings.host, port=settings.port,
                    workers=settings.workers, timeout_graceful_shutdown=30, **_uvicorn_options(args, settings))
        return 0
    from .app import create_app

    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, timeout_graceful_shutdown=30,
                **_uvicorn_options(args, settings))
    return 0


def _uvicorn_options(args: argparse.Namespace, settings: Settings) -> dict:
    """The fast parts of uvicorn where installed (the ``service`` extra: httptools, uvloop), no access log unless asked."""
    import importlib.util

    fast = {name: name for name in ("httptools", "uvloop") if importlib.util.find_spec(name) is not None}
    return {"http": fast.get("httptools", "auto"), "loop": fast.get("uvloop", "auto"), "log_level": args.log_level,
            "access_log": args.access_log, "timeout_keep_alive": settings.keep_alive_seconds}


def app_from_env():
    from .app import create_app

    return create_app()


class Keys:
    """``fullrecall keys create|list|revoke``."""

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a key (printed once, alone on the last line)")
        create.add_argument("--tenant", required=True)
        create.add_argument("--users", help="comma-separated users the key may act for (default: any)")
        create.add_argument("--agents", help="comma-separated agents the key may act for (default: any)")
        create.add_argument("--name", default="", help="a label for listings")
        listing = sub.add_parser("list", help="list keys (never their secrets)")
        listing.add_argument("--tenant")
        revoke = sub.add_parser("revoke", help="revoke a key by id")
        revoke.add_argument("id")
        for p in (create, listing, revoke):
            p.add_argument("--store", help="store URL (env FULLRECALL_STORE)")
            p.add_argument("--config", help="a TOML settings file")
            p.add_argument("--json", action="store_true", help="print JSON")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from ..errors import FullRecallError
        from ..stores import open_store
        from ..stores._validate import check_shows
        from .auth import KeyStore, check_tenant
        from .config import Settings

        settings = Settings.load(args.config, store=args.store)
        if args.action == "create":  # a refused tenant opens (and makes) no store
            try:
                check_tenant(args.tenant)
                check_shows(args.tenant, "'tenant'", "name a tenant")  # in the words a blank user gets
            except (ValueError, FullRecallError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
        if args.action != "create":  # list and revoke only read: a mistyped SQLite path is refused, not made
            _refuse_missing_sqlite(settings.store)
        store = open_store(settings.store)
        try:
            keys = KeyStore(store)
            if args.action == "create":
                def split(v: str | None) -> list[str] | None:  # given empty, a limit to no one: refused, never "any"
                    return [x.strip() for x in v.split(",") if x.strip()] if v is not None else None

                try:
                    key, p = keys.create(args.tenant, split(args.users), split(args.agents), args.name)
                except ValueError as exc:
                    print(f"error: {exc}", file=sys.stderr)
                    return 2
                if args.json:
                    print(json.dumps({"key": key, "tenant": p.tenant, "id": p.key_id, "users": p.users,
                                      "agents": p.agents}))
                else:
                    print(f"key {p.key_id} for tenant {p.tenant!r} (store it now: it is not shown again):")
                    print(key)
            elif args.action == "list":
                found = keys.list(args.tenant)
                if args.json:
                    print(json.dumps(found))
                for k in [] if args.json else found:
                    print(f"{k['id']}  tenant={k['tenant']}  users={k['users'] or '*'}  agents={k['agents'] or '*'}"
                          f"{'  REVOKED' if k['revoked'] else ''}  {k['name']}")
            else:
                if not keys.revoke(args.id):
                    print(f"error: no key {args.id!r}", file=sys.stderr)
                    return 1
                print(json.dumps({"revoked": args.id}) if args.json else f"revoked {args.id}")
        finally:
            store.close()
        return 0


def _refuse_missing_sqlite(url: str) -> None:
    """A CommandError when ``url`` names a SQLite file that does not exist, as the CLI's reading commands say
    (:func:`fullrecall.cli.common.opened_store`): opening it would make an empty store and answer from it.
    """
    import os

    from ..cli.common import CommandError

    if url.lower().startswith("sqlite:"):
        from ..stores.sqlite import parse_url

        path = parse_url(url)[0]
        if path != ":memory:" and not os.path.exists(path):
            raise CommandError(f"no store at {url}: {path!r} does not exist (import, chat, serve and mcp make a "
                               "new store)")

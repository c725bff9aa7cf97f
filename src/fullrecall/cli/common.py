"""What the memory commands share: the store and scope options, output (text or ``--json``), progress bars.

Only argparse is imported at module level: ``fullrecall --help`` builds every parser and must stay fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

DEFAULT_STORE = "sqlite:///fullrecall.db"


class CommandError(Exception):
    """A command cannot go on (a conversation that does not exist, a refused confirmation): exit code 1."""


def not_found(own: Any) -> CommandError:
    """The error of a command given a conversation (``own``, a scope with its session) the owner does not have."""
    from ..stores.base import AnyOwner

    agent = "any agent" if isinstance(own.agent_id, AnyOwner) else f"agent {own.agent_id or '(default)'!r}"
    return CommandError(f"conversation {own.session_id!r} not found (tenant {own.tenant!r}, "
                        f"user {own.user_id or '(default)'!r}, {agent})")


def add_store(parser: argparse.ArgumentParser, *, session: bool = True, json_flag: bool = True,
              session_help: str = "one conversation (default: all of the owner's)") -> None:
    """``--store --tenant --user --agent [--session] [--json]``."""
    parser.add_argument("--store", help=f"store URL (env FULLRECALL_STORE; default {DEFAULT_STORE})")
    parser.add_argument("--tenant", default="default", help="tenant (default: default)")
    parser.add_argument("--user", help="user id (default: the default owner)")
    parser.add_argument("--agent", help="agent id (default: the default owner)")
    if session:
        parser.add_argument("--session", help=session_help)
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def store_url(args: argparse.Namespace) -> str:
    return args.store or os.environ.get("FULLRECALL_STORE") or DEFAULT_STORE


@contextmanager
def opened_store(args: argparse.Namespace, *, create: bool = True) -> Iterator[Any]:
    """The store the options name (created if new, as every store is), closed when the block ends, however it ends.

    Every command opens its store this way; :func:`fullrecall.cli.main.main` maps what a command raises to
    its message and exit code. A command that only reads (or deletes) passes ``create=False``: a SQLite file that
    does not exist is then a :class:`CommandError`, not a new empty store that answers "no hits" (a typo in
    ``--store``, a command run in another folder). A SQLite file the command made is removed again when the
    command fails having written nothing into it (an import refused on reading): a failed command leaves no store.
    """
    from ..stores import open_store

    url = store_url(args)
    path = None
    if url.lower().startswith("sqlite:"):
        from ..stores.sqlite import parse_url

        path = parse_url(url)[0]
        if path == ":memory:" or os.path.exists(path):
            path = None  # not the command's to remove
        elif not create:
            raise CommandError(f"no store at {url}: {path!r} does not exist (import, chat, serve and mcp make a "
                               "new store)")
    store = open_store(url)
    unmade: list[str] = []
    try:
        yield store
    except BaseException:
        if path is not None and _holds_nothing(store, args):
            unmade = [path, f"{path}-wal", f"{path}-shm", f"{path}-journal"]
        raise
    finally:
        store.close()
        for leftover in unmade:
            with contextlib.suppress(FileNotFoundError):
                os.remove(leftover)


def _holds_nothing(store: Any, args: argparse.Namespace) -> bool:
    """Whether the tenant of the options has no conversation and no record in ``store`` (False if it cannot tell)."""
    from ..stores.base import ANY, Scope

    try:
        held = store.stats(Scope(tenant=getattr(args, "tenant", None) or "default", user_id=ANY, agent_id=ANY))
    except Exception:  # noqa: BLE001 - a store that cannot say is kept
        return False
    return not (held["message_count"] or held["session_count"] or held["record_count"])


def scope(args: argparse.Namespace, session: str | None = None) -> Any:
    """The scope the options name (``session`` overrides ``--session``).

    An empty ``--session`` is refused: left out, it means every conversation of the owner, and a script's
    empty variable must not turn ``forget --session "$S"`` into forgetting them all. So is a ``--tenant`` starting
    with ``__``, reserved for the service's own records (its API keys are the tenant ``__keys__``: ``forget
    --tenant __keys__`` erased every tenant's keys), and a blank one, as a blank user is.
    """
    from ..errors import InvalidInput
    from ..stores._validate import check_owner, check_shows
    from ..stores.base import Scope

    if args.tenant.startswith("__"):
        raise InvalidInput(f"--tenant {args.tenant!r} is reserved (names starting with '__' hold the service's own "
                           "records, such as its API keys)")
    check_shows(args.tenant, "--tenant", "name a tenant, or leave the option out for the default one")

    if getattr(args, "session", None) == "":
        raise InvalidInput("--session is empty: name a conversation, or leave the option out for all of them")
    if getattr(args, "everyone", False) and (args.user is not None or args.agent is not None):
        raise InvalidInput("--everyone takes every user and agent of the tenant: leave --user and --agent out "
                           "(or leave --everyone out, for one owner)")
    check_owner(args.user, args.agent)  # --user and --agent, in the words of every entry point
    return Scope(tenant=args.tenant, user_id=args.user, agent_id=args.agent,
                 session_id=session or getattr(args, "session", None))


def emit(args: argparse.Namespace, data: Any, text: str | None = None) -> None:
    """Print ``data`` as JSON under ``--json``, else ``text`` (or the JSON, indented, if no text is given)."""
    if getattr(args, "json", False) or text is None:
        print(json.dumps(data, ensure_ascii=False, indent=None if getattr(args, "json", False) else 2, default=str))
    else:
        print(text)


def shorten(text: str, width: int = 100) -> str:
    """One line of at most ``width`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def message_text(data: dict[str, Any]) -> str:
    """The readable text of a stored message, whatever its shape."""
    from ..messages.formats import parse_messages

    try:
        return parse_messages([data])[1][0].text
    except Exception:  # noqa: BLE001 - a message of a shape we cannot read is shown as its JSON
        return json.dumps(data, ensure_ascii=False)


def speaker(data: dict[str, Any], role: str) -> str:
    """Who said a message: its ``"name"`` when it has one (a LoCoMo speaker), else its role."""
    name = data.get("name")
    return name if isinstance(name, str) and name else role


@contextmanager
def progress_bars(enabled: bool = True) -> Iterator[Any]:
    """A :data:`~fullrecall.transfer._common.Progress` drawing Rich bars on stderr (when it is a terminal)."""
    if not enabled or not sys.stderr.isatty():
        yield lambda what, done, total: None
        return
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    except ModuleNotFoundError:  # rich is the `cli` extra: without it, no bars
        yield lambda what, done, total: None
        return
    tasks: dict[str, Any] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True)) as bars:
        def update(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bars.add_task(what, total=total)
            bars.update(tasks[what], completed=done, total=total)

        yield update

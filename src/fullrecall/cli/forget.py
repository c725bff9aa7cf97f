"""``fullrecall forget --user U [--session S]``: delete a user's memory for good, after confirmation."""

from __future__ import annotations

import argparse
import sys

from ..stores._forget import counted_stats
from .common import CommandError, emit, not_found, opened_store, scope


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", help="store URL (env FULLRECALL_STORE; default sqlite:///fullrecall.db)")
    parser.add_argument("--tenant", default="default", help="tenant (default: default)")
    parser.add_argument("--user", required=True, help="whose memory ('' for the default owner)")
    parser.add_argument("--agent", help="only this agent's memory of the user")
    parser.add_argument("--session", help="only this conversation")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..stores.base import ANY
    from ..transfer._common import listings, unlist

    with opened_store(args, create=False) as store:
        own = scope(args)
        if args.agent is None:
            own = replace(own, agent_id=ANY)
        what = (f"conversation {own.session_id!r} of user {args.user!r}" if own.session_id
                else f"everything of user {args.user!r}") + (f" with agent {args.agent!r}" if args.agent else "")
        held = counted_stats(store, own)  # long-term memory's bookkeeping: records, as forget counts them
        if own.session_id and not held["session_count"]:  # as stats, inspect and export say: a typo forgets nothing
            raise not_found(own)
        if not args.yes:
            listed = listings(store, own) if own.session_id else 0  # the owners' list records naming it
            records = held.get("record_count", 0) + listed
            print(f"Forget {what} in tenant {own.tenant!r}: {held['message_count']:,} messages, "
                  f"{records:,} long-term records (summaries, facts, patterns, lists, "
                  "bookkeeping)? This cannot be undone. [y/N] ", end="", file=sys.stderr, flush=True)
            answer = sys.stdin.readline().strip().lower()
            if answer not in ("y", "yes"):
                raise CommandError("nothing forgotten (not confirmed; --yes skips the question)")
        counts = store.forget(own)
        if own.session_id:  # no list of the owner (of any agent's, without --agent) names it now
            counts["records"] = counts.get("records", 0) + unlist(store, own)
        kinds = {k: v for k, v in counts.items() if k != "remaining"}
        text = f"forgot {what}: " + ", ".join(f"{v:,} {k}" for k, v in kinds.items())
        for r in counts.get("remaining") or []:
            text += f"\n  a copy may remain in {r.get('where')}: {r.get('what')} until {r.get('until')}"
        emit(args, {"forgotten": what, **counts}, text)
    return 0

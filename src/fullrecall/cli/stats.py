"""``fullrecall stats``: what a store holds for an owner (or one conversation, or a whole tenant)."""

from __future__ import annotations

import argparse

from ..stores._forget import counted_stats
from .common import add_store, emit, not_found, opened_store, scope


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store(parser)
    parser.add_argument("--everyone", action="store_true", help="every user and agent of the tenant")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..stores.base import ANY
    from ..transfer._common import conversations

    with opened_store(args, create=False) as store:
        own = scope(args)
        if args.everyone:
            own = replace(own, user_id=ANY, agent_id=ANY)
        stats = counted_stats(store, own)  # long-term memory's bookkeeping: records, as forget counts them
        if own.session_id and not stats["session_count"]:  # as export and inspect say: a typo is no empty one
            raise not_found(own)
        if not args.everyone:
            stats["listed_conversations"] = len(conversations(store, replace(own, session_id=None)))
        who = "everyone" if args.everyone else f"user {own.user_id or '(default)'!r}, agent {own.agent_id or '(default)'!r}"
        where = f"conversation {own.session_id!r} of " if own.session_id else ""
        text = "\n".join([f"{where}{who} in tenant {own.tenant!r} ({store.url.split('://')[0]} store)"] +
                         [f"  {k:<22} {v:,}" for k, v in stats.items()])
        emit(args, {"tenant": own.tenant, "everyone": args.everyone,  # the default owner's ids are null, as in exports
                    "user_id": None if args.everyone else own.user_id or None,
                    "agent_id": None if args.everyone else own.agent_id or None, "session_id": own.session_id,
                    **stats}, text)
    return 0

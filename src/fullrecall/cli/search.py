"""``fullrecall search "query"``: hybrid search of the archive, each hit with its scores and the messages around it."""

from __future__ import annotations

import argparse

from .common import add_store, emit, message_text, opened_store, scope, shorten, speaker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", help="what to look for")
    add_store(parser)
    parser.add_argument("--top-k", type=int, default=5, help="how many hits (default 5)")
    parser.add_argument("--radius", type=int, default=1, help="messages shown either side of each hit (default 1)")
    parser.add_argument("--everyone", action="store_true", help="search every user and agent of the tenant")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..errors import InvalidInput
    from ..search import SemanticSearch
    from ..service.conversations import message_out

    if not args.query.strip():
        raise InvalidInput("search: the query is empty")
    if args.top_k < 1 or args.radius < 0:
        raise InvalidInput("search: --top-k must be >= 1 and --radius >= 0")
    with opened_store(args, create=False) as store:
        own = scope(args)
        if args.everyone:
            from ..stores.base import ANY

            own = replace(own, user_id=ANY, agent_id=ANY)
        engine = SemanticSearch(store=store, scope=own)
        hits = engine.search(args.query, top_k=args.top_k, min_score=-1e9, spread=args.radius)
        out, lines = [], []
        for rank, h in enumerate(hits, 1):
            m = h.message
            where = replace(own, session_id=m.session_id, user_id=m.user_id or "", agent_id=m.agent_id or "")
            pos = m.position or 0
            around = store.range(where, max(0, pos - args.radius), pos + args.radius) if args.radius else [m]
            out.append({**message_out(m), "score": h.score, "scores": h.scores,
                        "range": {"start": around[0].position if around else pos,
                                  "end": around[-1].position if around else pos,
                                  "messages": [message_out(x) for x in around]}})
            scores = "  ".join(f"{k} {v:.3f}" for k, v in h.scores.items())
            owner = f"user {m.user_id!r} " if args.everyone else ""
            lines.append(f"#{rank}  score {h.score:.3f}  ({scores})  {owner}conversation {m.session_id!r} "
                         f"position {m.position}")
            for x in around:
                mark = ">" if x.position == m.position else " "
                lines.append(f"   {mark} [{x.position}] {speaker(x.data, x.role)}: {shorten(message_text(x.data))}")
        emit(args, {"query": args.query, "hits": out}, "\n".join(lines) if lines else "no hits")
    return 0

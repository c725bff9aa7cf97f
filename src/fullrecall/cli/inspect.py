"""``fullrecall inspect SESSION``: one conversation as its memory sees it: window, summaries, archive span."""

from __future__ import annotations

import argparse
import time

from .common import add_store, emit, message_text, not_found, opened_store, scope, shorten, speaker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the conversation's id")
    add_store(parser, session=False)
    parser.add_argument("--limit", type=int, default=8, help="window messages shown in text (default: the last 8)")


def _date(t: float | None) -> str | None:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) if t is not None else None


def run(args: argparse.Namespace) -> int:
    from ..errors import InvalidInput
    from ..memory.conversation import SyncConversationMemory
    from ..service.conversations import message_out

    if not args.session:  # before scope(), which names the option other commands have for it
        raise InvalidInput("inspect: the conversation id is empty")
    if args.limit < 0:  # it showed no message and said every one was earlier
        raise InvalidInput(f"inspect: --limit must be >= 0, got {args.limit}")
    with opened_store(args, create=False) as store:
        own = scope(args, args.session)
        total = store.count(own)
        if not total:
            raise not_found(own)
        oldest, last = _at(store, own, "oldest_position"), _at(store, own, "newest_position")
        first = [oldest] if oldest else []
        memory = SyncConversationMemory(store, args.session, user_id=own.user_id or None, agent_id=own.agent_id or None,
                                        tenant=own.tenant)
        window = memory.messages
        manager = memory.manager
        summary = getattr(manager, "summary_message", None)
        summaries = manager.archive.summaries()
        managed = store.get_state(own, "window") is not None
        removed = manager.removed_message_count
        pinned = int(bool(first) and first[0].role in ("system", "developer"))  # stays at the window's head
        report = {
            "conversation_id": args.session, "tenant": own.tenant, "user_id": own.user_id or None,
            "agent_id": own.agent_id or None, "messages": total,
            "positions": [first[0].position if first else None, last.position if last else None],
            "first_at": first[0].created_at if first else None, "last_at": last.created_at if last else None,
            "window": {"managed": managed, "messages": len(window), "archived": removed,
                       "summary": summary, "items": window},
            "summaries": summaries,
            "archive": {"span": [pinned, pinned + removed - 1] if removed else None,
                        "stats": store.stats(own)},
        }
        lines = [f"conversation {args.session!r}: {total:,} messages, positions {report['positions'][0]}"
                 f"-{report['positions'][1]}, {_date(report['first_at'])} to {_date(report['last_at'])} UTC",
                 f"window: {len(window)} messages" + (" (a summary first)" if summary else "") +
                 (f", {removed:,} archived (positions {report['archive']['span'][0]}-{report['archive']['span'][1]})"
                  if removed else ", nothing archived yet") +
                 ("" if managed else " (no window manager has run on it: the whole log is the window)")]
        shown = window[-args.limit:] if args.limit > 0 else []
        if len(window) > len(shown):
            lines.append(f"  … {len(window) - len(shown)} earlier window messages")
        lines += [f"  {speaker(m, str(m.get('role', '?')))}: {shorten(message_text(m))}" for m in shown]
        lines.append(f"summaries: {len(summaries)}")
        lines += [f"  {s['id']} covers {s['covers'][0]}-{s['covers'][1]}: {shorten(s['text'])}" for s in summaries]
        emit(args, report | {"last_message": message_out(last) if last else None}, "\n".join(lines))
    return 0


def _at(store, own, which):
    """The oldest or newest message (``which``: ``oldest_position`` or ``newest_position``): positions may have
    gaps (deleted messages), so neither is found by counting.
    """
    position = int(store.stats(own).get(which, -1))
    found = store.range(own, position, position) if position >= 0 else []
    return found[0] if found else None

"""The read routes the browser inspector (``/ui``) needs beside the ``/v1`` API.

* ``GET /v1/inspector/conversations``: the conversations of the key's tenant it may see,
  with their owner (user, agent) and size;
* ``GET /v1/inspector/conversations/{id}/archive?offset=&limit=``: one page of the archive
  by position (positions ``offset`` to ``offset + limit - 1``), so a conversation of
  100,000 messages is read a page at a time;
* ``GET /v1/inspector/conversations/{id}/timeline?points=``: the archive, the summarized
  messages and the active window over time, sampled at most ``points`` times.

Every scope is built by :func:`~.tenancy.scope_for` from the key, exactly as the other
routes: the tenant is the key's, and a key limited to some users or agents sees theirs only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Query
from fastapi.staticfiles import StaticFiles
from starlette.types import Scope as AsgiScope

from ..archive.archive import archived_summaries
from ..memory._records import record_owner
from ..memory.persistent import _SESSIONS as SESSIONS
from ..stores._common import first_at_or_after
from ..stores.base import ANY, Scope
from .auth import Principal
from .conversations import CONVERSATIONS, NotFound, message_out
from .tenancy import scope_for

UI = Path(__file__).with_name("ui")
# the page runs its own files only, is never framed, and sends no referrer: a key in its tab goes nowhere else
UI_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
                                         "base-uri 'none'; form-action 'none'",
              "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"}
MAX_PAGE = 500
MAX_LISTED = 1000
_END = 2**62


def inspector_router(service: Any, key: Any) -> APIRouter:
    """The inspector's routes over ``service`` (the app's :class:`~.app.Service`); ``key`` is the auth dependency."""
    router = APIRouter(prefix="/v1/inspector", tags=["inspector"])
    store = service.store
    User = Query(None, max_length=200, description="the user the conversation belongs to (default owner if unset)")
    Agent = Query(None, max_length=200, description="the agent the conversation belongs to (default owner if unset)")

    def own(p: Principal, user_id: str | None, agent_id: str | None, conversation_id: str) -> Scope:
        s = scope_for(p, user_id=user_id, agent_id=agent_id, conversation_id=conversation_id)
        if not store.count(s):
            raise NotFound(f"conversation {conversation_id!r} not found")
        return s

    def last_position(s: Scope, count: int) -> int:
        """The newest position, from the conversation's counters: positions may have gaps (deleted messages), and
        reading from ``count - 1`` on read every message past it, not a page.
        """
        newest = store.stats(s).get("newest_position")
        return int(newest) if isinstance(newest, int) and newest >= 0 else count - 1

    def owners_lists(tenant: str) -> dict[tuple[str, str, str], float]:
        """``(user, agent, conversation)``: when listed, for every conversation its owner's lists name: the
        service's conversation list (``/v1/conversations``, import, chat) and long-term memory's session list
        (``/v1/memories/record``, which lists its session itself before writing to it, so no request pays a
        second write for the inspector).
        """
        everyone = Scope(tenant=tenant, user_id=ANY, agent_id=ANY)
        found: dict[tuple[str, str, str], float] = {}
        for r in store.get_records(everyone, CONVERSATIONS):
            user, agent = r.data.get("user_id"), r.data.get("agent_id")
            if isinstance(user, str) and isinstance(agent, str):  # else registered before owners were recorded
                found.setdefault((user, agent, r.id), r.created_at)
        for r in store.get_records(everyone, SESSIONS):
            owner = record_owner(r)
            if owner is not None and owner.tenant == tenant:
                found.setdefault((str(owner.user_id), str(owner.agent_id), r.id), r.created_at)
        return found

    @router.get("/conversations")
    def conversations(p: Principal = key) -> dict:
        """The key's tenant and the conversations the key may see, each with its user, agent and message count:
        the first ``MAX_LISTED`` holding messages in order of user, agent and id; ``truncated`` when one more does.
        """
        users = set(p.users) if p.users is not None else None
        agents = set(p.agents) if p.agents is not None else None
        out: list[dict[str, Any]] = []
        truncated = False
        for (user, agent, conversation), created in sorted(owners_lists(p.tenant).items()):
            if (users is not None and user not in users) or (agents is not None and agent not in agents):
                continue
            count = store.count(Scope(tenant=p.tenant, user_id=user, agent_id=agent, session_id=conversation))
            if count and len(out) == MAX_LISTED:  # one past the limit holds messages: some are left out
                truncated = True
                break
            if count:
                out.append({"conversation_id": conversation, "user_id": user or None, "agent_id": agent or None,
                            "messages": count, "created_at": created})
        return {"tenant": p.tenant, "conversations": out, "truncated": truncated}

    @router.get("/conversations/{conversation_id:path}/archive")
    def archive(conversation_id: str, p: Principal = key, user_id: str | None = User, agent_id: str | None = Agent,
                offset: int = Query(0, ge=0, le=_END, description="the first position of the page"),
                limit: int = Query(100, ge=1, le=MAX_PAGE, description="positions per page")) -> dict:
        """Archived messages at positions ``offset`` to ``offset + limit - 1``, verbatim, with the archive's size."""
        s = own(p, user_id, agent_id, conversation_id)
        count = store.count(s)
        messages = store.range(s, offset, offset + limit - 1)
        return {"conversation_id": conversation_id, "total": count, "last_position": last_position(s, count),
                "offset": offset, "limit": limit, "messages": [message_out(m) for m in messages]}

    @router.get("/conversations/{conversation_id:path}/timeline")
    def timeline(conversation_id: str, p: Principal = key, user_id: str | None = User, agent_id: str | None = Agent,
                 points: int = Query(40, ge=2, le=200, description="samples at most")) -> dict:
        """The archive, the summarized messages and the active window over time (sampled positions).

        Each sample is the first message held from its position on: messages deleted since leave no hole in the
        series (``archived`` counts the positions taken by ``t``, deleted messages included).

        ``archived`` counts the messages stored by ``t``; ``summarized`` the messages covered by the summaries
        made by ``t``; ``window`` the active window then: the messages not summarized and the summary (a
        summarizing manager), or the newest ``window_messages`` messages (a sliding window). The newest sample is
        now: every summary counts (a manager summarizes just after the messages it was given are written, so the
        summary's time is after theirs), and its ``window`` is the active window as ``GET .../messages`` reads it
        (a sliding window never starts inside a tool call; a managed one is what its manager kept), also given as
        ``window`` beside the series.
        """
        s = own(p, user_id, agent_id, conversation_id)
        in_window = len(service.conversations.window(s))  # first: reading a managed window may summarize
        count = store.count(s)
        last = last_position(s, count)
        summaries = archived_summaries(store, s)
        n = min(points, last + 1)
        sampled = sorted({round(i * last / max(1, n - 1)) for i in range(n)})
        window = service.conversations.window_messages
        managed = service.conversations.windows is not None  # older messages summarized (else a sliding window)
        # each sample is the first message held from its position on, up to the next sample's (deleted messages
        # leave gaps): the newest message is the last sample's, whatever was deleted before it
        ends = [b - 1 for b in sampled[1:]] + [last]
        firsts = first_at_or_after(store, s, sampled[:-1], ends[:-1]) + store.ranges(s, [(last, last)])[0][:1]
        series = []
        for found in firsts:
            if found is None:
                continue
            position, t = int(found.position or 0), found.created_at
            archived = position + 1
            summarized = max((c["covers"][1] + 1 for c in summaries
                              if float(c.get("created_at") or 0) <= t and c.get("covers")), default=0)
            then = archived - summarized + (1 if summarized else 0) if managed else min(archived, window)
            series.append({"t": t, "position": position, "archived": archived, "summarized": summarized,
                           "window": then})
        if series:  # the newest message's sample: the conversation as it is now
            series[-1]["summarized"] = max((c["covers"][1] + 1 for c in summaries if c.get("covers")), default=0)
            series[-1]["window"] = in_window
        return {"conversation_id": conversation_id, "total": count, "window_messages": window, "window": in_window,
                "summaries": len(summaries), "series": series}

    return router


class _Page(StaticFiles):
    """The inspector's static files, with headers that keep the page to itself."""

    async def get_response(self, path: str, scope: AsgiScope) -> Any:
        response = await super().get_response(path, scope)
        response.headers.update(UI_HEADERS)
        return response


def mount_ui(app: FastAPI) -> None:
    """Serve the inspector (plain HTML, JavaScript and CSS shipped in the package) at ``/ui``; it asks for a key."""
    app.mount("/ui", _Page(directory=UI, html=True), name="ui")

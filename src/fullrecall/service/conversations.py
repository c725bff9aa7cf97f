"""What the service does with conversations, behind one small interface.

:class:`Conversations` is the service's view of a store: every appended message is
committed to the store (positions assigned atomically, idempotent on the message's
``"id"``) before the request is answered, then handed to the :class:`~.indexer.Indexer`
to be embedded in batches. The active window is the newest messages of the
conversation; ``context`` trims it to a token budget and adds recalled context from
older messages to the newest user message, exactly as the library's hook does.

Everything takes a :class:`~fullrecall.stores.Scope` whose tenant comes from the API
key (see :mod:`.tenancy`), so nothing here can reach another tenant's data.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any, Protocol

from ..archive.archive import archived_summaries
from ..archive.recall import fill_ranges, format_enrichment, merge_ranges
from ..errors import InvalidInput, MessageFormatError
from ..memory.conversation import message_id
from ..memory.facts import NAMESPACE as FACTS
from ..memory.procedural import NAMESPACE as PROCEDURES
from ..messages.formats import check_unique_ids, parse_messages, render_message
from ..messages.model import TextBlock
from ..search.terms import index_text
from ..stores import _validate as V
from ..stores._common import newest
from ..stores.base import Filters, Record, Scope, Store, StoredMessage
from ..transfer._common import CONVERSATIONS, unlist
from ..window.cuts import clean_cuts
from . import renewal
from .tenancy import InvalidName, check_conversation
from .windows import ManagedWindows

MAX_ID_LENGTH = 200
MAX_REGISTERED = 100_000  # conversations a process remembers having listed (then it forgets them all: listing is idempotent)


class NotFound(LookupError):
    """The conversation, summary or message does not exist in the caller's scope."""


class ConversationBackend(Protocol):
    """The operations the HTTP routes call; long-term memory adds its own beside it."""

    def append(self, scope: Scope, messages: list[dict[str, Any]]) -> list[dict[str, Any]]: ...
    def window(self, scope: Scope) -> list[dict[str, Any]]: ...
    def context(self, scope: Scope, max_tokens: int | None, query: str | None) -> dict[str, Any]: ...
    def summaries(self, scope: Scope) -> list[dict[str, Any]]: ...
    def summary_messages(self, scope: Scope, summary_id: str) -> list[dict[str, Any]]: ...
    def forget(self, scope: Scope) -> dict[str, int]: ...
    def search(self, scope: Scope, query: str, top_k: int, radius: int, filters: Filters | None
               ) -> list[dict[str, Any]]: ...


def check_text(value: Any, where: str) -> None:
    """Refuse NUL characters and lone surrogates anywhere in a JSON value (no backend stores them alike, and
    no embedder reads a lone surrogate).
    """
    if isinstance(value, str):
        if "\x00" in value:
            raise MessageFormatError(f"{where} holds a NUL character (\\u0000), which cannot be stored")
        try:
            V.check_unicode(value, where)
        except InvalidInput as exc:
            raise MessageFormatError(str(exc)) from None
    elif isinstance(value, dict):
        for k, v in value.items():
            check_text(k, f"{where} key")
            check_text(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_text(v, f"{where}[{i}]")


def summary_token(scope: Scope, summary_id: str) -> str:
    """An opaque, URL-safe summary id naming the conversation it belongs to."""
    raw = json.dumps([scope.user_id, scope.agent_id, scope.session_id, summary_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def parse_summary_token(token: str) -> tuple[str, str, str, str]:
    try:
        user, agent, session, sid = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        V.check_id(user, "user", empty=True)
        V.check_id(agent, "agent", empty=True)
        V.check_id(session, "session")  # a forged one: no conversation of the caller's, not a bad scope
        V.check_id(sid, "summary")
        return user, agent, session, sid
    except Exception:  # noqa: BLE001 - any malformed token is simply not a summary of the caller's
        raise NotFound(f"summary {token!r} not found") from None


def message_out(m: StoredMessage) -> dict[str, Any]:
    """A stored message as the API returns it."""
    return {"id": m.id, "position": m.position, "role": m.role, "kind": m.kind, "created_at": m.created_at,
            "conversation_id": m.session_id, "user_id": m.user_id or None, "agent_id": m.agent_id or None,
            "message": m.data}


class Conversations:
    """:class:`ConversationBackend` on a :class:`~fullrecall.stores.Store`."""

    def __init__(self, store: Store, indexer: Any, *, window_messages: int = 50, max_context_length: int = 2000,
                 search_options: dict[str, Any] | None = None, windows: ManagedWindows | None = None) -> None:
        if window_messages < 1:
            raise ValueError(f"window_messages must be positive, got {window_messages}")
        self.store = store
        self.indexer = indexer
        self.windows = windows  # None: the window is the newest ``window_messages`` messages (a sliding window)
        self.window_messages = window_messages
        self.max_context_length = max_context_length
        self.search_options = search_options or {}
        self._registered: dict[tuple, float] = {}  # conversations listed by this process, and when
        self.max_registered = MAX_REGISTERED

    # -- writing ------------------------------------------------------------------------------
    def append(self, scope: Scope, messages: list[dict[str, Any]], ids: list[str | None] | None = None
               ) -> list[dict[str, Any]]:
        """Commit ``messages`` (all or none); their ids and positions, once durable.

        A message's id is ``ids[i]`` if given, else its own ``"id"``, else a new one.
        """
        records = self.prepare(scope, messages, ids)
        self._register(scope)  # listed before its words are written: a crash between the two loses no listing
        positions = self.store.append(scope, records)  # durable when it returns
        if 0 in positions:  # begun anew: another process may have forgotten it (and unlisted it) meanwhile
            self._register(scope, again=True)
        for record, position in zip(records, positions):
            record.position = position
        self.indexer.submit(scope, records, records[0].created_at)
        if self.windows is not None:  # durable already: now the manager keeps the window within budget
            self.windows.manage(scope, messages)
        return [{"id": r.id, "position": p} for r, p in zip(records, positions)]

    def prepare(self, scope: Scope, messages: list[dict[str, Any]], ids: list[str | None] | None = None
                ) -> list[StoredMessage]:
        """The records ``append`` would write; raises ``MessageFormatError`` (naming message and field) instead."""
        scope = scope.require_session()
        if not isinstance(messages, list) or not messages:
            raise MessageFormatError("messages must be a non-empty list")
        given = ids or [None] * len(messages)
        mids = [message_id(raw if mid is None else {"id": mid}, i) if isinstance(raw, dict) else ""
                for i, (raw, mid) in enumerate(zip(messages, given))]  # the library's rule and words
        check_text(messages, "messages")
        shape, parsed = parse_messages(messages, storable=True)  # what a store keeps verbatim, as the library asks
        check_unique_ids(messages, mids, "a request")
        if self.windows is not None:  # a managed window is read whole, in one shape
            self.windows.check(scope, messages, shape)
        if any(m.has_tool_result for m in parsed):  # only then is the conversation's tail needed
            recent = self._tail(scope, self.window_messages)
            self._check_tool_pairs(parsed, recent, {m.id for m in recent}, mids)
        now = time.time()
        date = time.strftime("%Y-%m-%d", time.gmtime(now))
        records = [
            StoredMessage(id=mid, role=msg.role, text=index_text(msg.text, speaker=msg.role, date=date), data=raw,
                          created_at=now, archived_at=now, metadata={"shape": shape})
            for mid, msg, raw in zip(mids, parsed, messages)
        ]
        return records

    def _register(self, scope: Scope, again: bool = False) -> bool:
        """Record the conversation in its owner's list once (idempotent), so export can find it; True if written.

        On a store whose data expires (Redis, ``ttl_seconds``) it is written again now and then while the
        conversation is written to (after a day, or half the time to live): its messages' time to live is renewed
        by every write, and the listing's was not, so a conversation in use fell off the inspector's list.
        """
        key = (scope.tenant, scope.user_id, scope.agent_id, scope.session_id)
        written = self._registered.get(key)
        if written is not None and not again and not renewal.due(self.store, written):
            return False
        owner = {"user_id": str(scope.user_id), "agent_id": str(scope.agent_id)}  # so a tenant-wide listing names it
        self.store.put_record(replace(scope, session_id=None), Record(
            id=str(scope.session_id), namespace=CONVERSATIONS, text=str(scope.session_id), data=owner))
        if len(self._registered) >= self.max_registered:  # a long-running server sees conversations without end
            self._registered.clear()
        self._registered[key] = time.time()
        return True

    @staticmethod
    def _check_tool_pairs(parsed, recent: list[StoredMessage], known: set[str], ids: list[str]) -> None:
        """A tool result must answer a tool call of this batch or of the conversation's recent messages."""
        calls: set[str] = set()
        for m in recent:
            calls.update(_tool_use_ids(m))
        for index, (msg, mid) in enumerate(zip(parsed, ids)):
            if mid in known:  # a retry of a stored message: it was checked when first written
                continue
            for tool_id in msg.tool_result_ids:
                if tool_id not in calls:
                    raise MessageFormatError(f"message {index}: tool result {tool_id!r} answers no tool call "
                                             "of this conversation")
            calls.update(msg.tool_use_ids)

    # -- reading ------------------------------------------------------------------------------
    def _tail(self, scope: Scope, n: int) -> list[StoredMessage]:
        """The newest ``n`` messages, stepping over the gaps deleted messages left (not every message past them)."""
        return newest(self.store, scope, n)

    def _require(self, scope: Scope) -> None:
        if not self.store.count(scope):
            raise NotFound(f"conversation {scope.session_id!r} not found")

    def _window_records(self, scope: Scope) -> list[tuple[StoredMessage | None, dict[str, Any]]]:
        """The window: each message with its stored row (None for a summary), oldest first."""
        self._require(scope)
        if self.windows is not None:
            return self.windows.read(scope)
        tail = self._tail(scope, self.window_messages)
        parsed = [_parse(m) for m in tail]
        clean = clean_cuts(parsed)
        start = next((c for c in range(len(tail)) if clean[c]), 0)
        return [(m, m.data) for m in tail[start:]]

    def _summary_out(self, scope: Scope, message: dict[str, Any]) -> dict[str, Any]:
        items = archived_summaries(self.store, scope)
        newest = items[-1] if items else None
        return {"id": summary_token(scope, newest["id"]) if newest else None, "position": None, "role": message.get(
            "role"), "kind": "summary", "covers": newest["covers"] if newest else None, "conversation_id":
            scope.session_id, "message": message}

    def window(self, scope: Scope) -> list[dict[str, Any]]:
        """The active window: the newest messages (after the summary of older ones, when a manager made one), never
        starting inside a tool call and its result.
        """
        return [{**message_out(row), "message": raw} if row is not None else self._summary_out(scope, raw)
                for row, raw in self._window_records(scope)]

    def context(self, scope: Scope, max_tokens: int | None, query: str | None) -> dict[str, Any]:
        """The window within ``max_tokens``, the newest user message enriched with recalled context.

        A budget below the newest message (with the tool call it answers) is refused, naming ``max_tokens``:
        an empty context would send a model nothing of the conversation.
        """
        from ..tokens import default_token_counter

        window = self._window_records(scope)
        shape = next((row.metadata.get("shape") for row, _ in window if row is not None), None)
        parsed = [parse_messages([raw], row.metadata.get("shape") if row is not None else shape)[1][0]
                  for row, raw in window]
        if max_tokens is not None:
            counter = default_token_counter()
            sizes = [counter.count_message(p) for p in parsed]
            clean = clean_cuts(parsed)
            start, used = len(window), 0
            for c in range(len(window) - 1, -1, -1):
                used += sizes[c]
                if used > max_tokens:
                    break
                if clean[c]:
                    start = c
            if window and start == len(window):  # not even the newest message fits: refused, as MCP's get_context
                newest = max(c for c in range(len(window)) if clean[c])
                what = ("newest message's" if newest == len(window) - 1 else
                        f"newest {len(window) - newest} messages' (a tool call and its results, kept together)")
                raise InvalidInput(f"'max_tokens' {max_tokens} is below the {what} {sum(sizes[newest:])} tokens")
            window, parsed = window[start:], parsed[start:]
        messages = [raw for _, raw in window]
        rows = [row for row, _ in window]
        recalled: list[dict[str, Any]] = []
        positions = [row.position for row in rows if row is not None and row.position is not None]
        first = positions[0] if positions else None
        newest = positions[-1] if positions else 0
        # recall reaches what left the window: every message before its newest but those it holds (a pinned system
        # message, or one a Converse pin flag keeps there after others left, sits before messages that left)
        before = newest + 1 if positions else None
        last_user = next((i for i in range(len(parsed) - 1, -1, -1)
                          if rows[i] is not None and parsed[i].role == "user" and not parsed[i].has_tool_result), None)
        question = query if query is not None else (parsed[last_user].text if last_user is not None else "")
        if question.strip() and before:
            hits = self._searcher(scope).search(question, top_k=3, spread=2, around=2)
            in_window = set(positions)
            hits = [h for h in hits if h.position is not None and h.position < before and h.position not in in_window]
            ranges = fill_ranges(self.store, scope, merge_ranges([(h.position, h.score) for h in hits], 2,
                                                                 before=before), hits, skip=in_window)
            recalled = [message_out(m) for r in ranges for m in r.messages]
            row = rows[last_user] if last_user is not None else None
            if last_user is not None and row is not None:
                msg = parsed[last_user]
                index = next((i for i, b in enumerate(msg.content) if isinstance(b, TextBlock)), None)
                block = msg.content[index] if index is not None else None
                enriched = format_enrichment(block.text, ranges, max_context_length=self.max_context_length
                                             ) if isinstance(block, TextBlock) else None
                if enriched is not None and index is not None:
                    content = list(msg.content)
                    content[index] = TextBlock(enriched)
                    messages[last_user] = render_message(msg.with_content(content), row.metadata["shape"])
        return {"messages": messages, "recalled": recalled, "first_position": first}

    def summaries(self, scope: Scope) -> list[dict[str, Any]]:
        """Summaries made of the conversation (by a summarizing manager on the same store), oldest first."""
        self._require(scope)
        items = archived_summaries(self.store, scope)
        return [{**s, "id": summary_token(scope, s["id"]), "summary_id": s["id"]} for s in items]

    def summary_messages(self, scope: Scope, summary_id: str) -> list[dict[str, Any]]:
        """The archived messages a summary covers, verbatim (``NotFound`` outside the caller's tenant)."""
        user, agent, session, sid = parse_summary_token(summary_id)
        if (user, agent) != (scope.user_id, scope.agent_id):
            raise NotFound(f"summary {summary_id!r} not found")
        own = replace(scope, session_id=session)
        found = next((s for s in archived_summaries(self.store, own) if s["id"] == sid), None)
        if found is None:
            raise NotFound(f"summary {summary_id!r} not found")
        start, end = found["covers"]
        return [message_out(m) for m in self.store.range(own, start, end)]

    def forget(self, scope: Scope) -> dict[str, int]:
        """Delete the conversation and take it off its owner's list.

        An append racing with it leaves the conversation listed: the first append after the deletion (position 0)
        lists it once written, and the forget lists it again when it holds messages once unlisted, so whichever
        comes last, a conversation holding messages is on the list.
        """
        self._require(scope)
        if self.windows is not None:
            counts = self.windows.forget(scope, lambda: self.store.forget(scope))
        else:
            counts = self.store.forget(scope)
        counts["records"] = counts.get("records", 0) + unlist(self.store, scope)  # the list records naming it too
        self._registered.pop((scope.tenant, scope.user_id, scope.agent_id, scope.session_id), None)
        if self.store.count(scope):  # another process appended between the deletion and the unlisting
            self._register(scope, again=True)
        return counts

    # -- search -------------------------------------------------------------------------------
    def _searcher(self, scope: Scope):
        return self.indexer.searcher(scope, **self.search_options)

    def search(self, scope: Scope, query: str, top_k: int, radius: int, filters: Filters | None
               ) -> list[dict[str, Any]]:
        """The best ``top_k`` messages in ``scope`` with every score and ``radius`` neighbours each."""
        hits = self._searcher(scope).search(query, top_k=top_k, min_score=-1e9, filters=filters, spread=radius,
                                            around=radius)
        out = []
        for h in hits:
            m = h.message
            own = replace(scope, session_id=m.session_id, user_id=m.user_id, agent_id=m.agent_id)
            lo, hi = max(0, (m.position or 0) - radius), (m.position or 0) + radius
            if h.context is not None:  # read with the hit
                around = h.context
            else:
                around = self.store.range(own, lo, hi) if radius else [m]
            out.append({**message_out(m), "score": h.score, "scores": h.scores,
                        "range": {"start": around[0].position if around else m.position,
                                  "end": around[-1].position if around else m.position,
                                  "messages": [message_out(x) for x in around]}})
        return out

    # -- export and import ----------------------------------------------------------------------
    def export(self, scope: Scope) -> Iterator[dict[str, Any]]:
        """Every message of ``scope`` (one conversation or all the owner's, then the owner's long-term records) in
        fullrecall's JSONL format, header first: the library's export (:func:`fullrecall.transfer.jsonl.lines`)
        without vectors, which an import computes again.
        """
        from ..transfer import jsonl

        return jsonl.lines(self.store, scope, vectors=False)

    def import_lines(self, scope: Scope, lines: Iterable[dict[str, Any]], numbers: list[int] | None = None
                     ) -> dict[str, int]:
        """Append the messages of a JSONL export to the caller's own conversations (idempotent on ids).

        The format is :mod:`fullrecall.transfer.jsonl`'s (a header line, then one line a message, then the
        owner's long-term records, then the end line); state lines are the library's (``fullrecall import``) and
        are skipped here. A body of version 3 without its end line was cut short and is refused. ``numbers`` are
        the lines' numbers in the body (blank lines counted, as ``fullrecall import`` counts them; default: 1, 2,
        ...): errors name them, and a message without an id takes its id from its line.
        """
        from ..transfer import jsonl
        from ..transfer._common import stable_id

        by_conversation: dict[str, tuple[list[dict[str, Any]], list[str | None]]] = {}
        records: dict[str, list[Record]] = {}  # namespace -> the long-term lines' records
        whole = jsonl.Whole("the body")  # an export of version 3 ends with its end line: without it, cut short
        at: dict[str, list[int]] = {}  # conversation -> the line of each of its messages
        for i, line in enumerate(lines):
            n = numbers[i] - 1 if numbers is not None else i  # the line's index in the body
            if not isinstance(line, dict):
                raise MessageFormatError(f"line {n + 1}: expected a JSON object")
            if jsonl.is_header(line):
                whole.header(line, n + 1)
                continue
            if whole.line(line, n + 1):
                continue
            if line.get("type") in jsonl.RECORD_TYPES:
                record = jsonl.record_of({**line, "_line": n + 1})
                check_text(record.text, f"line {n + 1}: 'text'")  # the store keeps a NUL; the service takes none
                check_text(record.data, f"line {n + 1}: 'data'")
                records.setdefault(record.namespace, []).append(record)
                continue
            kind = line.get("type", "message")
            if kind in ("state", "summary"):  # the library's window state and archived summaries, of positions
                continue                         # the service gives anew: not the service's to restore
            if kind != "message":  # a typo ("mesage") must not drop the line silently: the command refuses it too
                raise MessageFormatError(f"line {n + 1}: unknown type {kind!r}; expected 'message', 'state', "
                                         f"'summary' or one of {sorted(jsonl.RECORD_TYPES)}")
            conv = jsonl.conversation_of({**line, "_line": n + 1})
            msg, mid = line.get("message"), line.get("id")
            if len(conv) > MAX_ID_LENGTH:
                raise MessageFormatError(f"line {n + 1}: 'conversation_id' must be a non-empty string")
            try:  # one the routes could never reach again is refused as they refuse it
                check_conversation(conv)
            except InvalidName as exc:
                raise MessageFormatError(f"line {n + 1}: {exc}") from None
            if not isinstance(msg, dict):
                raise MessageFormatError(f"line {n + 1}: 'message' must be an object")
            msgs, ids = by_conversation.setdefault(conv, ([], []))
            at.setdefault(conv, []).append(n + 1)
            msgs.append(msg)
            # without an id, one from its place and content, as the command's import gives: a retried import of
            # the file stores each message once (a fresh id each time stored them again)
            ids.append(mid if mid is not None or msg.get("id") is not None else stable_id(n + 1, msg))
        whole.close()
        final: dict[str, set[str]] = {}  # conversation -> the ids its messages are stored under
        for conv, (msgs, ids) in by_conversation.items():  # validate everything before writing anything
            try:
                final[conv] = {r.id for r in self.prepare(replace(scope, session_id=conv), msgs, ids)}
            except MessageFormatError as exc:  # "message 3" (of the conversation's) named by its line of the body
                text = _by_line(str(exc), at[conv])
                raise MessageFormatError(f"conversation {conv!r}: {text}") from None
        read = written = 0
        for conv, (msgs, ids) in by_conversation.items():
            own = replace(scope, session_id=conv)
            held = {m.id for m in self.store.get(own, list(final[conv]))}  # a retried import's: kept, not counted
            read += len(self.append(own, msgs, ids))
            written += len(final[conv] - held)
        out = {"conversations": len(by_conversation), "messages": read, "written": written}
        if records:  # facts, patterns, memory sessions: the caller's own, each written once
            out["records"] = sum(jsonl.put_records(self.store, replace(scope, session_id=None), namespace,
                                                   self._embedded(namespace, recs))
                                 for namespace, recs in records.items())
        return out

    def _embedded(self, namespace: str, records: list[Record]) -> list[tuple[Record, Any]]:
        """Facts and patterns with vectors of this service's model, as its memory makes them (a file's vectors
        may be another model's, which every later search of the owner would refuse); other records have none.
        """
        if namespace not in (FACTS, PROCEDURES):
            return [(r, None) for r in records]
        return list(zip(records, self.indexer.embedder.embed([r.text for r in records])))


def _by_line(text: str, lines: list[int]) -> str:
    """``text`` naming messages by their line of the body (``lines[i]``), not their index ("message 3")."""
    return re.sub(r"\bmessage (\d+)(?=:|'s)", lambda m: f"line {lines[int(m[1])]}", text)


def _parse(m: StoredMessage):
    return parse_messages([m.data], m.metadata.get("shape"))[1][0]


def _tool_use_ids(m: StoredMessage) -> list[str]:
    try:
        return _parse(m).tool_use_ids
    except Exception:  # noqa: BLE001 - a message of another shape has none we can pair with
        return []

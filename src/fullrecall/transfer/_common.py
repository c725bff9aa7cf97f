"""What every format shares: the owner's conversation list, batched idempotent writes, indexing, progress."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from ..archive.archive import message_record
from ..errors import InvalidInput, MessageFormatError
from ..messages.formats import parse_messages, render_messages
from ..search.terms import index_text
from ..stores._validate import check_message, check_owner_id, check_session_id
from ..stores.base import Record, Scope, Store, StoredMessage

CONVERSATIONS = "conversations"  # record namespace: one record per conversation of an owner (export lists them)
BATCH = 500  # messages per append: an interrupted import keeps every batch it finished
END = 2**62  # past any position a store holds

Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``: called as work advances (``what`` names the step)."""


def no_progress(what: str, done: int, total: int) -> None:
    """The default :data:`Progress`: says nothing."""


@dataclass
class Counts:
    """What an import read and what it wrote (``written`` is 0 when everything was there already)."""

    conversations: int = 0
    messages: int = 0
    written: int = 0
    embedded: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"conversations": self.conversations, "messages": self.messages, "written": self.written,
                "embedded": self.embedded}


def conversations(store: Store, scope: Scope) -> list[str]:
    """The conversation ids of ``scope``: its own session, or every conversation of the owner.

    That is every one the owner's conversation list names (kept by the service, ``fullrecall import`` and
    ``fullrecall chat``), every session :class:`~fullrecall.memory.PersistentMemory` keeps memory of, and
    every other that holds messages (``Store.sessions``: one a ``ConversationMemory`` keeps, say).
    Long-term memory's change logs (``_log.*``) are bookkeeping, never a conversation.
    """
    from ..memory.persistent import _SESSIONS
    from ..stores._forget import is_change_log

    if scope.session:
        return [scope.session]
    owner = replace(scope, session_id=None)
    listed = {r.id for namespace in (CONVERSATIONS, _SESSIONS) for r in store.get_records(owner, namespace)}
    listed.update(s for s in (sc.session for sc in store.sessions(owner)) if s is not None)
    return sorted(s for s in listed if not is_change_log(s))


def register(store: Store, scope: Scope) -> None:
    """Put the conversation of ``scope`` in its owner's list (idempotent; the service keeps the same list).

    The record names its owner, as the service's do, so a tenant-wide listing (the inspector) shows it.
    """
    session = str(scope.require_session().session_id)
    owner = {"user_id": str(scope.user_id), "agent_id": str(scope.agent_id)}
    store.put_record(replace(scope, session_id=None), Record(id=session, namespace=CONVERSATIONS, text=session,
                                                             data=owner))


def unlist(store: Store, scope: Scope) -> int:
    """Take the conversation of ``scope`` out of its owners' lists (``scope``'s agent may be
    :data:`~fullrecall.stores.base.ANY`: every agent's): the conversation list, and the session list of
    long-term memory with the change-log events that name it (so no memory that holds it cached lists it).
    How many list records it deleted: long-term records, which ``forget`` reports with the rest.
    """
    from ..memory.persistent import unlist_session

    session = str(scope.session_id)
    owners = replace(scope, session_id=None)
    listed = sum(r.id == session for r in store.get_records(owners, CONVERSATIONS))  # one an agent, without agent
    store.delete_record(owners, CONVERSATIONS, session)
    return listed + unlist_session(store, scope)


def listings(store: Store, scope: Scope) -> int:
    """How many list records name the conversation of ``scope`` (see :func:`unlist`, which deletes them): what
    ``forget``'s question counts among long-term records before it asks.
    """
    from ..memory.persistent import _SESSIONS

    session = str(scope.session_id)
    owners = replace(scope, session_id=None)
    return sum(r.id == session for namespace in (CONVERSATIONS, _SESSIONS) for r in store.get_records(owners, namespace))


def records_for(raws: Sequence[dict[str, Any]], ids: Sequence[str], *, speakers: Sequence[str | None] | None = None,
                times: Sequence[float | None] | None = None, where: str = "") -> list[StoredMessage]:
    """Stored messages for ``raws`` (kept verbatim), with the given ids, indexed as the library indexes them.

    ``speakers`` and ``times`` replace the role in the indexed text and the creation time.
    A bad message raises :class:`~fullrecall.errors.MessageFormatError` naming it (prefixed by ``where``).
    """
    try:
        shape, parsed = parse_messages(list(raws), storable=True)
    except MessageFormatError as exc:
        raise MessageFormatError(f"{where}{exc}") from None
    out = []
    for i, (raw, msg) in enumerate(zip(raws, parsed)):
        msg.id = ids[i]
        when = times[i] if times is not None else None
        if when is not None:
            msg.timestamp = when
        record = message_record(msg, shape, data=raw)
        speaker = speakers[i] if speakers is not None else None
        if speaker:
            record.text = index_text(msg.text, speaker=speaker, date=time.strftime("%Y-%m-%d", time.gmtime(record.created_at)))
        try:  # what the store would refuse (an id with a NUL, or too long), refused before any conversation is written
            check_message(record, i, f"{where}message {i}")
        except InvalidInput as exc:
            raise MessageFormatError(str(exc)) from None
        out.append(record)
    return out


def stable_id(index: int, raw: dict[str, Any]) -> str:
    """A message's id from its place and content: the same file gives the same ids, another file others."""
    # surrogatepass: a lone surrogate is hashed like any character here, and refused by the message's check,
    # which names the message and field
    digest = hashlib.sha1(json.dumps(raw, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
                          ).hexdigest()[:12]
    return f"{index}-{digest}"


def write(store: Store, scope: Scope, records: Sequence[StoredMessage], progress: Progress = no_progress,
          embedder: Any = None) -> tuple[int, int]:
    """Append ``records`` to the conversation of ``scope`` in batches; (how many were new, how many embedded).

    The conversation is registered first, so an interrupted import is listed and finished by running it
    again. With an ``embedder``, the messages without a vector are embedded afterwards (never one that has).
    """
    register(store, scope)
    written = 0
    for start in range(0, len(records), BATCH):
        chunk = records[start:start + BATCH]
        written += append_new(store, scope, chunk)
        progress(f"writing {scope.session}", start + len(chunk), len(records))
    embedded = embed(store, scope, [r.id for r in records], embedder, progress) if embedder is not None else 0
    return written, embedded


def append_new(store: Store, scope: Scope, messages: Sequence[StoredMessage]) -> int:
    """Append ``messages`` (idempotent on ids); how many of them the conversation did not hold before.

    Counted by id, not by the conversation's size before and after: a message another client appends
    meanwhile is not one of these.
    """
    ids = list(dict.fromkeys(m.id for m in messages))
    held = {m.id for m in store.get(scope, ids)}
    store.append(scope, messages)
    return len(ids) - len(held)


def write_all(store: Store, prepared: Sequence[tuple[Scope, Sequence[StoredMessage]]], conversations: int,
              progress: Progress = no_progress, embedder: Any = None) -> dict[str, int]:
    """Write each parsed and checked conversation of an import (see :func:`write`); the import's counts.

    An id names one message of a conversation: two different messages a file gives one id (the store would
    keep the first and drop the other) are refused, naming them, before anything is written.
    """
    check_owners(prepared)
    check_ids(prepared)
    counts = Counts(conversations=conversations)
    for own, records in prepared:
        written, embedded = write(store, own, records, progress, embedder)
        counts.messages += len(records)
        counts.written += written
        counts.embedded += embedded
    return counts.as_dict()


def check_owners(prepared: Sequence[tuple[Scope, Sequence[StoredMessage]]]) -> None:
    """``MessageFormatError`` for a conversation, user or agent a file names (an OpenAI ``conversation_id``, a
    Strands session or agent, a LoCoMo ``sample_id``) that every entry point refuses: one that shows nothing, or
    a conversation named as long-term memory's change log.
    """
    for own, _ in prepared:
        try:
            check_session_id(own.session_id, "'session_id'")
            where = f"conversation {own.session_id!r}"
            check_owner_id(own.user_id, f"{where}: 'user_id'")
            check_owner_id(own.agent_id, f"{where}: 'agent_id'")
        except InvalidInput as exc:
            raise MessageFormatError(str(exc)) from None


def check_ids(prepared: Sequence[tuple[Scope, Sequence[StoredMessage]]]) -> None:
    """``MessageFormatError`` for an id given to two different messages of one conversation."""
    seen: dict[tuple[str, str, str, str], dict[str, tuple[int, int, StoredMessage]]] = {}
    for part, (own, records) in enumerate(prepared):
        ids = seen.setdefault((own.tenant, str(own.user_id), str(own.agent_id), str(own.session_id)), {})
        for index, record in enumerate(records):
            first = ids.setdefault(record.id, (part, index, record))
            if first[2] is not record and first[2].data != record.data:
                earlier = f"message {first[1]}" + (" of an earlier part of the file" if first[0] != part else "")
                raise MessageFormatError(f"conversation {own.session_id!r}: message {index}: 'id' {record.id!r} is "
                                         f"also {earlier}'s, a different message; ids are unique within a "
                                         "conversation")


def embed(store: Store, scope: Scope, ids: Sequence[str], embedder: Any, progress: Progress = no_progress) -> int:
    """Embed the messages of ``ids`` that have no vector yet (never one that has), in batches; how many."""
    have = store.get_vectors(scope, list(ids))
    todo = [i for i in dict.fromkeys(ids) if i not in have]
    done = 0
    for start in range(0, len(todo), BATCH):
        chunk = store.get(scope, todo[start:start + BATCH])
        if chunk:
            store.set_vectors(scope, [m.id for m in chunk], embedder.embed([m.text for m in chunk]), embedder.name)
        done += len(chunk)
        progress(f"embedding {scope.session}", done, len(todo))
    return done


def chunks(store: Store, scope: Scope) -> Iterator[list[StoredMessage]]:
    """Every message of one conversation, in order, a batch at a time (about :data:`BATCH` positions a read).

    Positions may have gaps (deleted messages, an import at the file's positions): an empty read is no end.
    Past one, the span read doubles until a message or the conversation's newest position is reached. A read
    keeps only what lies from ``start`` on: a store brings a span past the last position back clamped (a message
    an older version put past it, read again each time), and every read must move on.
    """
    newest = int(store.stats(scope).get("newest_position", -1))
    start, size = 0, BATCH
    while start <= newest:
        chunk = [m for m in store.range(scope, start, min(start + size - 1, END)) if int(m.position or 0) >= start]
        if chunk:
            yield chunk
            start, size = int(chunk[-1].position or 0) + 1, BATCH
        else:
            start, size = start + size, size * 2


def created_date(m: StoredMessage, session: str, fmt: str) -> datetime:
    """When ``m`` was created, as a UTC date for a format that writes dates (``fmt``: strands, locomo).

    Every store keeps any finite time; one before year 1 or past 9999 is no date: InvalidInput names the
    message (jsonl keeps it).
    """
    try:
        return datetime.fromtimestamp(m.created_at, UTC)
    except (OverflowError, ValueError, OSError):
        raise InvalidInput(f"conversation {session!r}: message {m.id!r}: 'created_at' {m.created_at!r} is no date "
                           f"from year 1 to 9999, which the {fmt} format writes; export it as jsonl") from None


def read_all(store: Store, scope: Scope) -> list[StoredMessage]:
    """Every message of one conversation, in order (read in batches, across gaps in the positions)."""
    return [m for chunk in chunks(store, scope) for m in chunk]


def each_conversation(store: Store, scope: Scope, shape: str,
                      progress: Progress = no_progress) -> Iterator[tuple[str, list[StoredMessage], list[dict[str, Any]]]]:
    """Each non-empty conversation of ``scope`` for an export: its id, its stored rows and its messages in
    ``shape`` (verbatim when stored in that shape); ``progress`` advances after each.
    """
    sessions = conversations(store, scope)
    for n, session in enumerate(sessions):
        stored = read_all(store, replace(scope, session_id=session))
        if stored:
            raws = [m.data for m in stored]
            found, parsed = parse_messages(raws)
            yield session, stored, raws if found == shape else render_messages(parsed, shape)
        progress("exporting", n + 1, len(sessions))

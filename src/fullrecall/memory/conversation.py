"""A conversation that survives restarts and concurrent writers: its message log is the truth.

Two faces of one design: :class:`ConversationMemory` speaks MassGen's memory API as
coroutines (store and embedding work run in a worker thread, never on the event loop);
:class:`SyncConversationMemory` is its synchronous twin, which does the work.

Every added message is appended to the store before ``add`` returns, in one
atomic, idempotent append (the store assigns its position, so writers in any
number of processes each land, in one order). The window is not saved whole:
it is *derived* from the log, as

    the pinned system message (position 0, if it is one) + the messages the manager keeps
    pinned at the window's front (``pin_first``: at their own positions) + the manager's summary
    + every message from the first position still in the window on.

The state document holds only what is small and bounded: the manager's state
(how many messages left the window, the current summary) and any message the
manager replaced in the window (a shortened tool result), plus a version.
Archiving a removed message is indexing it, since its text is stored already.

So nothing acknowledged is lost: not by a crash (mid-write or mid-summarization),
not by a concurrent writer, not by two writers managing the window at once
(the state is one consistent document; the one that went further wins, and the
log holds every message whichever wins). Every read starts from the store, so a
conversation deleted by ``forget()`` (this object's or an administrator's
``store.forget``) stays deleted: nothing held in memory is written back.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import replace
from typing import Any

from .._fork import renew_in_child
from ..archive.archive import END, forget_summaries, message_record
from ..errors import ArchiveError, InvalidInput, MessageFormatError, MessageTypeError
from ..messages.formats import parse_messages
from ..stores import _validate as V
from ..stores._validate import MAX_ID_BYTES, check_id
from ..stores.base import DEFAULT_TENANT, Scope, Store, StoredMessage
from ..window.base import ConversationManager
from ..window.pins import is_pinned

log = logging.getLogger("fullrecall.memory")

_WINDOW_KEY = "window"
_UNPINNED = "@unpinned-"  # in the key of the copy of a pinned message that a new one replaced
_PINNED_ROLES = ("system", "developer")


class SyncConversationMemory:
    """The chat loop's memory, synchronous: durable and with full recall (the twin of :class:`ConversationMemory`).

    ``add`` records messages; ``messages`` is the active window; ``model_input()``
    is the window with recalled context added to the newest user message;
    ``clear()`` empties the window after archiving it (nothing is deleted:
    ``forget()`` does that). A message's own ``"id"`` field is its idempotency
    key: adding a message whose id the conversation already holds stores nothing
    new (a retried ``add`` is safe). Extra keyword arguments configure the default
    :class:`~fullrecall.archive.SemanticSummarizingConversationManager`.
    """

    def __init__(
        self,
        store: Store | str = "sqlite:///:memory:",
        session_id: str = "default",
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        manager: Any = None,
        hook: Any = None,
        tenant: str = DEFAULT_TENANT,
        **manager_options: Any,
    ) -> None:
        from ..archive import SemanticMemoryHook, SemanticSummarizingConversationManager
        from ..stores import open_store

        V.check_session_id(session_id, "ConversationMemory: 'session_id'")  # refused before a store is opened
        V.check_owner(user_id, agent_id)
        self.store: Store = open_store(store) if isinstance(store, str) else store
        self._owns_store = isinstance(store, str)  # opened here from a URL: closed by close()
        self._owns_manager = manager is None
        self.scope = Scope(tenant=tenant, user_id=user_id, agent_id=agent_id, session_id=session_id).require_session()
        self.manager = manager or SemanticSummarizingConversationManager(
            store=self.store, session_id=session_id, user_id=user_id, agent_id=agent_id, tenant=tenant,
            **manager_options)
        archive = getattr(self.manager, "archive", None)
        if archive is not None:
            archive.archived_span = self._archived_span  # the log holds every message: archiving is indexing
            archive.in_window = lambda: _front_positions(self.manager)  # pinned, past what left: never recalled
        self.hook = hook or SemanticMemoryHook(manager=self.manager)
        self._fresh_state = self.manager.get_state()  # what the manager starts from (and returns to after forget)
        self._messages: list[dict[str, Any]] = []
        self._head: StoredMessage | None = None  # the pinned row at position 0
        self._opening: StoredMessage | None = None  # the row at position 0, pinned or not
        self._pinning: str | None = None  # the state's "pinning": the key of the row a system message is replacing
        self._front: list[StoredMessage] = []  # the rows the manager keeps pinned at the window's front
        self._rows: list[StoredMessage] = []  # the window's other originals as stored
        self._pinned = 0
        self._version = 0
        self._first_key: str | None = None  # the store key of the log's first row (position 0), if any
        self._sync()

    def close(self) -> None:
        """Finish the archive's background indexing if this memory made its manager, and close the store if it
        opened it from a URL (a manager or store passed in is the caller's). Calling it twice is harmless.
        """
        archive = getattr(self.manager, "archive", None) if self._owns_manager else None
        if archive is not None:
            archive.close()
        if self._owns_store:
            self._owns_store = False
            self.store.close()

    def __enter__(self) -> SyncConversationMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the window ---------------------------------------------------------------------------
    @property
    def messages(self) -> list[dict[str, Any]]:
        """The active window as the store has it now (a copy: change it through ``add`` and the managers)."""
        self._sync()
        return list(self._messages)

    def add(self, messages: dict[str, Any] | Iterable[dict[str, Any]], *,
            keys: Sequence[str | None] | None = None) -> None:
        """Record one message or several durably (one atomic append), then let the manager keep the window in budget.

        A message whose ``"id"`` the conversation already holds is not stored again; ``keys[i]``, when given
        and not None, is message i's idempotency key (and store id) instead of its ``"id"`` (an integration
        keys messages by its own ids). Once the append returns the messages are kept: if managing the window
        then fails (a removal listener raised), that is logged, the window stays as it is, and the next call
        tries again.
        """
        new = [messages] if isinstance(messages, dict) else list(messages)
        if keys is not None:
            if isinstance(keys, (str, bytes)):
                raise InvalidInput("add: 'keys' must be a list of keys (or None each), not one string")
            keys = list(keys)
            if len(keys) != len(new):
                raise InvalidInput(f"add: {len(keys)} keys for {len(new)} messages")
            for index, key in enumerate(keys):
                if key is not None:
                    check_id(key, f"message {index}: key")
        self._append(new, keys)

    def _append(self, new: list[dict[str, Any]], keys: Sequence[str | None] | None = None) -> None:
        """What ``add`` does, ``keys`` checked."""
        if not new:
            return
        shape, parsed = parse_messages(new, storable=True)  # a clear error naming the message and field, first
        self._sync()
        if self._messages:
            parse_messages(self._messages + new)  # one shape per conversation (indices count the window)
        records = []
        for index, (raw, msg) in enumerate(zip(new, parsed)):
            msg.id = message_id(raw, index)
            if keys is not None and keys[index]:
                msg.id = keys[index]
            records.append(message_record(msg, shape, data=raw))
        self._finish_repin()  # one a crash interrupted
        if self._cleared() and new[0].get("role") in _PINNED_ROLES:  # a reset: its system message is the pinned one
            held = self.store.get(self.scope, [records[0].id])  # an id held already stores nothing new, as ever
            if not held and not _same(new[0], self._head.data if self._head else {}):  # the same prompt: kept once
                self._repin(records[0])
            new, records = new[1:], records[1:]
        if records:
            self.store.append(self.scope, records)  # durable, positioned and deduplicated by the store
        self._sync()
        try:
            self._manage(self.manager.apply_management)
        except ArchiveError as exc:  # the messages are stored: a failed trim must not look like a failed add
            log.warning("messages stored, but the window could not be managed (it stays as it is): %s", exc)

    def _cleared(self) -> bool:
        """The window holds only the pinned message (and those the manager keeps pinned after it), or nothing when no
        message is pinned, the rest having left it (as after ``clear``): a system message added now opens it.
        """
        if self.manager.removed_message_count == 0:
            return False
        if self._head is None:
            return not self._messages
        return self._messages[:1] == [self._head.data] and len(self._messages) == 1 + len(self._front)

    def _repin(self, record: StoredMessage) -> None:
        """``record`` becomes the pinned message at position 0; the message there leaves for the archive.

        That message (the one pinned before, or a user's or assistant's when the conversation began without a
        system message) is appended again (under a key derived from its own ``"id"``, marked ``@unpinned-``: a
        rerun stores it once, and :func:`copies_of` ties it to the original) and leaves the window at once, as a
        cleared message does, so it stays recallable; only then does one atomic store write (``Store.replace``)
        delete its row at position 0 and write the new message there. Killed at any point, the conversation has
        one pinned message or none (the old or the new), never two, and loses nothing; a copy that had not left
        the window yet leaves it at the next ``add`` (:meth:`_finish_repin`).

        Position 0 unpinned counts among the messages that left the window; pinned, it does not. So before such a
        swap the window state names the row being replaced (``pinning``: its key, empty when position 0 was
        deleted), and :meth:`_sync` counts one message fewer removed once position 0 holds another, pinned one:
        the window's start stays where it is, whether or not the swap landed.
        """
        first = self._opening
        if first is not None:
            copy = replace(first, id=self._copy_key(first), position=None)
            self.store.append(self.scope, [copy])  # a rerun's: its key held already, nothing new stored
            self._sync()
            self._finish_repin()
        counted = self._head is None  # position 0 counts among the removed until the swap
        if counted:
            self._pinning = (first.key or "") if first is not None else ""
            self._save()
        self.store.replace(self.scope, [first.id] if first is not None else [], [replace(record, position=0)])
        self._sync()
        if counted:
            self._save()  # the count as it now is, without "pinning"

    def _copy_key(self, row: StoredMessage) -> str:
        """The store key of ``row``'s copy when it leaves position 0: derived from its root, so a rerun finds the
        copy it appended before (a message of the caller's holding that key already: a fresh one).
        """
        key = _derived_key(_root(row.data, row), f"{_UNPINNED[1:]}0")
        held = self.store.get(self.scope, [key])
        if held and not _same(held[0].data, row.data):
            key = _derived_key(_root(row.data, row), f"{_UNPINNED[1:]}{uuid.uuid4().hex}")
        return key

    def _finish_repin(self) -> None:
        """A copy of the message at position 0 that :meth:`_repin` appended and that is still in the window (the
        newest message of a cleared window) leaves it for the archive.
        """
        rows, first = self._rows, self._opening
        if first is None or len(rows) != 1 or _UNPINNED not in rows[0].id or rows[0].data != first.data:
            return
        lead = len(self._messages) - 1
        self._manage(lambda window: self.manager.leave(
            window, lead, 1, positions=[int(rows[0].position or 0)], originals=[rows[0].data]))

    def apply_management(self) -> None:
        """Let the manager trim or summarize the window now."""
        self._sync()
        self._manage(self.manager.apply_management)

    def reduce_context(self, error: BaseException | None = None) -> None:
        """Shrink after a context overflow (raises ``ContextWindowOverflowError`` if it cannot)."""
        self._sync()
        self._manage(lambda window: self.manager.reduce_context(window, error))

    def model_input(self) -> list[dict[str, Any]]:
        """What to send the model: the window, the newest user message enriched with recalled context."""
        self._sync()
        return self.hook.enrich(self._messages)

    def recall(self, query: str) -> Any:
        """The archived messages relevant to ``query`` (a :class:`~fullrecall.archive.Recall`), never the window."""
        if not isinstance(query, str):
            raise InvalidInput(f"recall: 'query' must be a string, got {type(query).__name__}")
        self._sync()
        return self.manager.recall(query)

    def clear(self) -> None:
        """Empty the window; every message in it goes to the archive first (a pinned system message stays).

        A different system message opening the next ``add`` takes the pinned one's place (the old one goes
        to the archive), as an agent reset with a new prompt expects; the same one again is kept once. With none
        pinned, it becomes the pinned one at position 0 all the same (the message there goes to the archive), as
        the manager pins a system message that opens the window (see :meth:`_repin`).
        """
        self._sync()
        self._manage(self.manager.clear)

    def delete(self, index: int | Iterable[int]) -> None:
        """Delete the window's messages at ``index`` (one or several) for good: text, vectors and all.

        A bad index raises ``IndexError`` and nothing changes. The rest of the window stays, in
        order: it is cleared into the archive and what remains is added back (see :meth:`_rebuild`).
        Deleting the summary drops it (what it summarized stays in the archive). The archived rows of the
        same message go too (see :func:`copies_of`: a rebuild archived the message it added again), with the
        summaries that may repeat them; a copy still in the window (an allowed duplicate) stays.
        """
        self._sync()
        wanted: list[Any] = list(index) if isinstance(index, Iterable) and not isinstance(index, (str, bytes)) else [index]
        bad = [i for i in wanted if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self._messages)]
        if bad:
            raise IndexError(f"delete: no message at {bad} (the window holds {len(self._messages)})")
        doomed = set(wanted)
        if not doomed:
            return
        rows = self.window_rows()
        kept = [m for i, m in enumerate(self._messages) if i not in doomed]
        gone = [row for i in sorted(doomed) if (row := rows[i]) is not None]
        copies = copies_of(self.store, self.scope, gone, keep={row.id for row in rows if row is not None})
        self._rebuild(kept, gone + copies)
        if copies:  # archived: a summary may repeat their words
            forget_window_words(self.store, self.scope, copies)
            forget_summaries(self.store, self.scope, {row.position for row in copies if row.position is not None})
            self._sync()

    def truncate_to_size(self, max_messages: int) -> None:
        """Keep the newest ``max_messages`` in the window; the older ones leave it for the archive (recallable).

        A pinned system message, and the messages the manager keeps pinned after it (``pin_first``, or flagged
        pinned), stay besides them, in order (as with :meth:`clear`: ``truncate_to_size(0)`` is ``clear()``), so a window already
        that small is left as it is: nothing is archived or added again.
        """
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 0:
            raise InvalidInput(f"truncate_to_size: 'max_messages' must be an integer >= 0, got {max_messages!r}")
        self._sync()
        body = self._messages[self._pinned + len(self._front):]
        if len(body) > max_messages:
            self._rebuild(body[len(body) - max_messages:] if max_messages else [])

    def leave(self, indexes: Iterable[int]) -> None:
        """The window's messages at ``indexes`` leave it for the archive (recallable, never deleted); the rest stay.

        They no longer count toward the budget. A pinned system message stays, and so do the messages the
        manager keeps pinned after it (``pin_first``) and those flagged pinned, as with :meth:`clear`; the
        summary, if named, is dropped (what it summarized is archived). The oldest messages leave as a trim's
        do; any others by a rebuild (see :meth:`_rebuild`).
        """
        self._sync()
        wanted = list(indexes)
        bad = [i for i in wanted if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self._messages)]
        if bad:
            raise IndexError(f"leave: no message at {bad} (the window holds {len(self._messages)})")
        gone = {i for i in wanted if i >= self._pinned + len(self._front)  # pinned messages stay (as clear keeps them)
                and not is_pinned(self._messages, i)}
        if not gone:
            return
        lead = len(self._messages) - len(self._rows)  # the pinned message and the summary come before the log rows
        oldest = gone == set(range(lead, lead + len(gone)))
        if oldest and isinstance(self.manager, ConversationManager) and not self.manager.pinned_front:
            rows = self._rows[:len(gone)]
            self._manage(lambda window: self.manager.leave(
                window, lead, len(rows), positions=[int(row.position or 0) for row in rows],
                originals=[row.data for row in rows]))
        else:
            self._rebuild([m for i, m in enumerate(self._messages) if i not in gone])

    def logged(self, ids: Iterable[str]) -> set[str]:
        """Those of ``ids`` the conversation's log holds (in the window or archived): one read of the store."""
        return {row.id for row in self.store.get(self.scope, ids)}

    @property
    def log_mark(self) -> tuple[str | None, int]:
        """A token that changes whenever messages may have left the log since it was read, as of the last read of
        the store: what :meth:`logged` said stays true while it is the same (for a caller that keeps its answers).

        It is the store key of the log's first message (a store never reuses a key, so the conversation
        forgotten by any path and written again has a new one) and the window state's version (which
        :meth:`delete`, a new pinned message and every window change move). A message deleted straight
        from the store (``Store.delete``, by id) does not move it.
        """
        return self._first_key, self._version

    def forget(self) -> dict[str, Any]:
        """Delete this conversation everywhere (window, archive, vectors, summaries); per-kind counts."""
        counts = self.store.forget(self.scope)
        self._sync()
        return counts

    def __len__(self) -> int:
        return len(self.messages)

    # -- the log and the state ------------------------------------------------------------------
    def window_rows(self) -> list[StoredMessage | None]:
        """The stored row behind each window message, as of the last read of the store (None for the summary):
        its store id, position and data as recorded (a window message the manager shortened differs from its row).
        """
        summary = getattr(self.manager, "summary_message", None)
        return ([self._head] if self._pinned else []) + list(self._front) + ([None] if summary is not None else []) \
            + list(self._rows)

    def _rebuild(self, kept: list[dict[str, Any]], doomed: Sequence[StoredMessage] = ()) -> None:
        """Make the window ``kept`` (in order), deleting the ``doomed`` rows from the store.

        The log only grows and the window is always a suffix of it, so: clear the window into the
        archive, delete the doomed rows, and append the kept messages still missing as new log
        entries (their own ``"id"`` unchanged, a fresh key each). A crash half-way loses nothing:
        every kept message is in the archive, at worst not yet back in the window. A summary kept stays the
        summary (never a message of the log).
        """
        summary = getattr(self.manager, "summary_message", None)
        rows = {id(m): row for m, row in zip(self._messages, self.window_rows()) if row is not None}
        self._manage(self.manager.clear)
        self._release_out_of_order(kept)
        if doomed:
            head = self._head
            ids = {row.id for row in doomed}
            kept_front = _front_positions(self.manager)  # the cleared window holds these after the pinned message
            front = [int(row.position or 0) for row in self._front if row.id in ids and row.position in kept_front]
            if front and isinstance(self.manager, ConversationManager):
                # the window loses them too, or the state saved below pairs the places left with their words
                cut = {self._pinned + i for i, p in enumerate(kept_front) if p in front}
                self._messages = [m for i, m in enumerate(self._messages) if i not in cut]
                self.manager.drop_front(front)  # saved with the state below, before the rows are deleted
            if head is not None and head.id in ids:
                # Position 0 is no longer pinned: it counts as gone. The window state saying so (and naming the
                # pinned row, which _sync then skips) is written first, in one write: killed before the row's
                # delete, the window is already right, and the next _sync deletes the row.
                self.manager.removed_message_count += 1
                self._save(unpinned=head.key)
            elif front:
                self._save()
            self.store.delete(self.scope, [row.id for row in doomed])
            self._sync()
        if summary is not None and summary in kept:
            self.manager.restore_from_state({**self.manager.get_state(), "summary_message": summary})
            self._save()
            self._sync()
        missing = _without(kept, self._messages)
        self._append(missing, [_derived_key(_root(raw, rows.get(id(raw))), uuid.uuid4().hex) for raw in missing])

    def _release_out_of_order(self, kept: list[dict[str, Any]]) -> None:
        """The pinned messages a clear kept at the window's front (a Converse message flagged pinned) that ``kept``
        puts after a message the clear did not keep leave the window too, to be added back in order with the rest:
        the front comes before every other message of the window.
        """
        if not isinstance(self.manager, ConversationManager):
            return
        ahead = _without(kept, self._messages[:self._pinned])
        placed = [m for m in self._messages[self._pinned:] if m in ahead]
        at = next((i for i, (m, k) in enumerate(zip(placed, ahead)) if m != k), len(placed))
        if at < len(placed):
            out = placed[at:]
            self._messages[:] = [m for m in self._messages if not any(m is o for o in out)]
            self._manage(self.manager.clear)  # archives them at their places (they were taken out of its front)

    def _archived_span(self) -> tuple[int, int]:
        """Positions ``[first, end)`` that have left the window (as of the last read of the store).

        The messages the manager keeps pinned at the front are not among them: ``pin_first`` pins the first
        ones, so they come before ``first``; one pinned after others that left (a Converse message's flag) is
        inside the span, and the archive skips it (its ``in_window``).
        """
        front = _front_positions(self.manager)
        first = self._pinned
        while first - self._pinned < len(front) and front[first - self._pinned] == first:
            first += 1
        return first, self._pinned + self.manager.removed_message_count + len(front)

    def _sync(self) -> None:
        """Rebuild the window from the store: state first, then the log from the window's start on."""
        state = self.store.get_state(self.scope, _WINDOW_KEY) or {}
        check_window_state(state, f"conversation {self.scope.session_id!r}: the saved window state is damaged: ",
                           _WINDOW_KEY)
        self._check_owner(state)
        self.manager.restore_from_state(state.get("manager") or self._fresh_state)
        if "messages" in state:
            state = self._upgrade(state)
        self._version = int(state.get("version", 0))
        head = self.store.range(self.scope, 0, 0)
        if head and head[0].key is not None and head[0].key == state.get("unpinned"):  # a delete a crash cut short
            self.store.delete(self.scope, [head[0].id])
            head = []
        self._first_key = head[0].key if head else None
        self._opening = head[0] if head else None
        pinned = [head[0].data] if head and head[0].data.get("role") in _PINNED_ROLES else []
        self._pinned = len(pinned)
        self._head = head[0] if pinned else None
        self._pinning = state.get("pinning")
        if self._pinning is not None and head and head[0].key != self._pinning:  # the swap _repin began landed
            self._pinning = None
            if pinned:  # position 0, counted removed when the state was saved, is the pinned message now
                self.manager.removed_message_count -= 1
        front = _front_positions(self.manager)
        self._front = [row for span in self.store.ranges(self.scope, [(p, p) for p in front]) for row in span]
        start = self._pinned + self.manager.removed_message_count + len(front)
        self._rows = self.store.range(self.scope, start, END)
        replaced = state.get("replaced") or {}
        summary = getattr(self.manager, "summary_message", None)
        # each its own dict, never the row's: a manager changing a window message in place (pin_first's flag on a
        # Converse one) changes the window only, which _save compares with the row as stored, and keeps
        pinned_front, body = ([dict(replaced.get(str(row.position), row.data)) for row in rows]
                              for rows in (self._front, self._rows))
        self._messages = [dict(m) for m in pinned] + pinned_front + ([summary] if summary is not None else []) + body

    def _check_owner(self, state: dict[str, Any]) -> None:
        """InvalidInput naming both managers when the saved state is another manager's (one this memory's could
        only refuse with a raw ValueError at every read): the conversation was managed, or imported, so.
        """
        name = (state.get("manager") or {}).get("__name__")
        own = (self._fresh_state or {}).get("__name__") if isinstance(self._fresh_state, dict) else None
        if name is not None and own is not None and name != own:
            raise InvalidInput(f"conversation {self.scope.session_id!r}: the saved window state belongs to {name}, "
                               f"not {own} ('{_WINDOW_KEY}.manager.__name__'): open it with that manager")

    def _upgrade(self, state: dict[str, Any]) -> dict[str, Any]:
        """A window saved whole (by fullrecall before the log was the truth): its messages join the log.

        The system message goes to position 0 and the originals after what was archived, with the ids
        the archive gave by position, so processes that upgrade at once append each message once.
        """
        saved = state["messages"]
        pinned = 1 if saved and saved[0].get("role") in _PINNED_ROLES else 0
        summary = getattr(self.manager, "summary_message", None)
        skip = pinned + int(summary is not None and len(saved) > pinned and saved[pinned] == summary)
        start = pinned + self.manager.removed_message_count
        raws, positions = saved[:pinned] + saved[skip:], [0] * pinned + list(range(start, start + len(saved) - skip))
        if raws:
            shape, parsed = parse_messages(raws)
            for msg, position in zip(parsed, positions):
                msg.position, msg.id = position, f"m{position}"
            self.store.append(self.scope, [message_record(m, shape, data=raw) for m, raw in zip(parsed, raws)])
        upgraded: dict[str, Any] = {"manager": state.get("manager"), "replaced": {}, "version": int(state.get("version", 0)) + 1}
        self.store.put_state(self.scope, _WINDOW_KEY, upgraded)
        return upgraded

    def _manage(self, operation: Callable[[list[dict[str, Any]]], Any]) -> None:
        """Run a manager operation on the window; save the state if the window or the manager's state changed (a
        reduction that cut nothing may still have pinned the first messages: ``pin_first``).
        """
        before = list(self._messages)
        state = self.manager.get_state()
        try:
            operation(self._messages)
        finally:
            if self._messages != before or self.manager.get_state() != state:
                self._save()

    def _save(self, unpinned: str | None = None) -> None:
        """Save the manager's state, unless the store moved on meanwhile; ``unpinned``: the key of the pinned row
        that is being deleted (the window no longer counts it as pinned, see :meth:`_sync`).

        Re-read first: if the conversation was forgotten, nothing is written back; if another
        writer saved a state that got as far as ours (or further), its state stands. Either way
        every message is in the log, so no choice loses one.
        """
        current = self.store.get_state(self.scope, _WINDOW_KEY) or {}
        removed = self.manager.removed_message_count
        version = int(current.get("version", 0))
        theirs = int((current.get("manager") or {}).get("removed_message_count", 0))
        forgotten = (self._version and not current) or self.store.count(self.scope) == 0
        if forgotten or (version != self._version and theirs >= removed):
            self._sync()
            return
        front = _front_positions(self.manager)
        start = self._pinned + removed + len(front)
        kept = [row for row in self._rows if row.position is not None and row.position >= start]
        body = self._messages[len(self._messages) - len(kept):] if kept else []
        held = {row.position: row for row in self._front + self._rows}  # a front message was one or the other
        pairs = [*zip([held.get(p) for p in front], self._messages[self._pinned:self._pinned + len(front)]),
                 *zip(kept, body)]
        replaced = {str(row.position): raw for row, raw in pairs if row is not None and raw != row.data}
        self._version = max(version, self._version) + 1
        state: dict[str, Any] = {"manager": self.manager.get_state(), "replaced": replaced, "version": self._version}
        if unpinned is not None:
            state["unpinned"] = unpinned
        if self._pinning is not None:
            state["pinning"] = self._pinning
        self.store.put_state(self.scope, _WINDOW_KEY, state)
        # the window is as the manager left it; the next operation reads the store again anyway


def _front_positions(manager: Any) -> list[int]:
    """The positions of the messages ``manager`` keeps pinned at the window's front, after a system message (none
    for a manager that pins none, or a caller's own that does not say).
    """
    return [int(p) for p in getattr(manager, "pinned_front", ())]


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _position(value: Any) -> bool:
    """A count or a position a store can hold (a larger one overflowed a driver at the next read of the log)."""
    return _count(value) and value <= V.MAX_POSITION


def _positions_to_messages(value: Any) -> bool:
    return isinstance(value, dict) and all(k.isascii() and k.isdigit() and isinstance(m, dict) for k, m in value.items())


_WINDOW_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {  # what _sync reads of the state, as _save writes it
    "manager": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "replaced": (lambda v: v is None or _positions_to_messages(v), "an object of positions to messages"),
    "version": (_position, f"an integer from 0 to {V.MAX_POSITION}"),  # incremented by every save
    "unpinned": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "pinning": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "messages": (lambda v: isinstance(v, list) and all(isinstance(m, dict) for m in v),
                 "a list of messages (objects)"),  # a window saved whole, by an early version
}
_MANAGER_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {  # and what the managers' restore_from_state reads
    "__name__": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "removed_message_count": (_position, f"an integer from 0 to {V.MAX_POSITION}"),
    "summary_message": (lambda v: v is None or isinstance(v, dict), "a message (an object) or null"),
    "front_positions": (lambda v: v is None or (isinstance(v, list) and all(_position(p) for p in v)),
                        f"a list of positions (integers from 0 to {V.MAX_POSITION}) or null"),
    "pinned": (_position, f"an integer from 0 to {V.MAX_POSITION}"),
    "held_pins": (lambda v: v is None or (isinstance(v, list) and all(isinstance(m, dict) for m in v)),
                  "a list of messages (objects) or null"),
}


def check_window_state(state: Any, prefix: str, path: str) -> None:
    """Refuse, with InvalidInput naming the field (``prefix`` + ``'path.field'``), a window state this memory
    could not read back: a field it reads, not of the type it writes. Read, such a state failed every use of the
    conversation with AttributeError or TypeError (or put a non-message in the window); an import checks a file's
    with this before writing anything. Keys it does not read are left alone.
    """
    if not isinstance(state, dict):
        raise InvalidInput(f"{prefix}'{path}' must be an object, got {_shown(state)}")
    _check_fields(state, _WINDOW_FIELDS, prefix, path)
    manager = state.get("manager") or {}
    if isinstance(manager, dict):
        _check_fields(manager, _MANAGER_FIELDS, prefix, f"{path}.manager")
    held = [(f"{path}.manager.summary_message", manager.get("summary_message"))] + \
        [(f"{path}.manager.held_pins[{i}]", m) for i, m in enumerate(manager.get("held_pins") or ())] + \
        [(f"{path}.replaced.{k}", m) for k, m in (state.get("replaced") or {}).items()] + \
        [(f"{path}.messages[{i}]", m) for i, m in enumerate(state.get("messages") or ())]
    for where, message in held:  # each goes into the window as it is: one a model API would refuse, refused here
        if message is not None:
            try:
                parse_messages([message])
            except MessageFormatError as exc:
                raise InvalidInput(f"{prefix}'{where}' is not a message: {str(exc).removeprefix('message 0: ')}") \
                    from None


def _check_fields(value: dict[str, Any], fields: dict[str, tuple[Callable[[Any], bool], str]], prefix: str,
                  path: str) -> None:
    for key, (ok, what) in fields.items():
        if key in value and not ok(value[key]):
            raise InvalidInput(f"{prefix}'{path}.{key}' must be {what}, got {_shown(value[key])}")


def _shown(value: Any) -> str:
    """``value`` as an error shows it: its repr, cut short (a file's value may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def forget_window_words(store: Store, scope: Scope, deleted: Sequence[StoredMessage]) -> bool:
    """Take the words of the ``deleted`` messages (being deleted from the conversation's log, as stored) out of
    its saved window: its summary, when it may cover one of them (one left the window; the messages it replaced
    stay archived, verbatim), a shortened copy of one, and the manager's own copy of one it holds pinned (``pin_first`` outside
    Converse). A pinned system message deleted (position 0) counts as removed, as :meth:`SyncConversationMemory.delete`
    counts it: the window keeps its start. The next read of the window sees it so. True if the window changed.
    """
    positions = {m.position for m in deleted if m.position is not None}
    state = store.get_state(scope, _WINDOW_KEY)
    if not state or not positions:
        return False
    manager, replaced = dict(state.get("manager") or {}), dict(state.get("replaced") or {})
    dropped = [replaced.pop(str(p)) for p in positions if str(p) in replaced]
    gone = [_without_id(m.data) for m in deleted]
    held = list(manager.get("held_pins") or ())
    pins = [m for m in held if not isinstance(m, dict) or _without_id(m) not in gone]
    removed = int(manager.get("removed_message_count") or 0)
    front = [int(p) for p in manager.get("front_positions") or ()]
    kept_front = [p for p in front if p not in positions]
    head = any(m.position == 0 and m.role in _PINNED_ROLES for m in deleted)  # the window's pinned system message
    # (one whose swap onto position 0 was cut short is counted removed already: the state still says "pinning")
    counted = head and state.get("pinning") is None
    unpinned = len(pins) < len(held) or len(kept_front) < len(front) or head
    if unpinned:  # a message deleted from the front counts as removed: no later one takes its place
        manager["held_pins"] = pins
        manager["front_positions"] = kept_front
        manager["removed_message_count"] = removed + len(front) - len(kept_front) + counted
    # the summary covers what left the window: the positions after a pinned first message (if any) and
    # before the window's start, but for those kept pinned at the front
    summarized = manager.get("summary_message") is not None and \
        any(p not in front and p < 1 + removed + len(front) and not (p == 0 and head) for p in positions)
    if summarized:
        manager["summary_message"] = None
    if not (dropped or summarized or unpinned):
        return False
    store.put_state(scope, _WINDOW_KEY, {**state, "manager": manager, "replaced": replaced,
                                         "version": int(state.get("version", 0)) + 1})
    return True


def _without_id(message: dict[str, Any]) -> dict[str, Any]:
    """A message as compared with a copy: its ``"id"`` (the idempotency key a copy may lack) aside."""
    return {k: v for k, v in message.items() if k != "id"}


def message_id(raw: dict[str, Any], index: int) -> str:
    """The message's own ``"id"`` (its idempotency key; an integer as its digits), or a fresh unique one: the one rule
    of the library and the service.
    """
    if "id" not in raw:
        return uuid.uuid4().hex
    value = raw["id"]
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise MessageFormatError(f"message {index}: 'id' must be a non-empty string or an integer, got {value!r}")
    try:  # named here, as the store would name it, before the id is looked up anywhere
        return check_id(str(value), f"message {index}: 'id'")
    except InvalidInput as exc:
        raise MessageFormatError(str(exc)) from None


def _derived_key(message_id: str, suffix: str) -> str:
    """The store key of a message added again: ``id@suffix``, the id hashed when that would be too long a key."""
    key = f"{message_id}@{suffix}"
    if len(key.encode("utf-8")) <= MAX_ID_BYTES:
        return key
    return f"{hashlib.sha256(message_id.encode('utf-8')).hexdigest()[:32]}@{suffix}"


def copies_of(store: Store, scope: Scope, rows: Sequence[StoredMessage], keep: Collection[str] = ()
              ) -> list[StoredMessage]:
    """The conversation's other rows that hold the same message as one of ``rows`` (being deleted), so that a
    deleted message leaves no copy: stored under its own ``"id"`` (or its row's id) or under a key derived from it
    (:func:`_derived_key`: a rebuild's, a new pinned message's, a message back into the window), with the same data
    but for ``"id"``, a copy keeping the message's own ``"id"``. Another message under the same id (a caller's
    reuse, archived as ``id@position``) differs in its data, one under an id of its own with an ``@`` in its own
    ``"id"``: both stay; so do ``rows`` and the rows ``keep`` names.
    """
    if not rows:
        return []
    names = [{n for n in (row.id, own_id(row) or row.id.split("@", 1)[0]) if n is not None} for row in rows]
    prefixes = [{f"{k}@" for n in ns for k in (n, hashlib.sha256(n.encode("utf-8")).hexdigest()[:32])}
                for ns in names]
    found = store.get(scope, sorted(set.union(*names))) + \
        store.get_copies(scope, sorted({p[:-1] for ps in prefixes for p in ps}))
    skip = set(keep) | {row.id for row in rows}
    out: dict[str, StoredMessage] = {}
    for other in found:  # a copy keeps the message's own "id" (none for one added without): "a@b" of its own is no copy
        if other.id not in skip and any(
                (other.id in ns or (other.id.startswith(tuple(ps)) and own_id(other) == own_id(row)))
                and _same(other.data, row.data) for row, ns, ps in zip(rows, names, prefixes)):
            out[other.id] = other
    return list(out.values())


def _root(raw: dict[str, Any], row: StoredMessage | None) -> str:
    """What a copy of ``raw`` is keyed after (``root@...``), so that :func:`copies_of` finds it: its own ``"id"``,
    or, for a message added without one, its row's key before any ``@`` (the first row's: a fresh id).
    """
    if "id" in raw:
        return str(raw["id"])
    return row.id.split("@", 1)[0] if row is not None else "m"


def own_id(row: StoredMessage) -> str | None:
    """The message's own ``"id"`` as a store id (as :func:`message_id` reads it), or None when it has none a store
    could hold.
    """
    value = row.data.get("id")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    try:
        return check_id(str(value), "id")
    except InvalidInput:
        return None


def _same(message: dict[str, Any], other: dict[str, Any]) -> bool:
    """The same message but for its ``"id"``."""
    return {k: v for k, v in message.items() if k != "id"} == {k: v for k, v in other.items() if k != "id"}


def _without(kept: list[dict[str, Any]], present: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``kept`` less one equal message for each message ``present`` already (order kept)."""
    left = list(present)
    out = []
    for message in kept:
        if message in left:
            left.remove(message)
        else:
            out.append(message)
    return out


class ConversationMemory:
    """The chat loop's memory with MassGen's API, as coroutines: durable and with full recall.

    ``await add(messages)`` records a dict or a list (an ``"id"`` is added to a copy of a message
    that has none; a message whose id the window, or an earlier message of the call, holds is skipped
    unless ``allow_duplicates``),
    ``await get_messages(limit)`` is the active window (copies), ``clear`` empties the window into
    the archive, ``delete`` removes messages for good, ``truncate_to_size`` moves the oldest out of
    the window into the archive, ``retrieve``/``recall`` search what left the window. Construction
    and ``state_dict``/``load_state_dict`` are plain calls. The work is done by a
    :class:`SyncConversationMemory` (``.sync``) in a worker thread, so the event loop never blocks;
    the arguments are the same as its.
    """

    def __init__(
        self,
        store: Store | str = "sqlite:///:memory:",
        session_id: str = "default",
        **options: Any,
    ) -> None:
        self.sync = SyncConversationMemory(store, session_id, **options)  # user_id, tenant, manager, ...: the same
        self.store, self.scope = self.sync.store, self.sync.scope
        self._lock = threading.Lock()  # one operation at a time on the twin, whichever thread runs it
        renew_in_child(self)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close what this memory opened (see :meth:`SyncConversationMemory.close`); harmless twice."""
        with self._lock:
            self.sync.close()

    async def __aenter__(self) -> ConversationMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    async def _run(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` in a worker thread, under this object's lock."""
        def locked() -> Any:
            with self._lock:
                return function(*args)

        return await asyncio.to_thread(locked)

    # -- MassGen's MemoryBase --------------------------------------------------------------------
    async def add(self, messages: dict[str, Any] | Sequence[dict[str, Any]] | None,
                  allow_duplicates: bool = False) -> None:
        """Record one message or several, durably, then let the manager keep the window in budget.

        A message without ``"id"`` gets one (on a copy). One whose id the window or an earlier
        message of the call holds already is skipped (a retried ``add`` stores once; of two messages
        sharing an id the first is kept, as :class:`SyncConversationMemory` keeps it) unless
        ``allow_duplicates``, which keeps each. A message that
        left the window (``clear``, ``truncate_to_size``, the manager) and is added again comes
        back into the window, as a new log entry: so MassGen's compressor, ``clear()`` then
        ``add(kept)``, leaves exactly ``kept``.
        """
        if messages is None:
            return
        batch = [messages] if isinstance(messages, dict) else messages
        if not isinstance(batch, (list, tuple)):
            raise MessageTypeError(f"add: messages must be a dict or a list of dicts, got {type(messages).__name__}")
        for index, message in enumerate(batch):
            if not isinstance(message, dict):
                raise MessageTypeError(f"message {index}: must be a dict, got {type(message).__name__}")
        await self._run(self._add, [dict(m) for m in batch], allow_duplicates)

    def _add(self, batch: list[dict[str, Any]], allow_duplicates: bool) -> None:
        for index, message in enumerate(batch):
            message.setdefault("id", f"msg_{uuid.uuid4().hex[:12]}")
            message_id(message, index)  # a bad id is refused before anything is stored
        window = {str(m["id"]) for m in self.sync.messages if "id" in m}
        rows = self.store.get(self.scope, list(dict.fromkeys(str(m["id"]) for m in batch))) if batch else []
        # an id logged where the window begins or later is the window's, also when another writer's add of it
        # landed after the window was read (taken for a message back into the window, it was stored twice)
        end = self.sync._archived_span()[1]
        window |= {row.id for row in rows if row.position is not None and row.position >= end}
        if not allow_duplicates:  # an id the window or an earlier message of the batch holds: skipped
            held, fresh = set(window), []
            for message in batch:
                if str(message["id"]) not in held:
                    held.add(str(message["id"]))
                    fresh.append(message)
            batch = fresh
        ids = [str(m["id"]) for m in batch]
        logged = {row.id for row in rows}
        start = self.sync._pinned + self.sync.manager.removed_message_count
        keys: list[str | None] = []
        seen: set[str] = set()
        back: dict[str, int] = {}  # the keys of messages back into the window: index in the batch
        for index, key in enumerate(ids):
            if key in window or key in seen:  # allowed duplicates: a fresh key each
                keys.append(_derived_key(key, uuid.uuid4().hex))
            elif key in logged:  # back into the window after leaving it; a retry finds it there
                derived = _derived_key(key, str(start))
                keys.append(derived)
                back[derived] = index
            else:
                keys.append(None)
            seen.add(key)
        if back:  # such a key that another message holds as its own id ("A@1" beside "A") is no retry of this one
            for row in self.store.get(self.scope, list(back)):
                index = back[row.id]
                if row.data != batch[index]:
                    keys[index] = _derived_key(ids[index], uuid.uuid4().hex)
        self.sync.add(batch, keys=keys)

    async def get_messages(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The active window (copies); a positive ``limit`` keeps the most recent ``limit``."""
        _check_limit("get_messages", limit)
        messages = await self._run(lambda: self.sync.messages)
        return [dict(m) for m in (messages[-limit:] if limit is not None and limit > 0 else messages)]

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The active window (copies), read at once: MassGen's public ``messages`` list, read-only here.

        A plain read of the store, as ``state_dict`` is; in a coroutine, ``await get_messages()`` keeps the
        event loop free.
        """
        with self._lock:
            return [dict(m) for m in self.sync.messages]

    async def get_messages_by_role(self, role: str) -> list[dict[str, Any]]:
        """The window's messages of ``role`` (copies)."""
        return [m for m in await self.get_messages() if m.get("role") == role]

    async def get_last_message(self) -> dict[str, Any] | None:
        """The newest message of the window (a copy), or None when it is empty."""
        messages = await self.get_messages(limit=1)
        return messages[0] if messages else None

    async def delete(self, index: int | Iterable[int]) -> None:
        """Delete the window's messages at ``index`` for good (``IndexError`` when one does not exist)."""
        await self._run(self.sync.delete, index)

    async def truncate_to_size(self, max_messages: int) -> None:
        """Keep the newest ``max_messages`` in the window; the older leave it for the archive (recallable).
        A pinned system message, and the messages ``pin_first`` pins, stay besides them (as with ``clear``).
        """
        await self._run(self.sync.truncate_to_size, max_messages)

    async def clear(self) -> None:
        """Empty the window into the archive (a pinned system message stays; nothing is deleted)."""
        await self._run(self.sync.clear)

    async def size(self) -> int:
        """How many messages the window holds."""
        return len(await self.get_messages())

    async def retrieve(self, query: str | dict[str, Any] | Sequence[dict[str, Any]], limit: int | None = None,
                       **kwargs: Any) -> list[dict[str, Any]]:
        """Archived messages relevant to ``query`` (text, or messages whose text is joined), best first."""
        _check_limit("retrieve", limit)
        if not isinstance(query, (str, dict, list, tuple)):
            raise InvalidInput(f"retrieve: 'query' must be a string, a message or a list of them, got "
                               f"{type(query).__name__}")
        text = query if isinstance(query, str) else _text_of([query] if isinstance(query, dict) else list(query))
        found = await self.recall(text)
        messages = [dict(m.data) for m in found.messages]
        return messages[:limit] if limit is not None and limit > 0 else messages

    def state_dict(self) -> dict[str, Any]:
        """``{"messages": the window}`` (MassGen's shape)."""
        with self._lock:
            return {"messages": [dict(m) for m in self.sync.messages]}

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> None:
        """Make the window ``state_dict["messages"]`` (what was there goes to the archive, as ``clear``).

        Raises ``ValueError`` when ``messages`` is missing and ``strict``; non-dict entries are skipped.
        A malformed message raises :class:`~fullrecall.errors.MessageFormatError` naming it, and the
        window stays as it was; loading the window it already is changes nothing.
        """
        if not isinstance(state_dict, dict):
            raise InvalidInput(f"load_state_dict: the state must be a dict, got {type(state_dict).__name__}")
        if not isinstance(state_dict.get("messages") or [], (list, tuple)):
            raise InvalidInput("load_state_dict: 'messages' must be a list, got "
                               f"{type(state_dict['messages']).__name__}")
        if strict and "messages" not in state_dict:
            raise InvalidInput("load_state_dict: the state has no 'messages' (strict=True)")
        messages = [dict(m) for m in state_dict.get("messages") or [] if isinstance(m, dict)]
        named = [index for index, message in enumerate(messages) if "id" not in message]
        for index, message in enumerate(messages):
            message.setdefault("id", f"msg_{uuid.uuid4().hex[:12]}")
            message_id(message, index)
        if messages:
            parse_messages(messages, storable=True)  # named before the window is touched
        with self._lock:
            window = self.sync.messages
            summary = getattr(self.sync.manager, "summary_message", None)
            for index in named:  # the window's summary (it has no id) stays the summary, never a message of the log
                if summary is not None and _same(messages[index], summary):
                    del messages[index]["id"]
            if messages == window:  # the window it is already (a restart loading what it saved): nothing to do
                return
            head = window[:self.sync._pinned]  # the pinned system message stays: one shape with it
            if messages and head and head[0] not in messages:
                parse_messages(head + messages)
            self.sync._rebuild(messages)  # clears the window into the archive, the summary kept if loaded

    # -- what fullrecall adds -------------------------------------------------------------------
    async def model_input(self) -> list[dict[str, Any]]:
        """What to send the model: the window, the newest user message enriched with recalled context."""
        return await self._run(self.sync.model_input)

    async def recall(self, query: str) -> Any:
        """The archived messages relevant to ``query`` (a :class:`~fullrecall.archive.Recall`)."""
        return await self._run(self.sync.recall, query)

    async def forget(self) -> dict[str, Any]:
        """Delete this conversation everywhere (window, archive, vectors, summaries); per-kind counts."""
        return await self._run(self.sync.forget)

    async def apply_management(self) -> None:
        """Let the manager trim or summarize the window now."""
        await self._run(self.sync.apply_management)

    async def reduce_context(self, error: BaseException | None = None) -> None:
        """Shrink after a context overflow (raises ``ContextWindowOverflowError`` if it cannot)."""
        await self._run(self.sync.reduce_context, error)

    @property
    def manager(self) -> Any:
        """The window manager."""
        return self.sync.manager


def _check_limit(name: str, limit: Any) -> None:
    """A ``limit`` is None or an integer (a bool or a string is refused by name)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise InvalidInput(f"{name}: 'limit' must be an integer or None, got {limit!r}")


def _text_of(messages: list[dict[str, Any]]) -> str:
    """The plain text of messages, joined (for a query given as messages)."""
    return "\n".join(m.text for m in parse_messages(messages)[1] if m.text)

"""``PersistentMemory``: one user's and one agent's long-term memory, across sessions and restarts.

The API keeps MassGen's names and return shapes (``record``, ``retrieve``,
``save_to_memory``, ``recall_from_memory``; ``agent_name``/``user_name``/``session_name``
accepted), but nothing is summarized away and no LLM is needed: every recorded turn is
archived verbatim with its embedding (one batched call per ``record`` for its messages; a fact in
words of its own is embedded beside it) and found again by
hybrid search (:class:`~fullrecall.search.SemanticSearch`); facts stated by the user are kept
with validity intervals (:class:`~fullrecall.memory.facts.FactMemory`, by rules unless a
``chat_model`` is given).

Scoping: everything is written under the owner's exact scope (tenant, user, agent; an unset
user or agent is the default owner ``""``) and every read filters on it in the store, so one
user's memory never reaches another's. Writes go to this instance's session (a new one per
instance unless ``session_id`` is given); reads span all the owner's sessions.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC
from pathlib import Path
from queue import SimpleQueue
from typing import IO, Any

import numpy as np

from .._fork import after_fork_in_child
from .._json import dumps_text
from .._json import parse as parse_json
from ..archive.archive import archived_summaries, forget_summaries
from ..errors import FactExtractionError, InvalidInput, MemoryInputError, MessageFormatError
from ..stores import _validate as V
from ..stores import open_store
from ..stores._forget import is_change_log
from ..stores.base import DEFAULT_TENANT, Record, Scope, Store, StoredMessage
from ._records import RecordBook, owner_scope, record_owner
from ._records import checked as _checked
from .conversation import copies_of, forget_window_words, message_id, own_id
from .facts import Fact, FactMemory

log = logging.getLogger("fullrecall.memory")

DEFAULT_STORE = "sqlite:///fullrecall_memory.db"
_SESSIONS = "sessions"
_EMPTIED = "emptied"  # a session record's mark: a selective clear deleted every message the session had
_EVERYTHING = 2**62  # a position past any session's end
IN_FLIGHT_S = 60.0  # a message without a vector recorded this recently may be being embedded by its writer
_NO_QUERY: Any = object()  # retrieve() given no query at all
MIN_FACT_SIMILARITY = 0.3
MAX_QUERIES = 3
ERROR_MODES = ("log", "raise", "silent")
_REASON = "memory_save_reason"  # the metadata of the message that keeps save_to_memory's ``thinking``


@dataclass
class MemoryHit:
    """One thing recalled: an archived message (``kind="message"``) or a fact (``kind="fact"``).

    ``score`` is the cosine similarity for a fact and the fused hybrid score (0-1, relative to
    the query's best candidate, see :mod:`fullrecall.search.fusion`) for a message.
    """

    kind: str
    id: str
    text: str
    score: float
    agent_id: str = ""
    session_id: str | None = None
    role: str | None = None
    created_at: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class PersistentMemory:
    """Long-term memory of one user and agent (see the module docstring).

    ``store`` is a :class:`~fullrecall.stores.base.Store` or URL (default: a SQLite file in the
    working directory); ``embedder`` an :class:`~fullrecall.embeddings.Embedder` or model name
    (default: the local MiniLM); ``extract_facts`` keeps user-stated facts (rules; the
    ``chat_model``'s checked extraction when one is given). An extraction that fails (the chat model does, or
    its answer is no JSON array of facts, or is cut short) keeps every word recorded and, by ``errors``, is
    logged (``"log"``, the default), raised as :class:`~fullrecall.errors.FactExtractionError` (``"raise"``)
    or passed over (``"silent"``); ``stats()`` counts them. MassGen's mem0 options (``llm_config``,
    ``embedding_backend``, ``on_disk``, ...) are accepted as written and not used (a warning names them).
    With ``warm`` (the default) the owner's memory is read into the process in the background as soon as the
    memory is made (see :meth:`warm`), so that the first ``retrieve`` does not wait for it; a memory made for
    one call (a request) is better made with ``warm=False``.
    """

    def __init__(
        self,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        store: Store | str = DEFAULT_STORE,
        *,
        agent_name: str | None = None,
        user_name: str | None = None,
        session_name: str | None = None,
        tenant: str = DEFAULT_TENANT,
        embedder: Any = None,
        extract_facts: bool = True,
        chat_model: Any = None,
        errors: str = "log",
        warm: bool = True,
        **mem0_options: Any,
    ) -> None:
        from ..embeddings import load_embedder

        if errors not in ERROR_MODES:
            raise InvalidInput(f"PersistentMemory: 'errors' must be one of {ERROR_MODES}, got {errors!r}")
        _check_mem0_options(mem0_options)
        self.user_id = _checked(V.check_owner_id, _one_of("user_id", user_id, "user_name", user_name),
                                "'user_id'") or ""
        self.agent_id = _checked(V.check_owner_id, _one_of("agent_id", agent_id, "agent_name", agent_name),
                                 "'agent_id'") or ""
        session = _one_of("session_id", session_id, "session_name", session_name)
        self.session_id = (session and _checked(V.check_session_id, session, "PersistentMemory: 'session_id'")
                           or f"s-{uuid.uuid4().hex}")
        self._owns_store = isinstance(store, str)
        self.store: Store = open_store(store) if isinstance(store, str) else store
        self.tenant = tenant
        self.owner = owner_scope(tenant, self.user_id, self.agent_id)
        self.embedder = load_embedder(embedder)
        self._query_vectors = _QueryVectors(self.embedder)
        self._search = self._searcher(self.session_id)
        self.facts = FactMemory(self.store, user_id=self.user_id, agent_id=self.agent_id, tenant=tenant,
                                embedder=self.embedder, chat_model=chat_model)
        self.extract_facts = extract_facts
        self.errors = errors
        self.extraction_failures = 0  # this instance's, since it was made
        self._sessions = RecordBook(self.store, self.owner, _SESSIONS)
        self._noted = False  # whether this instance has put its session in the owner's list
        self._unembedded: set[str] = set()  # ids this instance stored but could not embed (see catch_up)
        self._unlearned: set[str] = set()  # ids of turns whose facts a failed record did not learn: their retry
        # learns them even when a catch-up gave the messages their vectors meanwhile
        self._warms = warm
        self._warming = _warm_later(self) if warm else None
        self._first_warming = self._warming  # the one followed by a catch-up, which may outlast it: see close

    # -- MassGen's interface: coroutines (see "Coroutines" in docs/memory.md for where their work runs) ---------
    async def record(self, messages: Any, metadata: dict[str, Any] | None = None, **kw: Any) -> list[str]:
        """Archive a turn verbatim, with embeddings; return the stored message ids.

        A message's time is its ``timestamp`` (or ``created_at``) key when it has one (Unix
        seconds or ISO 8601), else now. System messages, ``None`` and messages with empty content
        are skipped. ``metadata`` (e.g. ``{"turn": 3}``) is kept with every message; other
        keywords (MassGen's ``memory_type``, ``infer``) are accepted and ignored.

        Retries store once when the caller says which turn this is: a message's own ``id``
        key, or ``metadata["turn"]`` with the message's place in the turn and its content, make
        its stored id. A malformed message raises
        :class:`~fullrecall.errors.MessageFormatError` naming it, before anything is written.
        """
        if self.extract_facts and self.facts.chat_model is not None:  # it may wait seconds for the model
            return await asyncio.to_thread(self.record_sync, messages, metadata)
        return self.record_sync(messages, metadata)

    async def retrieve(
        self,
        query_or_messages: Any = _NO_QUERY,
        limit: int = 5,
        previous_winners: Sequence[dict[str, Any]] | None = None,
        *,
        query: Any = _NO_QUERY,
        **kw: Any,
    ) -> str:
        """Context ready to inject: the current facts and archived messages most relevant to the query.

        The query (text, a message or messages) comes first, or as ``query=`` (MassGen's name).
        ``previous_winners`` (``[{"agent_id": "b", "turn": 1}, ...]``, MassGen's shape) adds
        what those agents recorded for the same user (in that turn, when given), each line
        marked ``[From b Turn 1]``. Returns "" when nothing is found.
        """
        query_or_messages = _the_query(query_or_messages, query)
        winners = list(previous_winners or ())
        if isinstance(previous_winners, (str, bytes)) or not all(isinstance(w, dict) for w in winners):
            raise MemoryInputError(f"retrieve: 'previous_winners' must be a list of {{'agent_id', 'turn'}} dicts, "
                                   f"not {previous_winners!r}")
        lines = [_line(h) for h in self.search(query_or_messages, limit)]
        for winner in winners:
            agent, turn = str(winner.get("agent_id") or ""), winner.get("turn")
            if not agent or agent == self.agent_id:
                continue
            tag = f"[From {agent} Turn {turn}] " if turn is not None else f"[From {agent}] "
            lines += [tag + _line(h) for h in self.search(query_or_messages, limit, agent_id=agent, turn=turn)]
        return "\n".join(lines)

    async def save_to_memory(self, thinking: str, content: str | Sequence[str], **kw: Any) -> dict[str, Any]:
        """Agent tool: keep each item of ``content`` as a fact; ``{"success", "message", "memory_ids"}``.

        ``thinking``, the agent's reason for saving them (MassGen keeps it as their context), is recorded as
        one message (``{"role": "assistant", "name": "memory_save", "content": thinking}``, searchable, no fact
        drawn from it) that each fact names among its ``sources``: ``expand(fact_id)`` returns it.
        """
        items = [content] if isinstance(content, str) else list(content)
        try:
            if thinking is not None and not isinstance(thinking, str):
                raise MemoryInputError(f"save_to_memory: 'thinking' must be a string, not {thinking!r}")
            if not items:
                raise MemoryInputError("save_to_memory: 'content' is empty")
            for i, item in enumerate(items):
                if not isinstance(item, str) or not item.strip():
                    raise MemoryInputError(f"save_to_memory: content item {i} must be a non-empty string, not {item!r}")
                self.facts.check(item, f"save_to_memory: content item {i}")  # all checked before anything is kept
            sources: list[dict[str, str]] = []
            if thinking and thinking.strip():
                reason = {"role": "assistant", "name": "memory_save", "content": thinking}
                try:
                    _conversation([reason], storable=True)
                except MessageFormatError as exc:
                    raise MemoryInputError(f"save_to_memory: 'thinking': {str(exc).removeprefix('message 0: ')}"
                                           ) from None
                recorded = self._record([reason], {_REASON: True}, learn=False)
                sources = [{"session_id": self.session_id, "id": i} for i in recorded]
            ids = [self.remember(item, sources=sources).id for item in items]
        except MemoryInputError as exc:
            return {"success": False, "message": str(exc), "memory_ids": []}
        return {"success": True, "message": f"Successfully saved {len(ids)} items to memory", "memory_ids": ids}

    async def recall_from_memory(self, keywords: str | Sequence[str], limit: int = 5, **kw: Any) -> dict[str, Any]:
        """Agent tool: memories for each keyword (up to ``limit`` each); ``{"success", "memories", "count"}``."""
        if not isinstance(keywords, (str, list, tuple)):
            return {"success": False, "message": f"recall_from_memory: 'keywords' must be a string or a list of them, "
                    f"not {keywords!r}", "memories": [], "count": 0}
        words = [keywords] if isinstance(keywords, str) else [str(k) for k in keywords]
        try:
            hits = [hit for word in words for hit in self.search(word, limit)]
        except MemoryInputError as exc:  # a tool call's bad argument is the tool's answer, as in save_to_memory
            return {"success": False, "message": str(exc), "memories": [], "count": 0}
        # a saved fact's reason (see save_to_memory) is not repeated beside the fact it explains
        explained = {s.get("id") for h in hits if h.kind == "fact" for s in h.metadata.get("sources") or ()}
        seen: dict[str, str] = {}
        for hit in hits:
            if not (hit.kind == "message" and hit.metadata.get(_REASON) and hit.id in explained):
                seen.setdefault(hit.id, hit.text)
        memories = list(seen.values())
        return {"success": True, "memories": memories, "count": len(memories)}

    # -- the same, synchronous and structured ------------------------------------------------
    def record_sync(self, messages: Any, metadata: dict[str, Any] | None = None) -> list[str]:
        """What :meth:`record` does, for synchronous callers."""
        return self._record(messages, metadata, learn=True)

    def _record(self, messages: Any, metadata: dict[str, Any] | None, *, learn: bool) -> list[str]:
        """Store and index ``messages``; with ``learn``, keep the facts found in them too."""
        if metadata is not None and not isinstance(metadata, dict):
            raise MemoryInputError(f"record: 'metadata' must be a dict or None, not {type(metadata).__name__}")
        try:  # what the store would refuse, refused before anything is embedded or written (the session listed)
            V.check_json_value(metadata or {}, "record: 'metadata'")
        except InvalidInput as exc:
            raise MemoryInputError(str(exc)) from None
        found = _conversation(messages, storable=True)
        if not found:
            return []
        for index, msg, _, _ in found:  # an id given is the message's own, or refused by the one rule, as everywhere
            if "id" in msg:
                message_id(msg, index)
        now = time.time()
        ids = [self._message_id(msg, i, metadata) for i, (_, msg, _, _) in enumerate(found)]
        first: dict[str, int] = {}  # each id's first message, by its place in ``found``
        for at, ((index, msg, _, _), m_id) in enumerate(zip(found, ids)):  # an id given twice: one message, twice
            earlier = found[first.setdefault(m_id, at)]
            if earlier[1] != msg:  # two messages under one id: the store would keep one, and the other be lost
                raise MessageFormatError(f"message {index}: 'id' {msg.get('id')!r} is also message {earlier[0]}'s, "
                                         "a different message; ids are unique within a turn")
        kept = [(msg, parsed, shape) for _, msg, parsed, shape in found]
        turn = [kept[at] for at in first.values()]
        turn_ids, texts = list(first), [_words(parsed.text) for _, parsed, _ in turn]
        sources = [{"session_id": self.session_id, "id": i} for i in turn_ids]
        learns = learn and self.extract_facts
        by_rules = learns and self.facts.chat_model is None
        unlearned = self._unlearned.intersection(turn_ids) if learns else set()  # a failed record's: learned now

        def store_words() -> list[StoredMessage]:  # the messages as stored, built here beside the embedding
            stored = []
            for m_id, (msg, parsed, shape) in zip(turn_ids, turn):
                created = _message_time(msg)
                created = now if created is None else created  # 0 is a time: 1970-01-01
                stored.append(StoredMessage(
                    id=m_id, role=parsed.role, text=_index_text(parsed.text, parsed.role, created), data=msg,
                    created_at=created, archived_at=now, metadata={**(metadata or {}), "shape": shape},
                ))
            self._store_words(stored)
            return stored

        # While the turn's messages are embedded: they are built and their words made durable, the store asked
        # which of them a retry already recorded with a vector (stored and learned from nothing twice), and the
        # facts in them are found and learned on other threads (see _learn_early).
        said: Future[np.ndarray] = Future()  # the messages' vectors: a fact that is a message's words shares its own
        stored_words = _io().submit(store_words)
        retried = _io().submit(self.store.get_vectors, self._search.scope, turn_ids)  # beside it
        learning = self._learn_early([(p.role, p.text) for _, p, _ in turn], sources, turn_ids, texts, said,
                                     stored_words, retried, now, unlearned) if by_rules else None
        try:
            try:
                vectors = _embed_once(self._search.embedder, texts)
            except BaseException as exc:
                said.set_exception(exc)
                raise
            said.set_result(vectors)
            if learning is not None:
                learning.embedded.result()  # a fact's own embedding failed: as if the turn's had
        except Exception:
            if learning is not None:  # (the facts in words of their own may be kept: see docs/memory.md)
                wait([learning.kept])
            if learns:  # (first: a catch-up on the warming thread leaves their facts to the retry or next record)
                self._unlearned.update(turn_ids)
            self._unembedded.update(turn_ids)  # their words are stored all the same: see catch_up
            raise
        finally:
            stored = stored_words.result()
            have = set(retried.result())
        fresh = [i for i, m_id in enumerate(turn_ids) if m_id not in have]
        new = [stored[i] for i in fresh]
        new_ids = {m.id for m in new}
        try:
            try:
                if new:
                    self._search.index(new, append=False, vectors=vectors[fresh])
            finally:
                if learning is not None:
                    wait([learning.kept])
            if learning is not None:
                learning.kept.result()
        except Exception:
            if learns:
                self._unlearned.update(turn_ids)
            self._unembedded.update(new_ids)  # the vectors' write failed: see catch_up
            raise
        self._unlearned.difference_update(unlearned)  # kept above, or learned below
        if not new and not unlearned:
            return ids
        if self._unembedded or self._unlearned:  # an earlier turn failed here: the embedder and the store work again
            self._catch_up_quietly()
        todo = [i for i, m_id in enumerate(turn_ids) if m_id not in have or m_id in unlearned]
        if learns and not by_rules and todo:  # the chat model reads the turn once its words are stored
            try:
                self.facts.learn([turn[i][0] for i in todo], [sources[i] for i in todo], stated_at=now)
            except FactExtractionError as exc:  # the words are kept; facts are missed (but those kept before a cut)
                self._extraction_failed(exc, len(todo), ids)
        self._warm_again()
        return ids

    def _learn_early(self, turn: list[tuple[str, str]], sources: list[dict[str, str]], ids: list[str],
                     texts: list[str], said: Future[np.ndarray], stored_words: Future[Any],
                     retried: Future[dict[str, Any]], now: float, unlearned: set[str]) -> _Learning:
        """Find and keep the facts of a turn ((role, text) each) while its messages are embedded, on another
        thread: a fact in words of its own is embedded there, the cached facts checked, and the facts of the
        messages a retry had not already recorded (or had recorded without learning from them: ``unlearned``, by a
        failed record of this instance) kept once their words are durable. A fact that is a message's words needs
        that message's vector: its keeping is handed back to the pool once the turn's embedding is done, so that
        no worker thread sits waiting for it (other records' word appends would queue behind). The task waits only
        on tasks handed to the pool before it, which have begun; the main thread waits on it only for what it
        sets before waiting.
        """
        embedded: Future[None] = Future()  # set before the task waits on anything
        kept: Future[None] = Future()

        def keep(learned: list[Any], rows: dict[str, np.ndarray]) -> None:
            try:
                if any(c.text not in rows for c in learned):  # a message's words: its vector (made by now)
                    rows.update(zip(texts, said.result()))
                self.facts.keep(learned, np.stack([rows[c.text] for c in learned]), stated_at=now, checked=True)
            except BaseException as exc:
                kept.set_exception(exc)
            else:
                kept.set_result(None)

        def learn() -> None:
            try:
                found = self.facts.candidates_in(turn, sources)
                own = list(dict.fromkeys(c.text for c in found if c.text not in texts))
                rows = dict(zip(own, _embed_once(self._search.embedder, own))) if own else {}
            except BaseException as exc:
                embedded.set_exception(exc)
                kept.set_exception(exc)
                return
            embedded.set_result(None)
            try:
                learned: list[Any] = []
                if found:
                    self.facts.book.entries()  # the cached facts checked: kept below without another round trip
                    stored_words.result()
                    new = set(ids).difference(retried.result()) | unlearned
                    learned = [c for c in found if any(s["id"] in new for s in c.sources)]
            except BaseException as exc:
                kept.set_exception(exc)
                return
            if not learned:
                kept.set_result(None)
            elif said.done() or all(c.text in rows for c in learned):
                keep(learned, rows)
            else:
                said.add_done_callback(lambda _: hand_over(learned, rows))

        def hand_over(learned: list[Any], rows: dict[str, np.ndarray]) -> None:  # by the thread that sets ``said``
            try:
                _io().submit(keep, learned, rows)
            except RuntimeError:  # no new task at interpreter exit: kept here
                keep(learned, rows)

        _io().submit(learn)
        return _Learning(embedded, kept)

    def _extraction_failed(self, exc: FactExtractionError, recorded: int, ids: list[str]) -> None:
        """Count a failed fact extraction and handle it as ``errors`` says."""
        self.extraction_failures += 1
        said = (f"recorded {recorded} message{'s' if recorded > 1 else ''} but could not extract facts from "
                f"{'them' if recorded > 1 else 'it'}: {exc}")
        if self.errors == "raise":
            raise FactExtractionError(said, facts=exc.facts, ids=ids) from exc
        if self.errors == "log":
            log.warning("%s", said)

    def _store_words(self, messages: list[StoredMessage]) -> None:
        """Append a turn's messages (idempotent: those a retry already stored keep their place, and nothing of
        them is written again), while the caller asks which of them already have a vector.

        The session is added to the owner's list the first time this instance writes to it, and again
        whenever the session starts over at position 0 (the owner was forgotten, here or by another
        process): no round trip for it on the other turns.
        """
        self._search._check_vector_space()  # before anything is written: one embedding model per index
        first = not self._noted
        if first:  # listed before its words are written: a crash in between loses no listing
            self._note_session()
            self._noted = True
        positions = self.store.append(self._search.scope, messages)
        if 0 in positions and not first:  # the session started over: the owner was forgotten since
            self._note_session()

    def _message_id(self, msg: dict[str, Any], index: int, metadata: dict[str, Any] | None) -> str:
        """A message's id: derived from its own ``id`` key, or from ``metadata["turn"]``, its place in
        the turn and its content, so that recording the same turn again stores nothing twice; else a new uuid.
        """
        own = msg.get("id")
        if (isinstance(own, str) and own) or (isinstance(own, int) and not isinstance(own, bool)):
            key: list[Any] = ["id", own]
        elif metadata and metadata.get("turn") is not None:  # the words too: a reused turn number loses nothing
            key = ["turn", metadata["turn"], index, msg]
        else:
            return uuid.uuid4().hex
        parts = [self.tenant, self.user_id, self.agent_id, self.session_id, *key]
        return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]

    def search(
        self,
        query_or_messages: str | dict[str, Any] | Sequence[dict[str, Any]],
        limit: int = 5,
        *,
        agent_id: str | None = None,
        turn: Any = None,
        kinds: tuple[str, ...] = ("fact", "message"),
    ) -> list[MemoryHit]:
        """The structured variant of :meth:`retrieve`: current facts first, then messages, with scores.

        ``agent_id`` reads another agent's memory of the same user; ``turn`` keeps only
        messages recorded with that ``metadata["turn"]``. Given messages, each of the last
        ``MAX_QUERIES`` non-system ones is a query.
        """
        queries = _queries(query_or_messages)[-MAX_QUERIES:]
        warming, self._warming = self._warming, None
        if warming is not None:
            warming.settle()
        try:
            for query in queries or [""]:  # before anything is embedded: the fact search embeds too
                V.check_query("search", query, "limit", limit)
        except InvalidInput as exc:
            raise MemoryInputError(str(exc)) from None
        if not queries or limit <= 0:
            return []
        agent = self.agent_id if agent_id is None else agent_id
        hits: dict[str, MemoryHit] = {}
        facts = self.facts if agent == self.agent_id else FactMemory(
            self.store, user_id=self.user_id, agent_id=agent, tenant=self.tenant, embedder=self.embedder)
        scope = owner_scope(self.tenant, self.user_id, agent)
        want_facts = "fact" in kinds and turn is None
        facts_checked = _io().submit(facts.book.entries) if want_facts else None  # while the query is embedded
        for query in queries:
            if "message" in kinds:  # the search embeds the question (its keyword query may run meanwhile) ...
                for h in self._message_hits(query, limit, scope, turn):
                    _keep_best(hits, MemoryHit(
                        "message", h.id, h.text, h.score, agent, h.session_id, h.message.role,
                        h.message.created_at, h.metadata))
            if facts_checked is not None:  # ... and its vector serves the facts too: embedded once
                vector = self._query_vectors.take(query)
                if vector is None:
                    vector = self._search.embed_query(query)
                facts_checked.result()
                for fact, score in facts.search(vector, limit, checked=True):
                    if score >= MIN_FACT_SIMILARITY:
                        _keep_best(hits, _fact_hit(fact, score, agent))
        found = sorted(hits.values(), key=lambda h: (h.kind != "fact", -h.score))
        return [h for h in found if h.kind == "fact"][:limit] + [h for h in found if h.kind == "message"][:limit]

    def _message_hits(self, query: str, limit: int, scope: Scope, turn: Any) -> list[Any]:
        """The ``limit`` best messages for ``query`` in ``scope``; given a ``turn``, the best of that turn: the
        search goes deeper (4 times each round) until ``limit`` of them are found or the scope has no more.
        """
        if turn is None:
            return list(self._search.search(query, top_k=limit, scope=scope))
        depth, vector = limit * 4, None
        while True:
            found = self._search.search(query, top_k=depth, scope=scope, vector=vector)
            of_turn = [h for h in found if h.metadata.get("turn") == turn]
            if len(of_turn) >= limit or len(found) < depth:
                return of_turn[:limit]
            if vector is None:  # the first round's, reused by every deeper one
                vector = self._query_vectors.take(query)
                if vector is None:
                    vector = self._search.embed_query(query)
            depth *= 4

    def remember(self, fact: str, **details: Any) -> Fact:
        """Keep a fact stated outright (see :meth:`FactMemory.remember` for ``details``).

        The session is listed once the fact is kept: a fact refused (``MemoryInputError``) leaves nothing behind.
        """
        kept = self.facts.remember(fact, **details)
        self._note_session()
        return kept

    def expand(self, memory_id: str, session_id: str | None = None) -> list[StoredMessage]:
        """The exact archived messages behind an id, in order: a message itself, a fact's source
        messages, or the messages a summary covers (a window manager's, in the same store and scope).

        ``session_id`` narrows the look-up to one session (message ids may repeat across sessions, and a window
        manager's summary ids do: ``summary-0`` in each); None or "" looks in every session and gives what each
        holds under the id, session after session.
        """
        _session("expand: 'session_id'", session_id)
        found = self.store.get(replace(self.owner, session_id=session_id or None), [memory_id])
        if found:
            return found
        fact = self.facts.get(memory_id)
        if fact is not None:
            by_session: dict[str, list[str]] = {}
            for source in fact.sources:
                by_session.setdefault(source.get("session_id") or self.session_id, []).append(source["id"])
            return [m for s, ids in by_session.items() for m in self.store.get(replace(self.owner, session_id=s), ids)]
        covered: list[StoredMessage] = []
        for s in [session_id] if session_id else self.sessions():  # "" is every session, as in a store's scope
            scope = replace(self.owner, session_id=s)
            for summary in archived_summaries(self.store, scope):
                if summary.get("id") == memory_id:
                    start, end = summary["covers"]
                    covered += self.store.range(scope, start, end)
                    break
        return covered

    # -- listing, clearing, export -------------------------------------------------------------
    def sessions(self) -> list[str]:
        """The owner's sessions that hold memory: those long-term memory recorded into, oldest first, then
        the owner's other conversations that hold messages (kept by a
        :class:`~fullrecall.memory.ConversationMemory`, the service or an import), as the store lists them.

        A session whose messages a selective :meth:`clear` deleted, every one of them, is not listed
        while it holds no message and no fact names one of its messages among its ``sources``; a
        message recorded in it later lists it again.
        """
        records = self._sessions.all()
        holding = [s for s in (sc.session for sc in self.store.sessions(self.owner))  # one read: those with messages
                   if s is not None and not is_change_log(s)]
        emptied = {r.id for r in records if r.data.get(_EMPTIED) is True}.difference(holding)
        if emptied:
            emptied -= {source.get("session_id") or self.session_id for fact in self.facts.history()
                        for source in fact.sources}
        listed = [r.id for r in records if r.id not in emptied]
        known = set(listed)
        return listed + [s for s in holding if s not in known]

    def messages(
        self, *, roles: Iterable[str] | None = None, since: float | None = None, until: float | None = None,
        session_id: str | None = None, ids: Iterable[str] | None = None,
    ) -> list[StoredMessage]:
        """Archived messages matching every given criterion (times on ``created_at``, ``until`` exclusive).

        Messages are looked up in every session of the owner (:meth:`sessions`), as search and ``expand`` find
        them: a conversation kept by :class:`~fullrecall.memory.ConversationMemory` too. ``session_id`` None or ""
        is every session, as in ``expand``.
        """
        wanted, role_set = _names("ids", ids), _names("roles", roles)
        session_id = None if session_id == "" else _session("'session_id'", session_id)
        _check_times(since=since, until=until)
        if wanted is not None and session_id is None:  # one look-up across the owner's sessions, logs aside
            found = [(m.session_id or "", m) for m in self._by_ids(self.owner, wanted)
                     if not is_change_log(m.session_id)]
        else:
            found = []
            for s in [session_id] if session_id is not None else self.sessions():
                scope = replace(self.owner, session_id=s)
                batch = self._by_ids(scope, wanted) if wanted is not None else self.store.range(scope, 0, _EVERYTHING)
                found += [(s, m) for m in batch]
        return [
            replace(m, session_id=s) for s, m in found
            if (role_set is None or m.role in role_set) and (since is None or m.created_at >= since)
            and (until is None or m.created_at < until)
        ]

    def _by_ids(self, scope: Scope, ids: Collection[str]) -> list[StoredMessage]:
        """The messages stored under ``ids``, and the copies a conversation's window stored again of a message whose
        own ``"id"`` is one of them (``X@...``: after a new pinned message took the old one's place, only its copy
        holds it).
        """
        named = set(ids)
        keys = [*named, *(hashlib.sha256(i.encode("utf-8")).hexdigest()[:32] for i in named)]  # a long id's copies
        copies = [m for m in self.store.get_copies(scope, keys) if own_id(m) in named and m.id not in named]
        return sorted(self.store.get(scope, named) + copies, key=lambda m: (m.session_id or "", m.position or 0))

    def clear(
        self, *, roles: Iterable[str] | None = None, since: float | None = None, until: float | None = None,
        session_id: str | None = None, ids: Iterable[str] | None = None,
    ) -> dict[str, int]:
        """Delete the archived messages matching every given criterion (and facts among ``ids``), each with every
        row of its conversation that is the same message stored again (a window's copy, see
        :func:`~fullrecall.memory.conversation.copies_of`), counted among ``messages``.

        With no criterion at all, everything of this owner goes (messages, summaries, facts, patterns,
        vectors, sessions): the store's ``forget`` counts (see :meth:`fullrecall.stores.Store.forget`). An empty
        ``session_id`` is refused: read as "every session", a caller's empty variable would delete them all.
        """
        _session("clear: 'session_id'", session_id)
        if session_id == "":
            raise MemoryInputError("clear: 'session_id' is empty: name a session, or leave it out for every session")
        if roles is None and since is None and until is None and session_id is None and ids is None:
            counts = self.store.forget(self.owner)  # the change logs counted as records, not messages or sessions
            self._noted = False
            return counts
        ids = list(_names("ids", ids) or ()) if ids is not None else None
        counts = {"messages": 0, "summaries": 0, "facts": 0}
        by_session: dict[str, list[StoredMessage]] = {}
        for m in self.messages(roles=roles, since=since, until=until, session_id=session_id, ids=ids):
            by_session.setdefault(m.session_id or "", []).append(m)
        for s, gone in by_session.items():
            scope = replace(self.owner, session_id=s)
            gone += copies_of(self.store, scope, gone)  # the same messages a window stored again: they go too
            # what repeats their words first: a window manager's summaries of them (see forget_summaries), and the
            # conversation's window, when its summary or a shortened copy holds them; then the messages, whose
            # delete scrubs the store's files of all of it (SQLite: the WAL's old pages)
            positions = {m.position for m in gone if m.position is not None}
            forget_window_words(self.store, scope, gone)
            counts["summaries"] += forget_summaries(self.store, scope, positions)
            counts["messages"] += self.store.delete(scope, [m.id for m in gone])
            if not self.store.count(scope):
                self._mark_emptied(s)
        if ids is not None and roles is None and since is None and until is None and session_id is None:
            counts["facts"] = sum(1 for i in ids if self.facts.forget(i))
        return counts

    def _mark_emptied(self, session_id: str) -> None:
        """Note that ``session_id`` lost its last message; :meth:`sessions` then lists it only while it
        holds a message again (recorded by any instance) or a fact names one of its messages.
        """
        record = self._sessions.get(session_id)
        if record is not None and record.data.get(_EMPTIED) is not True:
            record.data[_EMPTIED] = True
            record.updated_at = time.time()
            self._sessions.put(record)

    def export_jsonl(self, target: str | Path | IO[str]) -> int:
        """Write every message and fact of this owner as JSON lines, between a first line naming the format
        and a last line counting them (what proves the file whole); return how many messages and facts.
        """
        messages, facts = self.messages(), self.facts.history()
        lines = [json.dumps(_HEADER)]
        lines += [dumps_text({"kind": "message", **_message_doc(m)}) for m in messages]
        lines += [json.dumps({"kind": "fact", **f.to_dict()}, ensure_ascii=False) for f in facts]
        lines.append(json.dumps({"kind": "end", "messages": len(messages), "facts": len(facts)}))
        text = "".join(line + "\n" for line in lines)
        if isinstance(target, (str, Path)):
            Path(target).write_text(text, encoding="utf-8")
        else:
            target.write(text)
        return len(messages) + len(facts)

    def import_jsonl(self, source: str | Path | IO[str]) -> dict[str, int]:
        """Read lines written by :meth:`export_jsonl` into this owner's memory (idempotent on ids); the counts
        of what the file holds (``messages``, ``facts``) and of what was new to the owner and written
        (``written``: messages; a message whose session and id the owner holds is skipped; ``facts_written``).

        Every line is checked before anything is written; a bad one raises
        :class:`~fullrecall.errors.MemoryInputError` naming its line number and field, and so does a file
        cut short: one that starts with the format line but lacks its end line, or whose counts disagree.
        (A file without the format line, written before it existed, is read as it is.)
        """
        text = Path(source).read_text(encoding="utf-8") if isinstance(source, (str, Path)) else source.read()
        messages: dict[str, list[StoredMessage]] = {}
        facts: list[Fact] = []
        headed, end = False, None
        for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 and the like are in the text
            if not line.strip():
                continue
            if end is not None:
                raise MemoryInputError(f"line {n}: a line after the end line")
            kind, item = _parse_line(n, line, first=not (headed or messages or facts))
            if kind == "header":
                headed = True
            elif kind == "end":
                end = (n, item)
            elif kind == "message":
                session, message = item
                messages.setdefault(session, []).append(message)
            else:
                facts.append(item)
        held = (sum(len(b) for b in messages.values()), len(facts))
        if headed and end is None:
            raise MemoryInputError("the file is cut short: its end line (the counts of what it holds) is missing")
        if end is not None and end[1] != held:
            raise MemoryInputError(f"line {end[0]}: the end line counts {end[1][0]} messages and {end[1][1]} facts, "
                                   f"the file holds {held[0]} and {held[1]}: it is not whole")
        written = facts_written = 0
        for session, batch in messages.items():
            self._note_session(session)
            written += self._archive(session, [replace(m, position=None) for m in batch])
        if facts:
            self._note_session()
            facts_written = self.facts.restore(facts)
        return {"messages": held[0], "written": written, "facts": held[1], "facts_written": facts_written}

    def stats(self) -> dict[str, Any]:
        """Usage: messages (total and by role), sessions, facts (total and current), bytes, time span, and the fact
        extractions that failed since this instance was made (``extraction_failures``).
        """
        store_stats = self.store.stats(self.owner)
        msgs = self.messages()
        by_role: dict[str, int] = {}
        for m in msgs:
            by_role[m.role] = by_role.get(m.role, 0) + 1
        facts, now = self.facts.history(), self.facts.clock()
        return {
            "message_count": len(msgs),
            "messages_by_role": by_role,
            "session_count": len(self.sessions()),
            "fact_count": len(facts),
            "current_fact_count": sum(1 for f in facts if f.valid_at(now)),
            "text_bytes": int(store_stats.get("text_bytes", 0)),
            "vector_bytes": int(store_stats.get("vector_bytes", 0)),
            "oldest": min((m.created_at for m in msgs), default=None),
            "newest": max((m.created_at for m in msgs), default=None),
            "extraction_failures": self.extraction_failures,
        }

    def close(self) -> None:
        """Stop this memory's background warm, then close the store if this memory opened it (a store passed in
        is the caller's to close): a warm or catch-up not begun never runs, one under way is waited for (it
        would find the store closed: a warning that the owner's messages were left without a vector).
        """
        for warming in (self._warming, self._first_warming):  # stopping one twice is harmless
            if warming is not None:
                warming.stop(self)
        self._warming = self._first_warming = None
        if self._owns_store:
            self.store.close()

    def _archive(self, session_id: str, messages: list[StoredMessage]) -> int:
        """Store messages (idempotent on id) and embed the words of those without a vector, in one batch; how
        many the session did not hold.
        """
        scope = replace(self.owner, session_id=session_id)
        ids = {m.id for m in messages}
        held = {m.id for m in self.store.get(scope, list(ids))}
        self.store.append(scope, messages)
        self._embed_missing(session_id, messages)
        return len(ids - held)

    def _embed_missing(self, session_id: str, messages: list[StoredMessage],
                       due: Callable[[StoredMessage], bool] | None = None
                       ) -> tuple[list[StoredMessage], dict[str, np.ndarray]]:
        """Embed, in one batch, the words of those stored ``messages`` of ``session_id`` that have no vector (and
        are ``due``, when given); those embedded, and their words' vectors (by words).
        """
        from ..search.semantic import _verbatim_text

        have = self.store.get_vectors(replace(self.owner, session_id=session_id), [m.id for m in messages])
        todo = list({m.id: m for m in messages if m.id not in have and (due is None or due(m))}.values())
        if not todo:
            return [], {}
        searcher, words = self._searcher(session_id), [_words(_verbatim_text(m)) for m in todo]
        vectors = _embed_once(searcher.embedder, words)
        searcher.index(todo, append=False, vectors=vectors)
        return todo, dict(zip(words, vectors))

    def catch_up(self) -> int:
        """Embed the messages of the owner's recorded sessions that have no vector, and learn the facts of the
        turns they belong to; how many messages.

        A turn's words are stored before it is embedded: when the embedding (or the vectors' write) fails,
        ``record`` raises and the words stay, found by keyword only, their facts not learned (but those the rules
        found in words of their own, kept while the turn was embedded). This memory's next ``record`` that embeds
        calls this, and so does the warming thread for each memory made (``warm=True``), which finds what a
        process that died had left. Their facts are then learned as ``record`` would have (by the rules, or by the
        chat model reading each turn; a fact already kept from the same message counts no new mention), when
        the memory extracts facts; so are those of this memory's turns whose facts' write failed after their
        vectors were written. A session whose vector count equals its message count costs one read of its
        counters. Messages recorded in the last ``IN_FLIGHT_S`` seconds are left to the writer embedding them,
        unless their embedding failed here.
        """
        return self._catch_up(own=True)

    def _catch_up(self, *, own: bool) -> int:
        """:meth:`catch_up`; without ``own`` (the warming thread's), the facts of this memory's own failed turns
        are left to their retry or its next record, which may run meanwhile (learning them twice at once would be
        work done twice: their facts would count one mention all the same, see ``FactMemory._fold``).
        """
        embedded: list[tuple[str, list[StoredMessage]]] = []
        known: dict[str, np.ndarray] = {}  # words -> the vector just made: a fact in those words is not embedded again
        recent, failed = time.time() - IN_FLIGHT_S, set(self._unembedded)
        for record in self._sessions.all():
            scope = replace(self.owner, session_id=record.id)
            counts = self.store.stats(scope)
            if counts["vector_count"] >= counts["message_count"]:
                continue
            messages, vectors = self._embed_missing(record.id, self.store.range(scope, 0, _EVERYTHING),
                                                    lambda m: m.id in failed or (m.archived_at or m.created_at) < recent)
            embedded.append((record.id, messages))
            known |= vectors
        self._unembedded -= failed  # embedded now, or never stored (a write that failed too)
        if self.extract_facts:
            mine = set() if own else set(self._unlearned)  # the warming thread's: not beside their retry
            for session_id, messages in embedded:
                self._learn_caught_up(session_id, [m for m in messages if m.id not in mine], known)
            # turns of this memory whose facts' write failed after their vectors': read again
            if own and (left := set(self._unlearned)):
                self._learn_caught_up(self.session_id, self.store.get(
                    replace(self.owner, session_id=self.session_id), sorted(left)), known)
                self._unlearned -= left  # learned now, or gone from the store (forgotten since)
        return sum(len(messages) for _, messages in embedded)

    def _learn_caught_up(self, session_id: str, messages: list[StoredMessage], known: dict[str, np.ndarray]) -> None:
        """Learn the facts of the turns whose messages a catch-up just embedded (a turn: the messages recorded
        at one time; the reasons ``save_to_memory`` keeps are no turn); a fact in words ``known`` holds the vector
        of (a message's, just embedded) is not embedded again.
        """
        turns: dict[float, list[StoredMessage]] = {}
        for m in messages:
            if not m.metadata.get(_REASON):
                turns.setdefault(m.archived_at or m.created_at, []).append(m)
        for at, turn in turns.items():
            ids = [m.id for m in turn]
            try:
                self.facts.learn([m.data for m in turn], [{"session_id": session_id, "id": i} for i in ids],
                                 stated_at=at, known=known)
            except FactExtractionError as exc:  # as record: the turn is kept, its facts missed
                self._extraction_failed(exc, len(turn), ids)
            self._unlearned.difference_update(ids)

    def _catch_up_quietly(self) -> None:
        try:
            self.catch_up()
        except Exception as exc:  # noqa: BLE001 - the turn was recorded; these stay for the next try
            log.warning("could not catch up on %d earlier message(s) left without a vector or their facts: %s: %s",
                        len(self._unembedded | self._unlearned), type(exc).__name__, exc)

    def warm(self, *, kept_only: bool = False) -> None:
        """Read this owner's memory into the process ahead of its first search: what the store keeps of the
        owner's sessions for searching them (see :meth:`~fullrecall.stores.base.Store.warm`) and the index of the
        owner's facts. A user's first question otherwise waits for it (about 100 ms for 1,000 turns). Changes no
        answer; safe from any thread. ``kept_only``: only bring up to date what the store keeps of the owner
        already (the warm after a turn is recorded: an owner the store's cache let go of stays out of it).
        """
        if kept_only:
            self.store.warm(self.owner, kept_only=True)
        else:  # (a store of one's own may know the plain call alone)
            self.store.warm(self.owner)
        self.facts.warm()

    def _warm_again(self) -> None:
        """After a turn is written, read what the next search reads of it (its vectors, its words, the facts it
        changed) into the process in the background, as :meth:`warm` does, unless a warm begun earlier still
        waits or runs: the search otherwise reads it while the question is embedded, or after (a few milliseconds
        for a few turns). Only for a memory that warms (``warm=True``).
        """
        warming = self._warming
        if self._warms and (warming is None or warming.done.is_set()):
            self._warming = _warm_later(self, first=False)

    def _searcher(self, session_id: str) -> Any:
        from ..search import SemanticSearch

        return SemanticSearch(self._query_vectors, store=self.store, scope=replace(self.owner, session_id=session_id))

    def _note_session(self, session_id: str | None = None) -> None:
        session = session_id or self.session_id
        if self._sessions.get(session) is None:  # checked each time (one small round trip): the owner may be cleared
            self._sessions.put(Record(id=session, namespace=_SESSIONS, text=session))


def unlist_session(store: Store, scope: Scope) -> int:
    """Take ``scope``'s session out of the session list of every owner ``scope`` covers (its agent may be
    :data:`~fullrecall.stores.base.ANY`), with the change-log events that name it, so that neither a list
    nor a memory holding one cached names it any more (see :meth:`RecordBook.erase`); how many lists did.
    """
    session = scope.session
    if session is None:
        return 0
    owners = {owner for r in store.get_records(replace(scope, session_id=None), _SESSIONS)
              if r.id == session and (owner := record_owner(r)) is not None}
    return sum(RecordBook(store, owner, _SESSIONS).erase(session) for owner in owners)


class _QueryVectors:
    """The memory's embedder, keeping the vectors of the questions the message search embeds (until taken),
    so that the fact search reuses them: the search embeds a question itself, and may run its keyword
    query while it does.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name: str = inner.name
        self._kept: dict[str, np.ndarray] = {}

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        vectors = (getattr(self.inner, "embed_queries", None) or self.inner.embed)(texts)
        if len(self._kept) > 64:  # taken right after each search: only an interrupted one leaves any
            self._kept.clear()
        self._kept.update(zip(texts, vectors))
        return vectors

    def take(self, query: str) -> np.ndarray | None:
        return self._kept.pop(query, None)


# -- helpers ---------------------------------------------------------------------------------

_MEM0_OPTIONS = ("llm_backend", "llm_config", "embedding_backend", "embedding_config", "vector_store_config",
                 "mem0_config", "memory_type", "qdrant_client", "debug", "on_disk")


def _check_mem0_options(options: dict[str, Any]) -> None:
    """MassGen's constructor takes mem0's configuration: taken as written and not needed (said once, naming what
    was set); any other keyword is a TypeError, as Python's own.
    """
    unknown = [name for name in options if name not in _MEM0_OPTIONS]
    if unknown:
        raise TypeError(f"PersistentMemory() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}")
    used = [name for name, value in options.items() if value is not None and value is not False]
    if used:
        log.warning("PersistentMemory: MassGen's mem0 options %s are not used: every turn is kept verbatim in "
                    "'store' and found again with no LLM ('chat_model=' extracts facts with one), embedded by "
                    "'embedder=' (default: the local MiniLM)", ", ".join(used))


def _the_query(query_or_messages: Any, query: Any) -> Any:
    """``retrieve``'s query, given first or as ``query=`` (MassGen's name): one of them, or both the same."""
    if query_or_messages is _NO_QUERY and query is _NO_QUERY:
        raise TypeError("retrieve() missing its query: retrieve(query) or retrieve(query=...)")
    if query_or_messages is not _NO_QUERY and query is not _NO_QUERY and query_or_messages != query:
        raise MemoryInputError(f"retrieve: the query {query_or_messages!r} and query={query!r} disagree")
    return query if query_or_messages is _NO_QUERY else query_or_messages


def _one_of(name: str, value: str | None, alias: str, alias_value: str | None) -> str | None:
    if value is not None and alias_value is not None and value != alias_value:
        raise MemoryInputError(f"PersistentMemory: {name}={value!r} and {alias}={alias_value!r} disagree")
    chosen = value if value is not None else alias_value
    if chosen is not None and not isinstance(chosen, str):
        raise MemoryInputError(f"PersistentMemory: {name} must be a string, not {type(chosen).__name__}")
    return chosen


def _session(where: str, session_id: str | None) -> str | None:
    """``session_id``, unless it names one of memory's own change logs (``_log.<namespace>``), which hold its
    bookkeeping, not the owner's messages: MemoryInputError naming ``where``, in the words of every entry point.
    """
    return _checked(V.check_not_change_log, session_id, where)


def _names(name: str, values: Iterable[str] | None) -> set[str] | None:
    """``values`` as a set of strings (None: no criterion); one string is refused, not read as its letters."""
    if values is None:
        return None
    items = list(values) if isinstance(values, Iterable) and not isinstance(values, (str, bytes)) else None
    if items is None or not all(isinstance(v, str) for v in items):
        raise MemoryInputError(f"{name!r} must be a list of strings, not {values!r}")
    return set(items)


def _check_times(**times: Any) -> None:
    """Each time criterion is None or Unix seconds (a finite number); else MemoryInputError naming it."""
    for name, value in times.items():
        if value is not None and not V.is_time(value):
            raise MemoryInputError(f"{name!r} must be Unix seconds (a finite number) or None, not {value!r}")


def _is_empty(content: Any) -> bool:
    if isinstance(content, str):
        return not content.strip()
    return content is None or (isinstance(content, list) and not content)


def _conversation(messages: Any, *, storable: bool = False) -> list[tuple[int, dict[str, Any], Any, str]]:
    """(index, message, parsed, shape) for each message worth keeping; the first malformed one raises (with
    ``storable``, one no store could keep verbatim too: a value that is not JSON, a lone surrogate).
    """
    from ..messages.formats import detect_shape, parse_messages

    if messages is None:
        return []
    items = [messages] if isinstance(messages, dict) else messages
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise MessageFormatError(f"messages must be a list of dicts, got {type(messages).__name__}")
    kept = []
    for i, msg in enumerate(items):
        if msg is None:
            continue
        if not isinstance(msg, dict):
            raise MessageFormatError(f"message {i}: expected a dict, got {type(msg).__name__}")
        if msg.get("role") == "system" or _is_empty(msg.get("content")):
            continue
        try:
            shape = detect_shape([msg])
            _message_time(msg)  # a bad time named as a time, before the JSON check names a NaN one
            parsed = parse_messages([msg], shape, storable=storable)[1][0]
        except MessageFormatError as exc:
            raise MessageFormatError(f"message {i}: {str(exc).removeprefix('message 0: ')}") from None
        if parsed.text.strip():
            kept.append((i, msg, parsed, shape))
    return kept


def _message_time(msg: dict[str, Any]) -> float | None:
    """A message's own time: its ``timestamp`` or ``created_at`` key, Unix seconds or ISO 8601 (a key set to
    ``None`` is no time; one set to anything else, ``True`` or a dict, is refused, not taken for now).
    """
    from datetime import datetime

    for key in ("timestamp", "created_at"):
        value = msg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise MessageFormatError(f"{key!r} must be Unix seconds or ISO 8601, not {type(value).__name__} "
                                     f"{_short(value)}")
        if isinstance(value, (int, float)):
            if not V.is_time(value):  # NaN too: a date is made of it (for the index), as of ISO 8601
                raise MessageFormatError(f"{key!r} must be Unix seconds of the years 1 to 9999, not {value!r}")
            return float(value)
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise MessageFormatError(f"{key!r} must be Unix seconds or ISO 8601, not {value!r}") from None
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _queries(query: Any) -> list[str]:
    if isinstance(query, str):
        return [query] if query.strip() else []
    if isinstance(query, dict):
        query = [query]
    if query is None:
        return []
    if not isinstance(query, Iterable) or isinstance(query, bytes):
        raise MemoryInputError(f"search: 'query' must be a str, a message or a list of them, got {type(query).__name__}")
    try:
        return [parsed.text for _, _, parsed, _ in _conversation(query) if parsed.role != "system"]
    except MessageFormatError:  # a loose shape: take the contents as they are (MassGen does)
        return [str(m["content"]) for m in query if isinstance(m, dict) and not _is_empty(m.get("content"))]


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


@dataclass
class _Learning:
    """A turn's facts being learned while its messages are embedded: found and embedded, then kept."""

    embedded: Future[None]  # the facts found, and those in words of their own embedded
    kept: Future[None]


def _io() -> ThreadPoolExecutor:
    """Threads for the store round trips that run while a turn or a query is embedded (and a fact's own embedding)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(4, thread_name_prefix="fullrecall-memory-io")
        return _pool


class _Warming:
    """A memory's warm, asked of the one thread that warms memories: queued, then under way, then done; or
    dropped, when the memory's first search comes before the warm begins (the search reads what it needs) or
    the memory is gone by then. Memories of one owner asked to warm while one is queued share it (the newest
    of them is warmed).
    """

    __slots__ = ("key", "memory", "state", "done", "pid", "first", "taken", "stopped", "finished")

    def __init__(self, memory: PersistentMemory, key: tuple[int, Scope], first: bool) -> None:
        self.key = key
        self.memory = weakref.ref(memory)
        # the memory's first warm reads the owner whole, then embeds what has no vector (see
        # PersistentMemory.catch_up); a warm after a record brings up to date only what the store keeps
        self.first = first
        self.state = "queued"
        self.done = threading.Event()
        self.pid = os.getpid()  # a forked child does not wait for its parent's warms (see _fork)
        self.taken = self.stopped = False  # taken by the warming thread; stopped by its memory's close
        self.finished = threading.Event()  # the thread is done with it: warm and catch-up

    def begin(self) -> tuple[PersistentMemory | None, bool]:
        """The memory (None: it is gone or closed) and whether to warm it now (the warming thread), or it was
        dropped.
        """
        with _pool_lock:
            self._unlist()
            self.taken = True
            memory = None if self.stopped else self.memory()
            warm = memory is not None and self.state == "queued"
            self.state = "under way" if warm else "dropped"
        if not warm:
            self.done.set()
        return memory, warm

    def settle(self) -> None:
        """Before a search: a warm not begun is dropped (the search reads the same), one under way waited for
        (so that no two threads read the same into the process at once).
        """
        if self.pid != os.getpid():
            return
        with _pool_lock:
            if self.state == "queued":
                self.state = "dropped"
                self._unlist()
                self.done.set()
        self.done.wait()

    def stop(self, memory: PersistentMemory) -> None:
        """``memory`` closes: if this is its warm, nothing of it begins from now on, and what is under way (the
        warm, the catch-up after it) is waited for, so that the store is not closed beneath it.
        """
        if self.pid != os.getpid():
            return
        with _pool_lock:
            if self.memory() is not memory:  # another memory of the owner took over the queued warm
                return
            self.stopped = True
            self._unlist()
            taken = self.taken
        if not taken:
            self.done.set()
            return
        self.finished.wait()

    def _unlist(self) -> None:
        """No longer the owner's queued warm (under ``_pool_lock``)."""
        if _warm_pending.get(self.key) is self:
            del _warm_pending[self.key]


_warm_queue: SimpleQueue[_Warming] = SimpleQueue()
_warm_pending: dict[tuple[int, Scope], _Warming] = {}  # (the store's id, the owner) -> its queued warm
_warm_thread: threading.Thread | None = None


@after_fork_in_child
def _renew() -> None:
    """A new lock, and none of the parent's threads or queued warms (see ``_fork``)."""
    global _pool, _pool_lock, _warm_queue, _warm_pending, _warm_thread
    _pool, _pool_lock, _warm_queue, _warm_pending, _warm_thread = None, threading.Lock(), SimpleQueue(), {}, None


def _warm_later(memory: PersistentMemory, first: bool = True) -> _Warming:
    """``memory``'s warm, queued for the one background thread that warms memories, in the order asked: its
    ``first`` reads the owner whole and is followed by the catch-up of what has no vector; a later one (after a
    record) brings up to date what the store keeps. The thread is a daemon: a process that exits leaves the
    rest undone.
    """
    global _warm_thread
    key = (id(memory.store), memory.owner)
    with _pool_lock:
        queued = _warm_pending.get(key)
        if queued is not None:  # the newest memory of the owner is the one to warm (an older one may be gone)
            queued.memory = weakref.ref(memory)
            queued.first = queued.first or first
            return queued
        warming = _warm_pending[key] = _Warming(memory, key, first)
        if _warm_thread is None:
            _warm_thread = threading.Thread(target=_warm_each, name="fullrecall-memory-warm", daemon=True)
            _warm_thread.start()
    _warm_queue.put(warming)
    return warming


def _warm_each() -> None:
    while True:
        warming = _warm_queue.get()
        memory, warm = warming.begin()
        try:
            if memory is not None:
                _warm_one(memory, warming, warm)
        finally:
            del memory
            warming.finished.set()


def _warm_one(memory: PersistentMemory, warming: _Warming, warm: bool) -> None:
    """The warming thread's work for one memory: its warm (unless dropped), then, after its first, its catch-up
    (unless the memory closed meanwhile).
    """
    try:
        if warm:
            memory.warm(kept_only=not warming.first)
    except Exception:  # noqa: BLE001 - a hint: the first search reads what it needs, and reports its own failures
        log.debug("warming the memory of %r failed", memory.owner, exc_info=True)
    finally:
        warming.done.set()
    try:  # a warm dropped for a search too: what a process that died left without vectors is embedded
        if warming.first and not warming.stopped:  # this memory's own failed turns: left to its retry or next record
            memory._catch_up(own=False)
    except Exception as exc:  # noqa: BLE001 - left for the next memory made, or this one's next record
        log.warning("could not embed the messages of %r left without a vector: %s: %s", memory.owner,
                    type(exc).__name__, exc)


def _words(text: str) -> str:
    """What a message's vector embeds: its own words (as much as is indexed). Speaker and date are in
    the indexed text, for keyword search and facets; the vector is the words alone, as a query's is.
    """
    from ..search.terms import indexed_prefix

    return indexed_prefix(text.strip())


def _embed_once(embedder: Any, texts: list[str]) -> np.ndarray:
    """Vectors for ``texts`` in one batched call, each distinct text embedded once."""
    unique = list(dict.fromkeys(texts))
    vectors = embedder.embed(unique)
    row = {t: i for i, t in enumerate(unique)}
    return np.asarray(vectors)[[row[t] for t in texts]]


def _index_text(text: str, role: str, created: float) -> str:
    from ..search.terms import index_text

    return index_text(text, speaker=role, date=time.strftime("%Y-%m-%d", time.gmtime(created)))


def _keep_best(hits: dict[str, MemoryHit], hit: MemoryHit) -> None:
    if hit.id not in hits or hits[hit.id].score < hit.score:
        hits[hit.id] = hit


def _fact_hit(fact: Fact, score: float, agent: str) -> MemoryHit:
    return MemoryHit("fact", fact.id, fact.text, score, agent, None, None, fact.stated_at,
                     {"valid_from": fact.valid_from, "sources": fact.sources})


def _line(hit: MemoryHit) -> str:
    if hit.kind == "fact":
        return f"[fact] {hit.text}"
    date = time.strftime("%Y-%m-%d", time.gmtime(hit.created_at or 0))
    return f"[{date} {hit.role}] {hit.text}"


def _message_doc(m: StoredMessage) -> dict[str, Any]:
    return {"session_id": m.session_id, "id": m.id, "role": m.role, "text": m.text, "data": m.data,
            "created_at": m.created_at, "archived_at": m.archived_at, "metadata": m.metadata}


_HEADER = {"kind": "header", "format": "fullrecall.memory", "version": 2}


def _parse_line(n: int, line: str, *, first: bool = False) -> tuple[str, Any]:
    """One line of :meth:`PersistentMemory.export_jsonl`'s file: its kind and what it holds (the format line,
    the first, holds nothing; the end line, its counts of messages and facts).
    """
    try:
        doc = parse_json(line)
    except json.JSONDecodeError as exc:
        raise MemoryInputError(f"line {n}: not JSON ({exc.msg})") from None
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind == "header" and first:
        if doc.get("format") != _HEADER["format"] or doc.get("version") != _HEADER["version"]:
            raise MemoryInputError(f"line {n}: not a file of this version of long-term memory's export ({line[:80]})")
        return "header", None
    if kind == "end":
        counts = (doc.get("messages"), doc.get("facts"))
        if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
            raise MemoryInputError(f"line {n}: the end line's 'messages' and 'facts' must be counts")
        return "end", counts
    if kind not in ("message", "fact"):
        raise MemoryInputError(f"line {n}: 'kind' must be \"message\" or \"fact\"")
    strings = ("session_id", "id", "role", "text") if doc["kind"] == "message" else ("id", "text")
    for key in strings:
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise MemoryInputError(f"line {n}: {key!r} must be a non-empty string")
    if doc["kind"] == "fact":
        fields = {k: doc[k] for k in Fact.__dataclass_fields__ if k in doc}
        try:
            fact = Fact(**fields)
        except TypeError as exc:
            raise MemoryInputError(f"line {n}: {exc}") from None
        _check_fact(n, fact)
        return "fact", fact
    if not isinstance(doc.get("data"), dict):
        raise MemoryInputError(f"line {n}: 'data' must be an object (the message as recorded)")
    for key in ("created_at", "archived_at"):
        if not V.is_time(doc.get(key)):
            raise MemoryInputError(f"line {n}: {key!r} must be Unix seconds of the years 1 to 9999, "
                                   f"not {_short(doc.get(key))}")
    if not isinstance(doc.get("metadata") or {}, dict):
        raise MemoryInputError(f"line {n}: 'metadata' must be an object")
    message = StoredMessage(
        id=doc["id"], role=doc["role"], text=doc["text"], data=doc["data"], created_at=float(doc["created_at"]),
        archived_at=float(doc["archived_at"]), metadata=dict(doc.get("metadata") or {}), kind="message")
    try:  # what the store would refuse, refused before anything of the file is written
        V.check_session_id(doc["session_id"], "'session_id'")  # as every entry point names a conversation
        V.check_message(message, 0)
    except InvalidInput as exc:
        raise MemoryInputError(f"line {n}: {str(exc).removeprefix('message 0: ')}") from None
    return "message", (doc["session_id"], message)


_FACT_STRINGS = {"subject": False, "origin": False, "attribute": True, "value": True, "superseded_by": True}


def _check_fact(n: int, fact: Fact) -> None:
    """A fact line holds what a remembered fact holds, and nothing the store would refuse."""
    try:
        V.check_id(fact.id, "'id'")
        V.check_text(fact.text, "'text'")
        for name, optional in _FACT_STRINGS.items():
            if not (optional and getattr(fact, name) is None):
                V.check_text(getattr(fact, name), repr(name))
        V.check_time(fact.stated_at, "'stated_at'")
        V.check_time(fact.valid_from, "'valid_from'")
        if fact.valid_to is not None:
            V.check_time(fact.valid_to, "'valid_to'")
        if isinstance(fact.mentions, bool) or not isinstance(fact.mentions, int):
            raise InvalidInput(f"'mentions' must be an integer, not {fact.mentions!r}")
        if not isinstance(fact.sources, list) or not all(
                isinstance(s, dict) and all(isinstance(v, str) for v in s.values()) for s in fact.sources):
            raise InvalidInput(f"'sources' must be a list of objects of strings, not {fact.sources!r}")
        V.check_json_value(fact.sources, "'sources'")
    except InvalidInput as exc:
        raise MemoryInputError(f"line {n}: {exc}") from None


__all__ = ["MemoryHit", "PersistentMemory"]

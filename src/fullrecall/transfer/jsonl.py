"""fullrecall's own JSON Lines format: lossless, versioned, one JSON object a line.

The first line is the header, ``{"format": "fullrecall", "version": 3, ...}``. Every other
line has a ``"type"``:

* ``"message"``: one stored message, verbatim (``"message"``) with everything the store
  keeps of it: ``conversation_id``, ``user_id``, ``agent_id`` (``null`` for the default
  owner), ``id``, ``position``, ``role``, ``kind``, ``created_at``, ``archived_at``,
  ``summary_id``, ``metadata``, the indexed ``text`` and, when stored, its ``vector``
  (``{"model", "dim", "b64"}``: little-endian float32, base64), so an import never
  embeds again;
* ``"state"``: a conversation's state document (``key`` is ``window``, ``archive`` or
  ``summaries``; ``value`` the document): the window and its summaries come back as they were
  (an import writes a state the conversation does not have yet, never over a newer one);
* ``"summary"``: one summary the conversation's archive made (a record of namespace ``archive.summaries``:
  ``id``, ``text``, ``created_at``, ``updated_at`` and ``data`` with its ``covers``, the first and last position
  it covers, and ``folds_id``, the earlier summary it folds in); an import writes one the conversation does not
  hold (by id), so importing twice stores it once. The end line counts summary lines with the states;
* ``"fact"``, ``"pattern"`` and ``"session"`` (version 2): the owner's long-term memory, one record
  a line: a :class:`~fullrecall.memory.FactMemory` fact (its validity interval, supersession and
  source messages are in ``data``), a :class:`~fullrecall.memory.ProceduralMemory` pattern (steps,
  scores, expiry) and a conversation :class:`~fullrecall.memory.PersistentMemory` keeps memory of.
  Each carries ``user_id``, ``agent_id``, ``id``, ``text``, ``created_at``, ``updated_at``,
  ``data`` and, when it has one, its ``vector`` (``{"dim", "b64"}``; kept even without message
  vectors: records are few and never embedded again). They are exported with a whole owner's
  memory (not with one conversation); expired patterns are left out. An import writes a record it
  does not hold, or holds in an older version (``updated_at``): the same record twice is written once.
  A pattern takes the id its new owner's memory gives the same task and steps (the file's id when
  the owner is the same), so owners importing one file never share an id;
* ``"end"`` (version 3): the last line, ``{"type": "end", "messages": M, "states": S, "records": R}``,
  the counts of the lines before it. It proves the file whole: an export that fails part-way writes
  none, and an import refuses a version 3 file without it (cut short) or with counts the file does
  not hold, before anything is written. Files of versions 1 and 2 have no end line and are read as
  they always were: nothing tells whether one was cut at a line's end.

The change logs long-term memory keeps (conversations named ``_log.*``) are bookkeeping and are
never exported: an import writes its own events. A line without ``"type"`` is a message (the
service's export before the header existed); a file without a header is read as version 1, and
version 1 files are read as they always were. Importing puts each message back at its position
under its id; the store skips ids it holds, so an import is idempotent, and an interrupted one is
finished by running it again.
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import IO, Any

import numpy as np

from .._json import dumps, dumps_text
from .._json import parse as parse_json
from ..archive.archive import SUMMARIES
from ..errors import InvalidInput, MessageFormatError, StateConflict
from ..memory._records import _OWNER, _VEC, EXPIRES_AT, RecordBook, owner_scope, public_data
from ..memory.conversation import check_window_state
from ..memory.facts import NAMESPACE as FACTS
from ..memory.persistent import _SESSIONS as SESSIONS
from ..memory.procedural import NAMESPACE as PROCEDURES
from ..memory.procedural import check_pattern_data, owned_pattern
from ..stores._validate import (
    MAX_DOCUMENT_BYTES,
    MAX_POSITION,
    check_id,
    check_json_value,
    check_message,
    check_owner_id,
    check_record,
    check_session_id,
)
from ..stores.base import ANY, Record, Scope, Store, StoredMessage
from ._common import (
    BATCH,
    Counts,
    Progress,
    append_new,
    chunks,
    conversations,
    embed,
    no_progress,
    records_for,
    register,
    stable_id,
)

FORMAT = "fullrecall"
VERSION = 3
END_SINCE = 3  # the first version whose files end with an end line
STATE_KEYS = ("window", "archive", "summaries")
RECORD_TYPES = {"fact": FACTS, "pattern": PROCEDURES, "session": SESSIONS}  # line type -> record namespace
_COUNTED = {"message": "messages", "state": "states", "summary": "states",  # type -> the end line's count
            **dict.fromkeys(RECORD_TYPES, "records")}
_MESSAGE_FIELDS = ("id", "position", "role", "kind", "created_at", "archived_at", "summary_id", "metadata", "text")


def header() -> dict[str, Any]:
    """The first line of an export."""
    return {"format": FORMAT, "version": VERSION, "exported_at": time.time()}


def message_line(m: StoredMessage, vector: np.ndarray | None = None, model: str | None = None) -> dict[str, Any]:
    """One stored message as a line (with its vector, when given)."""
    line: dict[str, Any] = {"type": "message", "conversation_id": m.session_id, "user_id": m.user_id or None,
                            "agent_id": m.agent_id or None, "id": m.id, "position": m.position, "role": m.role,
                            "kind": m.kind, "created_at": m.created_at, "archived_at": m.archived_at,
                            "summary_id": m.summary_id, "metadata": m.metadata, "text": m.text, "message": m.data}
    if vector is not None:
        raw = np.asarray(vector, dtype="<f4")
        line["vector"] = {"model": model, "dim": int(raw.shape[0]), "b64": base64.b64encode(raw.tobytes()).decode()}
    return line


def lines(store: Store, scope: Scope, *, vectors: bool = True, progress: Progress = no_progress
          ) -> Iterator[dict[str, Any]]:
    """The export of ``scope`` (one conversation, or all the owner's listed ones), header first, end line last.

    The end line comes only once every other line has: a store failing part-way raises before it.
    """
    yield header()
    counts = dict.fromkeys(sorted(set(_COUNTED.values())), 0)
    for line in _body(store, scope, vectors, progress):
        yield line
        counts[_COUNTED[line["type"]]] += 1
    yield {"type": "end", **counts}


def _body(store: Store, scope: Scope, vectors: bool, progress: Progress) -> Iterator[dict[str, Any]]:
    """The lines of an export between its header and its end line."""
    sessions = conversations(store, scope)
    for n, session in enumerate(sessions):
        own = replace(scope, session_id=session)
        model = (store.vector_model(own) or (None, 0))[0] if vectors else None
        for chunk in chunks(store, own):
            found = store.get_vectors(own, [m.id for m in chunk]) if model else {}
            for m in chunk:
                m.session_id = m.session_id or session
                yield message_line(m, found.get(m.id), model)
        for key in STATE_KEYS:
            value = store.get_state(own, key)
            if value is not None:
                yield {"type": "state", "conversation_id": session, "user_id": own.user_id or None,
                       "agent_id": own.agent_id or None, "key": key, "value": value}
        for r in sorted(store.get_records(own, SUMMARIES), key=lambda r: (r.created_at, r.id)):
            yield {"type": "summary", "conversation_id": session, "user_id": own.user_id or None,
                   "agent_id": own.agent_id or None, "id": r.id, "text": r.text, "created_at": r.created_at,
                   "updated_at": r.updated_at, "data": r.data}
        progress("exporting", n + 1, len(sessions))
    if not scope.session:
        yield from record_lines(store, scope)


def record_lines(store: Store, scope: Scope, now: float | None = None) -> Iterator[dict[str, Any]]:
    """The long-term memory of ``scope``'s owner (or owners, with :data:`~fullrecall.stores.ANY`) as lines.

    Only records long-term memory wrote for an owner of the scope are exported, live ones only.
    """
    now = time.time() if now is None else now
    owners = replace(scope, session_id=None)
    for kind, namespace in RECORD_TYPES.items():
        for r in store.get_records(owners, namespace):
            owner: list[str] = r.data.get(_OWNER) or []
            if not _owned_by(owner, scope):
                continue
            if r.data.get(EXPIRES_AT) is not None and float(r.data[EXPIRES_AT]) <= now:
                continue
            line: dict[str, Any] = {"type": kind, "user_id": owner[1] or None, "agent_id": owner[2] or None,
                                    "id": r.id, "text": r.text, "created_at": r.created_at,
                                    "updated_at": r.updated_at, "data": public_data(r)}
            vector = RecordBook.vector(r)
            if vector is not None:
                line["vector"] = {"dim": int(vector.shape[0]), "b64": r.data[_VEC]}
            yield line


def _owned_by(owner: Any, scope: Scope) -> bool:
    """Whether a record's owner (``[tenant, user, agent]``) is one ``scope`` names."""
    if not (isinstance(owner, list) and len(owner) == 3 and owner[0] == scope.tenant):
        return False
    return all(want is ANY or owner[i] == (want or "") for i, want in ((1, scope.user_id), (2, scope.agent_id)))


def export_jsonl(store: Store, scope: Scope, fp: IO[str], *, vectors: bool = True,
                 progress: Progress = no_progress) -> dict[str, int]:
    """Write the export of ``scope`` to ``fp``; counts of conversations, messages, states and records written."""
    seen: set[str] = set()
    counts: dict[str, int] = {}
    for line in lines(store, scope, vectors=vectors, progress=progress):
        fp.write(dumps_text(line) + "\n")
        if line.get("type") in ("message", "state"):
            seen.add(line["conversation_id"])
        elif line.get("type") == "end":  # the lines' counts, as the file states them
            counts = {key: line[key] for key in sorted(set(_COUNTED.values()))}
    return {"conversations": len(seen), **counts}


def read(fp: IO[str] | Iterable[str], name: str = "the file") -> Iterator[dict[str, Any]]:
    """The lines of a file as objects, header checked and skipped; ``MessageFormatError`` names the line.

    A file of version 3 or later must end with its end line (checked, not yielded; see :class:`Whole`).
    """
    whole = Whole(name)
    for n, text in enumerate(fp):
        if n == 0:
            text = text.removeprefix("\ufeff")  # a byte order mark (a Windows tool's file, on stdin too) is no JSON
        if not text.strip():
            continue
        try:
            line = parse_json(text)
        except json.JSONDecodeError as exc:
            raise MessageFormatError(f"line {n + 1}: not valid JSON ({exc.msg})") from None
        if not isinstance(line, dict):
            raise MessageFormatError(f"line {n + 1}: expected a JSON object")
        if is_header(line):
            whole.header(line, n + 1)
            continue
        if whole.line(line, n + 1):
            continue
        line.setdefault("type", "message")
        line["_line"] = n + 1
        yield line
    whole.close()


class Whole:
    """Checks that a file is whole: each header of version 3 or later opens an export that must close with an
    end line whose counts are the lines of that export; nothing but another export's header follows it.

    ``name`` names the file in every refusal (``"file 'x.jsonl'"``, ``"the body"``).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.opened: int | None = None  # the header's line of an export still owing its end line
        self.ended: int | None = None  # the line of the end line that closed the latest export
        self.counts = dict.fromkeys(set(_COUNTED.values()), 0)

    def header(self, line: dict[str, Any], number: int) -> None:
        """A header (checked): the export before it must be whole, and a new one begins."""
        check_header(line, number)
        self.close()
        self.opened = number if line["version"] >= END_SINCE else None
        self.ended = None
        self.counts = dict.fromkeys(self.counts, 0)

    def line(self, line: dict[str, Any], number: int) -> bool:
        """Count a typed line; True for an end line (checked against the counts, and then to be skipped)."""
        if self.ended is not None:
            raise MessageFormatError(f"{self.name}: line {number} follows the end line (line {self.ended})")
        kind = line.get("type", "message")
        if kind != "end":
            if kind in _COUNTED:
                self.counts[_COUNTED[kind]] += 1
            return False
        for key, held in sorted(self.counts.items()):
            said = line.get(key)
            if isinstance(said, bool) or not isinstance(said, int):
                raise MessageFormatError(f"{self.name}: line {number}: the end line's {key!r} must be an integer")
            if said != held:
                raise MessageFormatError(f"{self.name}: line {number}: the end line counts {said} {key}, the "
                                         f"lines before it hold {held}: the file is not whole; export it again")
        self.opened, self.ended = None, number
        return True

    def close(self) -> None:
        """Refuse an export of version 3 or later that has no end line: it was cut short."""
        if self.opened is not None:
            raise MessageFormatError(f"{self.name} is cut short: the export its line {self.opened} begins has no "
                                     "end line (every export of version 3 or later ends with one); export it again")


def is_header(line: dict[str, Any]) -> bool:
    """Whether a line is a header (it names a format and is no typed line)."""
    return "format" in line and "type" not in line


def check_header(line: dict[str, Any], number: int = 1) -> None:
    """Refuse a file of another format, or of a version newer than this one reads."""
    if line.get("format") != FORMAT:
        raise MessageFormatError(f"line {number}: format {line.get('format')!r} is not {FORMAT!r}")
    version = line.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= VERSION:
        raise MessageFormatError(f"line {number}: version {version!r} is not one this fullrecall reads (1..{VERSION})")


def conversation_of(line: dict[str, Any]) -> str:
    """The line's ``conversation_id``, checked."""
    conv = line.get("conversation_id")
    if not isinstance(conv, str) or not conv or "\x00" in conv:
        raise MessageFormatError(f"line {line.get('_line', '?')}: 'conversation_id' must be a non-empty string")
    _identifier(line, "conversation_id", conv)
    try:  # one the library would not name a conversation by: blank, or long-term memory's change log
        check_session_id(conv, f"line {line.get('_line', '?')}: 'conversation_id'")
    except ValueError as exc:
        raise MessageFormatError(str(exc)) from None
    return conv


def _identifier(line: dict[str, Any], key: str, value: str) -> None:
    """Refuse, naming the line, an id no store keeps (a NUL, a lone surrogate, too long): found while reading,
    not when its conversation or record is written, after others were.
    """
    try:
        check_id(value, f"line {line.get('_line', '?')}: '{key}'", empty=True)
    except ValueError as exc:
        raise MessageFormatError(str(exc)) from None


def owner_of(line: dict[str, Any], key: str) -> str:
    """The line's ``user_id`` or ``agent_id`` (``""``, the default owner, when null), checked: one that shows
    nothing is refused as every entry point refuses it (:func:`~fullrecall.stores._validate.check_owner_id`).
    """
    value = line.get(key) or ""
    if not isinstance(value, str):
        raise MessageFormatError(f"line {line.get('_line', '?')}: '{key}' must be a string or null")
    _identifier(line, key, value)
    try:
        check_owner_id(value, f"line {line.get('_line', '?')}: '{key}'")
    except InvalidInput as exc:
        raise MessageFormatError(str(exc)) from None
    return value


def stored_message(line: dict[str, Any]) -> StoredMessage:
    """The stored message a ``"message"`` line describes (validated by the store when appended)."""
    where = f"line {line.get('_line', '?')}"
    data = line.get("message")
    if not isinstance(data, dict):
        raise MessageFormatError(f"{where}: 'message' must be an object")
    if "text" not in line or "role" not in line:  # a line of the service's first export: index it as it would
        mid = line.get("id")
        # without an id, one from its place and content (as an OpenAI message's): "line-<n>" named another file's
        # different message at that line the same, and a second file's was skipped as already there
        return records_for([data], [mid if isinstance(mid, str) and mid else stable_id(int(line.get("_line") or 0), data)],
                           where=f"{where}: ")[0]
    fields = {k: line[k] for k in _MESSAGE_FIELDS if line.get(k) is not None}
    for key in ("id", "role", "text"):
        if not isinstance(fields.get(key), str):
            raise MessageFormatError(f"{where}: '{key}' must be a string")
    position = fields.get("position")
    if position is not None and (not isinstance(position, int) or isinstance(position, bool) or position < 0):
        raise MessageFormatError(f"{where}: 'position' must be an integer >= 0")
    message = StoredMessage(data=data, **fields)
    try:  # what the store would refuse, refused naming the line before anything is written
        check_json_value(data, f"{where}: 'message'")
        check_message(message, 0, where)
    except InvalidInput as exc:
        raise MessageFormatError(str(exc)) from None
    return message


def check_state(line: dict[str, Any]) -> None:
    """Refuse, naming the line and field, a state document the store would refuse or its reader could not read
    back: a window state not of the shape the conversation's memory writes
    (:func:`~fullrecall.memory.conversation.check_window_state`), a summaries document whose ``items`` are no list
    of summaries.
    """
    where, value = f"line {line['_line']}: ", line["value"]
    try:
        check_json_value(value, f"{where}'value'", limit=MAX_DOCUMENT_BYTES)
        if line["key"] == "window":
            check_window_state(value, where, "value")  # its manager's name: the memory that opens it checks it
    except InvalidInput as exc:
        raise MessageFormatError(str(exc)) from None
    items = value.get("items") if line["key"] == "summaries" else None
    if items is not None and not (isinstance(items, list) and all(isinstance(s, dict) and isinstance(s.get("id"), str)
                                                                  for s in items)):
        raise MessageFormatError(f"{where}'value.items' must be a list of summaries (objects with a string 'id')")


def vector_of(line: dict[str, Any]) -> tuple[str, np.ndarray] | None:
    """(model, vector) of a message line, if it carries one."""
    v = line.get("vector")
    if not v:
        return None
    try:
        vec = np.frombuffer(base64.b64decode(v["b64"]), dtype="<f4").astype(np.float32)
        if vec.shape[0] != int(v["dim"]) or not vec.shape[0] or not isinstance(v["model"], str):
            raise ValueError
    except Exception:  # noqa: BLE001 - any malformed vector is named, whatever broke
        raise MessageFormatError(f"line {line.get('_line', '?')}: 'vector' is malformed") from None
    return v["model"], _finite(vec, line)


def _finite(vec: np.ndarray, line: dict[str, Any]) -> np.ndarray:
    """``vec``, if every value is finite (the store refuses others, after the file's messages were written)."""
    if not np.isfinite(vec).all():
        raise MessageFormatError(f"line {line.get('_line', '?')}: 'vector' holds NaN or infinity")
    return vec


def import_jsonl(store: Store, scope: Scope, fp: IO[str] | Iterable[str], *, keep_owner: bool = True,
                 progress: Progress = no_progress, embedder: Any = None, name: str | None = None) -> dict[str, int]:
    """Import an export into ``scope``'s tenant; counts (``written`` 0 when it was all there already).

    With ``keep_owner`` each conversation goes back to the user and agent its lines name, else to
    ``scope``'s; ``scope.session_id``, when set, puts every message in that one conversation.
    Everything is read and checked before anything is written. Vectors in the file are stored as they
    are; with an ``embedder``, messages that came without one are embedded. A file cut short (a version 3 file
    without its end line, or whose end line's counts disagree) is refused naming ``name`` (default: ``fp``'s).
    """
    groups: dict[tuple[str, str, str], tuple[list[StoredMessage], dict[str, tuple[str, np.ndarray]],
                                             dict[str, dict[str, Any]]]] = {}
    records: dict[tuple[str, str, str], list[tuple[Record, np.ndarray | None]]] = {}
    sources: dict[tuple[str, str, str], set[str]] = {}  # the file's conversations each target gathers
    numbers: dict[tuple[str, str, str], list[int]] = {}  # the line of each message of a target
    models: dict[tuple[str, str, str], tuple[str, int, int]] = {}  # a target's vectors: (model, dim, first line)
    summaries: dict[tuple[str, str, str], list[Record]] = {}  # a target's archived summaries
    path = getattr(fp, "name", None)
    where = name or (f"file {path!r}" if isinstance(path, str) else "the file")
    for line in read(fp, where):
        user = owner_of(line, "user_id") if keep_owner else str(scope.user_id or "")
        agent = owner_of(line, "agent_id") if keep_owner else str(scope.agent_id or "")
        if line["type"] in RECORD_TYPES:
            record = record_of(line)
            records.setdefault((user, agent, record.namespace), []).append((record, record_vector(line)))
            continue
        conv = scope.session or conversation_of(line)
        messages, vectors, states = groups.setdefault((user, agent, conv), ([], {}, {}))
        if line.get("conversation_id") is not None or not scope.session:
            sources.setdefault((user, agent, conv), set()).add(str(line.get("conversation_id")))
        if line["type"] == "message":
            m = stored_message(line)
            messages.append(m)
            numbers.setdefault((user, agent, conv), []).append(line["_line"])
            vector = vector_of(line)
            if vector is not None:
                model, dim = vector[0], int(vector[1].shape[0])
                first = models.setdefault((user, agent, conv), (model, dim, line["_line"]))
                if first[:2] != (model, dim):
                    raise MessageFormatError(f"line {line['_line']}: 'vector' is {model!r} of {dim} dimensions, line "
                                             f"{first[2]}'s {first[0]!r} of {first[1]}: a conversation's vectors are "
                                             "of one model")
                vectors[m.id] = vector
        elif line["type"] == "state":
            if line.get("key") not in STATE_KEYS or not isinstance(line.get("value"), dict):
                raise MessageFormatError(f"line {line['_line']}: a state needs a 'key' in {STATE_KEYS} and an "
                                         "object 'value'")
            check_state(line)
            states[line["key"]] = line["value"]
        elif line["type"] == "summary":
            summaries.setdefault((user, agent, conv), []).append(summary_of(line))
        else:
            raise MessageFormatError(f"line {line['_line']}: unknown type {line['type']!r}")
    targets = {key: Scope(tenant=scope.tenant, user_id=key[0], agent_id=key[1], session_id=key[2]) for key in groups}
    for key, (messages, vectors, states) in groups.items():  # validate everything before writing anything
        targets[key].require_session()
        if len(sources.get(key, ())) > 1:  # conversations merged into one (--session): appended in file order;
            for m in messages:               # their positions, window states and summaries' covers describe
                m.position = None            # conversations gone
            states.clear()
            summaries.pop(key, None)
        _check_places(store, targets[key], messages, numbers.get(key, []))
        _check_room(store, targets[key], messages, numbers.get(key, []))
        held = store.vector_model(targets[key]) if key in models or embedder is not None else None
        if held is not None and key in models and tuple(held) != models[key][:2]:
            raise MessageFormatError(f"line {models[key][2]}: 'vector' is {models[key][0]!r} of {models[key][1]} "
                                     f"dimensions; conversation {key[2]!r} holds vectors of {held[0]!r} of {held[1]}")
        if embedder is not None:
            _check_embedder(store, targets[key], [m.id for m in messages if m.id not in vectors], models.get(key),
                            held, embedder, numbers.get(key, [0]))
    counts = Counts(conversations=len(groups))
    total = sum(len(g[0]) for g in groups.values())
    for key, (messages, vectors, states) in groups.items():
        own = targets[key]
        register(store, own)
        placed = [m for m in messages if m.position is not None]  # a message without a position takes the next
        messages = placed + [m for m in messages if m.position is None]  # free one: after all the file places
        for start in range(0, len(messages), BATCH):
            chunk = messages[start:start + BATCH]
            counts.written += append_new(store, own, chunk)
            counts.messages += len(chunk)
            progress("importing", counts.messages, total)
        for model, ids in _by_model(vectors).items():
            have = store.get_vectors(own, ids)
            todo = [i for i in ids if i not in have]
            if todo:
                store.set_vectors(own, todo, np.stack([vectors[i][1] for i in todo]), model)
                counts.embedded += len(todo)
        if embedder is not None:
            counts.embedded += embed(store, own, [m.id for m in messages], embedder, progress)
        for state_key, value in states.items():  # a conversation that has moved on since keeps its own
            if store.get_state(own, state_key) is None:
                store.put_state(own, state_key, value)
        for summary in summaries.get(key, []):  # one the conversation holds (a rerun's) stays as it is
            try:
                store.put_record(own, summary, expected=0)
            except StateConflict:
                pass
    out = _result(counts)
    out["records"] = sum(len(r) for r in records.values())
    out["records_written"] = sum(put_records(store, Scope(tenant=scope.tenant, user_id=user, agent_id=agent),
                                             namespace, recs) for (user, agent, namespace), recs in records.items())
    return out


def _check_places(store: Store, own: Scope, messages: list[StoredMessage], lines: list[int]) -> None:
    """Refuse, before anything is written, a message the store would drop: an id the conversation (in the
    file or the store) gives another message, or a position another message holds.
    """
    where = f"conversation {own.session!r}"
    first: dict[str, int] = {}
    taken: dict[int, int] = {}
    for n, m in enumerate(messages):
        earlier = first.setdefault(m.id, n)
        if earlier != n and (messages[earlier].data != m.data or messages[earlier].position != m.position):
            raise MessageFormatError(f"line {lines[n]}: {where}: id {m.id!r} is also line {lines[earlier]}'s, a "
                                     "different message; ids are unique within a conversation")
        if m.position is not None and earlier == n:
            other = taken.setdefault(m.position, n)
            if other != n:
                raise MessageFormatError(f"line {lines[n]}: {where}: position {m.position} is also line "
                                         f"{lines[other]}'s (id {messages[other].id!r})")
    if not messages or not store.count(own):
        return
    held = {m.id: m for m in store.get(own, list(first))}
    for n, m in enumerate(messages):
        have = held.get(m.id)
        if have is not None and m.position is not None and have.position != m.position:
            raise MessageFormatError(f"line {lines[n]}: {where}: id {m.id!r} is held at position {have.position}, "
                                     f"not {m.position}")
        if have is not None and dumps(have.data) != dumps(m.data):  # as JSON: bytes held, their encoding in the file
            raise MessageFormatError(f"line {lines[n]}: {where}: id {m.id!r} is held with another message; ids are "
                                     "unique within a conversation")
    todo = sorted({m.position for m in messages if m.id not in held and m.position is not None})
    spans: list[tuple[int, int]] = []
    for p in todo:
        if spans and spans[-1][1] == p - 1:
            spans[-1] = (spans[-1][0], p)
        else:
            spans.append((p, p))
    by_position = {m.position: n for n, m in enumerate(messages) if m.id not in held}
    for found in store.ranges(own, spans) if spans else []:
        for have in found:
            n = by_position[int(have.position or 0)]
            raise MessageFormatError(f"line {lines[n]}: {where}: position {have.position} holds another message "
                                     f"(id {have.id!r})")


def _check_embedder(store: Store, own: Scope, bare: list[str], found: tuple[str, int, int] | None,
                    held: tuple[str, int] | None, embedder: Any, lines: list[int]) -> None:
    """Refuse, before anything is written, a conversation whose vectors (the file's, ``found``: model, dim, line; or
    those it holds) are another model's than ``embedder``'s, which is to embed its messages ``bare`` of a vector
    (those the conversation does not hold with one): the store would refuse those vectors after the file's messages
    were written, at every rerun.
    """
    name = getattr(embedder, "name", None)
    model = found[0] if found is not None else held[0] if held is not None else name
    if model == name or not bare or len(store.get_vectors(own, bare)) == len(set(bare)):
        return
    remedy = (f"a conversation's vectors are of one model: import without embedding (keeping its vectors), or with "
              f"the embedder of {model!r}")
    if found is not None:
        raise MessageFormatError(f"line {found[2]}: conversation {own.session!r}: its vectors are {model!r}'s, and "
                                 f"the import embeds the messages that came without one with {name!r}; {remedy}")
    raise MessageFormatError(f"line {lines[0]}: conversation {own.session!r} holds vectors of {model!r}, and the "
                             f"import embeds the messages that came without one with {name!r}; {remedy}")


def _check_room(store: Store, own: Scope, messages: list[StoredMessage], lines: list[int]) -> None:
    """Refuse, before anything is written, a message without a position when no position is left for it after
    the last one (``MAX_POSITION``) the file or the conversation takes: the store would refuse it, after the
    file's other conversations were written.
    """
    unplaced = list(dict.fromkeys(m.id for m in messages if m.position is None))
    if not unplaced:
        return
    held = {m.id for m in store.get(own, unplaced)} if store.count(own) else set()
    new = [mid for mid in unplaced if mid not in held]  # a held one keeps its place
    last = max([m.position for m in messages if m.position is not None]
               + [int(store.stats(own).get("newest_position", -1))])
    if new and last + len(new) > MAX_POSITION:
        mid = new[max(0, MAX_POSITION - last)]
        n = next(i for i, m in enumerate(messages) if m.id == mid)
        raise MessageFormatError(f"line {lines[n]}: conversation {own.session!r}: no position is left for message "
                                 f"{mid!r} after position {MAX_POSITION} (2**53 - 1), the last a conversation has")


def summary_of(line: dict[str, Any]) -> Record:
    """The archived summary a ``"summary"`` line describes, checked: its covers are what the archive and
    ``inspect`` read back (two positions, first to last), so a malformed one is refused naming the line.
    """
    where = f"line {line.get('_line', '?')}"
    if not isinstance(line.get("id"), str) or not line["id"]:
        raise MessageFormatError(f"{where}: 'id' must be a non-empty string")
    if not isinstance(line.get("text"), str):
        raise MessageFormatError(f"{where}: 'text' must be a string")
    data = line.get("data")
    if not isinstance(data, dict):
        raise MessageFormatError(f"{where}: 'data' must be an object")
    covers = data.get("covers")
    if not (isinstance(covers, list) and len(covers) == 2 and all(_position(p) for p in covers)
            and covers[0] <= covers[1]):
        raise MessageFormatError(f"{where}: 'data.covers' must be [first, last], two positions (integers from 0 to "
                                 f"{MAX_POSITION}) in order, got {covers!r}")
    for key in ("folds_id", "folds"):
        if not _string_or_none(data.get(key)):
            raise MessageFormatError(f"{where}: 'data.{key}' must be a string or null")
    record = Record(id=line["id"], namespace=SUMMARIES, text=line["text"], data=data,
                    created_at=_line_time(line, "created_at"), updated_at=_line_time(line, "updated_at"))
    try:
        check_record(record)  # what the store would refuse, refused before anything is written
    except ValueError as exc:
        raise MessageFormatError(f"{where}: {exc}") from None
    return record


def _position(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_POSITION


def _line_time(line: dict[str, Any], key: str) -> float:
    """A record line's time (``created_at``, ``updated_at``), checked."""
    value = line.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e11:
        raise MessageFormatError(f"line {line.get('_line', '?')}: '{key}' must be a time in Unix seconds")
    return float(value)


def record_of(line: dict[str, Any]) -> Record:
    """The long-term record a ``"fact"``, ``"pattern"`` or ``"session"`` line describes, checked."""
    where = f"line {line.get('_line', '?')}"
    for key in ("id", "text"):
        if not isinstance(line.get(key), str) or not line[key]:
            raise MessageFormatError(f"{where}: '{key}' must be a non-empty string")
    if not isinstance(line.get("data"), dict):
        raise MessageFormatError(f"{where}: 'data' must be an object")
    data = {k: v for k, v in line["data"].items() if k not in (_OWNER, _VEC)}
    record = Record(id=line["id"], namespace=RECORD_TYPES[line["type"]], text=line["text"], data=data,
                    created_at=_line_time(line, "created_at"), updated_at=_line_time(line, "updated_at"))
    try:
        check_record(record)  # what the store would refuse, refused before anything is written
        if record.namespace == PROCEDURES:  # its id is made again for the owner it goes to (see put_records)
            check_pattern_data(record.data)
            check_pattern_fields(record.data)
        if record.namespace == FACTS:
            check_fact_data(record.data)
        if record.namespace == SESSIONS:  # its id names a conversation of the owner
            check_session_id(record.id, "'id'")
    except ValueError as exc:
        raise MessageFormatError(f"{where}: {exc}") from None
    return record


def _time(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _string(value: Any) -> bool:
    return isinstance(value, str)


def _string_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


_FACT_FIELDS: dict[str, tuple[Any, str]] = {  # what long-term memory reads back of a fact: (check, what it must be)
    "subject": (_string, "a string"), "origin": (_string, "a string"),
    "attribute": (_string_or_none, "a string or null"), "value": (_string_or_none, "a string or null"),
    "superseded_by": (_string_or_none, "a string or null"),
    "stated_at": (_time, "a time in Unix seconds"), "valid_from": (_time, "a time in Unix seconds"),
    "valid_to": (lambda v: v is None or _time(v), "a time in Unix seconds or null"),
    "mentions": (_count, "a positive integer"),
    "sources": (lambda v: isinstance(v, list) and all(isinstance(x, dict) and isinstance(x.get("id"), str) for x in v),
                "a list of objects with a message 'id'"),
}
_PATTERN_FIELDS: dict[str, tuple[Any, str]] = {  # and of a pattern (the first three it needs)
    "success_score": (lambda v: _time(v) and 0 <= v <= 1, "a number from 0 to 1"),
    "success_count": (_count, "a positive integer"),
    "avg_execution_time_ms": (lambda v: _time(v) and v >= 0, "a number >= 0"),
    "last_used": (_time, "a time in Unix seconds"),
    EXPIRES_AT: (lambda v: v is None or _time(v), "a time in Unix seconds or null"),
    "query": (_string, "a string"), "query_type": (_string_or_none, "a string or null"),
}
_PATTERN_NEEDS = ("success_score", "success_count", "avg_execution_time_ms")


def check_fact_data(data: dict[str, Any]) -> None:
    """Refuse a fact record's data long-term memory could not read back (a field of
    :class:`~fullrecall.memory.facts.Fact` not of its type): imported, one such fact failed every read of its
    owner's facts until it was deleted.
    """
    _check_fields("fact", data, _FACT_FIELDS, ())


def check_pattern_fields(data: dict[str, Any]) -> None:
    """Refuse a pattern record's data procedural memory could not read back (its score, count and time missing or
    not numbers): imported, one such pattern failed every plan and store of its owner's patterns.
    """
    _check_fields("pattern", data, _PATTERN_FIELDS, _PATTERN_NEEDS)


def _check_fields(kind: str, data: dict[str, Any], fields: dict[str, tuple[Any, str]], needed: tuple[str, ...]
                  ) -> None:
    for key, (ok, what) in fields.items():
        if key in needed and key not in data:
            raise MessageFormatError(f"a {kind}'s 'data.{key}' is missing; it must be {what}")
        if key in data and not ok(data[key]):
            raise MessageFormatError(f"a {kind}'s 'data.{key}' must be {what}, got {data[key]!r}")


def record_vector(line: dict[str, Any]) -> np.ndarray | None:
    """The vector of a record line, if it carries one."""
    v = line.get("vector")
    if not v:
        return None
    try:
        vec = np.frombuffer(base64.b64decode(v["b64"], validate=True), dtype="<f4").astype(np.float32)
        if vec.shape[0] != int(v["dim"]) or not vec.shape[0]:
            raise ValueError
    except Exception:  # noqa: BLE001 - any malformed vector is named, whatever broke
        raise MessageFormatError(f"line {line.get('_line', '?')}: 'vector' is malformed") from None
    return _finite(vec, line)


def put_records(store: Store, owner: Scope, namespace: str, records: list[tuple[Record, np.ndarray | None]],
                now: float | None = None) -> int:
    """Write the records the owner does not hold, or holds in an older version; how many were written.

    Writes go through long-term memory's record book, so every process using the memory sees them. A
    procedural pattern takes the id its new owner's memory gives it (:func:`~fullrecall.memory.procedural.owned_pattern`):
    the pattern that owner's own runs of the same task and tools update, never another owner's id.
    """
    now = time.time() if now is None else now
    book = RecordBook(store, owner_scope(owner.tenant, str(owner.user_id), str(owner.agent_id)), namespace)
    book.state()  # checked once: each record is then looked up in the cache, which follows this import's writes
    written = 0
    with book.writes():
        for record, vector in records:
            if namespace == PROCEDURES:
                record = owned_pattern(book, record)
            if record.data.get(EXPIRES_AT) is not None and float(record.data[EXPIRES_AT]) <= now:
                continue
            # written only over the version compared: a pattern another process updates meanwhile is compared again
            written += book.update(record.id, _unless_held_newer(record, vector), check=False) is not None
    return written


def _unless_held_newer(record: Record, vector: np.ndarray | None) -> Callable[[Record | None], Any]:
    """The change that writes ``record`` (with ``vector``) unless the owner holds it as recent or more recent."""
    return lambda have: None if have is not None and have.updated_at >= record.updated_at else (record, vector)


def _result(counts: Counts) -> dict[str, int]:
    out = counts.as_dict()
    out["vectors"] = out.pop("embedded")
    return out


def _by_model(vectors: dict[str, tuple[str, np.ndarray]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for mid, (model, _) in vectors.items():
        out.setdefault(model, []).append(mid)
    return out

"""OpenAI-format transcripts: a JSON list of chat messages, or JSON Lines of chat records.

Import reads any of: a JSON list of messages (one conversation); a JSON object with
``"messages"`` (one conversation); JSON Lines where each line is a chat record
``{"messages": [...]}`` (one conversation a line, named by its ``"conversation_id"`` if it
has one, else ``<name>-<line>``; records with one ``conversation_id`` continue it, in file order)
or a single message (one conversation). A message's own ``"id"`` is its idempotency key; without
one it gets an id from its place in its conversation (counted across its records) and content.
Export writes JSON Lines: one chat record ``{"conversation_id", "messages"}`` a conversation,
the messages in OpenAI's shape (verbatim when they were stored in it).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import IO, Any

from .._json import dumps_text
from .._json import parse as parse_json
from ..errors import MessageFormatError
from ..stores.base import Scope, Store
from ._common import Progress, each_conversation, no_progress, records_for, stable_id, write_all


def parse(text: str, name: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """(conversation id, messages) of each conversation in ``text``; ``name`` names an unnamed one."""
    try:
        whole = parse_json(text)
    except json.JSONDecodeError:
        whole = None
        lines = [(n + 1, line) for n, line in enumerate(text.split("\n")) if line.strip()]
    else:
        lines = []
        if not isinstance(whole, (list, dict)):
            raise MessageFormatError(f"expected a list of messages, a chat record or JSON Lines, got a JSON "
                                     f"{type(whole).__name__ if whole is not None else 'null'}")
    if isinstance(whole, list):
        return [(name, whole)]
    if isinstance(whole, dict):
        lines = [(1, text)]
    records: list[tuple[str, list[dict[str, Any]]]] = []
    single: list[dict[str, Any]] = []
    for number, line in lines:
        try:
            item = parse_json(line) if isinstance(line, str) else line
        except json.JSONDecodeError as exc:
            raise MessageFormatError(f"line {number}: not valid JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise MessageFormatError(f"line {number}: expected a JSON object (a chat record or a message)")
        if "messages" in item:
            if not isinstance(item["messages"], list):
                raise MessageFormatError(f"line {number}: 'messages' must be a list")
            conv = item.get("conversation_id")
            records.append((conv if isinstance(conv, str) and conv else f"{name}-{number}", item["messages"]))
        else:
            single.append(item)
    return records + ([(name, single)] if single else [])


def import_openai(store: Store, scope: Scope, fp: IO[str], *, name: str = "transcript",
                  progress: Progress = no_progress, embedder: Any = None) -> dict[str, int]:
    """Import a transcript into ``scope``'s owner (``scope.session_id``, when set, takes every message).

    Everything is parsed and checked first; then each conversation is written in batches.
    """
    text = fp.read().removeprefix("\ufeff")  # a byte order mark (a Windows tool's file, on stdin too) is no JSON
    found = [(conv, messages) for conv, messages in parse(text, name) if messages]  # no empty one listed
    prepared = []
    before: Counter[str] = Counter()  # each conversation's messages in the file's earlier records
    for n, (conv, messages) in enumerate(found):
        first, before[conv] = before[conv], before[conv] + len(messages)
        # a message without an id takes its place in its conversation, not in its record: a record continuing a
        # conversation repeats earlier places, and its message there with the same content would be taken for
        # the earlier record's and dropped
        ids = [m["id"] if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]
               else stable_id(first + i, m) if isinstance(m, dict) else "" for i, m in enumerate(messages)]
        if scope.session and len(found) > 1:  # several records into one conversation: keep their ids apart
            ids = [f"{n}.{i}" for i in ids]
        where = f"conversation {conv!r}: " if len(found) > 1 else ""
        prepared.append((replace(scope, session_id=scope.session or conv), records_for(messages, ids, where=where)))
    return write_all(store, prepared, len({s.session_id for s, _ in prepared}), progress, embedder)


def export_openai(store: Store, scope: Scope, fp: IO[str], *, progress: Progress = no_progress) -> dict[str, int]:
    """Write one chat record a conversation of ``scope``, as JSON Lines; counts."""
    counts = {"conversations": 0, "messages": 0}
    for session, _, messages in each_conversation(store, scope, "openai", progress):
        fp.write(dumps_text({"conversation_id": session, "messages": messages}) + "\n")
        counts["conversations"] += 1
        counts["messages"] += len(messages)
    return counts

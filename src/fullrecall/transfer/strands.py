"""Strands Agents session folders, in the SDK's ``FileSessionManager`` layout.

::

    <storage dir>/
      session_<session id>/
        session.json                  {"session_id", "session_type": "AGENT", "created_at", "updated_at"}
        agents/agent_<agent id>/
          agent.json                  {"agent_id", "state", "conversation_manager_state", "_internal_state", ...}
          messages/message_<n>.json   {"message", "message_id": n, "redact_message", "created_at", "updated_at"}
        multi_agents/

Import reads a storage directory (every ``session_*`` in it) or one session directory: each
agent's messages, in index order, become a conversation (the session's id; the agent's id
unless the caller names one, or ``agent.json`` names the owner's: the export of the default owner,
whose agent ``""`` cannot name a folder, writes it as Strands' ``default`` agent and names ``""``
there, so importing it back restores the same owner); a redacted message is imported as the agent
sees it (its ``redact_message``). Message ids are ``strands:<session>:<agent>:<n>``, so importing again
writes nothing new. Export writes that layout, one session a conversation, the messages in
the Converse shape Strands uses (verbatim when stored in it), so ``FileSessionManager`` loads them.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from .._json import dumps_text
from .._json import parse as parse_json
from ..errors import InvalidInput, MessageFormatError
from ..stores.base import Scope, Store
from ._common import Progress, conversations, created_date, each_conversation, no_progress, records_for, write_all

OWNER_KEY = "fullrecall_agent_id"  # agent.json: the owner's agent when Strands' id differs (Strands ignores it)
DEFAULT_AGENT = "default"  # Strands' agent id for an agent given none: the folder of fullrecall's default owner
SESSION_PREFIX = "session_"
AGENT_PREFIX = "agent_"
MESSAGE_PREFIX = "message_"


def _load(path: Path) -> Any:
    try:
        return parse_json(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MessageFormatError(f"{path}: not a readable JSON file ({exc})") from None


def _time(value: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None


def session_dirs(path: Path) -> list[Path]:
    """The session directories at ``path`` (itself, if it is one)."""
    if (path / "session.json").is_file() or path.name.startswith(SESSION_PREFIX):
        return [path]
    found = sorted(p for p in path.glob(f"{SESSION_PREFIX}*") if p.is_dir())
    if not found:
        raise MessageFormatError(f"{path}: no Strands session here (expected session_<id>/ folders or session.json)")
    return found


def read_session(directory: Path) -> list[tuple[str, str, str, list[tuple[int, dict[str, Any]]]]]:
    """(session id, agent id, owner's agent id, (index, message file) in index order) of each agent of a
    session directory.

    The owner's agent is the agent's id, unless ``agent.json`` names another (:data:`OWNER_KEY`, which the
    export writes for the default owner's agent ``""``). A message's index is its file's
    (``message_<index>.json``, the SDK's ``message_id``); two files of one index (``message_1.json``,
    ``message_01.json``) are refused, naming them.
    """
    meta = _load(directory / "session.json") if (directory / "session.json").is_file() else {}
    session = meta.get("session_id") or directory.name.removeprefix(SESSION_PREFIX)
    out = []
    for agent_dir in sorted((directory / "agents").glob(f"{AGENT_PREFIX}*")):
        agent_meta = _load(agent_dir / "agent.json") if (agent_dir / "agent.json").is_file() else {}
        agent = agent_meta.get("agent_id") or agent_dir.name.removeprefix(AGENT_PREFIX)
        owner = agent_meta.get(OWNER_KEY)
        files: dict[int, Path] = {}
        for f in sorted((agent_dir / "messages").glob(f"{MESSAGE_PREFIX}*.json")):
            try:
                index = int(f.name[len(MESSAGE_PREFIX):-5])
            except ValueError:
                continue
            if files.setdefault(index, f) != f:
                raise MessageFormatError(f"{f}: message index {index} is also {files[index].name}'s")
        out.append((str(session), str(agent), owner if isinstance(owner, str) else str(agent),
                    [(i, _load(files[i])) for i in sorted(files)]))
    return out


def import_strands(store: Store, scope: Scope, path: str | os.PathLike[str], *, agent_id: str | None = None,
                   progress: Progress = no_progress, embedder: Any = None) -> dict[str, int]:
    """Import Strands sessions into ``scope``'s user (``scope.session_id``, when set, takes every message)."""
    prepared = []
    for directory in session_dirs(Path(path)):
        for session, agent, owner, items in read_session(directory):
            raws, ids, times = [], [], []
            for index, item in items:
                if not isinstance(item, dict) or not isinstance(item.get("message"), dict):
                    raise MessageFormatError(f"{directory}: agent {agent!r}: message {index} lacks 'message'")
                raws.append(item.get("redact_message") or item["message"])
                ids.append(f"strands:{session}:{agent}:{index}")  # the file's index: its message_id may be absent
                times.append(_time(item.get("created_at")))
            own = replace(scope, session_id=scope.session or session, agent_id=agent_id or owner)
            prepared.append((own, records_for(raws, ids, times=times, where=f"session {session!r}, agent {agent!r}: ")))
    return write_all(store, prepared, len({(s.agent_id, s.session_id) for s, _ in prepared}), progress, embedder)


def _dump(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_text(data, indent=2), encoding="utf-8")


def _folder_name(kind: str, value: str, folder: str) -> str:
    """``value`` if it can name one folder (a Strands session or agent); InvalidInput naming it otherwise.

    A conversation id may hold any character: one with a path separator would name a folder elsewhere
    (``a/../../x`` one outside the storage directory), and Strands refuses such ids too.
    """
    if any(c in value for c in ("/", "\\", "\x00")):
        raise InvalidInput(f"{kind} {value!r} cannot name a Strands {folder} folder: it holds a path "
                           "separator ('/' or '\\'); export it in another format")
    return value


def _check_no_stale_messages(folder: Path, count: int) -> None:
    """Refuse to export over a folder holding message files the conversation has not (an earlier, longer export's,
    or an agent's own): left there, Strands and an import would load them with the conversation, a message deleted
    since among them; deleting them is not the export's to do.
    """
    for found in folder.glob(f"{MESSAGE_PREFIX}*.json") if folder.is_dir() else ():
        try:
            number = int(found.name[len(MESSAGE_PREFIX):-5])
        except ValueError:
            continue  # no message file: neither Strands nor an import reads it
        if number >= count or found.name != f"{MESSAGE_PREFIX}{number}.json":
            raise InvalidInput(f"{found} is not a message of the conversation ({count} messages): export into an "
                               "empty folder, or remove that session's folder first")


def export_strands(store: Store, scope: Scope, path: str | os.PathLike[str], *,
                   progress: Progress = no_progress) -> dict[str, int]:
    """Write each conversation of ``scope`` as a Strands session under the storage directory ``path``.

    Every conversation id (and the agent id) is checked before anything is written: each names a folder.
    """
    root = Path(path)
    agent = _folder_name("agent", str(scope.agent_id) or DEFAULT_AGENT, "agent")
    owner = {OWNER_KEY: str(scope.agent_id)} if agent != str(scope.agent_id) else {}  # the default owner's ""
    for session in conversations(store, scope):
        _folder_name("conversation", session, "session")
        _check_no_stale_messages(root / f"{SESSION_PREFIX}{session}" / "agents" / f"{AGENT_PREFIX}{agent}" / "messages",
                                 store.count(replace(scope, session_id=session)))
    counts = {"conversations": 0, "messages": 0}
    for session, stored, messages in each_conversation(store, scope, "converse", progress):
        dates = [created_date(m, session, "strands").isoformat() for m in stored]  # all checked before writing
        first, last = dates[0], dates[-1]
        directory = root / f"{SESSION_PREFIX}{session}"
        _dump(directory / "session.json", {"session_id": session, "session_type": "AGENT", "created_at": first,
                                           "updated_at": last})
        (directory / "multi_agents").mkdir(exist_ok=True)
        agent_dir = directory / "agents" / f"{AGENT_PREFIX}{agent}"
        _dump(agent_dir / "agent.json", {"agent_id": agent, "state": {}, "conversation_manager_state": {},
                                         "_internal_state": {}, "created_at": first, "updated_at": last, **owner})
        for index, (when, message) in enumerate(zip(dates, messages)):
            _dump(agent_dir / "messages" / f"{MESSAGE_PREFIX}{index}.json",
                  {"message": message, "message_id": index, "redact_message": None, "created_at": when,
                   "updated_at": when})
        counts["conversations"] += 1
        counts["messages"] += len(messages)
    return counts

"""Memory tools an agent can call: search, expand, remember, forget, recall patterns.

:class:`MemoryTools` wraps a :class:`~fullrecall.memory.persistent.PersistentMemory` (and,
optionally, a :class:`~fullrecall.memory.procedural.ProceduralMemory`) as five tools:

* ``search_memory(query, limit=5)``: facts and archived messages, with ids and scores;
* ``expand(id, session_id=None)``: the exact archived messages behind a hit, a fact or a summary;
* ``remember(fact)``: keep a fact (a newer value of the same attribute supersedes the old one);
* ``forget(id, session_id=None)``: delete a message (of the hit's session: ids may repeat across sessions), a
  fact or a pattern;
* ``recall_patterns(task)``: tool sequences that solved similar tasks, and a suggested plan.

They are offered as OpenAI-style tool schemas (:meth:`MemoryTools.schemas`) with a
dispatcher for any agent loop (:meth:`MemoryTools.call`, :meth:`MemoryTools.handle`), and as
Strands ``@tool`` functions (:meth:`MemoryTools.strands_tools`). Every tool returns a JSON
object; bad arguments give ``{"error": ...}`` (the model can correct itself) instead of raising.

The answers of ``search_memory`` and ``expand`` quote what memory holds already, so they carry
``"recalled_from_memory": true``: recorded with the agent's turn (or archived by a window) they are
kept verbatim but indexed as "recalled from memory", never as new copies of the messages they quote.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import InvalidInput
from ..messages.model import RECALLED
from ..stores import _validate as V
from ..stores.base import StoredMessage
from .persistent import PersistentMemory
from .procedural import ProceduralMemory

_STRING = {"type": "string"}

_SPECS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "search_memory": (
        ("Search long-term memory (facts about the user and past conversation messages, across sessions). "
         "Returns hits with an id, kind, text and score; pass an id to expand for the exact messages."),
        {"query": {**_STRING, "description": "what to look for"},
         "limit": {"type": "integer", "description": "how many hits of each kind (default 5)", "minimum": 1}},
        ["query"],
    ),
    "expand": (
        "Show the exact archived messages behind a search hit, a fact (the messages it came from) or a summary.",
        {"id": {**_STRING, "description": "an id from search_memory"},
         "session_id": {**_STRING, "description": "the hit's session_id, when it has one"}},
        ["id"],
    ),
    "remember": (
        ("Keep a durable fact about the user, e.g. 'My city is Lyon'. A newer value of the same attribute "
         "replaces the current one (the old one stays in history)."),
        {"fact": {**_STRING, "description": "the fact, as one short sentence"}},
        ["fact"],
    ),
    "forget": (
        ("Delete a message, fact or pattern from memory for good, by its id (and a message's session_id, from its "
         "search hit: message ids may repeat across sessions)."),
        {"id": {**_STRING, "description": "the id to delete"},
         "session_id": {**_STRING, "description": "the hit's session_id, when it has one"}},
        ["id"],
    ),
    "recall_patterns": (
        "Find tool sequences that solved similar tasks before, with a suggested plan and its confidence.",
        {"task": {**_STRING, "description": "the task at hand"}},
        ["task"],
    ),
}


class MemoryTools:
    """The memory tools of one :class:`PersistentMemory` (and optional :class:`ProceduralMemory`)."""

    def __init__(self, memory: PersistentMemory, procedural: ProceduralMemory | None = None, *, limit: int = 5) -> None:
        self.memory = memory
        self.procedural = procedural
        self.limit = limit

    # -- the tools -----------------------------------------------------------------------------
    def search_memory(self, query: str, limit: int | None = None) -> dict[str, Any]:
        hits = self.memory.search(query, limit or self.limit)
        return {RECALLED: True, "results": [
            {"id": h.id, "kind": h.kind, "text": h.text, "score": round(h.score, 4), "session_id": h.session_id,
             "role": h.role, "date": _date(h.created_at)}
            for h in hits
        ]}

    def expand(self, id: str, session_id: str | None = None) -> dict[str, Any]:
        messages = self.memory.expand(id, session_id=session_id)
        if not messages and not self._holds(id):
            return {"error": f"nothing in memory has the id {id!r}"}
        return {RECALLED: True, "id": id, "messages": [_message(m) for m in messages]}

    def _holds(self, id: str) -> bool:
        """Whether ``id`` is a fact or pattern of the owner (one without messages behind it is no unknown id: a
        remembered fact, one whose messages were forgotten, a pattern).
        """
        if self.memory.facts.get(id) is not None:
            return True
        return self.procedural is not None and self.procedural.book.get(id) is not None

    def remember(self, fact: str) -> dict[str, Any]:
        stored = self.memory.remember(fact)
        return {"id": stored.id, "text": stored.text, "attribute": stored.attribute, "value": stored.value,
                "mentions": stored.mentions}

    def forget(self, id: str, session_id: str | None = None) -> dict[str, Any]:
        if session_id:  # that session's message
            counts = self.memory.clear(ids=[id], session_id=session_id)
        else:
            sessions = sorted({m.session_id or "" for m in self.memory.messages(ids=[id])})
            if len(sessions) > 1:  # which one the model means, only the hit's session says
                return {"error": f"forget: the id {id!r} names messages in {len(sessions)} sessions "
                                 f"({', '.join(map(repr, sessions))}): give the hit's session_id"}
            counts = self.memory.clear(ids=[id])
        if not session_id and self.procedural is not None and self.procedural.delete_pattern(id):
            counts["patterns"] = 1
        deleted = sum(counts.values())
        return {"deleted": deleted, **counts} if deleted else {"error": f"nothing in memory has the id {id!r}"}

    def recall_patterns(self, task: str) -> dict[str, Any]:
        if self.procedural is None:
            return {"error": "no procedural memory is configured"}
        patterns = self.procedural.retrieve_patterns(task)
        return {
            "patterns": [{k: p[k] for k in ("id", "query", "tools_used", "success_score", "success_count",
                                            "similarity")} for p in patterns],
            "plan": self.procedural.plan_tool_sequence(task, patterns),
        }

    @property
    def names(self) -> list[str]:
        return [n for n in _SPECS if n != "recall_patterns" or self.procedural is not None]

    # -- OpenAI-style tools -------------------------------------------------------------------
    def schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI chat-completions ``tools`` entries."""
        return [
            {"type": "function", "function": {
                "name": name, "description": _SPECS[name][0],
                "parameters": {"type": "object", "properties": _SPECS[name][1], "required": _SPECS[name][2],
                               "additionalProperties": False},
            }}
            for name in self.names
        ]

    def call(self, name: str, arguments: str | dict[str, Any] | None = None) -> dict[str, Any]:
        """Run one tool by name with its arguments (a JSON string or a dict); the tool's JSON object."""
        if name not in self.names:
            return {"error": f"unknown tool {name!r}; the memory tools are {self.names}"}
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
        except (json.JSONDecodeError, TypeError, ValueError, RecursionError) as exc:  # nested past the parser's depth
            return {"error": f"{name}: arguments must be a JSON object ({exc})"}
        if not isinstance(args, dict):
            return {"error": f"{name}: arguments must be a JSON object"}
        _, props, required = _SPECS[name]
        problem = _check_args(name, args, props, required)
        if problem:
            return {"error": problem}
        try:
            return getattr(self, name)(**args)
        except ValueError as exc:  # fullrecall's bad-input errors: the model may fix its call
            return {"error": f"{name}: {exc}"}

    def handle(self, tool_calls: Sequence[Any]) -> list[dict[str, Any]]:
        """Answer an assistant message's ``tool_calls`` (OpenAI shape): one ``role: "tool"`` message each.

        Calls to other tools are left out, for the loop's other dispatchers, and so is an entry that is no
        tool call (neither a dict nor an SDK object, or without a ``function`` object): none of this loop's.
        """
        replies = []
        for entry in tool_calls:
            call = entry if isinstance(entry, dict) else _as_dict(entry)
            function = call.get("function") if call is not None else None
            if call is None or not isinstance(function, dict) or function.get("name") not in self.names:
                continue
            result = self.call(function["name"], function.get("arguments"))
            content = json.dumps(result, ensure_ascii=False)
            replies.append({"role": "tool", "tool_call_id": call.get("id"), "content": content})
        return replies

    # -- Strands ------------------------------------------------------------------------------
    def strands_tools(self) -> list[Any]:
        """The tools as Strands tools (``Agent(tools=memory_tools.strands_tools())``).

        Each takes the model's input as it is, through :meth:`call`: the same checks and answers as the
        dispatcher, so a misspelled argument is refused, never dropped (a Python signature would drop it, and
        ``forget`` with ``sesion_id`` would search every session).
        """
        from strands.tools.tools import PythonAgentTool

        def made(name: str) -> Any:
            description, props, required = _SPECS[name]
            schema = {"type": "object", "properties": props, "required": required}

            def run(tool_use: Any, **_: Any) -> dict[str, Any]:
                answer = self.call(name, tool_use.get("input"))
                return {"toolUseId": tool_use["toolUseId"], "status": "error" if "error" in answer else "success",
                        "content": [{"text": json.dumps(answer, ensure_ascii=False)}]}

            spec = {"name": name, "description": description, "inputSchema": {"json": schema}}
            return PythonAgentTool(name, spec, run)  # type: ignore[arg-type]  # the SDK's TypedDicts

        return [made(name) for name in self.names]


def unknown_argument(name: str, args: Iterable[str], known: Iterable[str]) -> str | None:
    """What tool ``name`` says of the first of ``args`` it does not take (None: it takes them all), here and over
    MCP: a misspelled argument is refused, never dropped (``sesion_id`` would make ``forget`` search every session).
    """
    props = sorted(known)
    key = next((k for k in args if k not in props), None)
    return None if key is None else f"{name}: unknown argument {key!r}; expected {props}"


def _check_args(name: str, args: dict[str, Any], props: dict[str, Any], required: list[str]) -> str | None:
    for key in required:
        if key not in args:
            return f"{name}: {key!r} is missing"
    unknown = unknown_argument(name, args, props)
    if unknown:
        return unknown
    for key, value in args.items():
        kind = props[key]["type"]
        if value is None and key not in required:
            continue
        if kind == "string" and (not isinstance(value, str) or (key in required and not value.strip())):
            return f"{name}: {key!r} must be a non-empty string"
        if kind == "string":  # named by the argument the model gave, not by what would refuse it inside
            try:
                V.check_unicode(value, f"{name}: {key!r}")
            except InvalidInput as exc:
                return str(exc)
        if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return f"{name}: {key!r} must be a positive integer"
    return None


def _as_dict(obj: Any) -> dict[str, Any] | None:
    """An SDK object (e.g. openai's ChatCompletionMessageToolCall) or another mapping as a dict; None for
    anything else.
    """
    if isinstance(obj, Mapping):
        return dict(obj)
    dump = getattr(obj, "model_dump", None)
    found = dump() if callable(dump) else None
    return found if isinstance(found, dict) else None


def _date(ts: float | None) -> str | None:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts)) if ts else None


def _message(m: StoredMessage) -> dict[str, Any]:
    return {"id": m.id, "session_id": m.session_id, "position": m.position, "role": m.role,
            "date": _date(m.created_at), "message": m.data}

"""Pinned messages: kept through trimming and summarization, as Strands pins them.

A message is pinned when its ``metadata.custom.pinned`` is True (the flag the
Strands SDK's pin API sets), when it is one of the messages a manager holds
pinned (``pin_first`` in a shape other than Converse, whose APIs refuse a field
they do not know, so nothing is written into the caller's message), or when it
is the tool call or tool result next to a pinned partner with the same tool id,
so a pinned pair is never split.
"""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence
from typing import Any

from ..messages.formats import detect_shape


def _flagged(message: Any, held: Sequence[Any] = ()) -> bool:
    """Pinned by the SDK's flag, or one of the ``held`` messages a manager pinned (the same dict: see
    :func:`bind_held`; a later message equal to a pinned one is not pinned).
    """
    if any(message is h for h in held):
        return True
    metadata = message.get("metadata") if isinstance(message, dict) else None
    custom = metadata.get("custom") if isinstance(metadata, dict) else None
    return isinstance(custom, dict) and custom.get("pinned") is True


def _tool_ids(message: Any) -> set[str]:
    """Tool ids a raw message calls or answers, in any supported shape."""
    ids: set[str] = set()
    if not isinstance(message, dict):
        return ids
    for call in message.get("tool_calls") or ():  # chat completions
        if isinstance(call, dict) and call.get("id"):
            ids.add(str(call["id"]))
    if message.get("tool_call_id"):
        ids.add(str(message["tool_call_id"]))
    content = message.get("content")
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        inner = block.get("toolUse") or block.get("toolResult")  # converse
        if isinstance(inner, dict) and inner.get("toolUseId"):
            ids.add(str(inner["toolUseId"]))
        for key in ("id", "tool_use_id"):  # anthropic tool_use / tool_result
            if block.get("type") in ("tool_use", "tool_result") and block.get(key):
                ids.add(str(block[key]))
    return ids


def is_pinned(messages: Sequence[Any], index: int, held: Sequence[Any] = ()) -> bool:
    """True when ``messages[index]`` is pinned (flagged or ``held``), or is the tool partner next to a pinned message."""
    if _flagged(messages[index], held):
        return True
    ids = _tool_ids(messages[index])
    if not ids:
        return False
    for near in (index - 1, index + 1):
        if 0 <= near < len(messages) and _flagged(messages[near], held) and ids & _tool_ids(messages[near]):
            return True
    return False


def pin(message: dict[str, Any]) -> None:
    """Pin one raw message in place (``metadata.custom.pinned = True``). Its ``metadata`` and ``custom`` are new
    dicts: one the message shared with a copy of it (a memory's stored row) is left as it was.
    """
    metadata = message.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    custom = metadata.get("custom")
    message["metadata"] = {**metadata, "custom": {**(custom if isinstance(custom, dict) else {}), "pinned": True}}


def pin_first(messages: MutableSequence[dict[str, Any]], count: int, held: list[dict[str, Any]]) -> None:
    """Pin the first ``count`` messages: Converse messages with the SDK's flag (its pin API, which Strands reads);
    any other shape's by adding them to ``held``, the manager's own list, leaving the caller's messages as they
    are (the Anthropic and OpenAI APIs refuse a ``metadata`` field in a message).
    """
    first = list(messages)[:count]
    if first and detect_shape(messages) == "converse":
        for message in first:
            pin(message)
    else:
        held.extend(first)


def bind_held(messages: Sequence[Any], held: list[Any], start: int = 0) -> list[Any]:
    """The ``held`` pinned messages as the very dicts of ``messages`` they are. Pinned messages stay at the
    window's front, in order, from ``start`` (after a system message): each is the dict there, the same one, or,
    for a window restored or rebuilt as copies, an equal one in its place. One that is not there is no longer
    held: the caller took it out, and no copy of it stays.
    """
    if not held:
        return held
    bound: list[Any] = []
    at = start
    for h in held:
        if at < len(messages) and (messages[at] is h or messages[at] == h):
            bound.append(messages[at])
            at += 1
    return bound


def leading_pinned(messages: Sequence[Any], start: int = 0, held: Sequence[Any] = ()) -> int:
    """How many messages from ``start`` on are pinned, in one run."""
    end = start
    while end < len(messages) and is_pinned(messages, end, held):
        end += 1
    return end - start


def taken_from_front(seen: Sequence[dict[str, Any]], present: Sequence[dict[str, Any]]) -> list[int]:
    """Indexes in ``seen`` (the messages a manager kept at a window's front) of those no longer anywhere in
    ``present``, the window now: the caller took them out.
    """
    held = {id(m) for m in present}
    return [i for i, m in enumerate(seen) if id(m) not in held and m not in present]

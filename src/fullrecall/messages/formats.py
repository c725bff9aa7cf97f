"""Parsing and rendering the three message shapes agents use.

* ``converse``: Amazon Bedrock Converse / Strands Agents
  (``{"role", "content": [{"text"}, {"toolUse"}, {"toolResult"}, ...]}``);
* ``openai``: OpenAI Chat Completions (string or parts content, ``tool_calls``,
  ``role: "tool"`` with ``tool_call_id``, ``system``);
* ``anthropic``: Anthropic Messages (``text``, ``tool_use``, ``tool_result`` blocks).

The ``openai`` shape also takes what agent frameworks built on several providers (MassGen) store
beside chat-completions messages: Anthropic content blocks in a message's content (a system
message beside Claude's ``tool_use`` blocks is one conversation, not two shapes), and the OpenAI
Responses API's items (``{"type": "function_call" | "function_call_output" | "message" |
"reasoning", ...}``, no role needed), each kept verbatim with its text indexed.

:func:`parse_messages` detects the shape of a list and returns it with typed
messages; :func:`render_messages` turns typed messages back into that shape.
An unchanged message renders to the very dict it came from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .._json import MAX_MESSAGE_BYTES, check_json
from ..errors import InvalidInput, MessageFormatError
from .model import Block, Message, OpaqueBlock, TextBlock, ToolResultBlock, ToolUseBlock

SHAPES = ("converse", "openai", "anthropic")

_OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool"}
_OPENAI_PART_TYPES = {"image_url", "input_audio", "refusal", "file", "input_text", "output_text"}
_ANTHROPIC_TYPES = {"tool_use", "tool_result", "thinking", "redacted_thinking", "server_tool_use", "web_search_tool_result"}
_TEXT_PART_TYPES = {"text", "input_text", "output_text"}  # chat completions' text part, the Responses API's two
# The Responses API's items without a role are the assistant's (a call, a reasoning), but for a call's output,
# which answers the call as a chat-completions "tool" message does.
_RESPONSES_OUTPUTS = {"function_call_output", "custom_tool_call_output"}


# -- detection -------------------------------------------------------------------------


def detect_shape(messages: Sequence[Any], first_index: int = 0) -> str:
    """The shape of a list; ``openai`` when every message would read the same in any shape.

    Errors number the messages from ``first_index`` (where the list sits in the caller's).
    """
    return shape_of(shape_signals(messages, first_index))


def shape_signals(messages: Sequence[Any], first_index: int = 0) -> dict[str, int]:
    """Each shape some message of the list shows, with the index of the first that does (counted from
    ``first_index``); ``MessageFormatError`` naming the first entry that is not a dict.
    """
    found: dict[str, int] = {}
    for index, msg in enumerate(messages, first_index):
        if not isinstance(msg, dict):
            raise MessageFormatError(f"message {index}: expected a dict, got {type(msg).__name__}")
        shape = _signal(msg)
        if shape and shape not in found:
            found[shape] = index
    return found


def shape_of(found: dict[str, int]) -> str:
    """The shape of a list whose messages show ``found`` (see :func:`shape_signals`); ``MessageFormatError``
    naming the first message of a second shape.
    """
    if set(found) == {"openai", "anthropic"}:
        return "openai"  # chat-completions messages carrying Claude's content blocks (as MassGen stores them)
    if len(found) > 1:
        (a, ia), (b, ib) = sorted(found.items(), key=lambda kv: kv[1])[:2]
        raise MessageFormatError(f"message {ib}: its shape ({b}) differs from message {ia}'s ({a}); use one shape per list")
    return next(iter(found), "openai")


def _signal(msg: dict[str, Any]) -> str | None:
    if _is_item(msg):
        return "openai"
    if "tool_calls" in msg or "tool_call_id" in msg or msg.get("role") in ("system", "developer", "tool"):
        return "openai"
    content = msg.get("content")
    if not isinstance(content, list):
        return None
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind is None:
            return "converse"
        if kind in _ANTHROPIC_TYPES or (kind in ("image", "document") and "source" in block):
            return "anthropic"
        if kind in _OPENAI_PART_TYPES:
            return "openai"
    return None


# -- parsing ---------------------------------------------------------------------------


def parse_messages(
    messages: Sequence[Any], shape: str | None = None, *, storable: bool = False, first_index: int = 0
) -> tuple[str, list[Message]]:
    """Typed messages and the shape they came in; ``MessageFormatError`` names index and field.

    Indexes count from ``first_index``: a slice of a caller's list names its messages as the caller does.

    With ``storable``, each message must also be a JSON value of at most ``MAX_MESSAGE_BYTES`` (what a
    store can keep verbatim: no NaN, bytes, tuples or other objects, nesting bounded), as
    :class:`~fullrecall.memory.ConversationMemory` requires before it stores anything.
    """
    if not isinstance(messages, (list, tuple)):
        raise MessageFormatError(f"messages must be a list, got {type(messages).__name__}")
    shape = shape or detect_shape(messages, first_index)
    if shape not in SHAPES:
        raise ValueError(f"unknown message shape {shape!r}; expected one of {SHAPES}")
    parse = _PARSERS[shape]
    out = []
    for index, msg in enumerate(messages, first_index):
        if not isinstance(msg, dict):
            raise MessageFormatError(f"message {index}: expected a dict, got {type(msg).__name__}")
        try:
            out.append(parse(msg))
            if storable:
                check_json(msg, f"message {index}", limit=MAX_MESSAGE_BYTES)
        except _FieldError as exc:
            raise MessageFormatError(f"message {index}: {exc}") from None
        except InvalidInput as exc:
            raise MessageFormatError(str(exc)) from None
    return shape, out


def check_unique_ids(messages: Sequence[Any], ids: Sequence[Any], within: str) -> None:
    """``MessageFormatError`` naming the first message whose id (``ids[i]``, None for none) an earlier,
    different message of the same batch holds: a conversation keeps an id's first message, so the other
    would be acknowledged and lost. An integer id counts as its digits, as the memory stores it.
    """
    first: dict[str, int] = {}
    for index, mid in enumerate(ids):
        if mid is None:
            continue
        earlier = first.setdefault(str(mid), index)
        if messages[earlier] != messages[index]:
            raise MessageFormatError(f"message {index}: 'id' {mid!r} is also message {earlier}'s, a different "
                                     f"message; ids are unique within {within}")


def parse_message(msg: dict[str, Any], shape: str) -> Message:
    return parse_messages([msg], shape)[1][0]


class _FieldError(Exception):
    """A problem in one field; the caller adds the message's index."""


def _text(value: Any, where: str) -> str:
    if isinstance(value, bytes):
        raise _FieldError(f"'{where}' must be str, got bytes (decode it as UTF-8 first)")
    if not isinstance(value, str):
        raise _FieldError(f"'{where}' must be a string, got {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise _FieldError(f"'{where}' is not valid UTF-8 (unpaired surrogate at character {exc.start})") from None
    if size > MAX_MESSAGE_BYTES:
        raise _FieldError(f"'{where}' is {size:,} bytes, over the {MAX_MESSAGE_BYTES:,}-byte limit for one message")
    return value


def _require(d: dict[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise _FieldError(f"'{where}.{key}' is missing")
    return d[key]


def _role(msg: dict[str, Any], allowed: Iterable[str]) -> str:
    role = msg.get("role")
    if role is None:
        raise _FieldError("'role' is missing")
    if not isinstance(role, str):
        raise _FieldError(f"'role' must be a string, got {type(role).__name__}")
    if role not in allowed:
        raise _FieldError(f"'role' must be one of {sorted(allowed)}, got {role!r}")
    return role


def _common(msg: dict[str, Any]) -> dict[str, Any]:
    meta = msg.get("metadata")
    return {"metadata": dict(meta) if isinstance(meta, dict) else {}, "raw": msg}


# converse


def _parse_converse(msg: dict[str, Any]) -> Message:
    role = _role(msg, ("user", "assistant"))
    content = _require(msg, "content", "message")
    if not isinstance(content, list):
        raise _FieldError(f"'content' must be a list of blocks, got {type(content).__name__}")
    blocks = [_converse_block(b, f"content[{i}]") for i, b in enumerate(content)]
    return Message(role=role, content=blocks, shape="converse", **_common(msg))


def _converse_block(block: Any, where: str) -> Block:
    if not isinstance(block, dict) or not block:
        raise _FieldError(f"'{where}' must be a non-empty dict")
    if "text" in block:
        return TextBlock(_text(block["text"], f"{where}.text"), raw=block)
    if "toolUse" in block:
        use = block["toolUse"]
        if not isinstance(use, dict):
            raise _FieldError(f"'{where}.toolUse' must be a dict")
        return ToolUseBlock(
            id=_text(_require(use, "toolUseId", f"{where}.toolUse"), f"{where}.toolUse.toolUseId"),
            name=_text(_require(use, "name", f"{where}.toolUse"), f"{where}.toolUse.name"),
            input=use.get("input"),
            raw=block,
        )
    if "toolResult" in block:
        res = block["toolResult"]
        if not isinstance(res, dict):
            raise _FieldError(f"'{where}.toolResult' must be a dict")
        inner = res.get("content", [])
        if not isinstance(inner, list):
            raise _FieldError(f"'{where}.toolResult.content' must be a list")
        return ToolResultBlock(
            tool_use_id=_text(_require(res, "toolUseId", f"{where}.toolResult"), f"{where}.toolResult.toolUseId"),
            content=tuple(_converse_result_part(p, f"{where}.toolResult.content[{i}]") for i, p in enumerate(inner)),
            status=res.get("status", "success"),
            raw=block,
        )
    kind = next(iter(block))
    return OpaqueBlock(kind=kind, data=block[kind], raw=block)


def _converse_result_part(part: Any, where: str) -> Block:
    if not isinstance(part, dict) or not part:
        raise _FieldError(f"'{where}' must be a non-empty dict")
    if "text" in part:
        return TextBlock(_text(part["text"], f"{where}.text"), raw=part)
    kind = next(iter(part))
    return OpaqueBlock(kind=kind, data=part[kind], raw=part)


def _render_converse(msg: Message) -> dict[str, Any]:
    out = {k: v for k, v in (msg.raw or {}).items() if k not in ("role", "content")}
    # Converse has two roles: a system message and a tool result (OpenAI's role "tool") are the user's turn
    role = "user" if msg.role in ("system", "tool") else msg.role
    return {"role": role, "content": [_converse_out(b) for b in msg.content], **out}


def _converse_out(block: Block) -> dict[str, Any]:
    if block.raw is not None and isinstance(block.raw, dict) and _raw_kind(block.raw) == "converse":
        return block.raw
    if isinstance(block, TextBlock):
        return {"text": block.text}
    if isinstance(block, ToolUseBlock):
        return {"toolUse": {"toolUseId": block.id, "name": block.name, "input": block.input}}
    if isinstance(block, ToolResultBlock):
        return {"toolResult": {"toolUseId": block.tool_use_id, "status": block.status, "content": [_converse_out(p) for p in block.content]}}
    return {block.kind: block.data}


# openai


def _is_item(msg: dict[str, Any]) -> bool:
    """A Responses API item: a ``type`` of its own, and a role only when it is a ``message``."""
    kind = msg.get("type")
    return isinstance(kind, str) and (kind == "message" or "role" not in msg)


def _parse_item(msg: dict[str, Any]) -> Message:
    """A Responses API item: a message, a function call, its output, a reasoning (anything else kept opaque)."""
    kind = msg["type"]
    if kind == "message":
        role = _role(msg, _OPENAI_ROLES)
        blocks = _openai_parts(msg.get("content"), "content")
        return Message(role="system" if role == "developer" else role, content=blocks, shape="openai", **_common(msg))
    if kind == "function_call":
        return Message(role="assistant", content=[ToolUseBlock(
            id=_text(_require(msg, "call_id", "message"), "call_id"), name=_text(_require(msg, "name", "message"), "name"),
            input=_arguments(msg.get("arguments", "")), raw=msg)], shape="openai", **_common(msg))
    if kind in _RESPONSES_OUTPUTS:
        output = msg.get("output", "")
        parts = _openai_parts(output, "output") if isinstance(output, (str, list)) else [OpaqueBlock("json", output)]
        result = ToolResultBlock(tool_use_id=_text(_require(msg, "call_id", "message"), "call_id"), content=tuple(parts),
                                 raw=msg)
        return Message(role="tool", content=[result], shape="openai", **_common(msg))
    return Message(role="assistant", content=[OpaqueBlock(kind=_text(kind, "type"), data=msg, raw=msg)], shape="openai",
                   **_common(msg))


def _render_item(msg: Message) -> dict[str, Any]:
    """A Responses API item changed by a manager (a call's output shortened): its own keys, the new content."""
    raw = msg.raw or {}
    if raw.get("type") in _RESPONSES_OUTPUTS:
        results = [b for b in msg.content if isinstance(b, ToolResultBlock)]
        if len(results) == 1:
            return {**raw, "output": _openai_content(list(results[0].content), raw.get("output"))}
    if raw.get("type") == "message":
        return {**raw, "content": _openai_content(msg.content, raw.get("content"))}
    return raw


def _arguments(args: Any) -> Any:
    """A tool call's arguments: the JSON they hold, or the string as given (models do emit broken JSON)."""
    try:
        return json.loads(args) if isinstance(args, str) and args else args
    except json.JSONDecodeError:
        return args


def _parse_openai(msg: dict[str, Any]) -> Message:
    if _is_item(msg):
        return _parse_item(msg)
    role = _role(msg, _OPENAI_ROLES)
    content = msg.get("content")
    if role == "tool":
        call_id = _text(_require(msg, "tool_call_id", "message"), "tool_call_id")
        parts = _openai_parts(content, "content")
        result = ToolResultBlock(tool_use_id=call_id, content=tuple(parts), raw=None)
        return Message(role="tool", content=[result], shape="openai", **_common(msg))
    blocks: list[Block] = _openai_parts(content, "content")
    calls = msg.get("tool_calls") or []
    if not isinstance(calls, list):
        raise _FieldError("'tool_calls' must be a list")
    for i, call in enumerate(calls):
        where = f"tool_calls[{i}]"
        if not isinstance(call, dict):
            raise _FieldError(f"'{where}' must be a dict")
        fn = _require(call, "function", where)
        if not isinstance(fn, dict):
            raise _FieldError(f"'{where}.function' must be a dict")
        blocks.append(
            ToolUseBlock(
                id=_text(_require(call, "id", where), f"{where}.id"),
                name=_text(_require(fn, "name", f"{where}.function"), f"{where}.function.name"),
                input=_arguments(fn.get("arguments", "")),
                raw=call,
            )
        )
    return Message(role="system" if role == "developer" else role, content=blocks, shape="openai", **_common(msg))


def _openai_parts(content: Any, where: str) -> list[Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextBlock(_text(content, where), raw=content)]
    if not isinstance(content, list):
        raise _FieldError(f"'{where}' must be a string, a list of parts or null, got {type(content).__name__}")
    out: list[Block] = []
    for i, part in enumerate(content):
        w = f"{where}[{i}]"
        if not isinstance(part, dict) or "type" not in part:
            raise _FieldError(f"'{w}' must be a dict with a 'type'")
        if part["type"] in _TEXT_PART_TYPES:
            out.append(TextBlock(_text(_require(part, "text", w), f"{w}.text"), raw=part))
        elif part["type"] in _ANTHROPIC_TYPES:  # Claude's blocks in a chat-completions message: typed as they are
            out.append(_anthropic_block(part, w))
        else:
            out.append(OpaqueBlock(kind=part["type"], data=part, raw=part))
    return out


def _has_blocks(raw: dict[str, Any]) -> bool:
    """A chat-completions message whose content holds Claude's blocks (rendered as blocks, in place)."""
    content = raw.get("content")
    return isinstance(content, list) and any(isinstance(p, dict) and p.get("type") in _ANTHROPIC_TYPES for p in content)


def _render_openai(msg: Message) -> dict[str, Any]:
    raw = msg.raw or {}
    if _is_item(raw):
        return _render_item(msg)
    if _has_blocks(raw):
        return {**raw, "content": [_anthropic_out(b) for b in msg.content]}
    out = {k: v for k, v in raw.items() if k not in ("role", "content", "tool_calls", "tool_call_id")}
    results = [b for b in msg.content if isinstance(b, ToolResultBlock)]
    if results:
        if len(msg.content) != 1:
            raise MessageFormatError("an openai tool message holds exactly one tool result")
        res = results[0]
        return {"role": "tool", "tool_call_id": res.tool_use_id, "content": _openai_content(list(res.content), raw.get("content")), **out}
    role = raw.get("role") if raw.get("role") == "developer" and msg.role == "system" else msg.role
    uses = [b for b in msg.content if isinstance(b, ToolUseBlock)]
    body = [b for b in msg.content if not isinstance(b, ToolUseBlock)]
    rendered: dict[str, Any] = {"role": role, "content": _openai_content(body, raw.get("content"))}
    if uses:
        rendered["tool_calls"] = [_openai_call(u) for u in uses]
    rendered.update(out)
    return rendered


def _openai_content(blocks: Sequence[Block], original: Any) -> Any:
    if not blocks:
        return None if original is None else ("" if isinstance(original, str) else [])
    if all(isinstance(b, TextBlock) for b in blocks) and (isinstance(original, str) or original is None):
        return "\n".join(b.text for b in blocks)  # type: ignore[union-attr]
    parts = []
    for b in blocks:
        if isinstance(b, TextBlock):
            parts.append(b.raw if isinstance(b.raw, dict) else {"type": "text", "text": b.text})
        elif isinstance(b, OpaqueBlock) and isinstance(b.data, dict) and "type" in b.data:
            parts.append(b.data)
        else:
            parts.append({"type": "text", "text": Message(role="user", content=[b]).text})
    return parts


def _openai_call(use: ToolUseBlock) -> dict[str, Any]:
    if isinstance(use.raw, dict) and "function" in use.raw:
        return use.raw
    args = use.input if isinstance(use.input, str) else json.dumps(use.input, ensure_ascii=False)
    return {"id": use.id, "type": "function", "function": {"name": use.name, "arguments": args}}


# anthropic


def _parse_anthropic(msg: dict[str, Any]) -> Message:
    role = _role(msg, ("user", "assistant"))
    content = _require(msg, "content", "message")
    if isinstance(content, str):
        blocks: list[Block] = [TextBlock(_text(content, "content"), raw=content)]
    elif isinstance(content, list):
        blocks = [_anthropic_block(b, f"content[{i}]") for i, b in enumerate(content)]
    else:
        raise _FieldError(f"'content' must be a string or a list of blocks, got {type(content).__name__}")
    return Message(role=role, content=blocks, shape="anthropic", **_common(msg))


def _anthropic_block(block: Any, where: str) -> Block:
    if isinstance(block, str):
        return TextBlock(_text(block, where), raw=block)
    if not isinstance(block, dict) or "type" not in block:
        raise _FieldError(f"'{where}' must be a dict with a 'type'")
    kind = block["type"]
    if kind == "text":
        return TextBlock(_text(_require(block, "text", where), f"{where}.text"), raw=block)
    if kind == "tool_use":
        return ToolUseBlock(
            id=_text(_require(block, "id", where), f"{where}.id"),
            name=_text(_require(block, "name", where), f"{where}.name"),
            input=block.get("input"),
            raw=block,
        )
    if kind == "tool_result":
        inner = block.get("content", [])
        if isinstance(inner, str):
            parts: tuple[Block, ...] = (TextBlock(_text(inner, f"{where}.content"), raw=inner),)
        elif isinstance(inner, list):
            parts = tuple(_anthropic_block(p, f"{where}.content[{i}]") for i, p in enumerate(inner))
        else:
            raise _FieldError(f"'{where}.content' must be a string or a list")
        return ToolResultBlock(
            tool_use_id=_text(_require(block, "tool_use_id", where), f"{where}.tool_use_id"),
            content=parts,
            status="error" if block.get("is_error") else "success",
            raw=block,
        )
    return OpaqueBlock(kind=kind, data=block, raw=block)


def _render_anthropic(msg: Message) -> dict[str, Any]:
    raw = msg.raw or {}
    out = {k: v for k, v in raw.items() if k not in ("role", "content")}
    role = "user" if msg.role in ("system", "tool") else msg.role
    if isinstance(raw.get("content"), str) and len(msg.content) == 1 and isinstance(msg.content[0], TextBlock):
        return {"role": role, "content": msg.content[0].text, **out}
    if not raw and all(isinstance(b, TextBlock) for b in msg.content):
        return {"role": role, "content": "\n".join(b.text for b in msg.content), **out}  # type: ignore[union-attr]
    return {"role": role, "content": [_anthropic_out(b) for b in msg.content], **out}


def _anthropic_out(block: Block) -> Any:
    if block.raw is not None and _raw_kind(block.raw) == "anthropic":
        return block.raw
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, ToolResultBlock):
        res: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id, "content": [_anthropic_out(p) for p in block.content]}
        if block.status == "error":
            res["is_error"] = True
        return res
    if isinstance(block.data, dict) and "type" in block.data:
        return block.data
    return {"type": block.kind, block.kind: block.data}


def with_result_content(block: ToolResultBlock, parts: tuple[Block, ...]) -> ToolResultBlock:
    """``block`` holding ``parts`` instead (a result a manager shortened), rendered as the caller wrote it.

    An Anthropic ``tool_result`` keeps its own keys (``cache_control``, ...) and its content's form (a string stays
    one); the other shapes keep a result's keys in the message (a Responses output, a ``tool`` message), or have none.
    """
    raw = block.raw
    if isinstance(raw, dict) and raw.get("type") == "tool_result":
        if isinstance(raw.get("content"), str) and all(isinstance(p, TextBlock) for p in parts):
            content: Any = "\n".join(p.text for p in parts if isinstance(p, TextBlock))
        else:
            content = [_anthropic_out(p) for p in parts]
        return ToolResultBlock(block.tool_use_id, parts, block.status, raw={**raw, "content": content})
    return ToolResultBlock(block.tool_use_id, parts, block.status)


def _raw_kind(raw: Any) -> str:
    """Which shape a block's raw dict belongs to (``converse`` blocks carry no ``type``)."""
    if isinstance(raw, str):
        return "string"
    return "converse" if isinstance(raw, dict) and "type" not in raw else "anthropic"


# -- rendering -------------------------------------------------------------------------

_PARSERS = {"converse": _parse_converse, "openai": _parse_openai, "anthropic": _parse_anthropic}
_RENDERERS = {"converse": _render_converse, "openai": _render_openai, "anthropic": _render_anthropic}


def render_message(msg: Message, shape: str | None = None) -> dict[str, Any]:
    """The message as a dict of ``shape`` (its own shape by default)."""
    shape = shape or msg.shape or "openai"
    if msg.raw is not None and not msg.changed and msg.shape == shape:
        return msg.raw
    return _RENDERERS[shape](msg if msg.shape == shape else _foreign(msg))


def render_messages(messages: Iterable[Message], shape: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for msg in messages:
        if shape == "openai" and msg.role != "tool" and len([b for b in msg.content if isinstance(b, ToolResultBlock)]) > 1:
            # one openai tool message per result
            out.extend(render_message(Message(role="tool", content=[b]), shape) for b in msg.content if isinstance(b, ToolResultBlock))
            continue
        out.append(render_message(msg, shape))
    return out


def _foreign(msg: Message) -> Message:
    """A message crossing shapes keeps its content but none of its old raw dicts."""
    return Message(role=msg.role, content=[_strip(b) for b in msg.content], id=msg.id, position=msg.position,
                   timestamp=msg.timestamp, metadata=msg.metadata)


def _strip(block: Block) -> Block:
    if isinstance(block, ToolResultBlock):
        return ToolResultBlock(block.tool_use_id, tuple(_strip(p) for p in block.content), block.status)
    if isinstance(block, OpaqueBlock):
        return OpaqueBlock(block.kind, block.data)
    if isinstance(block, TextBlock):
        return TextBlock(block.text)
    return ToolUseBlock(block.id, block.name, block.input)

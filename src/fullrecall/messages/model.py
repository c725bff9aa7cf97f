"""One typed message model for every shape agents use.

A :class:`Message` holds a role and a list of blocks. Blocks parsed from an
application's dict keep that dict (``raw``), so a message that fullrecall did
not change goes back exactly as it came, key order and unknown keys included.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

ROLES = ("system", "user", "assistant", "tool")
# The key of a memory tool's answer (``{"recalled_from_memory": true, ...}``): it quotes what memory holds already.
RECALLED = "recalled_from_memory"


@dataclass(frozen=True)
class TextBlock:
    text: str
    raw: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ToolUseBlock:
    """A tool call: ``id`` pairs it with its :class:`ToolResultBlock`."""

    id: str
    name: str
    input: Any
    raw: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ToolResultBlock:
    """The answer to one tool call; ``content`` holds text and opaque blocks."""

    tool_use_id: str
    content: tuple[Block, ...]
    status: str = "success"  # "success" or "error"
    raw: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class OpaqueBlock:
    """Anything fullrecall does not interpret (image, document, reasoning, ...), kept verbatim."""

    kind: str
    data: Any
    raw: Any = field(default=None, compare=False, repr=False)


Block = TextBlock | ToolUseBlock | ToolResultBlock | OpaqueBlock


@dataclass
class Message:
    """A message in any shape, with what managers need to reason about it.

    ``position`` is the message's place in the whole conversation (0-based, the
    same in the window and in the archive); ``id`` is stable for that position.
    """

    role: str
    content: list[Block]
    id: str | None = None
    position: int | None = None
    timestamp: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    shape: str | None = None  # "converse", "openai" or "anthropic"
    raw: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    changed: bool = field(default=False, compare=False)  # content differs from ``raw``

    # -- what managers ask -----------------------------------------------------
    @property
    def tool_use_ids(self) -> list[str]:
        return [b.id for b in self.content if isinstance(b, ToolUseBlock)]

    @property
    def tool_result_ids(self) -> list[str]:
        return [b.tool_use_id for b in self.content if isinstance(b, ToolResultBlock)]

    @property
    def has_tool_result(self) -> bool:
        return any(isinstance(b, ToolResultBlock) for b in self.content)

    @property
    def text(self) -> str:
        """The message as plain text: what search indexes and summarizers read."""
        return "\n".join(p for p in (_block_text(b) for b in self.content) if p)

    def with_content(self, content: list[Block]) -> Message:
        """A copy with new content; rendered anew, keeping the message's other keys."""
        return replace(self, content=content, changed=True)


def _block_text(block: Block) -> str:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ToolUseBlock):
        return f"[tool call {block.name} {json_text(block.input)}]"
    if isinstance(block, ToolResultBlock):
        inner = "\n".join(p for p in (_block_text(b) for b in block.content) if p)
        inner = _recalled(inner) or inner
        flag = " error" if block.status == "error" else ""
        return f"[tool result{flag}] {inner}".rstrip()
    if block.kind == "json":
        return json_text(block.data)
    if block.kind in ("thinking", "reasoning") and isinstance(block.data, dict):  # Claude's thinking, a Responses reasoning
        said = [block.data.get("thinking")] + [p.get("text") for p in block.data.get("summary") or () if isinstance(p, dict)]
        return "\n".join([f"[{block.kind}]", *(t for t in said if isinstance(t, str) and t)])
    return f"[{block.kind}]"


def json_text(value: Any) -> str:
    r"""``value`` as JSON text for search and summaries, always storable.

    A tool call's JSON ``arguments`` may escape half a surrogate pair (``"\ud83d"``, an emoji a model cut): the
    message holds only ASCII there and is stored verbatim, but the decoded text would hold a lone surrogate,
    which no store accepts. That text reads it as U+FFFD; the message itself is never changed.
    """
    return valid_text(json.dumps(value, ensure_ascii=False, sort_keys=True, default=_opaque))


def valid_text(text: str) -> str:
    """``text`` as valid Unicode: a surrogate pair split in two escapes joins again, a lone half becomes U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _recalled(text: str) -> str | None:
    """What a memory tool's answer is, instead of the old messages it quotes (None for any other result):
    stored verbatim, it is read as "recalled from memory", so a search never finds it as a new copy of them.
    """
    if RECALLED not in text:
        return None
    try:
        answer = json.loads(text)
    except ValueError:
        return None
    if isinstance(answer, dict) and answer.get(RECALLED) is True:  # fullrecall's memory tools
        items = answer.get("results") or answer.get("messages") or []
    elif isinstance(answer, list) and answer and all(  # a memory store's entries (Strands' search_memory tool)
            isinstance(e, dict) and isinstance(e.get("metadata"), dict) and e["metadata"].get(RECALLED) is True
            for e in answer):
        items = answer
    else:
        return None
    return f"recalled from memory ({len(items) if isinstance(items, list) else 0} item(s))"


def _opaque(value: object) -> str:
    """What a tool input that JSON cannot hold (bytes of an image) reads as in text."""
    return f"<{len(value)} bytes>" if isinstance(value, (bytes, bytearray)) else f"<{type(value).__name__}>"

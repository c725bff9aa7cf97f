"""The runnable examples of README.md and docs/*.md: each ```python block, with what its markdown says about it.

A block may be preceded (on the lines just above its fence) by HTML comments, invisible on the rendered page:

- ``<!-- doc-test: skip REASON -->``: the block is not run; REASON says why, and shows in the test report;
- ``<!-- doc-test: continues -->``: the block goes on from the previous python block of the file: the two run
  as one program (and so on, for a chain);
- ``<!-- doc-test: given NAME, NAME -->``: names the example takes from its surroundings (``messages``,
  ``call_model``, a chat ``model`` ...); each is bound to its value in ``doc_givens.py``;
- ``<!-- doc-test: servers -->``: the PostgreSQL and Redis URLs the block names stand for the test suite's
  servers (a schema or key prefix of the test's own).

Every other python block runs as it is.

A shell block (```console, ```bash) says what becomes of it: ``<!-- doc-test: run -->`` (a console transcript: each
``$`` line runs in bash, and its output must have the shape shown: the same lines, numbers free),
``<!-- doc-test: service -->`` (docs/service.md's quick start, run against a real ``fullrecall serve``), or
``<!-- doc-test: skip REASON -->``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARK = re.compile(r"<!--\s*doc-test:\s*(\w+)\s*(.*?)\s*-->")


@dataclass
class Example:
    """One program to run: a python block, with the blocks it continues joined in front of it."""

    doc: str  # e.g. "docs/memory.md"
    line: int  # the fence line of the first block
    code: str
    given: list[str] = field(default_factory=list)
    skip: str | None = None
    servers: bool = False

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass
class Shell:
    """A fenced block other than python (a shell block, say): its text, and what its markdown says of it."""

    doc: str
    line: int
    text: str
    marks: dict[str, str]

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"

    def transcript(self) -> list[tuple[str, list[str]]]:
        """A console block's ``$`` commands (a line ending in a backslash goes on at the next ``>`` line), each
        with the output lines shown after it."""
        steps: list[tuple[str, list[str]]] = []
        for line in self.text.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps and line.startswith("> ") and steps[-1][0].endswith("\\") and not steps[-1][1]:
                steps[-1] = (steps[-1][0] + "\n" + line[2:], [])
            elif steps:
                steps[-1][1].append(line)
        return steps


@dataclass
class _Block:
    line: int
    code: str
    marks: dict[str, str]
    language: str = "python"


def _blocks(path: Path, languages: tuple[str, ...] = ("python",)) -> list[_Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[_Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if fence.group(1) in languages:
            found.append(_Block(i + 1, "\n".join(lines[i + 1 : end]) + "\n", _marks_above(lines, i), fence.group(1)))
        i = end + 1
    return found


def _marks_above(lines: list[str], fence: int) -> dict[str, str]:
    """The doc-test comments on the lines right above a fence (up to the first line that is not one)."""
    marks: dict[str, str] = {}
    j = fence - 1
    while j >= 0 and (mark := _MARK.search(lines[j])):
        marks[mark.group(1)] = mark.group(2)
        j -= 1
    unknown = set(marks) - {"skip", "continues", "given", "servers", "run", "service"}
    if unknown or ("skip" in marks and not marks["skip"]):
        raise ValueError(f"line {fence + 1}: bad doc-test comment {sorted(unknown) or 'skip without a reason'}")
    return marks


def examples() -> list[Example]:
    """Every python block of the docs, those that continue another joined to it, in file order."""
    found: list[Example] = []
    for path in DOCS:
        doc = str(path.relative_to(ROOT))
        mine: list[Example] = []
        for block in _blocks(path):
            given = [n.strip() for n in block.marks.get("given", "").split(",") if n.strip()]
            if "continues" in block.marks:
                if not mine:
                    raise ValueError(f"{doc}:{block.line}: continues, but no python block comes before it")
                head = mine[-1]
                head.code += "\n" + block.code
                head.given += [n for n in given if n not in head.given]
                head.servers = head.servers or "servers" in block.marks
                head.skip = head.skip or block.marks.get("skip")
                continue
            mine.append(Example(doc, block.line, block.code, given, block.marks.get("skip"), "servers" in block.marks))
        found += mine
    return found


def fenced(*languages: str) -> list[Shell]:
    """Every block of the docs fenced as one of ``languages``."""
    return [Shell(str(path.relative_to(ROOT)), b.line, b.code, b.marks) for path in DOCS for b in _blocks(path, languages)]


def shell_blocks() -> list[Shell]:
    """Every ```console and ```bash block of the docs."""
    return fenced("console", "bash", "sh")

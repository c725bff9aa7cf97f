"""PostgreSQL ``tsvector`` and ``tsquery`` literals of the project's own tokens (:class:`._bm25.Tokenizer`).

A literal is read as written: no text-search parser, configuration or database locale runs, so
PostgreSQL holds and matches the words SQLite's FTS5 and the in-process index find, stems included.
What a ``tsvector`` cannot hold is made to fit, the same way at write and at query time:

* a lexeme over 2,047 bytes (PostgreSQL's limit) becomes its first 1,900 bytes, ``#`` and a digest of
  the whole (``#`` never stands in a word, so no real word is confused with it);
* positions start at 1 and stop at 16,383 (later words all stand there), and a lexeme keeps its first
  256 positions (PostgreSQL keeps no more): a phrase far into a long message may match loosely;
* a text's distinct lexemes stay under 1 MB (a 65,536-character prefix is far below it; later new
  lexemes would be left out).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

MAX_POSITION = 16_383
MAX_POSITIONS = 256  # a lexeme's positions PostgreSQL keeps
_MAX_LEXEME = 2_047  # bytes
_KEPT = 1_900  # bytes of a long lexeme kept before its digest
_MAX_BYTES = (1 << 20) - 1  # the lexemes of one tsvector, together


def lexeme(token: str) -> str:
    """``token`` as a lexeme PostgreSQL can hold (see the module docstring)."""
    if len(token) * 4 <= _MAX_LEXEME:
        return token
    raw = token.encode()
    if len(raw) <= _MAX_LEXEME:
        return token
    return raw[:_KEPT].decode(errors="ignore") + "#" + hashlib.sha256(raw).hexdigest()


def _quoted(lex: str) -> str:
    return "'" + lex.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector(tokens: Sequence[str]) -> str:
    """The ``tsvector`` literal of a text's ``tokens`` in order: each lexeme with its positions."""
    positions: dict[str, list[int]] = {}
    for i, token in enumerate(tokens, 1):
        positions.setdefault(token, []).append(i)
    if not positions:
        return ""
    letters = "".join(positions)
    if (len(tokens) <= MAX_POSITION and letters.isascii() and len(letters) <= _MAX_BYTES
            and max(map(len, positions)) <= _MAX_LEXEME and "'" not in letters and "\\" not in letters):
        return " ".join([f"'{t}':{p[0]}" if len(p) == 1 else f"'{t}':{','.join(map(str, p[:MAX_POSITIONS]))}"
                         for t, p in positions.items()])  # the usual text: nothing to make fit
    out, size = [], 0
    for token, held in positions.items():
        lex = lexeme(token)
        size += len(lex.encode())
        if size > _MAX_BYTES:
            break
        held = held[:MAX_POSITIONS]
        if held[-1] > MAX_POSITION:
            held = [p for p in held if p < MAX_POSITION] + [MAX_POSITION]
        out.append(f"{_quoted(lex)}:{','.join(map(str, held))}")
    return " ".join(out)


def tsquery(tokens: Sequence[str]) -> str:
    """The ``tsquery`` literal of a search term's ``tokens``: one lexeme, or a phrase of them side by side."""
    return " <-> ".join(_quoted(lexeme(t)) for t in tokens)

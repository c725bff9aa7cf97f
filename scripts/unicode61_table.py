"""Write ``src/fullrecall/stores/_unicode61.py``: SQLite FTS5's ``unicode61`` tokenizer as data.

Usage: ``python scripts/unicode61_table.py``. Every code point is put between two ASCII letters ("x", c, "y")
in an FTS5 table of its own row and read back through ``fts5vocab``: one token "xy" says c is a word
character that FTS5 drops (a combining accent), "x<f>y" that it is one that FTS5 folds to f, two tokens
that it separates words. The in-process keyword index reads the result, so that it finds what FTS5 finds.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "src" / "fullrecall" / "stores" / "_unicode61.py"


def probe() -> dict[int, str | None]:
    """Each code point (but NUL and the surrogates) -> what FTS5 makes of it, None where it separates words."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5 (x, tokenize = 'unicode61')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab (t, 'instance')")
    points = [p for p in range(1, 0x110000) if not 0xD800 <= p <= 0xDFFF]
    db.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", ((p, f"x{chr(p)}y") for p in points))
    found: dict[int, list[str]] = {}
    for doc, term in db.execute("SELECT doc, term FROM v ORDER BY doc, offset"):
        found.setdefault(doc, []).append(term)
    result: dict[int, str | None] = {}
    for p in points:
        terms = found[p]
        if terms == ["x", "y"]:
            result[p] = None
        else:
            assert len(terms) == 1 and terms[0][0] == "x" and terms[0][-1] == "y", (p, terms)
            result[p] = terms[0][1:-1]
    return result


def _rows(items: list[str], per_line: int = 6) -> list[str]:
    """``items`` as indented source lines, ``per_line`` a line."""
    return ["    " + " ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]


def main() -> None:
    made = probe()
    ranges: list[list[int]] = []
    for p in sorted(made):
        if made[p] is None:
            continue
        if ranges and ranges[-1][1] == p - 1 or ranges and ranges[-1][1] + 1 < p and all(
                q in (0, *range(0xD800, 0xE000)) for q in range(ranges[-1][1] + 1, p)):
            ranges[-1][1] = p
        else:
            ranges.append([p, p])
    folds = {p: f for p, f in made.items() if f is not None and f != chr(p)}
    lines = [
        '"""SQLite FTS5\'s ``unicode61`` tokenizer (``remove_diacritics 1``, its default) as data: which characters',
        "make words, and what each becomes in a word (lower case, an accent dropped). Written by",
        f"``scripts/unicode61_table.py`` from FTS5 itself (SQLite {sqlite3.sqlite_version}, every code point probed): do not edit.",
        '"""',
        "",
        "# the ranges of code points that make words (first, last), in order",
        "WORD_RANGES = (",
    ]
    lines += _rows([f"(0x{a:X}, 0x{b:X})," for a, b in ranges])
    lines += [")", "", "# code point -> what it becomes in a word, where that is not itself (an empty string: dropped)",
              "FOLDS = {"]
    lines += _rows([f"0x{p:X}: {ascii(f)}," for p, f in sorted(folds.items())])
    lines += ["}", ""]
    OUT.write_text("\n".join(lines))


if __name__ == "__main__":
    main()

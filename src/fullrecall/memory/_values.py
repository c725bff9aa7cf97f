"""The exact values in a fact's words: what two facts must share to be merged as one.

A merge keeps one of two texts, so two facts that say the same of different exact values (a door code, an
invoice number, a flight, a name, a day, a time) must never be merged, however close their meanings (an
embedding puts "Invoice INV-2231 is paid" and "Invoice INV-2232 is paid" at a cosine of 0.98) or their
words once case and punctuation are set aside ("-5" and "5", "C++" and "C#").

A text's words are its parts between spaces, each without the punctuation around it (``. , ; : ! ?``,
quotes, brackets, dashes). A word **carries a value** when it holds a digit, a capital letter (a name, a
code; the pronoun "I" aside) or a sign other than a letter, an apostrophe or a hyphen ("-5", "C++",
"ann@example.com", "🍕"). Texts are compared composed (NFKC): "Zürich" typed with a combining mark, or in full-width
letters, is the same word. A text with no word left ("???") is a value itself. Two texts **agree** when each
one's value words are words of the other, case aside: "On Tuesday I met Anna" agrees with "I met Anna on
Tuesday", "I like jazz" with "I love jazz"; "Flight LH 402" does not with "Flight LH 404".
"""

from __future__ import annotations

import functools
import unicodedata

_AROUND = "\"'`.,;:!?()[]{}<>«»“”‘’„…–—"  # punctuation around a word, not part of it
_WITHIN = "'’-"  # signs a plain word may hold: don't, well-known
_PRONOUN = frozenset({"i", "i'm", "i’m", "i've", "i’ve", "i'd", "i’d", "i'll", "i’ll"})


def _carries(word: str) -> bool:
    return word.casefold() not in _PRONOUN and any(
        c.isdigit() or c.isupper() or not (c.isalpha() or c in _WITHIN) for c in word)


@functools.lru_cache(maxsize=65_536)
def _words(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(the text's words, those that carry a value), case folded, compatibility-composed (NFKC)."""
    text = unicodedata.normalize("NFKC", text)
    words = [w for w in (part.strip(_AROUND) for part in text.split()) if w] or [text.strip()]
    return frozenset(w.casefold() for w in words), frozenset(w.casefold() for w in words if _carries(w))


def within(a: str, b: str) -> bool:
    """Whether every value word of ``a`` is a word of ``b`` (case aside)."""
    return _words(a)[1] <= _words(b)[0]


def agree(a: str, b: str) -> bool:
    """Whether two texts agree on their exact values (see the module docstring): each one's value words are
    words of the other.
    """
    return within(a, b) and within(b, a)

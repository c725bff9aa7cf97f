"""Preservation and exclusion checks run on every summary, whoever wrote it.

Preservation: every citation ``[N]`` and every match of the protected patterns
found in the summarized messages must appear in the summary. Exclusion: text
marked private (by pattern, by message, or by the conversation asking for it)
must not. Both are checked on the final text, so no model answer can slip past
them; the summarizers repair what fails (re-ask, append, redact).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from re import Pattern

from ..messages.model import Message

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
          r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
_UNITS = (r"%|[KMGTP]i?B|[kKMG]?Hz|ms|µs|ns|sec|secs|seconds?|s|mins?|minutes?|h|hrs?|hours?|days?|weeks?|"
          r"months?|years?|kg|g|mg|km|m|cm|mm|mi|miles?|ft|inch(?:es)?|lbs?|W|kW|V|mAh|Wh|kWh|fps|px|dpi|Gbps|Mbps|"
          r"GB/s|MB/s|tokens?|USD|EUR|GBP|x|k|K|M|B|bn")

#: The default protected patterns: what a summary must keep verbatim.
DEFAULT_PROTECTED: dict[str, str] = {
    "citation": r"\[\d+(?:\s*[,\u2013-]\s*\d+)*\]",
    "url": r"https?://[^\s<>()\"']+[^\s<>()\"'.,;:!?]",
    "email": r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b",
    "date": (rf"\b\d{{4}}-\d{{2}}-\d{{2}}(?:[T ]\d{{2}}:\d{{2}}(?::\d{{2}})?)?\b|\b\d{{1,2}}/\d{{1,2}}/\d{{2,4}}\b|"
             rf"\b{_MONTH}\.? \d{{1,2}}(?:st|nd|rd|th)?(?:,? \d{{4}})?\b|"
             rf"\b\d{{1,2}}(?:st|nd|rd|th)? {_MONTH}\b(?:,? \d{{4}})?|\b{_MONTH} \d{{4}}\b"),
    "money": r"[$€£¥]\s?\d[\d,]*(?:\.\d+)?(?:\s?(?:k|K|M|B|bn|million|billion))?",
    "number_with_unit": rf"(?<![\w.])\d+(?:[.,]\d+)*\s?(?:{_UNITS})(?![\w/])",
    "version": r"\bv?\d+\.\d+(?:\.\d+)+\b|\bv\d+(?:\.\d+)?\b",
    "id": r"\b[A-Z]{2,}[-_]\d+\b|(?<![\w&])#\d{2,}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
    "file_path": (r"(?<![\w/])(?:~|\.{1,2})?/(?:[\w.-]+/)*[\w-]+(?:\.\w{1,8})?(?![\w/])|"
                  r"\b(?:[\w.-]+/)+[\w-]+\.[A-Za-z0-9]{1,8}\b|"
                  r"\b[\w-]+\.(?:py|js|ts|tsx|jsx|json|ya?ml|toml|md|txt|cfg|ini|sh|go|rs|java|kt|c|h|cc|cpp|hpp|"
                  r"rb|php|cs|sql|html|css|csv|lock|xml|ipynb|parquet)\b"),
    "product": (r"\b[A-Z][A-Za-z]*-\d[\w.]*\b|"  # GPT-4o, Llama-3.1
                r"\b(?:[A-Z]{2,}|[A-Z][a-z]+[A-Z]\w*|i[A-Z][a-z]+)[ -]?\d{1,5}[A-Za-z]{0,3}\b|"  # RTX 4090, iPhone 15
                r"\b[A-Z]\d{2,5}[A-Za-z]{0,3}\b"),  # A100, H100
    "code": (r"`[^`\n]{1,80}`|\b[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*\(\)|"
             r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|\b[a-z]+(?:[A-Z][a-z0-9]+)+\b|"
             r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b|\b[a-z_]\w+(?:\.[a-z_]\w+)+\b"),
}

CITATION = re.compile(DEFAULT_PROTECTED["citation"])
PLACEHOLDER = "[private]"


def compile_patterns(patterns: Mapping[str, str | Pattern[str]] | Iterable[str | Pattern[str]] | None
                     ) -> list[Pattern[str]]:
    """Patterns as compiled regexes; ``None`` means the default protected set."""
    if patterns is None:
        patterns = DEFAULT_PROTECTED
    values = patterns.values() if isinstance(patterns, Mapping) else patterns
    return [p if isinstance(p, re.Pattern) else re.compile(p) for p in values]


def find_items(text: str, patterns: Sequence[Pattern[str]]) -> list[str]:
    """Matches of any pattern, longest first where they overlap, in text order, without repeats."""
    spans: list[tuple[int, int]] = []
    for pattern in patterns:
        spans.extend(m.span() for m in pattern.finditer(text) if m.end() > m.start())
    spans.sort(key=lambda s: (s[0], -(s[1] - s[0])))
    out: list[str] = []
    seen: set[str] = set()
    end = -1
    for start, stop in spans:
        if start < end:
            continue
        end = stop
        item = text[start:stop].strip()
        key = _norm(item)
        if item and key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def contains(text: str, item: str) -> bool:
    """Whether ``item`` appears in ``text`` whole, ignoring case and runs of whitespace.

    Inside a longer word or number it does not count: ``#12`` is not in ``#123``, nor ``v1.2`` in ``v1.2.3``.
    """
    needle = _norm(item)
    if not needle:
        return True
    pattern = re.escape(needle)
    if re.match(r"\w", needle):
        pattern = r"(?<!\w)(?<!\d[.,])" + pattern
    if re.search(r"\w$", needle):
        pattern += r"(?!\w)(?![.,]\d)"
    return re.search(pattern, _norm(text)) is not None


def missing_items(text: str, items: Iterable[str]) -> list[str]:
    return [i for i in items if not contains(text, i)]


# -- exclusion -----------------------------------------------------------------

_SUMMARY = r"(?:summar\w*|recaps?)\b"
_REQUEST = re.compile(
    # "never" after a clause's start or a word that makes it a request ("..., never put it", "and never
    # mention", "you should never include"), not after a subject ("I never include dates in my summaries")
    r"(?:(?:\b(?:do not|don't|dont|please don't|not to|without)|(?:^|[.!?,;:\u2013\u2014-]\s*|"
    r"\b(?:please|and|but|so|should|must|shall|will|to)\s+)never)\s+(?:\w+\s+){0,4}?"
    r"(?:include|put|mention|add|record|write|note|repeat|keep|store|save|list)\w*\b[^.?!\n]{0,80}?"
    r"\b" + _SUMMARY + ")"
    # "make sure it never appears in a summary", "don't let it end up in any summary" (a request, not a
    # question or complaint about what a summary holds: "why does the date not appear in the summary?")
    r"|(?:\b(?:make sure|ensure|see to it)\s+(?:that\s+)?(?:\w+\s+){0,3}?(?:never|not|n't|won't)\s+"
    r"(?:appear\w*|end up|make it|get|go)\s+in(?:to)?\s+(?:\w+\s+){0,2}?" + _SUMMARY + ")"
    r"|(?:\b(?:don't|do not|dont|never)\s+let\s+(?:\w+\s+){0,3}?(?:appear|end up|make it|get|go)\s+in(?:to)?\s+"
    r"(?:\w+\s+){0,2}?" + _SUMMARY + ")"
    # "the summary must never mention it", "make sure the summary doesn't include it", "not for the summary"
    r"|(?:\b" + _SUMMARY + r"\s+(?:must|should|shall)(?:\s+not|n't|\s+never)\s+"
    r"(?:include|mention|contain|list|show)\w*\b)"
    r"|(?:\b(?:make sure|ensure)\s+(?:that\s+)?(?:the\s+|any\s+|your\s+|a\s+)?" + _SUMMARY
    + r"\s+(?:never|doesn't|does not|won't|will not)\s+(?:include|mention|contain|list|show)\w*\b)"
    r"|(?:\bnot for\s+(?:the\s+|any\s+|a\s+)?" + _SUMMARY + ")"
    r"|(?:\b(?:keep|leave)\s+(?:[\w']+\s+){0,5}?out of\s+(?:\w+\s+){0,3}?" + _SUMMARY + ")"
    r"|(?:\bexclud\w*\s+[^.?!\n]{0,80}?\bfrom\s+(?:\w+\s+){0,3}?summar\w*)"
    r"|(?:\b(?:do not|don't|never)\s+summari[sz]e\s+(?:this|that|it)\b)"
    r"|(?:\boff the record\b)",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_LONG_NUMBER = re.compile(r"(?<!\d)\d{5,}(?!\d)")
_PARTS = re.compile(r"[^\W_]+")
_DIGIT_TOKEN = re.compile(r"(?<![\w])[\w$€£#@./:+-]*\d[\w./:+-]*")
_QUOTED = re.compile(r"\"([^\"\n]{2,80})\"|“([^”\n]{2,80})”|(?<!\w)'([^'\n]{2,80})'(?!\w)")
_COPULA = re.compile(r"\b(?:is|are|was|were|called|named)\s*[:=]?\s+(?:(?:a|an|the|my|our|your)\s+)?"
                     r"([A-Za-z][\w-]{2,})", re.IGNORECASE)
_SKIP_VALUES = {
    "not", "very", "also", "just", "still", "really", "going", "being", "this", "that", "these", "those",
    "it", "here", "there", "important", "private", "secret", "confidential", "sensitive", "something",
}


def is_exclusion_request(text: str) -> bool:
    """Whether a message asks to keep something out of any summary."""
    return _REQUEST.search(text) is not None


def private_values(text: str) -> list[str]:
    """The specific values in a private message: numbers and ids, quoted text, emails, "X is VALUE".

    These become excluded terms everywhere, so an assistant's echo of the value
    in a later message cannot carry it into the summary either.
    """
    values: list[str] = []
    for m in _DIGIT_TOKEN.finditer(text):
        token = m.group(0).strip(".:/+-")
        if token:
            values.append(token)
            # an id's long number alone ("account 55123" for ACCT-55123): a year's four digits are not enough
            values.extend(run for run in _LONG_NUMBER.findall(token) if run != token)
    for m in _QUOTED.finditer(text):
        values.append(next(g for g in m.groups() if g))
    for m in re.finditer(DEFAULT_PROTECTED["email"], text):
        values.append(m.group(0))
    for sentence in _SENTENCE.findall(text):
        if _REQUEST.search(sentence):
            continue
        for m in _COPULA.finditer(sentence):
            word = m.group(1)
            if word.lower() not in _SKIP_VALUES:
                values.append(word)
    seen: set[str] = set()
    unique = []
    for v in values:
        if v.casefold() not in seen:
            seen.add(v.casefold())
            unique.append(v)
    return unique


@dataclass
class Exclusions:
    """What must never appear in a summary.

    ``patterns``: regexes for private text (e.g. account numbers). ``messages``:
    positions or ids of private messages; a message is private too when its
    ``metadata`` has ``private: True`` or ``predicate(message)`` says so.
    ``honor_requests``: a message asking to keep something out of any summary
    (as in "don't include it in any summary") makes that message private.
    Private messages are summarized as covered but never written out, and their
    specific values (numbers, ids, quoted text, "X is VALUE") are excluded
    everywhere. The archive keeps all of it verbatim for exact recall.
    """

    patterns: Sequence[str | Pattern[str]] = ()
    messages: Collection[int | str] = ()
    terms: Sequence[str] = ()
    predicate: Callable[[Message], bool] | None = None
    honor_requests: bool = True
    learned: list[str] = field(default_factory=list, repr=False)

    def resolve(self, messages: Sequence[Message], previous_summary: str | None = None) -> ExclusionPlan:
        """Private messages and terms for this batch.

        Terms found in private messages are remembered (``learned``): the next
        batch no longer holds the request ("don't include 700 in any summary"),
        yet a later "as a reminder, ref 700" must stay out as well.
        """
        chosen = set(self.messages)
        private: list[int] = []
        terms = list(self.terms) + list(self.learned)
        for index, msg in enumerate(messages):
            text = msg.text
            meta = msg.metadata or {}
            flagged = (
                (msg.position is not None and msg.position in chosen) or (msg.id is not None and msg.id in chosen)
                or meta.get("private") is True or (isinstance(meta.get("fullrecall"), dict)
                                                   and meta["fullrecall"].get("private") is True)
                or (self.predicate is not None and self.predicate(msg))
                or (self.honor_requests and is_exclusion_request(text))
            )
            if flagged:
                private.append(index)
                found = private_values(text)
                terms.extend(found)
                known = {t.casefold() for t in self.learned}
                for t in found:
                    if t.casefold() not in known:
                        known.add(t.casefold())
                        self.learned.append(t)
        return ExclusionPlan(private_indexes=private, terms=_unique(t for t in terms if t.strip()),
                             patterns=[re.compile(p) if isinstance(p, str) else p for p in self.patterns])


@dataclass
class ExclusionPlan:
    """The resolved exclusions for one batch of messages."""

    private_indexes: list[int] = field(default_factory=list)
    terms: list[str] = field(default_factory=list)
    patterns: list[Pattern[str]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.private_indexes or self.terms or self.patterns)

    def matchers(self) -> list[Pattern[str]]:
        words = [re.compile(rf"(?<![A-Za-z0-9]){_term_pattern(t)}(?![A-Za-z0-9])", re.IGNORECASE) for t in self.terms]
        return words + list(self.patterns)

    def leaks(self, text: str) -> list[str]:
        """Private terms or pattern matches present in ``text``."""
        found = []
        for m in self.matchers():
            hit = next((x.group(0) for x in m.finditer(text) if x.end() > x.start()), None)
            if hit is not None:
                found.append(hit)
        return found

    def redact(self, text: str) -> tuple[str, int]:
        """Replace every private match; returns the text and how many matchers hit.

        A user pattern may match the placeholder itself, so whatever still
        matches after one pass is deleted outright, until nothing matches
        (each deletion shortens the text, so this ends).
        """
        hits = 0
        for m in self.matchers():
            text, n = _sub_nonempty(m, PLACEHOLDER, text)
            hits += bool(n)
        for _ in range(len(text) + 1):
            changed = False
            for m in self.matchers():
                text, n = _sub_nonempty(m, "", text)
                changed = changed or bool(n)
            if not changed:
                break
        return text, hits

    def is_private_text(self, text: str) -> bool:
        return bool(self.leaks(text))


_INVISIBLE = "[\u00ad\u200b-\u200d\u2060\ufeff]*"  # a soft hyphen, zero-width spaces and joiners
_DIGIT_GROUP = rf"{_INVISIBLE}[,.'\u2019\u00a0\u202f ]?{_INVISIBLE}"  # 55,123 / 55 123 / 55.123 / 55'123


def _term_pattern(term: str) -> str:
    """A private term as a regex whose words may be joined by any few separators: "ACCT-55123" is found as
    "ACCT 55123", "ACCT\u201155123" (a non-breaking hyphen) or "ACCT_55123" too, as a model may write it;
    within a word, its characters in full-width form ("５５１２３") or with invisible ones between them, and
    its digits in groups ("55,123", "55 123").
    """
    parts = _PARTS.findall(term)
    if not parts or (len(parts) < 2 and "".join(parts) != term):
        return re.escape(term)
    return r"[\W_]{0,3}".join(map(_word_pattern, parts))


def _word_pattern(word: str) -> str:
    out: list[str] = []
    for i, c in enumerate(word):
        if i:
            out.append(_DIGIT_GROUP if c.isdigit() and word[i - 1].isdigit() else _INVISIBLE)
        wide = chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else ""  # its full-width form
        out.append(f"[{re.escape(c)}{wide}]" if wide else re.escape(c))
    return "".join(out)


def _sub_nonempty(pattern: Pattern[str], repl: str, text: str) -> tuple[str, int]:
    count = 0

    def _swap(m: re.Match[str]) -> str:
        nonlocal count
        if m.end() == m.start():
            return m.group(0)
        count += 1
        return repl

    return pattern.sub(_swap, text), count


def _unique(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        key = item.casefold()
        if key not in seen:
            seen.add(key)
            out.append(item)
    # longer terms first, so "REF-700" is redacted whole before "700"
    return sorted(out, key=len, reverse=True)


def preserved_details(items: Sequence[str]) -> str:
    """The block appended when a summary still lacks required items."""
    return "## Preserved details\n" + "\n".join(f"* {item}" for item in items)

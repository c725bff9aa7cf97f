"""Relative dates resolved against the date a message was written, at index time.

"I went to the support group yesterday", written on 8 May 2023, is indexed with
``[yesterday: 7 May 2023]`` after it, so a question that names the day ("what
did Caroline do on 7 May?") finds it by its words and its meaning. Only the
indexed text changes; the message itself is kept and returned verbatim.

Resolved: yesterday, tomorrow, last/this past/next <weekday>,
last/next week, weekend, month and year, and "<n> days/weeks/months/years ago"
(n in digits or words up to twelve, "a", "a couple of", "a few"). A date is
read from ISO (``2023-05-08``), "8 May 2023" and "May 8, 2023" forms (LoCoMo's
"1:56 pm on 8 May, 2023" too). Pure functions, microseconds, no LLM.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from functools import lru_cache

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
            "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a couple": 2, "couple of": 2,
            "a few": 3, "few": 3}

_MONTH = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_ISO = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_DAY_MONTH_YEAR = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+" + _MONTH + r",?\s+(\d{4})\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(r"\b" + _MONTH + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b", re.IGNORECASE)

_COUNT = r"(\d{1,2}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + r")"
_RELATIVE_PATTERN = (
    r"\b(?:(yesterday|tomorrow)"
    r"|(last|this past|next) (" + "|".join(WEEKDAYS) + r"|week|weekend|month|year)"
    r"|" + _COUNT + r" (day|week|month|year)s? ago)\b"
)
_RELATIVE = re.compile(_RELATIVE_PATTERN)  # on lower-cased text: several times faster than IGNORECASE
_RELATIVE_ANY_CASE = re.compile(_RELATIVE_PATTERN, re.IGNORECASE)
_HINTS = ("yesterday", "tomorrow", "last", "past", "next", "ago")  # cheap substring test before the pattern


@lru_cache(maxsize=1024)
def parse_date(text: str | None) -> date | None:
    """The first calendar date in ``text`` (ISO, "8 May 2023", "May 8, 2023"), or None."""
    if not text:
        return None
    for pattern, order in ((_ISO, "ymd"), (_DAY_MONTH_YEAR, "dmy"), (_MONTH_DAY_YEAR, "mdy")):
        m = pattern.search(text)
        if not m:
            continue
        try:
            if order == "ymd":
                return date(int(m[1]), int(m[2]), int(m[3]))
            if order == "dmy":
                return date(int(m[3]), _month(m[2]), int(m[1]))
            return date(int(m[3]), _month(m[1]), int(m[2]))
        except ValueError:  # 31 February and the like
            continue
    return None


def _month(prefix: str) -> int:
    prefix = prefix.lower()[:3]
    return next(i for i, name in enumerate(MONTHS, 1) if name.startswith(prefix))


def day(d: date) -> str:
    """``7 May 2023``."""
    return f"{d.day} {MONTHS[d.month - 1].capitalize()} {d.year}"


def month(d: date) -> str:
    """``May 2023``."""
    return f"{MONTHS[d.month - 1].capitalize()} {d.year}"


def _shift_months(d: date, months: int) -> date:
    index = d.year * 12 + d.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def resolve(phrase: str, anchor: date) -> str | None:
    """What one relative phrase ("last Saturday", "two weeks ago") meant on ``anchor``; None if not one."""
    m = _RELATIVE_ANY_CASE.fullmatch(phrase.strip())
    return _resolved(m, anchor) if m else None


def _resolved(m: re.Match[str], anchor: date) -> str | None:
    """What the phrase ``m`` meant on ``anchor``; None for a day past the calendar's ends (tomorrow on 9999-12-31)."""
    try:
        return _meant(m, anchor)
    except (OverflowError, ValueError):
        return None


def _meant(m: re.Match[str], anchor: date) -> str | None:
    if m[1]:
        return day(anchor + timedelta(days=-1 if m[1].lower() == "yesterday" else 1))
    if m[2]:
        direction = 1 if m[2].lower() == "next" else -1
        unit = m[3].lower()
        if unit in WEEKDAYS:
            gap = (anchor.weekday() - WEEKDAYS.index(unit)) % 7 or 7  # the one before (after) the anchor day
            return day(anchor - timedelta(days=gap) if direction < 0 else anchor + timedelta(days=(7 - gap) or 7))
        if unit == "week":
            return f"the week of {day(anchor + timedelta(days=7 * direction))}"
        if unit == "weekend":
            saturday = anchor - timedelta(days=(anchor.weekday() - 5) % 7 or 7)
            return f"the weekend of {day(saturday if direction < 0 else saturday + timedelta(days=7))}"
        if unit == "month":
            return month(_shift_months(anchor, direction))
        return str(anchor.year + direction)
    count = int(m[4]) if m[4].isdigit() else _NUMBERS[m[4].lower()]
    unit = m[5].lower()
    if unit == "day":
        return day(anchor - timedelta(days=count))
    if unit == "week":
        return f"the week of {day(anchor - timedelta(days=7 * count))}"
    if unit == "month":
        return month(_shift_months(anchor, -count))
    return str(anchor.year - count) if anchor.year > count else None


def resolve_dates(text: str, written: str | None) -> list[tuple[str, str]]:
    """Each relative date phrase in ``text`` with what it meant when written (``written`` holds the date)."""
    low = text.lower()
    if not any(hint in low for hint in _HINTS):
        return []
    anchor = parse_date(written)
    if anchor is None:
        return []
    same_length = len(low) == len(text)  # lower() keeps offsets (not for every Unicode letter)
    out: list[tuple[str, str]] = []
    for m in (_RELATIVE.finditer(low) if same_length else _RELATIVE_ANY_CASE.finditer(text)):
        meant = _resolved(m, anchor)
        phrase = text[m.start():m.end()]
        if meant is not None and (phrase, meant) not in out:
            out.append((phrase, meant))
    return out


def date_note(text: str, written: str | None) -> str:
    """``" [yesterday: 7 May 2023; last week: the week of 1 May 2023]"`` for the phrases in ``text``, or ``""``."""
    found = resolve_dates(text, written)
    return " [" + "; ".join(f"{phrase}: {meant}" for phrase, meant in found) + "]" if found else ""

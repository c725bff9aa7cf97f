"""Query facets read from the question alone (no LLM, microseconds), and the boosts they give candidates.

* speaker: a question about a person ("What did Caroline research?") prefers
  turns that person wrote: a candidate whose speaker (``metadata["speaker"]``,
  else its role) is named in the question gains ``SPEAKER_BOOST``;
* date: a "when" question prefers turns that state or imply a date ("last
  Saturday", "in May", "two years ago"): such a candidate gains ``DATE_BOOST``.

Boosts are added to the fused score (in [0, 1]) of the best candidates only,
whose messages the search reads anyway; the rest of the ranking is untouched.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..stores.base import StoredMessage
from .terms import STOPWORDS

SPEAKER_BOOST = 0.1
DATE_BOOST = 0.1

_NAME = re.compile(r"\b([A-Z][\w'\u2019-]*)")
_WHEN = re.compile(
    r"^\s*(when|what (date|day|time|year|month|week)|which (date|day|year|month|week)|how long ago|since when)\b"
    r"|\b(what|which) (date|year|month|day of the week)\b|\bhow long (ago|has|have|had|did|was)\b",
    re.IGNORECASE,
)
_MONTHS = "january february march april may june july august september october november december"
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday"
# matched against lower-cased text: a case-insensitive pattern of many words is about 3x slower in ``re``
DATE_WORDS = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|recently|lately|ago|last|next|this (morning|afternoon|evening|week|weekend"
    r"|month|year)|weekend|since|(19|20)\d\d|" + "|".join((_MONTHS + " " + _WEEKDAYS).split()) + r")\b",
)


@dataclass(frozen=True)
class Facets:
    """What the question says about whom and when."""

    names: frozenset[str] = frozenset()  # lower-cased capitalised words (not stopwords), possessives stripped
    wants_date: bool = False

    def __bool__(self) -> bool:
        return bool(self.names) or self.wants_date

    @functools.cached_property
    def name_hashes(self) -> frozenset[int]:
        return frozenset(hash(n) for n in self.names)


def query_facets(question: str) -> Facets:
    """The names a question mentions and whether it asks when."""
    names = set()
    for word in _NAME.findall(question):
        word = re.sub(r"['\u2019]s$", "", word).lower()
        if len(word) > 1 and word not in STOPWORDS:  # "What", "When" open a question, they name nobody
            names.add(word)
    return Facets(frozenset(names), bool(_WHEN.search(question)))


def speaker_of(message: StoredMessage) -> str:
    """Who wrote a message: its ``speaker`` metadata, else its role (lower case)."""
    speaker = message.metadata.get("speaker") if isinstance(message.metadata, dict) else None
    return str(speaker or message.role or "").lower()


def states_date(text: str) -> bool:
    """Whether a text states or implies a date (a month, a weekday, "last week", "2 years ago", a year)."""
    return bool(DATE_WORDS.search(text.lower()))


@dataclass(frozen=True)
class Signals:
    """What the facets need to know of one message: a hash of its speaker (not the name) and whether it states a date."""

    speaker: int
    dated: bool


def signals(message: StoredMessage, text: str) -> Signals:
    """The facet signals of a message; ``text`` is its own words."""
    return Signals(hash(speaker_of(message)), states_date(text))


def boost(facets: Facets, message: StoredMessage | Signals, text: str = "", *, speaker_boost: float = SPEAKER_BOOST,
          date_boost: float = DATE_BOOST) -> float:
    """What ``facets`` add to a candidate's fused score: given the message and its own words (``text``), or
    its :func:`signals`.
    """
    known = message if isinstance(message, Signals) else signals(message, text)
    extra = 0.0
    if facets.names and known.speaker in facets.name_hashes:
        extra += speaker_boost
    if facets.wants_date and known.dated:
        extra += date_boost
    return extra

"""What a query contributes to lexical search: content words, names, numbers and ids.

Question words and other stopwords are dropped (they match everything and only
add noise to BM25); numbers and identifiers such as ``REF-48213`` or ``v2.3.1``
are kept whole, since a keyword-only hit must always be findable.
"""

from __future__ import annotations

import re

from ..stores._validate import indexed_prefix
from .dates import date_note

# An identifier keeps its inner '-', '_', '.', '/' or ':' (REF-48213, v2.3.1, a/b); a word its apostrophe.
_TOKEN = re.compile(r"\w+(?:[-_./:]\w+)*|\w+", re.UNICODE)

STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are aren't as at be because been before being below
    between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each
    either else ever few for from further get gets got had hadn't has hasn't have haven't having he he'd he'll he's
    her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself
    just let's like me might more most much must mustn't my myself neither no nor not now of off on once only or
    other ought our ours ourselves out over own per please same shall shan't she she'd she'll she's should
    shouldn't so some such than that that's the their theirs them themselves then there there's these they they'd
    they'll they're they've this those though through thus to too under until up upon us very via was wasn't we
    we'd we'll we're we've were weren't what what's whatever when when's whenever where where's wherever whether
    which while who who's whoever whom whose why why's will with won't would wouldn't yes yet you you'd you'll
    you're you've your yours yourself yourselves
    don didn doesn isn wasn aren won couldn shouldn wouldn haven hasn hadn weren mustn ll ve re
    tell remind recall remember said say says exactly earlier previously mentioned
    """.split()
)


def query_terms(text: str, *, max_terms: int = 32) -> list[str]:
    """Lower-cased content terms of ``text``, in order, without duplicates or stopwords.

    Possessives lose their ``'s`` ("Caroline's" -> "caroline"); single letters
    go unless they are digits. The store's tokenizer stems what remains.
    """
    text = text.replace("\u2019", "'").replace("\u0130", "I")  # "İ".lower() is "i" and a combining dot
    out: list[str] = []
    seen: set[str] = set()
    for raw in _TOKEN.findall(text.lower()):
        word = raw.strip("._-/:")
        if not word or word in STOPWORDS:
            continue
        if len(word) == 1 and not word.isdigit():
            continue
        if word not in seen:
            seen.add(word)
            out.append(word)
        if len(out) >= max_terms:
            break
    return out


def index_text(text: str, *, speaker: str | None = None, date: str | None = None) -> str:
    """The text search indexes for a message: ``"speaker (date): text"``, at most ``INDEXED_CHARS`` long.

    Speaker and date matter for recall ("what did Anna say in May?"); the
    message itself is returned verbatim, never this text. Relative dates are
    resolved against ``date`` (``[yesterday: 7 May 2023]`` after the text, see
    :mod:`.dates`). A huge message is
    indexed (and embedded) by its beginning, as every store indexes text.
    """
    if date:
        text += date_note(text, date)
    if speaker and date:
        text = f"{speaker} ({date}): {text}"
    elif speaker:
        text = f"{speaker}: {text}"
    elif date:
        text = f"({date}): {text}"
    return indexed_prefix(text)

"""Okapi BM25 in process: tokenizer, per-session inverted index (extended as messages are added), the
search over several sessions with the statistics of those sessions alone, and a per-process cache of
the indexes for a store that reads its rows in SQL.

Redis (no text index) searches this way always; SQLite for a scope of at most ``lexical_in_process``
messages, where FTS5's ``bm25()`` would read each query word's posting list across the whole file
(every user's rows) to weigh it.
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from .._fork import renew_in_child
from . import _unicode61 as U
from ._grown import Room, as_rows, grown, items
from ._vectors import Owner, filter_mask
from .base import Filters, Hit

_NOT_WORD_BUT_NUL = {c: " " for c in range(1, 128) if not chr(c).isalnum()}  # ASCII separators ("_" among them)
_NOT_WORD = {**_NOT_WORD_BUT_NUL, 0: " "}
_WORD_STARTS = [first for first, _ in U.WORD_RANGES]
_BECOMES: dict[int, str] = {}  # code point -> what it becomes in a word (" ": it separates words), as met


def words(text: str) -> list[str]:
    """The words of ``text`` as SQLite FTS5's ``unicode61`` tokenizer finds them: runs of letters, digits and
    combining accents (an underscore, an apostrophe, an emoji separate words), each lower-cased with its accents
    dropped ("Café" is "cafe"; :mod:`._unicode61`). An ASCII text is split without the table (half the time).
    """
    if text.isascii():
        return text.lower().translate(_NOT_WORD).split()
    return text.translate(_table(text)).split()


def _table(text: str) -> dict[int, str]:
    """What each character of ``text`` becomes (see :func:`words`), for ``str.translate``."""
    global _BECOMES
    points = {ord(c) for c in set(text)}
    becomes = _BECOMES
    if len(becomes) > 100_000:  # a new memory, never one emptied in place: another thread may be reading it
        becomes = _BECOMES = {}
    for p in points.difference(becomes):
        i = bisect.bisect_right(_WORD_STARTS, p) - 1
        becomes[p] = U.FOLDS.get(p, chr(p)) if i >= 0 and p <= U.WORD_RANGES[i][1] else " "
    return {p: becomes[p] for p in points}


IN_PROCESS_ROWS = 20_000
"""A SQL store searches a scope of at most this many messages by words in process (``lexical_in_process``)."""

LexicalRow = tuple[str, str, str, str, float, list[str], int | None]
"""(id, key, role, kind, created_at, tokens, position) of one message."""


class Tokenizer:
    """The words FTS5's ``unicode61`` finds (see :func:`words`), stemmed by PyStemmer's Porter stemmer (the algorithm of FTS5's ``porter``
    tokenizer) when it is installed; ``stems`` says whether it is.

    A process forked while another thread stems (its lock held, its stemmer mid-word) gives each tokenizer
    a fresh lock and stemmer in the child: the thread that held them is not there to let go.
    """

    def __init__(self, algorithm: str = "porter") -> None:
        self.algorithm = algorithm
        self._renew()
        self._known: dict[str, str] = {}  # word -> its token (a vocabulary is small: one look-up a word)
        renew_in_child(self)

    def _after_fork(self) -> None:
        self._renew()

    def _renew(self) -> None:
        """A new stemmer and its lock (at creation, and in a forked child)."""
        try:
            import Stemmer

            self._stem = Stemmer.Stemmer(self.algorithm).stemWords
            self.stems = True
        except ImportError:  # plain words still match exactly
            self._stem = lambda words: words
            self.stems = False
        self._stem_lock = threading.Lock()  # a PyStemmer stemmer is not safe to share between threads

    def __call__(self, text: str) -> list[str]:
        found = words(text)
        known = self.learn(found)
        return [known[w] for w in found]

    def learn(self, found: Iterable[str]) -> dict[str, str]:
        """The word memory, holding each of ``found`` (the words not yet in it stemmed, at once)."""
        known = self._known  # never emptied in place: another thread may be reading it
        if len(known) > 200_000:
            known = self._known = {}
        new = list(set(found).difference(known))
        if new:
            with self._stem_lock:
                stems = self._stem(new)
            # as FTS5's porter: words under 3 or over 64 characters pass unstemmed ("us" stays "us")
            known.update((w, s if 3 <= len(w) <= 64 else w) for w, s in zip(new, stems))
        return known


def _split_many(texts: Sequence[str]) -> list[str] | None:
    """The words of every text, one after another, as :func:`words` splits each, with a NUL (no word)
    between one text's and the next's: found in one pass over the texts joined by a NUL between two
    spaces. None when a text holds a NUL of its own.
    """
    if not texts:
        return []
    joined = " \0 ".join(texts)
    if joined.count("\0") != len(texts) - 1:
        return None
    if joined.isascii():
        return joined.lower().translate(_NOT_WORD_BUT_NUL).split()
    return joined.translate({**_table(joined), 0: "\0"}).split()


@dataclass
class LexicalIndex:
    """An inverted index of one session's messages, for BM25 in process (Redis without a search module)."""

    ids: Sequence[str]
    keys: Sequence[str]  # store-global message keys, parallel to ids
    roles: np.ndarray
    kinds: np.ndarray
    created: np.ndarray
    lengths: np.ndarray  # tokens per message
    postings: Postings  # term -> (row numbers, term frequencies)
    owner: Owner | None = None  # the session's (user_id, agent_id, session_id)
    positions: Sequence[int | None] | None = None  # each message's position, parallel to ids
    tokens: Sequence[Sequence[str]] | None = None  # each message's tokens in order, for phrases; parallel to ids
    _rooms: tuple[Room, ...] | None = field(default=None, repr=False, compare=False)  # where ``roles``, ``kinds``,
    # ``created`` and ``lengths`` lie, with room to grow (``ids``, ``keys`` and ``positions`` grow in place as
    # :class:`~._grown.Rows`): an extension writes the rows it adds, not every row again

    @classmethod
    def build(cls, rows: Sequence[LexicalRow], owner: Owner | None = None) -> LexicalIndex:
        """``rows``: (id, key, role, kind, created_at, tokens, position) of one session's messages."""
        return cls(
            [r[0] for r in rows],
            [r[1] for r in rows],
            np.array([r[2] for r in rows], dtype=object),
            np.array([r[3] for r in rows], dtype=object),
            np.array([r[4] for r in rows], dtype=np.float64),
            np.array([len(r[5]) for r in rows], dtype=np.float64),
            _postings([r[5] for r in rows]),
            owner,
            [r[6] for r in rows],
            [r[5] for r in rows],
        )

    @classmethod
    def of_texts(
        cls, rows: Sequence[tuple[str, str, str, str, float, str, int | None]], tokenizer: Tokenizer,
        owner: Owner | None = None,
    ) -> LexicalIndex:
        """:meth:`build` of ``rows`` (id, key, role, kind, created_at, text, position) with each text's
        ``tokenizer(text)``, the texts tokenized together: split in one pass (:func:`_split_many`),
        each distinct word stemmed and numbered once, each position's term found in numpy.
        """
        if not rows:
            return cls.build([], owner)
        ids, keys, roles, kinds, created, texts, positions = map(list, zip(*rows))
        found = _split_many(texts)
        if found is None:
            return cls.build([(*r[:5], tokenizer(r[5]), r[6]) for r in rows], owner)
        first: dict[str, int] = {}  # each distinct word -> where it is first found, in order of first use
        at = np.fromiter(map(first.setdefault, found, itertools.count()), np.int64, len(found))
        first.pop("\0", None)
        stems = list(map(tokenizer.learn(first).__getitem__, first))
        terms = list(dict.fromkeys(stems))  # in order of first use, as build numbers them
        numbers = dict(zip(terms, range(len(terms))))
        word_term = np.full(len(found), -1, np.int64)  # -1: the NUL between texts
        word_term[list(first.values())] = list(map(numbers.__getitem__, stems))
        term = word_term[at]
        between = term < 0
        row = np.cumsum(between)[~between]
        term = term[~between]
        lengths = np.bincount(row, minlength=len(texts))
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        return cls(
            ids,
            keys,
            np.array(roles, dtype=object),
            np.array(kinds, dtype=object),
            np.array(created, dtype=np.float64),
            lengths.astype(np.float64),
            _count(term, row, len(texts), numbers),
            owner,
            positions,
            RowTokens([(terms, term, bounds)]),
        )

    def extend(self, other: LexicalIndex) -> LexicalIndex:
        """This index plus ``other``'s rows (messages added since it was built); neither is changed."""
        if not other.ids:
            return self
        (roles, kinds, created, lengths), rooms = grown(
            (self.roles, self.kinds, self.created, self.lengths), self._rooms,
            (other.roles, other.kinds, other.created, other.lengths))
        return LexicalIndex(
            as_rows(self.ids) + other.ids, as_rows(self.keys) + other.keys, roles, kinds, created, lengths,
            Postings.joined(self.postings, other.postings, len(self.ids)),
            self.owner,
            as_rows(self.positions or [None] * len(self.ids)) + (other.positions or [None] * len(other.ids)),
            _joined(self.tokens or [[]] * len(self.ids), other.tokens or [[]] * len(other.ids)),
            rooms,
        )


Part = tuple[list[str], np.ndarray, np.ndarray]
"""(terms by number, each token's number in order, where each row's tokens start: one more than the rows)."""


class RowTokens(Sequence[list[str]]):
    """Each row's tokens in order (what a phrase is checked against), held as numbers: a row's list is made
    when it is asked for. A list a row would be as many objects for Python's garbage collector to walk,
    for every session of every user a process has searched.
    """

    __slots__ = ("_parts", "_first")

    def __init__(self, parts: list[Part]) -> None:
        self._parts = _tiered(parts, lambda p: len(p[1]), _merged)
        self._first = list(itertools.accumulate((len(b) - 1 for _, _, b in self._parts), initial=0))  # each part's row 0

    def __len__(self) -> int:
        return self._first[-1]

    def __getitem__(self, row: int) -> list[str]:  # type: ignore[override]
        if not -len(self) <= row < len(self):
            raise IndexError(row)
        row %= len(self)
        p = bisect.bisect_right(self._first, row) - 1
        terms, numbers, bounds = self._parts[p]
        r = row - self._first[p]
        return [terms[n] for n in numbers[bounds[r]:bounds[r + 1]].tolist()]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]


P = TypeVar("P")


def _tiered(parts: list[P], size: Callable[[P], int], merged: Callable[[Sequence[P]], P]) -> list[P]:
    """``parts`` with the last two merged while the one before the last is no more than twice as large as the
    last: an index extended row by row holds a few parts, each more than twice the size of the next (about
    log2 of its size in all), and a row is merged again about that many times, not once each extension.
    """
    while len(parts) > 1 and size(parts[-2]) <= 2 * size(parts[-1]):
        parts = [*parts[:-2], merged(parts[-2:])]
    return parts


def _joined(first: Sequence[Sequence[str]], then: Sequence[Sequence[str]]) -> Sequence[Sequence[str]]:
    """The rows' tokens of ``first`` followed by those of ``then``."""
    if isinstance(first, RowTokens) and isinstance(then, RowTokens):
        return RowTokens(first._parts + then._parts)
    return [*first, *then]


def _merged(parts: Sequence[Part]) -> Part:
    """One part holding the rows of ``parts``, in order, numbered by one list of terms."""
    number: dict[str, int] = {}
    numbers, bounds, offset = [], [np.zeros(1, np.int64)], 0
    for terms, held, starts in parts:
        renumbered = np.array([number.setdefault(t, len(number)) for t in terms], np.int64)
        numbers.append(renumbered[held] if len(held) else held.astype(np.int64))
        bounds.append(np.asarray(starts[1:], np.int64) + offset)
        offset += int(starts[-1])
    return list(number), np.concatenate(numbers), np.concatenate(bounds)


def _postings(token_lists: Sequence[Sequence[str]]) -> Postings:
    """Each term's rows (ascending) and its frequency in each, counted in numpy: every (term, row) pair
    as one integer, sorted and counted at once, each term's postings a slice of the result.
    """
    n = len(token_lists)
    flat = list(itertools.chain.from_iterable(token_lists))
    terms = dict.fromkeys(flat)  # each term's number: its place in order of first use
    numbers = dict(zip(terms, range(len(terms))))
    ids = np.fromiter(map(numbers.__getitem__, flat), np.int64, len(flat))
    return _count(ids, np.repeat(np.arange(n, dtype=np.int64), [len(t) for t in token_lists]), n, numbers)


def _count(ids: np.ndarray, rows: np.ndarray, n: int, numbers: dict[str, int]) -> Postings:
    """The postings of the term numbers ``ids`` (``numbers``: term -> number, 0 on) found in ``rows`` (ascending) of ``n``."""
    if not len(ids):
        return Postings({}, [0], _NONE[0], _NONE[1])
    pairs, counts = np.unique(ids * n + rows, return_counts=True)
    held, places = np.divmod(pairs, n)
    bounds = np.searchsorted(held, np.arange(len(numbers) + 1)).tolist()
    return Postings(numbers, bounds, places, counts.astype(np.float64))


_PostingsPart = tuple[dict[str, int], list[int], np.ndarray, np.ndarray, int]
"""(term -> its number, where each number's postings start, the rows, their frequencies, the rows' offset)."""


class Postings(Mapping[str, tuple[np.ndarray, np.ndarray]]):
    """Term -> (rows, frequencies): each term's slice of the rows and frequencies of all terms, cut when
    the term is asked for (a search asks for a few terms of the thousands a session holds).

    An index extended by the rows appended since it was built holds its postings in parts, one for
    each extension: extending copies no term of the parts before (a dictionary of every term's slices
    made again cost about 1 ms at each search after a record), and a term asked for is joined from
    the parts that hold it. The last parts are merged as they come (see :func:`_tiered`).
    """

    __slots__ = ("_parts", "_terms")

    def __init__(self, numbers: dict[str, int], bounds: list[int], rows: np.ndarray, tf: np.ndarray) -> None:
        # term -> its number: its postings are rows[bounds[i]:bounds[i + 1]]
        self._parts: list[_PostingsPart] = [(numbers, bounds, rows, tf, 0)]
        self._terms: Mapping[str, object] | None = numbers  # every part's terms, in order (made when asked)

    @classmethod
    def joined(cls, first: Postings, then: Postings, offset: int) -> Postings:
        """The postings of ``first``'s rows followed by ``then``'s (their rows numbered from ``offset``)."""
        joined = cls.__new__(cls)
        joined._parts = [p for p in first._parts if p[0]] + [
            (n, b, r, f, o + offset) for n, b, r, f, o in then._parts if n]  # a part without terms adds nothing
        joined._terms = None
        joined._parts = _tiered(joined._parts, lambda p: len(p[2]), _merged_postings)
        return joined

    def __getitem__(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        found = []
        for numbers, bounds, rows, tf, offset in self._parts:
            i = numbers.get(term)
            if i is not None:
                a, b = bounds[i], bounds[i + 1]
                found.append((rows[a:b] + offset if offset else rows[a:b], tf[a:b]))
        if len(found) == 1:
            return found[0]
        if not found:
            raise KeyError(term)
        return np.concatenate([r for r, _ in found]), np.concatenate([f for _, f in found])

    def _union(self) -> Mapping[str, object]:
        terms = self._terms
        if terms is None:
            terms = self._terms = dict.fromkeys(itertools.chain.from_iterable(p[0] for p in self._parts))
        return terms

    def __contains__(self, term: object) -> bool:
        return any(term in p[0] for p in self._parts)

    def __iter__(self) -> Iterator[str]:
        return iter(self._union())

    def __len__(self) -> int:
        return len(self._union())


def _merged_postings(parts: Sequence[_PostingsPart]) -> _PostingsPart:
    """One part holding the postings of ``parts`` (whose rows follow one another), terms in order of first use."""
    numbers: dict[str, int] = {}
    ids, rows, tfs = [], [], []
    for held, bounds, part_rows, tf, offset in parts:
        renumbered = np.array([numbers.setdefault(t, len(numbers)) for t in held], np.int64)
        ids.append(np.repeat(renumbered, np.diff(bounds).astype(np.int64)))
        rows.append(part_rows + offset)
        tfs.append(tf)
    term, row = np.concatenate(ids), np.concatenate(rows)
    order = np.lexsort((row, term))  # by term, then row: each term's rows ascending (the parts' rows follow)
    term = term[order]
    bounds = np.searchsorted(term, np.arange(len(numbers) + 1)).tolist()
    return numbers, bounds, row[order], np.concatenate(tfs)[order], 0


def bm25_search(
    indexes: Sequence[LexicalIndex],
    phrases: Sequence[Sequence[str]],
    k: int,
    filters: Filters | None,
    k1: float = 1.2,
    b: float = 0.75,
) -> list[Hit]:
    """Okapi BM25 over several sessions with their shared statistics, scored as SQLite FTS5's ``bm25()``
    scores (so that the backends and SQLite's two engines rank alike): an OR of ``phrases``, each the
    tokens of one search term; IDF ``log((N - n + 0.5) / (n + 0.5))``, at least 1e-6. A term of several
    tokens ("self-portrait") counts as one phrase, found where its tokens stand side by side. A term
    found in half the rows or more weighs nothing and only widens the matches, so it is left out
    unless every term is that common, or there are fewer than 64 rows (as the SQLite store does for
    FTS5). Each row's length counts ``LENGTH_OFFSET`` tokens more, as an FTS5 row's scope column does.
    """
    n_docs = sum(len(ix.ids) for ix in indexes)
    terms = [tuple(p) for p in phrases if p]  # a term given twice ("dogs", "dog") counts twice, as in FTS5
    if n_docs == 0 or not terms or k == 0:
        return []
    avg = float(sum(ix.lengths.sum() for ix in indexes)) / n_docs + LENGTH_OFFSET
    found_in = [[_phrase_rows(ix, p) for p in terms] for ix in indexes]
    df = [sum(len(per_ix[n][0]) for per_ix in found_in) for n in range(len(terms))]
    weighable = list(range(len(terms)))
    if n_docs >= _FEW_ROWS:
        weighable = [n for n in weighable if 2 * df[n] < n_docs] or weighable
    per_index = []
    for ix, per_phrase in zip(indexes, found_in):
        scores = np.zeros(len(ix.ids))
        lengths = ix.lengths + LENGTH_OFFSET
        for n in weighable:
            rows, tf = per_phrase[n]
            if not len(rows):
                continue
            idf = max(1e-6, math.log((n_docs - df[n] + 0.5) / (df[n] + 0.5)))
            scores[rows] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[rows] / avg))
        mask = filter_mask(filters, ix.ids, ix.roles, ix.kinds, ix.created)
        if mask is not None:
            scores[~mask] = 0.0
        per_index.append(scores)
    scores = np.concatenate(per_index)  # every row of the scope, the indexes one after another
    found = np.flatnonzero(scores > 0)
    if len(found) > k:  # the k best and every row tied with the k-th: ties are broken by key below
        kth = np.partition(scores[found], len(found) - k)[len(found) - k]
        found = found[scores[found] >= kth]
    starts = np.cumsum([0] + [len(ix.ids) for ix in indexes])
    hits: list[tuple[float, str, str, Owner | None, int | None]] = []
    columns = [(items(ix.ids), items(ix.keys), items(ix.positions) if ix.positions else None) for ix in indexes]
    for row, ix_n in zip(found.tolist(), (np.searchsorted(starts, found, side="right") - 1).tolist()):
        (ids, keys, positions), i = columns[ix_n], row - int(starts[ix_n])
        hits.append((float(scores[row]), ids[i], keys[i], indexes[ix_n].owner, positions[i] if positions else None))
    hits.sort(key=lambda h: (-h[0], len(h[2]), h[2]))  # a shorter key first: a SQL row id is older
    return [Hit(i, s, key, owner, position) for s, i, key, owner, position in hits[:k]]


LENGTH_OFFSET = 3
_FEW_ROWS = 64


def _phrase_rows(ix: LexicalIndex, tokens: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The rows holding ``tokens`` side by side, in this order, and how often they do."""
    held = [ix.postings.get(t) for t in dict.fromkeys(tokens)]
    if any(h is None for h in held):
        return _NONE
    rows, tf = held[0]  # type: ignore[misc]
    if len(held) == 1 and len(tokens) == 1:
        return rows, tf
    for other_rows, _ in held[1:]:  # type: ignore[misc]
        rows = np.intersect1d(rows, other_rows, assume_unique=True)
    found, counts, n = [], [], len(tokens)
    want = list(tokens)
    for row in rows.tolist():  # rows holding every token: count where they stand in order
        words = ix.tokens[row] if ix.tokens else []
        c = sum(1 for i in range(len(words) - n + 1) if words[i:i + n] == want)
        if c:
            found.append(row)
            counts.append(c)
    return np.array(found, np.int64), np.array(counts, np.float64)


_NONE = (np.zeros(0, np.int64), np.zeros(0, np.float64))


def _after_last(index: LexicalIndex) -> int:
    """The position after the index's last row (its rows are in position order): where rows it lacks begin."""
    last = index.positions[-1] if index.positions else None
    return 0 if last is None else last + 1


class SessionIndexes:
    """Each session's :class:`LexicalIndex`, kept in process while the session stands as it was read.

    A session is described by ``version`` (whatever changes when rows are deleted, or when the key
    comes to name another session), ``next_position`` and ``count`` (its message count). When only
    the last two moved and the rows read from after the index's last row on account for every new
    message, those rows are added to the index; otherwise it is built again. (Reading from the last
    row, not from the old next position, extends the index too when messages fill the positions a
    deletion left free at the end, as an archive written again after its tail was deleted does.) At most ``max_rows``
    rows are held (least recently used sessions are dropped first). An index whose rows were read
    while :meth:`drop` or :meth:`clear` ran (a forget) answers the search that read it and is not held:
    it may hold what the forget deleted.
    """

    def __init__(self, tokenize: Tokenizer, max_rows: int = 500_000) -> None:
        self.tokenize = tokenize
        self._max_rows = max_rows
        self._held: OrderedDict[Hashable, tuple[Hashable, int, int, LexicalIndex]] = OrderedDict()
        self._rows = 0  # rows held, all sessions together
        self._drops = 0  # calls of drop() and clear() so far
        self._lock = threading.Lock()

    def index(
        self, key: Hashable, version: Hashable, next_position: int, count: int, owner: Owner,
        read: Callable[[int], Sequence[tuple[str, str, str, str, float, str, int]]],
    ) -> LexicalIndex:
        """The session's index; ``read(position)`` gives its rows from that position on, in order,
        as (id, key, role, kind, created_at, indexed text, position).
        """
        with self._lock:
            held = self._held.get(key)
            drops = self._drops
        index = None
        if held is not None and held[0] == version:
            _, seen_next, seen_count, index = held
            if (seen_next, seen_count) != (next_position, count):
                added = read(_after_last(index)) if count > seen_count else []
                if added and seen_count + len(added) == count:  # only appends since: add them
                    index = index.extend(self._build(added, owner))
                else:
                    index = None
        if index is None:
            index = self._build(read(0), owner)
        with self._lock:
            if self._drops != drops:  # a forget came while the rows were read
                return index
            current = self._held.pop(key, None)
            if current is not None and current[3] is index:  # unchanged: only its place in the order moves
                self._held[key] = current
                return index
            self._rows += len(index.ids) - (len(current[3].ids) if current is not None else 0)
            self._held[key] = (version, next_position, count, index)
            while self._rows > self._max_rows and len(self._held) > 1:
                _, (_, _, _, dropped) = self._held.popitem(last=False)
                self._rows -= len(dropped.ids)
        return index

    def holds(self, key: Hashable) -> bool:
        """Whether the session's index is kept (in whatever state it was read)."""
        with self._lock:
            return key in self._held

    def _build(self, rows: Sequence[tuple[str, str, str, str, float, str, int]], owner: Owner) -> LexicalIndex:
        return LexicalIndex.of_texts(rows, self.tokenize, owner)

    def drop(self, keys: Sequence[Hashable]) -> None:
        with self._lock:
            self._drops += 1
            for key in keys:
                dropped = self._held.pop(key, None)
                if dropped is not None:
                    self._rows -= len(dropped[3].ids)

    def clear(self) -> None:
        with self._lock:
            self._drops += 1
            self._held.clear()
            self._rows = 0

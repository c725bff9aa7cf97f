"""The in-process keyword index's word splitting: FTS5's unicode61 tokenizer's words exactly, fast path included."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fullrecall.stores._bm25 import words


@pytest.fixture(scope="module")
def fts5_words():
    """The words SQLite FTS5's ``unicode61`` tokenizer (the SQLite store's, without porter) finds in a text."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute("CREATE VIRTUAL TABLE t USING fts5 (x, tokenize = 'unicode61')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab (t, 'instance')")

    def found(text: str) -> list[str]:
        db.execute("DELETE FROM t")
        db.execute("INSERT INTO t (rowid, x) VALUES (1, ?)", (text,))
        return [r[0] for r in db.execute("SELECT term FROM v ORDER BY offset")]

    yield found
    db.close()


_ACCENTED = st.text(alphabet=st.sampled_from(list("Café Montréal ÀÉÎÕÜàéîõüçñ ΟΔΟΣ ς İ ǅ K e\u0301 x\u0300y _'’-😀ß"
                                                   "øæœ ễ ά ё й Ａ ﬁ ½ ١٢ 日本語")))


@given(st.text(alphabet=st.characters(max_codepoint=0x7F, blacklist_characters="\x00"))
       | st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))) | _ACCENTED)
@example("Rendez-vous au café Montréal")
@example("my_notes l'été ΟΔΟΣ İstanbul x\u0301y")
def test_words_are_the_words_fts5_finds(fts5_words, text: str) -> None:
    """Accents folded ("café" is "cafe"), an underscore or an apostrophe between words, a final sigma as a
    sigma, marks and letters FTS5's Unicode 6.1 tables know otherwise: each as FTS5 has it (the in-process
    index kept accents and underscores, and found other words than FTS5). Lone surrogates are left out: no store
    takes them (they are no UTF-8), and SQLite could not be asked."""
    assert words(text) == fts5_words(text)


def test_words_split_on_every_ascii_separator_and_keep_digits() -> None:
    assert words("Self-portrait_2\tREF-48213;x\x00y \u212a") == ["self", "portrait", "2", "ref", "48213", "x", "y", "k"]


def test_the_tokenizer_gives_the_same_tokens_after_its_word_memory_is_renewed() -> None:
    from fullrecall.stores._bm25 import Tokenizer

    tokenize = Tokenizer()
    first = tokenize("Running dogs used us")
    tokenize._known.update({f"w{i}": f"w{i}" for i in range(200_001)})  # full: the next call starts a new one
    assert tokenize("Running dogs used us") == first


@given(st.lists(st.lists(st.sampled_from(["a", "b", "c", "dog", "us"]), max_size=6), max_size=8))
def test_postings_hold_each_terms_rows_in_order_with_their_counts(token_lists: list[list[str]]) -> None:
    from collections import Counter

    from fullrecall.stores._bm25 import LexicalIndex

    index = LexicalIndex.build([(f"m{n}", str(n), "user", "message", 0.0, t, n) for n, t in enumerate(token_lists)])
    expected: dict[str, list[tuple[int, int]]] = {}
    for n, tokens in enumerate(token_lists):
        for term, count in sorted(Counter(tokens).items()):
            expected.setdefault(term, []).append((n, count))
    assert {t: list(zip(r.tolist(), f.tolist())) for t, (r, f) in index.postings.items()} == expected


def _tokenize_in_child(tokenize, queue) -> None:
    queue.put(tokenize("Stemming unseen words"))


def test_a_process_forked_while_another_thread_stems_tokenizes_in_the_child() -> None:
    """The stem lock a parent's thread held across a fork was held for ever in the child: its first new word
    waited for ever. The child gets a fresh lock (and stemmer), and tokenizes as the parent does."""
    import multiprocessing
    import threading

    from fullrecall.stores._bm25 import Tokenizer

    tokenize = Tokenizer()
    held, release = threading.Event(), threading.Event()

    def stemming() -> None:  # a thread in the middle of stemming when the process forks
        with tokenize._stem_lock:
            held.set()
            release.wait(30)

    thread = threading.Thread(target=stemming)
    thread.start()
    try:
        assert held.wait(10)
        fork = multiprocessing.get_context("fork")
        queue = fork.Queue()
        child = fork.Process(target=_tokenize_in_child, args=(tokenize, queue))
        child.start()
        child.join(20)
        if child.is_alive():
            child.kill()
            child.join()
        assert child.exitcode == 0, "the child waited for ever on the stem lock"
        release.set()
        assert queue.get(timeout=5) == tokenize("Stemming unseen words")
    finally:
        release.set()
        thread.join()


def _same_index(a: object, b: object) -> None:
    import numpy as np

    from fullrecall.stores._bm25 import LexicalIndex

    assert isinstance(a, LexicalIndex) and isinstance(b, LexicalIndex)
    assert (a.ids, a.keys, a.positions, a.tokens) == (b.ids, b.keys, b.positions, b.tokens)
    for x, y in [(a.roles, b.roles), (a.kinds, b.kinds), (a.created, b.created), (a.lengths, b.lengths)]:
        assert x.dtype == y.dtype and x.tolist() == y.tolist()
    assert list(a.postings) == list(b.postings)  # the same terms, in the same order
    for term, (rows, tf) in a.postings.items():
        other_rows, other_tf = b.postings[term]
        assert np.array_equal(rows, other_rows) and rows.dtype == other_rows.dtype
        assert np.array_equal(tf, other_tf) and tf.dtype == other_tf.dtype


_WORDY = st.text(alphabet=st.sampled_from(list("ab Running dogs, us!\t\u03a3\u03c3\u03a3\u212a\u0130\u00e9\u2019\xa0_7")))


@given(st.lists(st.text(alphabet=st.characters(max_codepoint=0x7F)) | st.text() | _WORDY, max_size=8))
def test_an_index_of_texts_tokenized_together_is_the_index_of_each_texts_tokens(texts: list[str]) -> None:
    from fullrecall.stores._bm25 import LexicalIndex, Tokenizer

    rows = [(f"m{n}", str(n), "user", "message", float(n), t, n) for n, t in enumerate(texts)]
    tokenize = Tokenizer()
    expected = LexicalIndex.build([(*r[:5], tokenize(r[5]), r[6]) for r in rows], ("u", "a", "s"))
    _same_index(expected, LexicalIndex.of_texts(rows, Tokenizer(), ("u", "a", "s")))
    _same_index(expected, LexicalIndex.of_texts(rows, tokenize, ("u", "a", "s")))  # its word memory full
    half = len(rows) // 2  # rows added later extend the index as if it had been built with them
    extended = LexicalIndex.of_texts(rows[:half], tokenize, ("u", "a", "s")).extend(LexicalIndex.of_texts(rows[half:], tokenize))
    _same_index(expected, extended)


@given(st.lists(_WORDY, max_size=40), st.lists(st.integers(0, 40), max_size=24))
@example(["Running dogs", "us", "ab dogs", "", "x running us"] * 6, list(range(30)))  # more parts than are kept
def test_an_index_extended_many_times_is_the_index_built_at_once(texts: list[str], cuts: list[int]) -> None:
    from fullrecall.stores._bm25 import LexicalIndex, Tokenizer, bm25_search

    rows = [(f"m{n}", str(n), "user", "message", float(n), t, n) for n, t in enumerate(texts)]
    tokenize = Tokenizer()
    expected = LexicalIndex.of_texts(rows, tokenize, ("u", "a", "s"))
    bounds = sorted({0, len(rows), *(min(c, len(rows)) for c in cuts)})
    index = LexicalIndex.of_texts(rows[:bounds[1]] if len(bounds) > 1 else rows, tokenize, ("u", "a", "s"))
    for a, b in zip(bounds[1:], bounds[2:]):  # one extension a cut: the last parts are merged as they come
        index = index.extend(LexicalIndex.of_texts(rows[a:b], tokenize))
        # each part more than twice as large as the next: a few parts, whatever the number of extensions
        for parts, size in ((index.postings._parts, lambda p: len(p[2])), (index.tokens._parts, lambda p: len(p[1]))):
            assert all(size(x) > 2 * size(y) for x, y in zip(parts, parts[1:]))
    _same_index(expected, index)
    for term in ["dog", "run", "us", "ab", "nothing"]:
        assert (term in index.postings) == (term in expected.postings)
    query = [["run"], ["dog"], ["us"], ["ab", "run"]]
    assert bm25_search([index], query, 5, None) == bm25_search([expected], query, 5, None)


def test_texts_tokenized_together_keep_each_texts_words_apart() -> None:
    from fullrecall.stores._bm25 import LexicalIndex, Tokenizer

    texts = ["Running dogs", "", "caf\u00e9 \u039f\u0394\u039f\u03a3", "\u03a3\u03a3 us", "x\x00y running", "DOGS"]
    rows = [(f"m{n}", str(n), "user", "message", 0.0, t, n) for n, t in enumerate(texts)]
    index = LexicalIndex.of_texts(rows, Tokenizer())  # a NUL in a text: each text tokenized alone
    assert index.tokens == [["run", "dog"], [], ["cafe", "\u03bf\u03b4\u03bf\u03c3"], ["\u03c3\u03c3", "us"],
                            ["x", "y", "run"], ["dog"]]
    index = LexicalIndex.of_texts(rows[:4] + rows[5:], Tokenizer())
    assert index.tokens == [["run", "dog"], [], ["cafe", "\u03bf\u03b4\u03bf\u03c3"], ["\u03c3\u03c3", "us"], ["dog"]]
    assert index.lengths.tolist() == [2.0, 0.0, 2.0, 2.0, 1.0]
    assert index.postings["dog"][0].tolist() == [0, 4]
    assert LexicalIndex.of_texts([], Tokenizer()).ids == []


def test_a_held_index_adds_a_few_objects_for_the_collector_not_one_a_row() -> None:
    """Python's garbage collector walks every container a process holds, and SQLite keeps an index per session
    of every user searched: a session's rows' tokens (what a phrase is checked against) are held as numbers,
    not as a list a row, and are still each row's tokens in order.
    """
    import gc

    from fullrecall.stores._bm25 import LexicalIndex, Tokenizer

    texts = [f"message {n}: I went hiking near Lyon, self-portrait {n % 7} in hand" for n in range(2000)]
    rows = [(f"m{n}", str(n), "user", "message", float(n), t, n) for n, t in enumerate(texts)]
    tokenize = Tokenizer()
    tokenize(" ".join(texts))  # the tokenizer's (and its stemmer's) memory of these words is made before counting
    gc.collect()
    before = len(gc.get_objects())
    index = LexicalIndex.of_texts(rows, tokenize)
    more = LexicalIndex.of_texts(rows[:3], tokenize)
    grown = index.extend(more)
    gc.collect()
    assert len(gc.get_objects()) - before < 100
    assert index.tokens is not None and grown.tokens is not None
    assert [index.tokens[n] for n in (0, 1999)] == [tokenize(texts[0]), tokenize(texts[1999])]
    assert grown.tokens[2001] == tokenize(texts[1]) and len(grown.tokens) == 2003
    many = index  # extended a row at a time: its last parts are merged as they pile up
    for n in range(20):
        many = many.extend(LexicalIndex.of_texts(rows[n:n + 1], tokenize))
    assert many.tokens is not None and len(many.tokens) == 2020
    assert [many.tokens[n] for n in (7, 2000, 2019)] == [tokenize(texts[n]) for n in (7, 0, 19)]


def test_a_session_index_is_extended_by_messages_written_where_its_deleted_tail_stood() -> None:
    """A session whose last messages were deleted keeps its next position; messages written again at the freed
    positions (an archive written again after its tail was deleted) extend the kept index, which then equals the
    index built at once, instead of having it built again whole on every write.
    """
    from fullrecall.stores._bm25 import SessionIndexes, Tokenizer, bm25_search

    table = [(f"m{n}", str(n), "user", "message", float(n), f"heron {n} marsh" if n % 3 else f"otter {n}", n)
             for n in range(40)]
    built: list[int] = []
    indexes = SessionIndexes(Tokenizer())
    build = indexes._build

    def counted(rows: Any, owner: Any) -> Any:
        built.append(len(rows))
        return build(rows, owner)

    indexes._build = counted  # type: ignore[method-assign]

    def index(version: int) -> Any:
        return indexes.index("s", version, 40, len(table), ("u", "a", "s"),
                             lambda after: [r for r in table if r[6] >= after])

    index(0)
    del table[30:]  # the tail deleted: the version moves, the next position stays at 40
    index(1)
    assert built == [40, 30]
    for n in range(30, 34):  # written again at the freed positions, one by one
        table.append((f"w{n}", str(100 + n), "user", "message", float(100 + n), f"heron again {n}", n))
        kept = index(1)
    assert built == [40, 30, 1, 1, 1, 1]
    whole = SessionIndexes(Tokenizer()).index("s", 1, 40, len(table), ("u", "a", "s"), lambda after: table)
    assert kept.ids == whole.ids and kept.positions == whole.positions
    for query in ([["heron"]], [["again"], ["otter"]], [["marsh"]]):
        assert bm25_search([kept], query, 10, None) == bm25_search([whole], query, 10, None)

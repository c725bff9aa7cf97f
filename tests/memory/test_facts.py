"""FactMemory: validity intervals, supersession with history, merging duplicates, rules and checked LLM extraction."""

from __future__ import annotations

import itertools
import json
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fullrecall import FactMemory, MemoryInputError
from fullrecall.memory.facts import extract_facts
from fullrecall.stores import open_store

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from summarizer_peers import ScriptedServer, completion

T0 = 1_700_000_000.0


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def facts(default_embedder):
    return FactMemory(embedder=default_embedder, user_id="alice", clock=Clock())


def test_newer_value_supersedes_and_history_keeps_the_old_on_every_backend(store_url, default_embedder):
    clock = Clock()
    store = open_store(store_url)
    try:
        alice = FactMemory(store, user_id="alice", agent_id="a", embedder=default_embedder, clock=clock)
        bob = FactMemory(store, user_id="bob", agent_id="a", embedder=default_embedder, clock=clock)
        default_owner = FactMemory(store, embedder=default_embedder, clock=clock)
        paris = alice.remember("My city is Paris", sources=[{"session_id": "s1", "id": "m1"}])
        clock.now += 100
        lyon = alice.remember("My city is Lyon.")
        default_owner.remember("My city is Oslo")
        bob.remember("I like chess")

        assert [f.value for f in alice.current(attribute="city")] == ["Lyon"]
        assert [(f.value, f.valid_from, f.valid_to) for f in alice.history(attribute="city")] == [
            ("Paris", T0, T0 + 100), ("Lyon", T0 + 100, None)]
        old = alice.get(paris.id)
        assert old.superseded_by == lyon.id and old.sources == [{"session_id": "s1", "id": "m1"}]
        assert [f.value for f in alice.current(at=T0 + 50)] == ["Paris"]
        assert [f.text for f, _ in alice.search("which city?")] == ["My city is Lyon."]
        assert {f.text for f, _ in alice.search("which city?", include_history=True)} == {
            "My city is Lyon.", "My city is Paris"}
        # no leak: bob and the default owner see only their own facts, and alice none of theirs
        assert [f.text for f in bob.history()] == ["I like chess"]
        assert [f.value for f in default_owner.history()] == ["Oslo"]
        assert {f.value for f in alice.history()} == {"Paris", "Lyon"}
        assert bob.search("which city?") == [(bob.current()[0], pytest.approx(bob.search("which city?")[0][1]))]

        again = FactMemory(open_store(store_url), user_id="alice", agent_id="a", embedder=default_embedder)
        assert [f.value for f in again.current(attribute="city")] == ["Lyon"]  # survives a new store object
        again.store.close()
    finally:
        store.close()


def test_an_older_value_told_late_does_not_replace_the_current_one(facts):
    lyon = facts.remember("My city is Lyon", valid_from=T0)
    paris = facts.remember("My city is Paris", valid_from=T0 - 1000)
    assert [f.id for f in facts.current(attribute="city")] == [lyon.id]
    assert (facts.get(paris.id).valid_to, facts.get(paris.id).superseded_by) == (T0, lyon.id)
    nice = facts.remember("My city is Nice", valid_from=T0 - 500)  # between the two: cuts Paris short
    assert [(f.value, f.valid_from, f.valid_to) for f in facts.history(attribute="city")] == [
        ("Paris", T0 - 1000, T0 - 500), ("Nice", T0 - 500, T0), ("Lyon", T0, None)]
    assert facts.get(nice.id).superseded_by == lyon.id


def test_duplicates_merge_by_normalized_text_and_similarity(facts):
    first = facts.remember("I love hiking in the mountains.", sources=[{"session_id": "s1", "id": "m1"}])
    same = facts.remember("i love hiking in the MOUNTAINS", sources=[{"session_id": "s2", "id": "m9"}])
    close = facts.remember("I love hiking in the mountains!!  ")
    similar = facts.remember("I love going hiking in the mountains.")
    other = facts.remember("I love Italian food")
    assert first.id == same.id == close.id == similar.id != other.id
    merged = facts.get(first.id)
    assert merged.mentions == 4 and merged.sources == [{"session_id": "s1", "id": "m1"}, {"session_id": "s2", "id": "m9"}]
    assert len(facts.history()) == 2
    assert facts.remember("My city is Lyon").id == facts.remember("my city is lyon").id


def test_the_same_words_typed_composed_or_decomposed_are_one_fact(facts):
    """"Zürich" with ü as one character or as u and a combining mark (a Mac keyboard, a copied text), or a
    word in full-width letters, is the same word: a repeat of the fact, not a new value replacing it."""
    import unicodedata

    composed = facts.remember("My city is Zürich")
    decomposed = facts.remember(unicodedata.normalize("NFD", "My city is Zürich"))
    assert decomposed.id == composed.id and facts.get(composed.id).mentions == 2
    assert [(f.value, f.valid_to) for f in facts.history()] == [("Zürich", None)]
    plain = facts.remember("I play the piano on Sundays")
    assert facts.remember("I play the piano on Ｓｕｎｄａｙｓ").id == plain.id
    assert facts.remember("My city is Zurich").id != composed.id  # another spelling is another value


def test_an_attribute_fact_without_a_value_is_compared_by_its_words(store_url, default_embedder):
    """``remember(text, attribute=...)`` with no value (the service's remember allows it): a new statement of the
    attribute supersedes the current one, it is not merged into it as if both had the same (empty) value.
    """
    clock = Clock()
    facts = FactMemory(store_url, embedder=default_embedder, user_id="alice", clock=clock)
    try:
        paris = facts.remember("I moved to Paris", attribute="city")
        clock.now += 10
        rome = facts.remember("I moved to Rome", attribute="city")
        assert rome.id != paris.id and rome.text == "I moved to Rome" and rome.mentions == 1
        assert [f.text for f in facts.current(attribute="city")] == ["I moved to Rome"]
        assert facts.get(paris.id).superseded_by == rome.id
        clock.now += 10
        assert facts.remember("i moved to ROME", attribute="city").id == rome.id  # a repeat still merges
        assert facts.get(rome.id).mentions == 2
    finally:
        facts.close()


def test_rules_find_documented_facts_in_user_words():
    text = ("Hi! My name is Ada Lovelace. I live in London. I work for the Analytical Engine Company. "
            "I'm 36 years old. I really like mathematics. Remember that my favourite colour is green. "
            "Remember to buy milk. What is the weather?")
    assert extract_facts(text) == [
        ("name", "Ada Lovelace", "My name is Ada Lovelace."),
        ("lives in", "London", "I live in London."),
        ("works at", "the Analytical Engine Company", "I work for the Analytical Engine Company."),
        ("age", "36", "I'm 36 years old."),
        (None, "mathematics", "I really like mathematics."),
        ("favourite colour", "green", "my favourite colour is green."),
        (None, None, "to buy milk."),
    ]


def test_candidates_in_parsed_messages_are_those_of_the_messages(facts):
    """What record uses: the facts of messages already parsed ((role, text) each) are those candidates() finds in
    the messages themselves, whatever their shape, with the same sources; an assistant's words state no fact."""
    messages = [{"role": "user", "content": "My name is Ada. I live in London."},
                {"role": "assistant", "content": "My name is Claude."},
                {"role": "user", "content": [{"type": "text", "text": "Remember that my bike is red."}]}]
    sources = [{"session_id": "s", "id": f"m{i}"} for i in range(3)]
    said = [("user", "My name is Ada. I live in London."), ("assistant", "My name is Claude."),
            ("user", "Remember that my bike is red.")]
    found = facts.candidates_in(said, sources)
    assert found == facts.candidates(messages, sources)
    assert [(c.text, c.sources) for c in found] == [("My name is Ada.", [sources[0]]), ("I live in London.", [sources[0]]),
                                                    ("my bike is red.", [sources[2]])]


def test_a_negated_statement_is_no_fact_of_its_negation():
    """"my city is not Paris" was kept as the fact city = "not Paris", which then superseded the real city."""
    for text in ("My city is not Paris.", "my city is NOT Paris", "My city isn't Paris.", "My kids aren't at home.",
                 "My city is no longer Paris.", "My city is still not Paris!", "My car is never clean.",
                 "My city is not Paris it is Lyon.", "My city is no more Paris.", "My city is sadly not Paris.",
                 "My flight is unfortunately no longer on time."):
        assert extract_facts(text) == [], text
    for text in ("I love it.", "I like that!", "I really enjoy them", "I love it all."):  # a pronoun names nothing
        assert extract_facts(text) == [], text
    assert extract_facts("My number is one.") == [("number", "one", "My number is one.")]  # a word, no pronoun
    assert extract_facts("My name is Holly. I love Italian food.") == [
        ("name", "Holly", "My name is Holly."), (None, "Italian food", "I love Italian food.")]
    assert extract_facts("Remember that my city is not Paris.") == [(None, None, "my city is not Paris.")]
    assert extract_facts("My city is not Paris. My city is Lyon. My answer is no. My knot is nothing.") == [
        ("city", "Lyon", "My city is Lyon."), ("answer", "no", "My answer is no."),
        ("knot", "nothing", "My knot is nothing.")]


def test_a_negated_statement_supersedes_no_fact(facts):
    facts.learn([{"role": "user", "content": "My city is Lyon."}])
    facts.learn([{"role": "user", "content": "My city is not Paris. My city is no longer Rome."}])
    assert [(f.attribute, f.value) for f in facts.current()] == [("city", "Lyon")]


def test_a_dot_inside_a_word_does_not_cut_a_facts_value():
    """A decimal, an email, a domain, an address or a version: the sentence went on after the dot, so the rule
    kept a cut value ("My weight is 72." with the value "72"), which then superseded the right one.
    """
    text = ("My weight is 72.5 kg. My email is ann@example.com! My IP is 10.0.0.1. My version is v1.2.3.\n"
            "I live in Lyon")
    assert extract_facts(text) == [
        ("weight", "72.5 kg", "My weight is 72.5 kg."),
        ("email", "ann@example.com", "My email is ann@example.com!"),
        ("ip", "10.0.0.1", "My IP is 10.0.0.1."),
        ("version", "v1.2.3", "My version is v1.2.3."),
        ("lives in", "Lyon", "I live in Lyon"),
    ]
    assert extract_facts("!" * 100_000 + " my dog is Rex") == [("dog", "Rex", "my dog is Rex")]


def test_a_clause_of_its_own_is_no_part_of_the_previous_value():
    """'My locker code is 4711 and I live in Lyon' was kept as locker code = '4711 and I live in Lyon' (and no
    city): a clause that starts with the speaker's "I" or "my" after "and" / "but", or after a semicolon, is
    read on its own; an "and" inside a value stays in it."""
    assert extract_facts("My locker code is 4711 and I live in Lyon. My name is Ann; my city is Rome, but I "
                         "work at Acme") == [
        ("locker code", "4711", "My locker code is 4711"),
        ("lives in", "Lyon", "I live in Lyon."),
        ("name", "Ann", "My name is Ann"),
        ("city", "Rome", "my city is Rome"),
        ("works at", "Acme", "I work at Acme"),
    ]
    assert extract_facts("I like rock and roll. My favourite duo is Simon and Garfunkel. My friend is Ian and "
                         "Irene") == [
        (None, "rock and roll", "I like rock and roll."),
        ("favourite duo", "Simon and Garfunkel", "My favourite duo is Simon and Garfunkel."),
        ("friend", "Ian and Irene", "My friend is Ian and Irene"),
    ]
    assert extract_facts("Remember that my badge is 12 and I work at Acme") == [
        ("badge", "12", "my badge is 12"), ("works at", "Acme", "I work at Acme")]


def test_learn_links_each_fact_to_its_message_and_reads_only_user_words(facts):
    messages = [
        {"role": "system", "content": "You are helpful. My name is System."},
        {"role": "user", "content": "Remember that I like Python."},
        {"role": "assistant", "content": "My name is Claude and I live in the cloud."},
        {"role": "user", "content": [{"type": "text", "text": "My employer is ACME."}]},
    ]
    sources = [{"session_id": "s1", "id": f"m{i}"} for i in range(4)]
    learned = facts.learn(messages, sources)
    assert [(f.text, f.attribute, f.value, f.sources, f.origin) for f in learned] == [
        ("I like Python.", None, "Python", [sources[1]], "rule"),
        ("My employer is ACME.", "employer", "ACME", [sources[3]], "rule"),
    ]


def test_llm_extraction_stores_only_facts_found_in_their_source(default_embedder):
    server = ScriptedServer()
    try:
        from fullrecall.summarizers.chat_models.openai import OpenAIChatModel

        answer = [
            {"source": 0, "subject": "user", "attribute": "pet", "value": "a cat named Miso", "text": "The user has a cat named Miso."},
            {"source": 0, "subject": "user", "attribute": "city", "value": "Berlin", "text": "The user lives in Berlin."},
            {"source": 7, "subject": "user", "attribute": None, "value": "tea", "text": "The user likes tea."},
            {"source": 1, "subject": "user", "attribute": None, "value": "jazz", "text": "The user enjoys jazz."},
        ]
        server.script(completion("Here you go:\n" + json.dumps(answer)))
        model = OpenAIChatModel("scripted", base_url=server.base_url, api_key="k", max_retries=0)
        memory = FactMemory(embedder=default_embedder, user_id="u", chat_model=model)
        learned = memory.learn([
            {"role": "user", "content": "We adopted a cat named Miso last week."},
            {"role": "assistant", "content": "Lovely! Want some jazz playlists for her?"},
        ], [{"session_id": "s", "id": "a"}, {"session_id": "s", "id": "b"}])
        assert [(f.text, f.attribute, f.value, f.origin, f.sources) for f in learned] == [
            ("The user has a cat named Miso.", "pet", "a cat named Miso", "llm", [{"session_id": "s", "id": "a"}]),
            ("The user enjoys jazz.", None, "jazz", "llm", [{"session_id": "s", "id": "b"}]),
        ]
        (request,) = server.requests
        assert "[0] user: We adopted a cat named Miso last week." in request["messages"][-1]["content"]
    finally:
        server.close()


def test_bad_fact_is_refused_and_nothing_is_written(facts):
    with pytest.raises(MemoryInputError, match="fact: 'text' must be a non-empty string"):
        facts.remember("   ")
    with pytest.raises(MemoryInputError, match="'attribute' must be a string"):
        facts.remember("x", attribute=3)
    with pytest.raises(MemoryInputError, match="each source must be a dict with a message 'id'"):
        facts.remember("x", sources=["m1"])
    with pytest.raises(MemoryInputError, match="^fact: 'text' is not valid Unicode \\(a lone surrogate at character 11"):
        facts.remember("My city is \ud800")  # no backend stores it, no embedder reads it: refused by name first
    with pytest.raises(MemoryInputError, match="'value' is not valid Unicode"):
        facts.remember("My city is Lyon", attribute="city", value="Ly\udc00on")
    assert facts.history() == []
    for at in ("x", float("nan"), True):  # a time asked of current() is checked as a fact's times are
        with pytest.raises(MemoryInputError, match="^current: 'at' must be Unix seconds"):
            facts.current(at=at)
    assert facts.remember("a PIN with a \x00 in it").text == "a PIN with a \x00 in it"  # NUL: kept verbatim


@settings(max_examples=25)
@given(st.lists(st.tuples(st.sampled_from(["city", "job"]), st.sampled_from(["a", "b", "c"]),
                          st.integers(0, 50)), min_size=1, max_size=8))
def test_intervals_of_one_attribute_never_overlap_and_one_is_current(default_embedder, statements):
    statements = sorted(statements, key=lambda s: s[2])  # told in time order (a late one: test above)
    memory = FactMemory(embedder=default_embedder, user_id="u")
    for attribute, value, t in statements:
        memory.remember(f"My {attribute} is {value}", valid_from=T0 + t)
    for attribute in {a for a, _, _ in statements}:
        history = memory.history(attribute=attribute)
        assert len(memory.current(attribute=attribute)) == 1
        for before, after in itertools.pairwise(history):
            assert before.valid_to is not None and before.valid_to <= after.valid_from
        _, _, latest = max((t, i, v) for i, (a, v, t) in enumerate(statements) if a == attribute)
        assert memory.current(attribute=attribute)[0].value == latest  # the value stated as valid last


def test_concurrent_writers_of_one_attribute_leave_one_current_fact(tmp_path, default_embedder):
    url = f"sqlite:///{tmp_path / 'facts.db'}"
    open_store(url).close()
    barrier = threading.Barrier(4)

    def write(city: str) -> None:
        store = open_store(url)
        memory = FactMemory(store, user_id="u", embedder=default_embedder)
        barrier.wait()
        memory.remember(f"My city is {city}")
        store.close()

    threads = [threading.Thread(target=write, args=(c,)) for c in ("Oslo", "Rome", "Kyiv", "Lima")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    memory = FactMemory(url, user_id="u", embedder=default_embedder)
    history = memory.history(attribute="city")
    assert sorted(f.value for f in history) == ["Kyiv", "Lima", "Oslo", "Rome"]  # every writer landed
    assert len(memory.current(attribute="city")) == 1


def test_bad_times_and_origin_are_refused_by_name_on_every_backend(store_url, default_embedder):
    facts = FactMemory(open_store(store_url), user_id="alice", embedder=default_embedder, clock=Clock())
    try:
        for field, bad in [("valid_from", "abc"), ("valid_from", "5"), ("valid_from", True), ("stated_at", float("nan")),
                           ("valid_from", float("inf")), ("stated_at", [1.0])]:
            with pytest.raises(MemoryInputError, match=f"^fact 'My city is Lyon': '{field}' must be"):
                facts.remember("My city is Lyon", **{field: bad})
        with pytest.raises(MemoryInputError, match="^fact 'My city is Lyon': 'origin' must be a string"):
            facts.remember("My city is Lyon", origin=5)  # type: ignore[arg-type]
        assert facts.history() == []
    finally:
        facts.store.close()


def test_a_future_dated_fact_holds_once_its_time_comes_on_every_backend(store_url, default_embedder):
    """A fact valid from next month is not current today: what holds today stays current (listed, searched),
    a repeat of it today is merged into it, and the future one takes over when its time comes.
    """
    clock = Clock()
    facts = FactMemory(store_url, embedder=default_embedder, user_id="alice", clock=clock)
    try:
        paris = facts.remember("My office is in Paris")
        berlin = facts.remember("My office is in Berlin", valid_from=T0 + 1000)  # from next month
        jazz = facts.remember("I will love jazz", valid_from=T0 + 1000)
        assert [f.id for f in facts.current()] == [paris.id]
        assert [f.id for f in facts.current(attribute="office")] == [paris.id]
        assert [f.id for f, _ in facts.search("where is my office?")] == [paris.id]
        assert {f.id for f in facts.current(at=T0 + 1000)} == {berlin.id, jazz.id}
        assert [(f.value, f.valid_from, f.valid_to) for f in facts.history(attribute="office")] == [
            ("in Paris", T0, T0 + 1000), ("in Berlin", T0 + 1000, None)]
        clock.now += 10
        assert facts.remember("my office is in paris").id == paris.id  # holds today: a repeat
        assert facts.get(paris.id).mentions == 2

        clock.now = T0 + 1000  # its time has come
        assert {f.id for f in facts.current()} == {berlin.id, jazz.id}
        assert [f.id for f, _ in facts.search("where is my office?")][:1] == [berlin.id]
        assert paris.id not in [f.id for f, _ in facts.search("where is my office?")]
    finally:
        facts.close()


def test_a_value_stated_today_before_a_future_one_holds_until_then(facts):
    """Told now of a value that a future-dated fact also names: it holds from now, not only from the future
    date (it is no repeat of a fact that does not hold yet), and the future one still takes over on its date.
    """
    paris = facts.remember("My office is in Paris", valid_from=T0 - 100)
    berlin = facts.remember("My office is in Berlin", valid_from=T0 + 1000)
    now = facts.remember("My office is in Berlin")
    assert now.id != berlin.id
    assert [f.id for f in facts.current()] == [now.id]
    assert [(f.id, f.valid_from, f.valid_to) for f in facts.history(attribute="office")] == [
        (paris.id, T0 - 100, T0), (now.id, T0, T0 + 1000), (berlin.id, T0 + 1000, None)]
    assert [f.id for f in facts.current(at=T0 + 1000)] == [berlin.id]


_NEVER_MERGED = [  # each pair differs in an exact value: both facts are kept, whatever their cosine
    ("Invoice INV-2231 is paid", "Invoice INV-2232 is paid"),
    ("Call Bob at 555-1234", "Call Bob at 555-1243"),
    ("The meeting is at 10:30", "The meeting is at 11:30"),
    ("Meeting with Anna on Tuesday", "Meeting with Anna on Thursday"),
    ("ann@example.com is my email", "ann@example.org is my email"),
    ("Wifi password is hunter2", "Wifi password is hunter3"),
    ("Flight LH 402", "Flight LH 404"),
    ("The door code is 4417", "The door code is 9921"),
    ("The temperature in the cabin is -5", "The temperature in the cabin is 5"),  # the same words but a sign
    ("I like C++", "I like C#"),
    ("I like pizza 🍕", "I like pizza 🍣"),
    ("🎉", "❤️"), ("???", "!!!"), ("4417", "9921"), ("Jazz", "Blues"),
]
_MERGED = [  # the same values in other words: one fact, mentioned twice
    ("Invoice INV-2231 is paid", "Invoice INV-2231 has been paid"),
    ("I met Anna on Tuesday", "On Tuesday I met Anna"),
    ("I like pizza 🍕", "I love pizza 🍕"),
    ("I like C++", "I really like C++"),
    ("I like jazz", "I love jazz"),
    ("The gate code is 4417.", "the gate code is 4417"),
]


def test_facts_that_differ_in_an_exact_value_are_never_merged_on_every_backend(store_url, default_embedder):
    clock = Clock()
    facts = FactMemory(store_url, embedder=default_embedder, user_id="alice", clock=clock)
    try:
        for i, (a, b) in enumerate(_NEVER_MERGED + _MERGED):
            first, second = facts.remember(a, subject=f"p{i}"), facts.remember(b, subject=f"p{i}")
            if i < len(_NEVER_MERGED):
                assert first.id != second.id and {f.text for f in facts.current(f"p{i}")} == {a, b}, (a, b)
            else:
                assert first.id == second.id and facts.get(first.id).mentions == 2, (a, b)
        paid = next(f for f in facts.current("p0") if f.text == "Invoice INV-2231 is paid")
        assert facts.remember("Invoice INV-2231 has been paid", subject="p0").id == paid.id  # past INV-2232's
        balance = facts.remember("My balance is -50")
        clock.now += 10
        assert facts.remember("My balance is 50").id != balance.id  # a new value: it supersedes, it is kept
        assert [f.value for f in facts.history(attribute="balance")] == ["-50", "50"]
    finally:
        facts.close()


def test_an_llm_value_cut_inside_a_word_or_without_its_sign_is_not_taken_as_said(default_embedder):
    """The extraction check finds a value in its message word for word: "441" is not said in "4417", nor
    "-5" in "5", nor "Ann" in "Anna"; the value said is kept.
    """
    server = ScriptedServer()
    try:
        from fullrecall.summarizers.chat_models.openai import OpenAIChatModel

        answer = [{"source": 0, "attribute": "locker code", "value": v, "text": f"The locker code is {v}."}
                  for v in ("441", "-5", "Ann", "4417")]
        server.script(completion(json.dumps(answer)))
        model = OpenAIChatModel("scripted", base_url=server.base_url, api_key="k", max_retries=0)
        memory = FactMemory(embedder=default_embedder, user_id="u", chat_model=model)
        learned = memory.learn([{"role": "user", "content": "Anna says my locker code is 4417, floor 5."}])
        assert [f.value for f in learned] == ["4417"]
    finally:
        server.close()


def test_an_llm_fact_whose_sentence_says_other_values_than_its_source_is_not_stored(default_embedder):
    """Only the value was checked against the message: a sentence naming another city than its value, or adding
    a code nobody said, was stored and recalled as the user's word (and ``"source": true`` read as message 1).
    The sentence must state its value, and every exact value it holds must be said in its message."""
    server = ScriptedServer()
    try:
        from fullrecall.summarizers.chat_models.openai import OpenAIChatModel

        answer = [
            {"source": 0, "attribute": "city", "value": "Lyon", "text": "The user lives in Paris."},
            {"source": 0, "attribute": "door code", "value": "4417", "text": "The door code is 4417, formerly 9921."},
            {"source": True, "attribute": None, "value": "tea", "text": "The user likes tea."},
            {"source": 0, "attribute": "door code", "value": "4417", "text": "The user's door code is 4417."},
            {"source": 0, "attribute": "city", "value": "Lyon", "text": "The user moved to Lyon."},
        ]
        server.script(completion(json.dumps(answer)))
        model = OpenAIChatModel("scripted", base_url=server.base_url, api_key="k", max_retries=0)
        memory = FactMemory(embedder=default_embedder, user_id="u", chat_model=model)
        learned = memory.learn([{"role": "user", "content": "I moved to Lyon; my door code is 4417."},
                                {"role": "user", "content": "I like tea."}])
        assert [f.text for f in learned] == ["The user's door code is 4417.", "The user moved to Lyon."]
    finally:
        server.close()


def test_an_llm_answer_listing_a_fact_twice_or_with_half_a_surrogate_pair_keeps_each_fact_once(default_embedder):
    """A fact the answer listed five times counted five mentions of one statement; an attribute holding half a
    surrogate pair (JSON escapes one: "\\ud800") raised MemoryInputError, and the answer's other facts were lost.
    Each fact is kept once a statement, the attribute with U+FFFD for the lone half, as the answer's text is."""
    server = ScriptedServer()
    try:
        from fullrecall.summarizers.chat_models.openai import OpenAIChatModel

        jazz = {"source": 0, "attribute": None, "value": "jazz", "text": "The user likes jazz."}
        answer = json.dumps([jazz] * 5 + [{"source": 0, "attribute": "ci\ud800ty", "value": "Lyon",
                                           "text": "The user lives in Lyon."}, {**jazz, "text": "the user likes JAZZ"}])
        server.script(completion(answer))
        model = OpenAIChatModel("scripted", base_url=server.base_url, api_key="k", max_retries=0)
        memory = FactMemory(embedder=default_embedder, user_id="u", chat_model=model)
        learned = memory.learn([{"role": "user", "content": "I live in Lyon and I like jazz."}])
        assert sorted((f.text, f.attribute, f.mentions) for f in learned) == [
            ("The user likes jazz.", None, 1), ("The user lives in Lyon.", "ci\ufffdty", 1)]
    finally:
        server.close()


def test_a_statement_of_an_attribute_is_no_repeat_of_a_fact_of_another_or_of_none(store_url, default_embedder):
    """"My  city is Lyon" (two spaces) matched no rule and was kept without attribute; then "My city is Lyon",
    even with city given outright, was taken for a repeat of it, and Paris stayed the current city. Likewise the
    same words said of another attribute. Runs of spaces count as one, and the same words repeat only a fact of
    the same attribute."""
    clock = Clock()
    store = open_store(store_url)
    try:
        mem = FactMemory(store, user_id="u", embedder=default_embedder, clock=clock)
        mem.remember("My city is Paris")
        clock.now += 10
        assert (mem.remember("My  city is Lyon").attribute, mem.current(attribute="city")[0].value) == ("city", "Lyon")
        hometown = mem.remember("My town is Lyon", attribute="hometown", value="Lyon")
        clock.now += 10
        town = mem.remember("My town is Lyon")  # the rule's attribute: town, not hometown
        assert (town.attribute, town.mentions) == ("town", 1) and town.id != hometown.id
        assert [f.value for f in mem.current(attribute="hometown")] == ["Lyon"]
    finally:
        store.close()


@pytest.mark.parametrize("said", ["My locker code is what?", "Sorry, my locker code is what again?",
                                  "My locker code is 1234, right?"])
def test_a_question_states_no_fact(facts, said):
    """The rules took a question for a statement: "My locker code is what?" made "what" the current code."""
    facts.learn([{"role": "user", "content": "My locker code is 4711."}])
    assert extract_facts(said) == []
    facts.learn([{"role": "user", "content": said}])
    assert [(f.value, f.valid_to) for f in facts.history(attribute="locker code")] == [("4711", None)]


def test_racing_statements_of_one_attribute_leave_one_value_at_any_time(store_url, default_embedder):
    """Four writers stating different cities at once left one open fact, but earlier ones overlapping: each writer
    closed what it saw where the newest starts, so ``current(at=t)`` gave several cities for one moment."""
    store = open_store(store_url)
    try:
        mem = FactMemory(store, user_id="u", embedder=default_embedder)
        mem.remember("My city is Warmup")

        def say(i: int) -> None:
            for j in range(5):
                mem.remember(f"My city is T{i}x{j}")

        threads = [threading.Thread(target=say, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        fresh = FactMemory(store, user_id="u", embedder=default_embedder)
        history = fresh.history(attribute="city")
        assert len(history) == 21 and sum(f.valid_to is None for f in history) == 1
        for f in history:
            assert len(fresh.current(attribute="city", at=f.valid_from)) <= 1, f
    finally:
        store.close()

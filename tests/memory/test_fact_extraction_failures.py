"""A fact extraction that fails (the chat model down, an answer that is no JSON array of facts, one cut short) keeps
every word, follows the memory's ``errors`` setting as the memory's other failures do, and is counted in ``stats()``;
from an answer cut short, the facts complete before the cut are kept.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from fullrecall import FactExtractionError, MemoryAgent, PersistentMemory
from fullrecall.errors import InvalidInput
from fullrecall.memory.facts import FactMemory

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from summarizer_peers import Reply, ScriptedServer, completion, scripted_model  # noqa: E402

FACTS = [{"source": 0, "attribute": "city", "value": "Lyon", "text": "The user lives in Lyon."},
         {"source": 0, "attribute": None, "value": "jazz", "text": "The user likes jazz."},
         {"source": 0, "attribute": "employer", "value": "ACME", "text": "The user works at ACME."}]
SAID = "I live in Lyon, I like jazz and I work at ACME."
CUT = json.dumps(FACTS)[:-30]  # the third fact cut in its middle, as at max_tokens

FAILURES = {
    "provider down": (Reply(status=500, body=b'{"error": "down"}'), "answered HTTP 500"),
    "bad JSON": (completion('[{"source": 0, "value": "Lyon" "text": "x"}]'), "no JSON array of facts"),
    "prose": (completion("The user seems to live in Lyon."), "no JSON array of facts"),
    "cut short": (completion(CUT, finish_reason="length"), r"cut short \(finish_reason 'length'\) after 2 facts"),
}


@pytest.mark.parametrize("errors", ["log", "raise", "silent"])
@pytest.mark.parametrize("failure", FAILURES, ids=list(FAILURES))
def test_an_extraction_failure_keeps_the_words_follows_errors_and_is_counted(server, default_embedder, caplog,
                                                                            failure, errors):
    reply, says = FAILURES[failure]
    server.script(reply, completion("[]"))
    mem = PersistentMemory("u", store="sqlite:///:memory:", embedder=default_embedder, chat_model=scripted_model(server),
                           errors=errors)
    caplog.set_level(logging.WARNING, logger="fullrecall.memory")
    turn = [{"role": "user", "content": SAID}]
    if errors == "raise":
        with pytest.raises(FactExtractionError, match=f"recorded 1 message but could not extract facts from it: .*{says}") \
                as caught:
            mem.record_sync(turn)
        ids = caught.value.ids
    else:
        ids = mem.record_sync(turn)
    assert [m.id for m in mem.messages()] == ids and len(ids) == 1  # every word kept, whatever errors says
    warned = [r.getMessage() for r in caplog.records if "could not extract facts" in r.getMessage()]
    assert len(warned) == (1 if errors == "log" else 0)
    kept = sorted(f.text for f in mem.facts.history())
    assert kept == (["The user likes jazz.", "The user lives in Lyon."] if failure == "cut short" else [])
    assert mem.stats()["extraction_failures"] == 1
    mem.record_sync([{"role": "user", "content": "Nothing to note."}])  # answered []: no facts, no failure
    assert mem.stats()["extraction_failures"] == 1


def test_an_unknown_errors_mode_is_refused_naming_it(default_embedder):
    with pytest.raises(InvalidInput, match=r"PersistentMemory: 'errors' must be one of \('log', 'raise', 'silent'\), "
                                           r"got 'loud'"):
        PersistentMemory("u", store="sqlite:///:memory:", embedder=default_embedder, errors="loud")


def test_fact_memory_learn_keeps_the_facts_before_a_cut_and_raises_for_the_rest(server, default_embedder):
    server.script(completion("Sure:\n```json\n" + CUT, finish_reason="length"),
                  completion(json.dumps(FACTS), finish_reason="length"))
    facts = FactMemory(embedder=default_embedder, user_id="u", chat_model=scripted_model(server))
    with pytest.raises(FactExtractionError, match="after 2 facts") as caught:
        facts.learn([{"role": "user", "content": SAID}])
    assert [f.text for f in caught.value.facts] == ["The user lives in Lyon.", "The user likes jazz."]
    assert sorted(f.text for f in facts.current()) == ["The user likes jazz.", "The user lives in Lyon."]
    # an answer whole despite finish_reason "length" is no failure
    assert [f.text for f in facts.learn([{"role": "user", "content": SAID}])] == [f["text"] for f in FACTS]


def test_fact_memory_candidates_carries_the_facts_before_a_cut_as_learn_does(server, default_embedder):
    """candidates() raised for a cut answer with nothing to show (learn() kept the facts complete before the
    cut): its FactExtractionError now carries them in ``facts``, found and not stored, ready for keep()."""
    server.script(completion(CUT, finish_reason="length"))
    facts = FactMemory(embedder=default_embedder, user_id="u", chat_model=scripted_model(server))
    source = {"session_id": "s", "id": "m1"}
    with pytest.raises(FactExtractionError, match="after 2 facts") as caught:
        facts.candidates([{"role": "user", "content": SAID}], [source])
    found = caught.value.facts
    assert [(c.text, c.attribute, c.value, c.sources, c.origin) for c in found] == [
        ("The user lives in Lyon.", "city", "Lyon", [source], "llm"), ("The user likes jazz.", None, "jazz", [source], "llm")]
    assert facts.current() == []  # found, not stored
    kept = facts.keep(found, facts.book.embed([c.text for c in found]))
    assert sorted(f.text for f in facts.current()) == sorted(f.text for f in kept) == [
        "The user likes jazz.", "The user lives in Lyon."]


def chat(agent: MemoryAgent, text: str) -> list[str]:
    async def go() -> list[str]:
        return [chunk async for chunk in agent.chat(text)]

    return asyncio.run(go())


@pytest.mark.parametrize("errors", ["log", "raise", "silent"])
def test_a_memory_agents_extraction_failure_follows_its_errors_and_is_counted(server, default_embedder, caplog,
                                                                            errors):
    """The memory the agent makes lets its extraction failures reach the agent, which counts and handles them as
    any failing memory step: raised, logged or passed over (it was always logged, inside the memory)."""
    answers = ScriptedServer()
    try:
        answers.script(completion("Noted."))
        server.script(Reply(status=500, body=b'{"error": "down"}'))
        agent = MemoryAgent(scripted_model(answers), store="sqlite:///:memory:", embedder=default_embedder,
                            memory_model=scripted_model(server), errors=errors)
        caplog.set_level(logging.WARNING, logger="fullrecall.memory")
        if errors == "raise":
            with pytest.raises(FactExtractionError, match="could not extract facts"):
                chat(agent, SAID)
        else:
            assert chat(agent, SAID) == ["Noted."]
    finally:
        answers.close()
    stats: dict[str, Any] = agent.stats()
    assert stats["failures"] == 1 and stats["extraction_failures"] == 1 and stats["messages"] == 2
    assert len(agent.memory.messages()) == 2  # the turn's words are kept
    warned = [r for r in caplog.records if "could not extract facts" in r.getMessage()]
    assert len(warned) == (1 if errors == "log" else 0)

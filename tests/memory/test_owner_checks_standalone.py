"""A user, agent or session id that shows nothing is refused by every public memory class made on its own (not
through PersistentMemory), in PersistentMemory's words and error, before a store is opened; and by
PersistentMemory.import_jsonl for a session named inside the file, naming the line, before anything is written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fullrecall import MemoryAgent, MemoryInputError
from fullrecall.memory import FactMemory, PersistentMemory, ProceduralMemory
from fullrecall.stores import open_store
from fullrecall.stores.base import Scope

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from summarizer_peers import scripted_model  # noqa: E402

BLANK = ["  ", "\u200b", "\ufeff", "\u200e"]


def owner_words(field: str, value: str) -> str:
    return f"'{field}' {value!r} is blank (whitespace or invisible characters only): name an owner, or leave it out " \
           "for none"


MAKERS = {  # each memory made on its own, from a store URL, for an owner
    "facts": lambda url, server, **owner: FactMemory(url, **owner),
    "procedural": lambda url, server, **owner: ProceduralMemory(url, **owner),
    "agent": lambda url, server, **owner: MemoryAgent(scripted_model(server), store=url, **owner),
}


@pytest.mark.parametrize("value", BLANK)
@pytest.mark.parametrize("field", ["user_id", "agent_id"])
@pytest.mark.parametrize("kind", MAKERS)
def test_a_memory_made_on_its_own_refuses_a_blank_owner_before_its_store_is_opened(tmp_path, server, kind, field,
                                                                                  value):
    with pytest.raises(MemoryInputError) as refused:
        MAKERS[kind](f"sqlite:///{tmp_path / 'm.db'}", server, **{field: value})
    assert str(refused.value) == owner_words(field, value)
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize("value", BLANK)
def test_the_memory_agent_refuses_a_blank_session_before_its_store_is_opened(tmp_path, server, value):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with pytest.raises(MemoryInputError, match=r"^MemoryAgent: 'session_id' .* is blank"):
        MemoryAgent(scripted_model(server), store=url, session_id=value)
    assert not (tmp_path / "m.db").exists()


def _export_line(session: str, i: int) -> str:
    return json.dumps({"kind": "message", "session_id": session, "id": f"m{i}", "role": "user", "text": f"t{i}",
                       "data": {"role": "user", "content": f"t{i}"}, "created_at": 1.7e9, "archived_at": 1.7e9,
                       "metadata": {}})


@pytest.mark.parametrize("value", BLANK)
def test_import_jsonl_refuses_a_blank_session_in_the_file_and_writes_nothing(store_url, default_embedder, tmp_path,
                                                                             value):
    path = tmp_path / "export.jsonl"
    path.write_text("\n".join([_export_line("good", 0), _export_line(value, 1)]) + "\n", encoding="utf-8")
    store = open_store(store_url)
    try:
        memory = PersistentMemory("ann", "bot", store=store, embedder=default_embedder, extract_facts=False)
        with pytest.raises(MemoryInputError) as refused:
            memory.import_jsonl(path)
        assert str(refused.value) == f"line 2: 'session_id' {value!r} is blank (whitespace or invisible characters " \
                                     "only): name a conversation"
        assert store.stats(Scope(user_id="ann", agent_id="bot")).get("message_count") == 0
        assert memory.sessions() == []
    finally:
        store.close()

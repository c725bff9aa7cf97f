"""An owner or conversation named inside a jsonl file that shows nothing (whitespace, zero-width characters, a byte
order mark, a direction mark) is refused as every entry point refuses it, naming the line and field, on every
backend, before anything of the file is written.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from fullrecall.errors import MessageFormatError
from fullrecall.stores import open_store
from fullrecall.stores.base import ANY, Scope
from fullrecall.transfer import jsonl

HEADER = json.dumps({"format": "fullrecall", "version": 2})
BLANK = ["  ", "\u200b", "\ufeff", "\u200e"]


def message(i: int, **change: Any) -> str:
    fields = {"type": "message", "conversation_id": "c", "user_id": "ann", "agent_id": "bot", "id": f"m{i}",
              "position": i, "role": "user", "kind": "message", "created_at": 1.7e9, "archived_at": 1.7e9,
              "metadata": {}, "text": f"message {i}", "message": {"role": "user", "content": f"message {i}"}}
    return json.dumps({**fields, **change})


def session(**change: Any) -> str:
    fields = {"type": "session", "user_id": "ann", "agent_id": "bot", "id": "c", "text": "c", "created_at": 1.7e9,
              "updated_at": 1.7e9, "data": {}}
    return json.dumps({**fields, **change})


def refused(store_url: str, bad: str) -> str:
    """What the import of a good conversation, then ``bad`` (line 3), says; nothing of the file is written."""
    store = open_store(store_url)
    try:
        with pytest.raises(MessageFormatError) as error:
            jsonl.import_jsonl(store, Scope(), io.StringIO("\n".join([HEADER, message(0), bad])))
        everyone = Scope(user_id=ANY, agent_id=ANY)
        assert not store.stats(everyone).get("message_count")
        assert store.get_records(everyone, jsonl.SESSIONS) == []
        return str(error.value)
    finally:
        store.close()


@pytest.mark.parametrize("value", BLANK)
@pytest.mark.parametrize("field", ["user_id", "agent_id"])
@pytest.mark.parametrize("line", [message, session], ids=["message", "record"])
def test_a_blank_owner_in_the_file_is_refused_naming_its_line(store_url, line, field, value):
    assert refused(store_url, line(1, **{field: value}) if line is message else line(**{field: value})) == \
        f"line 3: '{field}' {value!r} is blank (whitespace or invisible characters only): name an owner, or leave " \
        "it out for none"


@pytest.mark.parametrize("value", BLANK)
def test_a_session_record_naming_a_blank_conversation_is_refused(store_url, value):
    assert refused(store_url, session(id=value, text="c")) == \
        f"line 3: 'id' {value!r} is blank (whitespace or invisible characters only): name a conversation"


@pytest.mark.parametrize("value", BLANK)
def test_an_openai_transcript_naming_a_blank_conversation_is_refused(store_url, value):
    from fullrecall.transfer import openai

    records = [{"conversation_id": "good", "messages": [{"role": "user", "content": "hi"}]},
               {"conversation_id": value, "messages": [{"role": "user", "content": "hello"}]}]
    store = open_store(store_url)
    try:
        with pytest.raises(MessageFormatError) as error:
            openai.import_openai(store, Scope(user_id="ann"), io.StringIO("\n".join(map(json.dumps, records))))
        assert str(error.value) == f"'session_id' {value!r} is blank (whitespace or invisible characters only): " \
                                   "name a conversation"
        assert not store.stats(Scope(user_id="ann")).get("message_count")
    finally:
        store.close()


@pytest.mark.parametrize("value", BLANK)
@pytest.mark.parametrize("field", ["session_id", "agent_id"])
def test_a_strands_session_naming_a_blank_session_or_agent_is_refused(store_url, tmp_path, field, value):
    from fullrecall.transfer import strands

    for name in ("good", "bad"):
        folder = tmp_path / f"session_{name}"
        (folder / "agents" / "agent_a" / "messages").mkdir(parents=True)
        ids = {"session_id": name, "agent_id": "a"} | ({field: value} if name == "bad" else {})
        (folder / "session.json").write_text(json.dumps({"session_id": ids["session_id"], "session_type": "AGENT"}))
        (folder / "agents" / "agent_a" / "agent.json").write_text(json.dumps({"agent_id": ids["agent_id"]}))
        (folder / "agents" / "agent_a" / "messages" / "message_0.json").write_text(json.dumps(
            {"message": {"role": "user", "content": [{"text": "hi"}]}, "message_id": 0}))
    store = open_store(store_url)
    try:
        with pytest.raises(MessageFormatError) as error:
            strands.import_strands(store, Scope(user_id="ann"), tmp_path)
        said = f"'session_id' {value!r}" if field == "session_id" else f"conversation 'bad': 'agent_id' {value!r}"
        assert str(error.value).startswith(f"{said} is blank (whitespace or invisible characters only): ")
        assert not store.stats(Scope(user_id="ann", agent_id=ANY)).get("message_count")
    finally:
        store.close()

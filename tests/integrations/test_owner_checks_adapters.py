"""The LangGraph store and window and the MassGen memories refuse a user, agent or session id that shows nothing in
the words every entry point uses, before a store is opened (a URL given: no file is made) or anything is written.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage

from fullrecall.errors import InvalidInput
from fullrecall.integrations.langgraph_store import FullrecallStore
from fullrecall.integrations.langgraph_window import FullrecallWindow
from fullrecall.massgen import memories
from fullrecall.stores import Scope, open_store

BLANK = ["  ", "\u200b", "\ufeff", "\u200e"]


def owner_words(field: str, value: str) -> str:
    return f"'{field}' {value!r} is blank (whitespace or invisible characters only): name an owner, or leave it out " \
           "for none"


def session_words(where: str, value: str) -> str:
    return f"{where} {value!r} is blank (whitespace or invisible characters only): name a conversation"


@pytest.mark.parametrize("value", BLANK)
@pytest.mark.parametrize("field", ["user_id", "agent_id"])
@pytest.mark.parametrize("make", [FullrecallStore, FullrecallWindow, memories], ids=["store", "window", "massgen"])
def test_a_blank_owner_is_refused_before_the_store_is_opened(tmp_path, make, field, value):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with pytest.raises(InvalidInput) as refused:
        make(url, **{field: value})
    assert str(refused.value) == owner_words(field, value)
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize("value", BLANK)
def test_massgen_memories_refuse_a_blank_session_before_the_store_is_opened(tmp_path, value):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with pytest.raises(InvalidInput) as refused:
        memories(url, session_id=value)
    assert str(refused.value) == session_words("memories: 'session_id'", value)
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize("value", BLANK)
@pytest.mark.parametrize("field", ["user_id", "thread_id"])
def test_the_window_refuses_a_blank_user_or_thread_of_a_run_and_writes_nothing(store_url, field, value):
    store = open_store(store_url)
    try:
        window = FullrecallWindow(store)
        config = {"configurable": {"user_id": "ann", "thread_id": "t", field: value}}
        with pytest.raises(InvalidInput) as refused:
            window.view([HumanMessage("hello", id="h1")], config)
        assert str(refused.value) == (owner_words(field, value) if field == "user_id"
                                      else session_words("'thread_id'", value))
        assert not store.stats(Scope(user_id="ann")).get("message_count")
        assert not store.stats(Scope(user_id=value)).get("message_count")
    finally:
        store.close()

"""The semantic manager (core, and Strands' over it) refuses a user, agent or session id that shows nothing in the
words every entry point uses, before its store is opened (a URL given: no file is made).
"""

from __future__ import annotations

import pytest

from fullrecall.archive import SemanticSummarizingConversationManager
from fullrecall.errors import InvalidInput

BLANK = ["  ", "\u200b", "\ufeff", "\u200e"]


def managers() -> list[type]:
    found: list[type] = [SemanticSummarizingConversationManager]
    try:
        from fullrecall.strands import SemanticSummarizingConversationManager as StrandsManager
    except ImportError:  # the strands extra is not installed
        return found
    return [*found, StrandsManager]


@pytest.mark.parametrize("value", BLANK)
@pytest.mark.parametrize("field", ["user_id", "agent_id", "session_id"])
@pytest.mark.parametrize("make", managers(), ids=lambda m: m.__module__.split(".")[1])
def test_a_blank_owner_or_session_is_refused_before_the_store_is_opened(tmp_path, make, field, value):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with pytest.raises(InvalidInput) as refused:
        make(store=url, **{field: value})
    where = "SemanticSummarizingConversationManager: 'session_id'" if field == "session_id" else f"'{field}'"
    what = "name a conversation" if field == "session_id" else "name an owner, or leave it out for none"
    assert str(refused.value) == f"{where} {value!r} is blank (whitespace or invisible characters only): {what}"
    assert not (tmp_path / "m.db").exists()

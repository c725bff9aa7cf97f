"""Which model ``fullrecall chat`` talks to, and what it says when none is configured."""

from __future__ import annotations

import argparse

import pytest

from fullrecall.cli.chat import ScriptedModel, chat_model
from fullrecall.summarizers.chat_models import ChatModelError, chat_model_from_env

VARIABLES = ("FULLRECALL_LLM_MODEL", "OPENAI_MODEL", "FULLRECALL_BEDROCK_MODEL_ID", "FULLRECALL_LLM_PROVIDER")


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"model": None, "provider": None, "base_url": None, "api_key": None, "region": None, **kw})


@pytest.fixture
def no_llm(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_without_a_model_the_error_names_the_variables_and_the_offline_model(no_llm):
    with pytest.raises(ChatModelError) as caught:
        chat_model(_args())
    text = str(caught.value)
    assert "FULLRECALL_LLM_MODEL" in text and "FULLRECALL_BEDROCK_MODEL_ID" in text and "--model scripted" in text
    assert "summarization" not in text  # the chat needs a model to answer, not to summarize


def test_the_environment_error_does_not_say_what_the_model_is_for(no_llm):
    with pytest.raises(ChatModelError, match="^no LLM configured: set FULLRECALL_LLM_MODEL"):
        chat_model_from_env()


def test_scripted_needs_nothing(no_llm):
    assert isinstance(chat_model(_args(model="scripted")), ScriptedModel)

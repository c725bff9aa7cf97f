"""Fixtures for the memory tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from summarizer_peers import ScriptedServer  # noqa: E402


@pytest.fixture(scope="module")
def server():
    """A scripted OpenAI-compatible chat server (``summarizer_peers``), one a test module."""
    s = ScriptedServer()
    yield s
    s.close()

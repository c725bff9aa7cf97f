"""The store URL ``fullrecall serve`` prints: the one it was given, with only a password hidden."""

from __future__ import annotations

import pytest

from fullrecall.service.cli import _redact


@pytest.mark.parametrize("url", ["sqlite:///memory.db", "sqlite:////data/fullrecall.db", "sqlite:///:memory:",
                                 "redis://localhost:6379/0", "postgresql://fullrecall@db:5432/agents"])
def test_a_url_without_password_is_printed_as_given(url):
    assert _redact(url) == url


def test_a_password_is_hidden():
    assert _redact("postgresql://ann:s3cret@db:5432/agents") == "postgresql://ann:***@db:5432/agents"

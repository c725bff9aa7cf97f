"""Stored JSON read back: :func:`fullrecall._json.loads` is ``json.loads`` with bytes restored, whatever the text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fullrecall._json import dumps, loads

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(values)
def test_what_dumps_writes_loads_reads_back_as_json_loads_does(value):
    text = dumps(value)
    assert loads(text) == json.loads(text) == value
    assert loads(text.encode()) == value


@given(st.text(alphabet=' \t\n{}[]":,0123456789.eE+-truefalsn\\ux', max_size=30))
def test_any_text_reads_as_json_loads_reads_it_or_fails_as_it_does(text):
    try:
        want = json.loads(text)
    except ValueError as exc:
        with pytest.raises(type(exc)):
            loads(text)
        return
    got = loads(text)
    assert got == want or (got != got and want != want)  # NaN is not equal to itself


def test_bytes_come_back_and_text_around_the_json_is_allowed_as_json_loads_allows_it():
    assert loads(dumps({"image": b"\x00\xff"})) == {"image": b"\x00\xff"}
    assert loads(' {"a": [1, 2]}\n') == {"a": [1, 2]}
    assert loads("NaN") != loads("NaN")

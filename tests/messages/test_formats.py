"""The message model: shapes detected, parsed losslessly, bad input named precisely."""

import json
import os
import subprocess
import sys

import pytest

from fullrecall import MessageFormatError
from fullrecall.messages import detect_shape, parse_messages, render_message, render_messages
from fullrecall.messages.model import OpaqueBlock, TextBlock, ToolResultBlock, ToolUseBlock

CONVERSE = [
    {"role": "user", "content": [{"text": "weather?"}, {"image": {"format": "png", "source": {"bytes": "..."}}}],
     "metadata": {"usage": {"inputTokens": 3}}, "tracking_id": "t-1"},
    {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tu1", "name": "weather", "input": {"city": "Oslo"}}}]},
    {"role": "user", "content": [{"toolResult": {"toolUseId": "tu1", "status": "error", "content": [{"text": "down"}, {"json": {"a": 1}}]}}]},
]
OPENAI = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:..."}}], "name": "ann"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
]
ANTHROPIC = [
    {"role": "user", "content": "hello"},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                                      {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {"e": "1+1"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "2", "is_error": False}]},
]


@pytest.mark.parametrize("messages,shape", [(CONVERSE, "converse"), (OPENAI, "openai"), (ANTHROPIC, "anthropic")])
def test_detect_parse_render_round_trip(messages, shape):
    assert detect_shape(messages) == shape
    detected, parsed = parse_messages(messages)
    assert detected == shape
    assert render_messages(parsed, shape) == messages
    for msg in parsed:
        msg.changed = True  # force a fresh rendering: still the same dicts
    assert json.loads(json.dumps(render_messages(parsed, shape))) == messages


def test_typed_view_of_each_shape():
    _, conv = parse_messages(CONVERSE)
    assert isinstance(conv[0].content[1], OpaqueBlock) and conv[0].content[1].kind == "image"
    assert conv[1].content[0] == ToolUseBlock("tu1", "weather", {"city": "Oslo"})
    result = conv[2].content[0]
    assert isinstance(result, ToolResultBlock) and result.status == "error" and result.content[0] == TextBlock("down")
    assert conv[0].metadata == {"usage": {"inputTokens": 3}}
    _, oa = parse_messages(OPENAI)
    assert oa[2].tool_use_ids == ["c1"] and oa[2].content[0].input == {"x": 1}
    assert oa[3].role == "tool" and oa[3].tool_result_ids == ["c1"]
    _, an = parse_messages(ANTHROPIC)
    assert an[1].tool_use_ids == ["toolu_1"] and an[2].tool_result_ids == ["toolu_1"]
    assert "[tool call calc" in an[1].text and "2" in an[2].text


def test_cross_shape_conversion_keeps_tool_pairs():
    _, conv = parse_messages(CONVERSE)
    as_openai = render_messages(conv, "openai")
    _, back = parse_messages(as_openai)
    assert back[1].tool_use_ids == ["tu1"] and back[2].tool_result_ids == ["tu1"]
    as_anthropic = render_messages(conv, "anthropic")
    assert as_anthropic[1]["content"][0] == {"type": "tool_use", "id": "tu1", "name": "weather", "input": {"city": "Oslo"}}


def test_broken_tool_arguments_are_kept_as_given():
    msg = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}
    _, (parsed,) = parse_messages([msg])
    assert parsed.content[0].input == "{oops"
    parsed.changed = True
    assert render_message(parsed, "openai") == msg


@pytest.mark.parametrize("messages,needle", [
    ([{"content": "x"}], "message 0: 'role' is missing"),
    ([{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}], "message 1: 'role' must be one of"),
    ([{"role": "user", "content": [{"text": 5}]}], "message 0: 'content[0].text' must be a string"),
    ([{"role": "user", "content": [{"text": b"bytes"}]}], "must be str, got bytes"),
    ([{"role": "user", "content": "bad \udcff surrogate"}], "not valid UTF-8"),
    ([{"role": "assistant", "content": [{"toolUse": {"name": "f"}}]}], "message 0: 'content[0].toolUse.toolUseId' is missing"),
    ([{"role": "tool", "content": "x"}], "message 0: 'message.tool_call_id' is missing"),
    ([{"role": "user", "content": [{"text": "a"}]}, {"role": "tool", "tool_call_id": "c", "content": "x"}], "message 1: its shape (openai) differs"),
    (["not a dict"], "message 0: expected a dict"),
    ([{"role": "user", "content": 7}], "message 0: 'content' must be"),
    ([{"role": ["user"], "content": "x"}], "message 0: 'role' must be a string, got list"),
    ([{"role": {"r": 1}, "content": "x"}], "message 0: 'role' must be a string, got dict"),
])
def test_malformed_messages_name_index_and_field(messages, needle):
    with pytest.raises(MessageFormatError) as info:
        parse_messages(messages)
    assert needle in str(info.value)
    assert isinstance(info.value, ValueError)


def test_huge_message_is_refused_with_its_size(monkeypatch):
    import fullrecall.messages.formats as formats

    monkeypatch.setattr(formats, "MAX_MESSAGE_BYTES", 1000)
    with pytest.raises(MessageFormatError, match=r"message 0: 'content' is 2,000 bytes, over the 1,000-byte limit"):
        parse_messages([{"role": "user", "content": "x" * 2000}])


IMAGE = {"role": "user", "content": [{"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}}, {"text": "look"}]}


@pytest.mark.parametrize("message,error", [
    ({"role": "user", "content": "x", "metadata": {"p": float("nan")}}, "message 0: 'metadata.p' is nan; JSON has no"),
    ({"role": "user", "content": "x", "tags": ("a", "b")}, "message 0: 'tags' is a tuple; use a list"),
    ({"role": "user", "content": "x", "blob": bytearray(b"x")}, "message 0: 'blob' is a bytearray, not a JSON value"),
    ({"role": "user", "content": "x", "meta": {7: "k"}}, "message 0: 'meta' has a key 7 of type int; JSON keys are"),
])
def test_storable_messages_are_json_values(message, error):
    parse_messages([message])  # a message in memory may hold anything (an agent's image bytes)
    with pytest.raises(MessageFormatError) as info:
        parse_messages([message], storable=True)
    assert str(info.value).startswith(error)


def test_image_bytes_are_storable():
    """Bytes (a tool's image, as Strands gives it) are stored base64-tagged and come back as bytes."""
    shape, (msg,) = parse_messages([IMAGE], storable=True)
    assert shape == "converse" and msg.raw == IMAGE


def test_storable_message_size_counts_the_whole_message(monkeypatch):
    import fullrecall.messages.formats as formats

    monkeypatch.setattr(formats, "MAX_MESSAGE_BYTES", 1000)
    parse_messages([{"role": "user", "content": "x" * 900, "extra": "y" * 900}])
    with pytest.raises(MessageFormatError, match=r"^message 0 is 1,8\d\d bytes as JSON, over the 1,000-byte limit"):
        parse_messages([{"role": "user", "content": "x" * 900, "extra": "y" * 900}], storable=True)


def test_the_messages_layer_does_not_import_the_stores():
    """Messages are below stores: parsing and checking a message loads no store module."""
    code = ("import sys, fullrecall.messages.formats as f; f.parse_messages([{'role': 'user', 'content': 'hi'}], "
            "storable=True); print(sorted(m for m in sys.modules if m.startswith('fullrecall.stores')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "[]"


MASSGEN_MIXED = [  # chat completions with Claude's blocks, then the Responses API's items (as MassGen stores them)
    {"role": "system", "content": "be brief"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {"e": "1+1"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "2"}]},
    {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\": \"Oslo\"}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "rain"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It rains."}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed"},
]


def test_massgen_mixed_shapes_are_openai_with_tool_pairs_and_text():
    shape, parsed = parse_messages(MASSGEN_MIXED)
    assert shape == "openai" and render_messages(parsed, shape) == MASSGEN_MIXED
    assert parsed[1].tool_use_ids == ["toolu_1"] and parsed[2].tool_result_ids == ["toolu_1"]
    assert parsed[3].tool_use_ids == ["call_1"] and parsed[4].tool_result_ids == ["call_1"] and parsed[4].role == "tool"
    assert "rain" in parsed[4].text and parsed[5].text == "It rains." and parsed[6].text == "[web_search_call]"
    for msg in parsed:
        msg.changed = True  # rendered afresh: still the same dicts
    assert render_messages(parsed, shape) == MASSGEN_MIXED


def test_arguments_escaping_half_an_emoji_read_as_valid_text_and_render_unchanged():
    """``"\\ud83d"`` in a tool call's JSON arguments decodes to a lone surrogate: the text search, summaries and token
    counts read has U+FFFD there (a split pair joins again), and the message renders back as it came."""
    from fullrecall.tokens import EstimatingTokenCounter

    split = '{"text": "great \\ud83d", "pair": "\\ud83d\\ude00"}'
    raw = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "post", "arguments": split}}]},
        {"type": "function_call", "call_id": "c2", "name": "post", "arguments": split}]
    _, messages = parse_messages(raw)
    for message, given in zip(messages, raw):
        assert "great \ufffd" in message.text and "\U0001f600" in message.text
        message.text.encode("utf-8")
        assert EstimatingTokenCounter().count_message(message) > 0
        assert render_message(message, "openai") is given

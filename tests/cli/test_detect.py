"""``fullrecall import`` guesses a file's format from its content, however the JSON is laid out."""

from __future__ import annotations

import json

import pytest

from fullrecall.cli.importing import detect

SAMPLE = {"sample_id": "conv-1", "conversation": {"speaker_a": "Ann", "speaker_b": "Bob",
                                                  "session_1_date_time": "1:56 pm on 8 May, 2023",
                                                  "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "Hi"}]}}
CHAT = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


@pytest.mark.parametrize("indent", [None, 1])  # one line, or spread over lines as `fullrecall export --format locomo` writes it
def test_locomo_samples_are_locomo_on_one_line_or_many(tmp_path, indent):
    path = tmp_path / "samples.json"
    path.write_text(json.dumps([SAMPLE], indent=indent), encoding="utf-8")
    assert detect(str(path)) == "locomo"


@pytest.mark.parametrize("indent", [None, 2])
def test_chat_messages_are_openai(tmp_path, indent):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(CHAT, indent=indent), encoding="utf-8")
    assert detect(str(path)) == "openai"


def test_json_lines_are_openai_and_a_header_is_jsonl(tmp_path):
    lines = tmp_path / "chat.jsonl"
    lines.write_text("\n".join(json.dumps({"messages": CHAT}) for _ in range(2)) + "\n", encoding="utf-8")
    assert detect(str(lines)) == "openai"
    header = tmp_path / "export.jsonl"
    header.write_text(json.dumps({"format": "fullrecall", "version": 2}) + "\n", encoding="utf-8")
    assert detect(str(header)) == "jsonl"

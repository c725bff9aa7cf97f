"""`fullrecall bench summary`: the scorer's definitions and a run on a small LoCoMo-format file."""

from __future__ import annotations

import argparse
import json

from fullrecall.bench import summary as bench


def test_scorer_definitions():
    f = bench.facts("Yesterday I met Anna Lee in Paris. She has two kids and 3 cats since May 2021. I'm fine [2].")
    assert f["entities"] == {"anna lee", "paris"}  # "Yesterday", "She", "I'm" start sentences or are "I"
    assert {"yesterday", "may 2021"} <= f["dates"]
    assert f["numbers"] == {"two", "3"}
    assert f["citations"] == {"[2]"}
    assert bench.kept("anna lee", "met Anna  Lee there") and not bench.kept("3", "in 2023")


def test_run_on_a_locomo_format_file(tmp_path, capsys):
    turns = [
        {"speaker": "Ana", "dia_id": f"D1:{i}", "text": text} for i, text in enumerate([
            "Hey Ben! I just got back from Lisbon yesterday.",
            "Welcome back Ana! How was the conference at the Gulbenkian Museum?",
            "Great, I presented our paper on 12 March with 40 people in the room.",
            "Wow. Did Maria Silva come too?",
            "Yes, Maria flew in from Porto on Tuesday and we had dinner at Cervejaria Ramiro.",
            "Sounds amazing. I'm starting at Acme Robotics next month, three days a week.",
        ] * 3, start=1)
    ]
    for i, t in enumerate(turns):
        t["speaker"] = "Ana" if i % 2 == 0 else "Ben"
    data = [{"sample_id": "conv-x", "conversation": {"speaker_a": "Ana", "speaker_b": "Ben",
                                                     "session_1_date_time": "1:56 pm on 8 May, 2023",
                                                     "session_1": turns}, "qa": []}]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(data))
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    assert bench.run(parser.parse_args(["--data", str(path), "--json"])) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["spans"] == 1 and result["found"]["entities"] > 5
    assert result["compression"] > 2.0
    assert 0.0 <= result["kept_numbers_dates_entities"] <= 1.0


def test_missing_data_is_reported(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    assert bench.run(parser.parse_args(["--data", str(tmp_path / "nope.json")])) == 2
    assert "no data" in capsys.readouterr().out


def test_default_data_is_next_to_the_checkout():
    assert bench.default_data().parts[-3:] == ("shared", "bench", "locomo-dev.json")

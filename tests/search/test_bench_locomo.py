"""``fullrecall bench locomo`` on a small LoCoMo-format file written here (malformed evidence included)."""

from __future__ import annotations

import argparse
import json

from fullrecall.bench import locomo

SAMPLE = {
    "sample_id": "conv-test",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bob! I just adopted a puppy named Biscuit."},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Congrats! What breed is Biscuit?"},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "A beagle. Here is a photo.", "img_url": ["x"],
             "blip_caption": "a photo of a small dog on a couch", "query": "beagle"},
            {"speaker": "Bob", "dia_id": "D1:4", "text": "I'm training for the Boston marathon next spring."},
        ],
        "session_2_date_time": "10:00 am on 20 June, 2023",
        "session_2": [
            {"speaker": "Ann", "dia_id": "D2:1", "text": "Biscuit chewed my running shoes yesterday."},
            {"speaker": "Bob", "dia_id": "D2:2", "text": "My order number for the new shoes is 77-1234."},
            {"speaker": "Ann", "dia_id": "D2:3", "text": "I started a pottery class on Tuesdays."},
        ],
    },
    "qa": [
        {"question": "What is the name of Ann's puppy?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 4},
        {"question": "Which marathon is Bob training for?", "answer": "Boston", "evidence": ["D1:4"], "category": 4},
        {"question": "What did the dog chew?", "answer": "shoes", "evidence": ["D2:1 D1:1"], "category": 1},
        {"question": "What was Bob's order number?", "answer": "77-1234", "evidence": ["D2:2", "D9:9"], "category": 2},
        {"question": "What class did Ann start?", "answer": "pottery", "evidence": ["D2:3"], "category": 3},
        {"question": "What is Bob's cat called?", "adversarial_answer": "Tom", "evidence": ["D1:1"], "category": 5},
        {"question": "Unanswerable", "answer": "x", "evidence": [], "category": 4},
    ],
}


def _run(tmp_path, capsys, *extra):
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([SAMPLE]))
    parser = argparse.ArgumentParser()
    locomo.add_arguments(parser)
    assert locomo.run(parser.parse_args(["--data", str(data), "--json", *extra])) == 0
    return json.loads(capsys.readouterr().out)


def test_json_report(tmp_path, capsys):
    r = _run(tmp_path, capsys, "--scale", "50")
    assert r["questions"] == 5  # categories 1-4 with evidence
    assert set(r["recall"]) == set(r["recall_radius"]) == set(r["all_hit"]) == {"1", "5", "10"}
    assert r["recall"]["10"] == 1.0 and r["recall_radius"]["10"] == 1.0  # 7 turns: everything is in the top 10
    assert r["by_category"]["5"]["questions"] == 1 and "5" in r["by_category"]  # reported apart
    assert sum(c["questions"] for k, c in r["by_category"].items() if k != "5") == 5
    assert r["evidence_split"] == 1 and r["evidence_skipped"] == 1 and r["questions_without_evidence"] == 1
    assert r["index_messages_per_s"] > 0 and r["query_ms"]["p50"] > 0
    assert r["query_ms_at_scale"]["messages"] == 50
    assert r["query_ms_at_scale"]["hook_500_p50"] > 0 and r["query_ms_at_scale"]["embed_p50"] > 0
    assert r["radius_turns"]["10"] <= 7
    # what reaches the model: 7 short turns fit in every budget but the smallest
    budgets = {"250", "500", "1000", "2000"}
    for part in (r, *r["by_category"].values()):
        assert set(part["delivered_recall"]) == set(part["delivered_tokens"]) == budgets
        assert set(part["recall_at_turns"]) == {"10", "25", "50"}
        assert all(0 < part["delivered_tokens"][b] <= int(b) for b in budgets)
    assert r["delivered_recall"]["2000"] == r["recall_at_turns"]["10"] == 1.0
    assert r["packing"] == {"mode": "budget", "radius_hits": 0, "pair_questions": True, "tokenizer": "estimate",
                            "include_metadata": False}
    # "[Message N, speaker]: " labels: the same 7 turns cost more tokens
    labelled = _run(tmp_path, capsys, "--scale", "0", "--include-metadata")
    assert labelled["packing"]["include_metadata"] is True and labelled["delivered_recall"]["2000"] == 1.0
    assert labelled["delivered_tokens"]["2000"] > r["delivered_tokens"]["2000"] + 7 * 4


def test_delivered_recall_of_the_classic_hook_and_a_tight_budget(tmp_path, capsys):
    seed = _run(tmp_path, capsys, "--scale", "0", "--packing", "classic")
    assert seed["packing"]["mode"] == "classic"
    # top 3 hits with radius 2 cover at most 7 turns here: the whole conversation
    assert seed["delivered_recall"]["2000"] == 1.0 and seed["delivered_tokens"]["2000"] < 2000
    budget = _run(tmp_path, capsys, "--scale", "0", "--no-pair-questions")
    assert budget["packing"]["pair_questions"] is False
    assert budget["delivered_tokens"]["250"] <= 250


def test_delivered_recall_with_a_cross_encoder(tmp_path, capsys, tiny_cross_encoder):
    r = _run(tmp_path, capsys, "--scale", "0", "--reranker-model", str(tiny_cross_encoder))
    assert r["delivered_recall"]["2000"] == 1.0 and r["query_ms"]["p50"] > 0


def test_table_output_and_turn_text(tmp_path, capsys):
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([SAMPLE]))
    parser = argparse.ArgumentParser()
    locomo.add_arguments(parser)
    assert locomo.run(parser.parse_args(["--data", str(data), "--scale", "0", "--fusion", "rrf"])) == 0
    assert "recall" in capsys.readouterr().out
    turns = locomo.conversation_turns(SAMPLE)
    assert turns[2]["text"] == "A beagle. Here is a photo. [shares a photo: a photo of a small dog on a couch]"
    assert turns[4]["date"] == "10:00 am on 20 June, 2023"
    assert locomo.run(parser.parse_args(["--data", str(tmp_path / "missing.json")])) == 2


def test_embedding_cache_gives_the_same_figures_without_embedding_again(tmp_path, capsys, default_embedder):
    cache = tmp_path / "vectors.npz"
    first = _run(tmp_path, capsys, "--scale", "0", "--embedding-cache", str(cache))
    cached = locomo.CachedEmbedder(default_embedder, cache)
    turns = locomo.conversation_turns(SAMPLE)
    assert len(cached.vectors) == len(turns) + 6  # every indexed turn and every question with evidence, once
    calls: list[int] = []
    real_embed = default_embedder.embed
    default_embedder.embed = lambda texts: calls.append(len(texts)) or real_embed(texts)
    try:
        assert cached.embed([SAMPLE["qa"][0]["question"]]).shape == (1, default_embedder.dimension)
        assert calls == []  # served from the file
    finally:
        del default_embedder.embed
    second = _run(tmp_path, capsys, "--scale", "0", "--embedding-cache", str(cache))
    for key in ("recall", "all_hit", "recall_radius", "delivered_recall", "recall_at_turns", "by_category"):
        assert second[key] == first[key]


def test_every_session_is_loaded_whatever_its_number():
    """Sessions were loaded from 1 up to the first missing number: session_1, session_2, session_4 lost session_4."""
    conversation = {"speaker_a": "Ann", "speaker_b": "Bob",
                    "session_1_date_time": "1:56 pm on 8 May, 2023",
                    "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "first"}],
                    "session_2": [{"speaker": "Bob", "dia_id": "D2:1", "text": "second"}],
                    "session_4_date_time": "2:00 pm on 10 May, 2023",
                    "session_4": [{"speaker": "Ann", "dia_id": "D4:1", "text": "fourth"}],
                    "session_10": [{"speaker": "Bob", "dia_id": "D10:1", "text": "tenth"}],
                    "session_x": [{"speaker": "Bob", "dia_id": "Dx:1", "text": "no session"}]}
    turns = locomo.conversation_turns({"sample_id": "gaps", "conversation": conversation})
    assert [(t["session"], t["id"], t["text"], t["date"]) for t in turns] == [
        (1, "D1:1", "first", "1:56 pm on 8 May, 2023"), (2, "D2:1", "second", ""),
        (4, "D4:1", "fourth", "2:00 pm on 10 May, 2023"), (10, "D10:1", "tenth", "")]

"""``fullrecall bench persistent`` runs tiny on SQLite and PostgreSQL and calls no LLM even when one is configured."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from summarizer_peers import ScriptedServer  # noqa: E402

from fullrecall.cli.main import main  # noqa: E402


def test_bench_persistent_reports_latency_ratios_without_llm_calls(service_urls, capsys, monkeypatch):
    server = ScriptedServer()  # an LLM the environment points at: memory must not call it
    monkeypatch.setenv("FULLRECALL_LLM_MODEL", "scripted")
    monkeypatch.setenv("FULLRECALL_LLM_BASE_URL", server.base_url)
    try:
        code = main(["bench", "persistent", "--backends", "sqlite,postgres", "--users", "2", "--turns", "3",
                     "--queries", "4", "--json", "--postgres-url", service_urls["postgres"]()])
    finally:
        server.close()
    assert code == 0 and server.requests == []
    rows = json.loads(capsys.readouterr().out)
    assert [r["backend"] for r in rows] == ["sqlite", "postgres"]
    for r in rows:
        assert (r["users"], r["turns"], r["llm_calls"]) == (2, 3, 0)
        assert 0 < r["record_p50_ms"] <= r["record_p95_ms"] and 0 < r["retrieve_p50_ms"] <= r["retrieve_p95_ms"]
        # the ratio is taken before the times are rounded to the microsecond
        assert r["record_ratio"] == pytest.approx(r["record_p50_ms"] / r["embed_turn_p50_ms"], rel=0.01, abs=0.01)
        assert r["retrieve_ratio"] == pytest.approx(r["retrieve_p50_ms"] / r["embed_query_p50_ms"], rel=0.01, abs=0.01)
        # 4 questions of 2 users: each asked user's first question is timed apart from the later ones
        assert 1 <= r["first_questions"] <= 2 and r["retrieve_first_p50_ms"] > 0 and r["retrieve_again_p50_ms"] > 0
        assert r["retrieve_again_ratio"] > 0


def test_bench_persistent_prints_a_table_with_the_targets(capsys):
    assert main(["bench", "persistent", "--backends", "sqlite", "--users", "1", "--turns", "2", "--queries", "2"]) == 0
    out = capsys.readouterr().out
    assert "| sqlite | 1 x 2 |" in out and "target <= 1.2" in out and "target <= 1.5" in out
    assert "sqlite: a user's first question" in out and "(n=1), later ones" in out


def test_timed_turns_load_the_history_first_and_the_embedding_cache_keeps_its_vectors(tmp_path, capsys):
    import numpy as np

    from fullrecall.bench.persistent import _Chat

    cache = tmp_path / "emb.npz"
    args = ["bench", "persistent", "--backends", "sqlite", "--users", "2", "--turns", "5", "--timed-turns", "2",
            "--queries", "3", "--json", "--embedding-cache", str(cache)]
    assert main(args) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["turns"], row["timed_records"]) == (5, 4)  # each user's last 2 turns timed
    chat = _Chat(0)
    turns = [[chat.turn(user, n) for n in range(5)] for user in range(2)]
    loaded = {m["content"] for user in turns for turn in user[:3] for m in turn}
    with np.load(cache) as saved:  # the loaded turns' vectors, kept for the next run
        assert set(saved["texts"].tolist()) == loaded
    before = cache.stat().st_mtime_ns
    assert main(args) == 0 and cache.stat().st_mtime_ns == before  # nothing new to embed for the load


def test_bad_counts_and_backends_are_refused_naming_them(capsys):
    """A bad option is refused as every command refuses one: exit 2 and one line naming it, no traceback."""
    assert main(["bench", "persistent", "--backends", "sqlite", "--turns", "5", "--timed-turns", "6"]) == 2
    assert capsys.readouterr().err.strip() == "error: --timed-turns 6 is above --turns 5"
    assert main(["bench", "persistent", "--backends", "sqlite,mysql"]) == 2
    assert "unknown backend: ['mysql']" in capsys.readouterr().err
    for option in ("--users", "--turns", "--queries", "--limit", "--timed-turns"):
        with pytest.raises(SystemExit) as exited:  # argparse's own refusal, as for every bench's counts
            main(["bench", "persistent", option, "0"])
        assert exited.value.code == 2
        assert f"argument {option}: expected a whole number, at least 1, got '0'" in capsys.readouterr().err

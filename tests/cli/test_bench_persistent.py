"""``fullrecall bench persistent`` runs tiny on SQLite and PostgreSQL and calls no LLM even when one is configured."""

from __future__ import annotations

import json
import sys
from pathlib import Path

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
        assert abs(r["record_ratio"] - r["record_p50_ms"] / r["embed_turn_p50_ms"]) < 0.01
        assert abs(r["retrieve_ratio"] - r["retrieve_p50_ms"] / r["embed_query_p50_ms"]) < 0.01


def test_bench_persistent_prints_a_table_with_the_targets(capsys):
    assert main(["bench", "persistent", "--backends", "sqlite", "--users", "1", "--turns", "2", "--queries", "2"]) == 0
    out = capsys.readouterr().out
    assert "| sqlite | 1 x 2 |" in out and "target <= 1.2" in out and "target <= 1.5" in out

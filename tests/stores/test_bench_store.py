"""``fullrecall bench store`` runs end to end (tiny sizes) and reports every column."""

from __future__ import annotations

import json

from fullrecall.cli.main import main


def test_bench_store_sqlite_json(capsys) -> None:
    assert main(["bench", "store", "--backends", "sqlite", "--sizes", "300,600", "--queries", "3", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["layout"], r["size"]) for r in rows] == [("one", 300), ("one", 600), ("many", 300), ("many", 600)]
    for r in rows:
        assert r["append_single_per_s"] > 0 and r["hybrid_p50_ms"] > 0 and r["bytes_per_message"] > 1536
        assert r["stats_p50_ms"] > 0


def test_bench_store_markdown_table(capsys) -> None:
    assert main(["bench", "store", "--backends", "sqlite", "--layouts", "many", "--sizes", "200", "--queries", "2"]) == 0
    out = capsys.readouterr().out
    assert "| sqlite | many | 200 |" in out and "hybrid p50 ms" in out and "stats p50 ms" in out


def test_bench_store_archive_path_json(capsys) -> None:
    args = ["bench", "store", "--archive", "--archive-writes", "32", "--archive-batch", "16", "--archive-sizes", "200",
            "--queries", "3", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["write_per_s"] > 0 and report["embed_batch_per_s"] > 0 and report["no_wait_write_ms"] > 0
    assert {k: v for k, v in report["round_trips_per_write"].items() if v >= 0.5} == {"append": 1, "set_vectors": 1}
    assert [r["size"] for r in report["recall"]] == [200] and report["recall"][0]["ratio"] > 0
    assert report["recall"][0]["after_write_ratio"] > 0 and report["recall"][0]["after_write_recall_p50_ms"] > 0
    assert report["round_trips_per_recall"]["search_vectors"] == 1


def test_bench_store_archive_recall_on_a_kept_postgres(capsys, tmp_path) -> None:
    """``--archive-backend postgres --archive-keep DIR`` loads once; the next run finds the rows and only measures."""
    args = ["bench", "store", "--archive", "--archive-writes", "32", "--archive-batch", "16", "--archive-sizes", "300",
            "--queries", "3", "--json", "--archive-backend", "postgres", "--archive-keep", str(tmp_path)]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)["recall"][0]
    assert first["size"] == 300 and first["load_s"] > 0 and first["ratio"] > 0
    assert (tmp_path / "pgdata" / "PG_VERSION").exists()
    assert main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["recall"][0]["load_s"] == 0.0 and again["recall"][0]["ratio"] > 0  # reused, not loaded again
    assert again["round_trips_per_recall"]["search_vectors"] == 1 and again["round_trips_per_recall"]["ranges"] == 1

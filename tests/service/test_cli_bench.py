"""``fullrecall keys`` and ``fullrecall bench serve`` (a small configuration of the shipped load test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fullrecall.cli.main import main
from fullrecall.service.auth import KeyStore
from fullrecall.stores import open_store

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_keys_create_list_revoke(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'k.db'}"
    assert main(["keys", "create", "--tenant", "acme", "--users", "u1,u2", "--store", url]) == 0
    key = capsys.readouterr().out.strip().splitlines()[-1]  # the key alone on the last line
    store = open_store(url)
    principal = KeyStore(store).verify(key)
    assert principal.tenant == "acme" and principal.users == ("u1", "u2") and principal.agents is None
    assert main(["keys", "create", "--tenant", "acme", "--store", url, "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert set(created) >= {"key", "tenant", "id"} and KeyStore(store).verify(created["key"]).key_id == created["id"]
    assert main(["keys", "list", "--store", url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == 2 and key not in json.dumps(listed)
    assert main(["keys", "revoke", created["id"], "--store", url]) == 0
    assert KeyStore(store).verify(created["key"]) is None
    assert main(["keys", "create", "--tenant", "__keys__", "--store", url]) == 2
    store.close()


def test_keys_create_from_the_environment(tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC, "FULLRECALL_STORE": f"sqlite:///{tmp_path / 'e.db'}"}
    out = subprocess.run([sys.executable, "-m", "fullrecall", "keys", "create", "--tenant", "t"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1].startswith("fr_")


@pytest.mark.slow
@pytest.mark.parametrize("backend, servers", [("sqlite", 1), ("postgres", 2)])
def test_bench_serve_small(store_url, servers, capsys):
    """Two server processes share one PostgreSQL: every count still checks out."""
    code = main(["bench", "serve", "--store", store_url, "--servers", str(servers), "--clients", "6", "--messages", "6",
                 "--searches", "2", "--json"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and result["ok"]
    assert (result["lost"], result["duplicated"], result["cross_tenant"], result["cut_exports"]) == (0, 0, 0, 0)
    assert result["appends"] == 36 and result["searches"] == 12
    assert result["append_ms"]["p50"] > 0 and result["searchable_delay_ms"]["p95_ms"] is not None
    library = result["library"]  # the in-process side did the server's work: its indexer embedded every append
    assert library["embedded_all"] and library["searchable_delay_ms"]["samples"] > 0
    assert library["append_ms"]["p50"] > 0 and library["search_ms"]["p50"] > 0 and library["cpu_ms_per_request"] > 0
    assert 0 <= result["client_cpu_share"] < 2
    if sys.platform == "linux":  # the servers' CPU time, read from /proc
        assert result["server_cpu_ms_per_request"] > 0 and result["server_cpu_share"] > 0


def test_made_up_keys_never_push_a_valid_key_out_of_the_cache(tmp_path):
    """A flood of requests with made-up keys: each is refused, and the valid key stays cached (no store read)."""
    store = open_store(f"sqlite:///{tmp_path / 'k.db'}")
    keys = KeyStore(store, cache_seconds=3600)
    key, principal = keys.create("acme")
    assert keys.verify(key) == principal and keys.cached(key) == principal
    made_up = [f"fr_{i:016x}_{'x' * 43}" for i in range(10_050)]
    assert all(keys.verify(k) is None for k in made_up)
    assert keys.cached(key) == principal  # still cached: the refused keys took no place
    assert all(keys.cached(k) is None for k in made_up[:50])
    store.close()


@pytest.mark.parametrize("action", [["list"], ["revoke", "abc"]])
def test_keys_list_and_revoke_refuse_a_store_that_does_not_exist(tmp_path, capsys, action):
    """``keys list --store`` with a typo made an empty SQLite file and listed no keys from it (``keys revoke`` too),
    where the other commands that only read refuse a missing file."""
    missing = tmp_path / "kyes.db"
    assert main(["keys", *action, "--store", f"sqlite:///{missing}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no store at ") and repr(str(missing)) in err, err
    assert not missing.exists()


@pytest.mark.parametrize("tenant", [" ", "\u200b", "\t \u00a0"])
def test_keys_create_refuses_a_blank_tenant(tmp_path, capsys, tenant):
    """A tenant of only whitespace or invisible characters got a key, where a blank user is refused: a tenant
    nobody can see or type back."""
    url = tmp_path / "k.db"
    assert main(["keys", "create", "--tenant", tenant, "--store", f"sqlite:///{url}"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: 'tenant' {tenant!r} is blank (whitespace or invisible characters only): name a tenant\n"
    assert not url.exists()

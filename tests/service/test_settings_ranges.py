"""Every numeric setting of ``fullrecall serve`` is range-checked at start, from the file, the environment or a flag:
one line naming the setting and what it accepts, before anything is served."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fullrecall.service.config import Settings

BAD = [("embedding_batch", "0", "at least 1"), ("max_body_bytes", "-1", "at least 1"), ("workers", "0", "at least 1"),
       ("workers", "-3", "at least 1"), ("search_threads", "0", "at least 1"), ("window_messages", "0", "at least 1"),
       ("window_tokens", "0", "at least 1"), ("embedding_backlog", "-1", "at least 0"),
       ("keep_alive_seconds", "-1", "at least 0"), ("key_cache_seconds", "-0.5", "at least 0"),
       ("key_cache_seconds", "nan", "at least 0"), ("rate_limit", "-1", "at least 0"),
       ("rate_limit", "inf", "at least 0"), ("failed_auth_limit", "nan", "at least 0"), ("burst", "-1", "at least 0"),
       ("failed_auth_burst", "-5", "at least 0"), ("embedding_backlog", "9" * 400, "at most 9007199254740991"),
       ("key_cache_seconds", "1e400", "at most")]


@pytest.mark.parametrize("name, value, accepted", BAD)
def test_a_value_out_of_range_is_refused_from_the_environment(name, value, accepted):
    """``FULLRECALL_EMBEDDING_BATCH=0`` started a server that never embedded and never finished its drain on
    SIGTERM; ``FULLRECALL_MAX_BODY_BYTES=-1`` answered every request 413; ``--workers 0`` was taken."""
    with pytest.raises(ValueError, match=f"^setting {name!r}: expected .*{accepted}.*, got "):
        Settings.load(env={f"FULLRECALL_{name.upper()}": value})


@pytest.mark.parametrize("name, value, accepted", BAD[:3])
def test_a_value_out_of_range_is_refused_from_the_file_and_a_flag(tmp_path, name, value, accepted):
    path = tmp_path / "serve.toml"
    path.write_text(f"[serve]\n{name} = {value}\n")
    with pytest.raises(ValueError, match=f"^setting {name!r}: expected .*{accepted}"):
        Settings.load(str(path), env={})
    with pytest.raises(ValueError, match=f"^setting {name!r}: expected .*{accepted}"):
        Settings.load(env={}, **{name: int(value)})


def test_the_limits_of_each_range_are_taken():
    settings = Settings.load(env={}, manager="sliding", embedding_batch=1, max_body_bytes=1, workers=1, search_threads=1,
                             window_messages=1, window_tokens=1, embedding_backlog=0, keep_alive_seconds=0,
                             key_cache_seconds=0, rate_limit=0, burst=0, failed_auth_limit=0, failed_auth_burst=0)
    assert (settings.embedding_batch, settings.embedding_backlog, settings.key_cache_seconds) == (1, 0, 0.0)


@pytest.mark.parametrize("workers", ["0", "-3"])
def test_serve_refuses_workers_below_one_before_serving(tmp_path, workers):
    done = subprocess.run([sys.executable, "-m", "fullrecall", "serve", "--store", f"sqlite:///{tmp_path / 'm.db'}",
                           "--workers", workers], env=dict(os.environ), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2 and "serving" not in done.stdout, (done.stdout, done.stderr)
    assert done.stderr == f"error: setting 'workers': expected an integer, at least 1 and at most 9007199254740991, got {workers}\n"
    assert not (tmp_path / "m.db").exists()


def test_an_in_memory_store_is_refused_with_more_than_one_worker():
    """Each worker process opened its own empty ``:memory:`` store: a conversation written through one worker
    was missing from the next request another worker answered."""
    with pytest.raises(ValueError, match=r"^setting 'workers': an in-memory store \(sqlite:///:memory:\) is one "
                                         r"process's, so 2 workers would each answer from their own"):
        Settings.load(env={}, store="sqlite:///:memory:", workers=2)
    assert Settings.load(env={}, store="sqlite:///:memory:", workers=1).workers == 1
    assert Settings.load(env={}, store="sqlite:///m.db", workers=2).workers == 2


@pytest.mark.parametrize("env, words", [
    ({"FULLRECALL_WINDOW_MESSAGES": "1"}, "setting 'window_messages': expected at least 2 with the summarizing manager"),
    ({"FULLRECALL_MANAGER": "summarising"}, "setting 'manager' must be one of ('summarizing', 'sliding')"),
    ({"FULLRECALL_SUMMARIZER": "gpt"}, "setting 'summarizer' must be one of ('extractive', 'llm')"),
])
def test_serve_refuses_a_window_the_manager_cannot_keep_before_serving(tmp_path, env, words):
    """The summarizing manager keeps a summary beside at least one message: ``window_messages = 1`` passed the range
    check, ``serve`` said it was serving, and only then exited naming it; so did an unknown manager or summarizer."""
    done = subprocess.run([sys.executable, "-m", "fullrecall", "serve", "--store", f"sqlite:///{tmp_path / 'm.db'}"],
                          env={**os.environ, **env}, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2 and "serving" not in done.stdout, (done.stdout, done.stderr)
    assert done.stderr.startswith(f"error: {words}"), done.stderr
    assert Settings.load(env={"FULLRECALL_WINDOW_MESSAGES": "1", "FULLRECALL_MANAGER": "sliding"}).window_messages == 1

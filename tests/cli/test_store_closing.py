"""Every memory command closes the store it opened, when it succeeds and when it fails."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import pytest

from fullrecall.cli.main import main

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads descriptors in /proc (Linux)")


def _held(path: str) -> int:
    """How many descriptors of this process point at ``path`` or its -wal/-shm files."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(path)
    return count


def _run(*args: str, stdin: str = "") -> int:
    stdin_was, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return main(list(args))
    finally:
        sys.stdin = stdin_was


def test_each_command_leaves_no_handle_on_the_store(tmp_path):
    db = str(tmp_path / "m.db")
    store = ["--store", f"sqlite:///{db}"]
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "My locker code is 4711."}]))
    runs = [  # (arguments, stdin, exit code): successes and failures of every command that opens the store
        (["import", str(chat), "--no-embed", "--user", "ann"], "", 0),
        (["import", str(tmp_path / "missing.json"), "--no-embed"], "", 1),
        (["stats", "--user", "ann"], "", 0),
        (["search", "locker", "--user", "ann"], "", 0),
        (["search", " ", "--user", "ann"], "", 2),
        (["inspect", "chat", "--user", "ann"], "", 0),
        (["inspect", "nope", "--user", "ann"], "", 1),
        (["export", str(tmp_path / "out.jsonl"), "--user", "ann"], "", 0),
        (["export", str(tmp_path / "o.jsonl"), "--session", "nope"], "", 1),
        (["chat", "--model", "scripted", "--session", "talk"], "/quit\n", 0),
        (["forget", "--user", "ann"], "n\n", 1),
        (["forget", "--user", "ann", "--yes"], "", 0),
    ]
    for args, stdin, code in runs:
        assert _run(*args, *store, stdin=stdin) == code, args
        assert _held(db) == 0, f"{args} left the store open"

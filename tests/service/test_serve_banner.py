"""The store URL ``fullrecall serve`` prints: the one it was given, with only a password hidden."""

from __future__ import annotations

import pytest

from fullrecall._secrets import shown_url as _redact


@pytest.mark.parametrize("url", ["sqlite:///memory.db", "sqlite:////data/fullrecall.db", "sqlite:///:memory:",
                                 "redis://localhost:6379/0", "postgresql://fullrecall@db:5432/agents"])
def test_a_url_without_password_is_printed_as_given(url):
    assert _redact(url) == url


def test_a_password_is_hidden():
    assert _redact("postgresql://ann:s3cret@db:5432/agents") == "postgresql://ann:***@db:5432/agents"


@pytest.mark.parametrize("url, shown", [
    ("postgresql://ann@db/agents?password=s3cret&schema=x", "postgresql://ann@db/agents?password=***&schema=x"),
    ("postgresql://db/agents?schema=x&sslpassword=s3cret", "postgresql://db/agents?schema=x&sslpassword=***"),
    ("postgresql://ann:s3cret@db/agents?password=s3cret", "postgresql://ann:***@db/agents?password=***"),
])
def test_a_password_in_the_query_is_hidden(url, shown):
    """libpq takes the password as a query parameter too: the banner printed it in the clear."""
    assert _redact(url) == shown


@pytest.mark.parametrize("how", [["--port", "70000"], ["--port", "-1"], "FULLRECALL_PORT"])
def test_a_port_no_server_takes_is_refused(tmp_path, how):
    """--port 70000 (or FULLRECALL_PORT=70000) printed 'serving ... on http://127.0.0.1:70000' and bound port 4464
    (70000 modulo 65536): clients were told a port nobody listened on."""
    import os
    import subprocess
    import sys

    env = {**os.environ, **({"FULLRECALL_PORT": "70000"} if how == "FULLRECALL_PORT" else {})}
    done = subprocess.run([sys.executable, "-m", "fullrecall", "serve", "--store", f"sqlite:///{tmp_path / 'm.db'}",
                           *([] if how == "FULLRECALL_PORT" else how)], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2 and "serving" not in done.stdout, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: setting 'port': expected a port from 1 to 65535, got "), done.stderr

"""A ``fullrecall serve`` process on a free loopback port (for the load test and the crash tests)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(store_url: str, port: int | None = None, **settings: str) -> tuple[subprocess.Popen, str]:
    """Start ``fullrecall serve`` (this fullrecall, this Python); return it and its base URL once it is ready."""
    import httpx

    port = port or free_port()
    src = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "FULLRECALL_STORE": store_url, "FULLRECALL_HOST": "127.0.0.1", "FULLRECALL_PORT": str(port),
           **{f"FULLRECALL_{k.upper()}": str(v) for k, v in settings.items()}}
    proc = subprocess.Popen([sys.executable, "-m", "fullrecall", "serve", "--log-level", "warning"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None  # stderr=PIPE
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"fullrecall serve exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("fullrecall serve did not become ready in 90 s")


@contextlib.contextmanager
def running_server(store_url: str, port: int | None = None, **settings: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """A server for the block; stopped gracefully (SIGTERM) afterwards."""
    proc, url = start_server(store_url, port, **settings)
    try:
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()

"""Throwaway local PostgreSQL (pgvector) and Redis servers for the tests and ``fullrecall bench store``.

Both listen on loopback / a socket in a temporary directory only, and stop when the
context exits: nothing is left running as a daemon.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import Any

REDIS_SERVER = os.environ.get("FULLRECALL_REDIS_SERVER", "redis-server")


class ServerUnavailable(RuntimeError):
    """The server could not be started here (binary or package missing)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def redis_server(appendfsync: str = "everysec") -> Iterator[str]:
    """A private ``redis-server`` (AOF on) on a free loopback port; yields its URL."""
    binary = shutil.which(REDIS_SERVER)
    if binary is None:
        raise ServerUnavailable(f"{REDIS_SERVER!r} not found (Debian: apt-get install redis-server)")
    workdir = tempfile.mkdtemp(prefix="fullrecall-redis-")
    port = free_port()
    cmd = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        workdir,
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        appendfsync,
        "--daemonize",
        "no",
        "--loglevel",
        "warning",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for_port(port, proc, "redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def postgres_server(settings: Mapping[str, str] | None = None, pgdata: str | None = None) -> Iterator[str]:
    """A private PostgreSQL with pgvector from the ``pgserver`` package; yields its URL.

    ``settings`` (``{"shared_buffers": "4GB"}``) are written with ``ALTER SYSTEM`` and the
    server is restarted once to apply them. ``pgdata``: a data folder kept after the server
    stops and used again by the next call (default: a temporary one, removed).
    """
    bad = [name for name in settings or {} if not re.fullmatch(r"[a-z_.]+", name)]
    if bad:
        raise ValueError(f"not PostgreSQL setting names: {bad}")
    try:
        import pgserver
    except ImportError as exc:
        raise ServerUnavailable("the 'pgserver' package is not installed (pip install pgserver)") from exc
    keep = pgdata is not None
    if pgdata is not None:
        os.makedirs(pgdata, exist_ok=True)
    workdir = pgdata if pgdata is not None else tempfile.mkdtemp(prefix="fullrecall-pg-")
    try:
        server = pgserver.get_server(workdir, cleanup_mode="stop")
        if settings:
            _apply_settings(server, settings)
    except Exception as exc:  # pgserver raises plain exceptions when initdb/pg_ctl fail
        _stop_postmaster(workdir)
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        raise ServerUnavailable(f"pgserver could not start PostgreSQL: {exc}") from exc
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        _stop_postmaster(workdir)
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _apply_settings(server: Any, settings: Mapping[str, str]) -> None:
    """``ALTER SYSTEM`` each setting, then restart the postmaster (same socket and options)."""
    import psycopg
    from pgserver._commands import pg_ctl  # type: ignore[attr-defined]  # made at import by create_command_function
    from pgserver.utils import PostmasterInfo

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{str(value).replace(chr(39), '')}'")
    try:  # a loaded machine can take more than pg_ctl's 60 s to stop (checkpoint) and start (recovery) it
        pg_ctl(["-w", "-t", "300", "-l", str(server.log), "restart"], pgdata=server.pgdata, user=server.system_user,
               timeout=660)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"pg_ctl restart exited {exc.returncode}; the server's log ends:\n{_tail(server.log)}") from exc
    server._postmaster_info = PostmasterInfo.read_from_pgdata(server.pgdata)  # the new postmaster's pid


def _tail(path: Any, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as exc:
        return f"(unreadable: {exc})"


def _stop_postmaster(pgdata: str) -> None:
    """Make sure the postmaster of ``pgdata`` is gone (pgserver may keep it for another handle)."""
    try:
        with open(os.path.join(pgdata, "postmaster.pid")) as f:
            pid = int(f.readline().strip())
    except (OSError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown
        for _ in range(1200):  # a minute: a fast shutdown still writes a checkpoint, killed it recovers at start
            os.kill(pid, 0)
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], name: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise ServerUnavailable(f"{name} exited with code {proc.returncode}: {err.strip()[:500]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    proc.kill()
    raise ServerUnavailable(f"{name} did not listen on port {port} within {timeout:.0f} s")


def drop_namespace(backend: str, base_url: str, name: str) -> None:
    """Remove a PostgreSQL schema or the Redis keys under a prefix (leave a shared server as it was)."""
    if backend == "postgres":
        import psycopg

        from .postgres import split_url

        with psycopg.connect(split_url(base_url)[0], autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    elif backend == "redis":
        import redis

        client = redis.Redis.from_url(base_url)
        try:
            for batch in _batched(client.scan_iter(match=f"{name}:*", count=1000), 1000):
                client.unlink(*batch)
        finally:
            client.close()
    else:
        raise ValueError(f"no namespaces for backend {backend!r}")


def _batched(items: Iterator[bytes], n: int) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for item in items:
        batch.append(item)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch

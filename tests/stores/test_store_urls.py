"""Store URLs on every backend: a bad or unknown option is refused at once, naming it; the scheme takes any case."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fullrecall.errors import StoreError
from fullrecall.stores import Scope, StoredMessage, open_store
from fullrecall.stores._servers import drop_namespace

BAD_OPTIONS = {  # backend -> (query, the option the error must name)
    "sqlite": [
        ("busy_timeout=inf", "busy_timeout"), ("busy_timeout=abc", "busy_timeout"), ("busy_timeout=-1", "busy_timeout"),
        ("vector_cache_mb=nan", "vector_cache_mb"), ("vector_cache_mb=-1", "vector_cache_mb"),
        ("fts_batch=1.5", "fts_batch"), ("fts_batch=0", "fts_batch"),
        ("lexical_in_process=-1", "lexical_in_process"), ("lexical_in_process=abc", "lexical_in_process"),
        ("synchronus", "synchronus"), ("synchronus=", "synchronus"), ("bogus=", "bogus"), ("synchronous=", "synchronous"),
        ("busy_timeout=" + "9" * 400, "busy_timeout"), ("vector_cache_mb=" + "9" * 400, "vector_cache_mb"),
    ],
    "postgres": [
        ("pool_max=abc", "pool_max"), ("pool_max=0", "pool_max"), ("pool_min=-1", "pool_min"),
        ("pool_min=5&pool_max=2", "pool_max"), ("ef_search=-1", "ef_search"), ("exact_limit=abc", "exact_limit"),
        ("hnsw_min_rows=-5", "hnsw_min_rows"), ("lexical_budget=x", "lexical_budget"), ("candidate_cap=1.5", "candidate_cap"),
        ("vector_cache_mb=nan", "vector_cache_mb"), ("lexical_in_process=-1", "lexical_in_process"),
        ("connect_timeout=abc", "connect_timeout"), ("connect_timeout=nan", "connect_timeout"),
        ("connect_timeout=inf", "connect_timeout"), ("connect_timeout=", "connect_timeout"),
    ],
    "redis": [
        ("prefx=x", "prefx"), ("ttl_day=3", "ttl_day"), ("ttl_days=abc", "ttl_days"), ("ttl_days=-1", "ttl_days"),
        ("ttl_seconds=abc", "ttl_seconds"), ("cache_sessions=abc", "cache_sessions"),
        ("cache_sessions=-1", "cache_sessions"), ("ttl_days=1&ttl_seconds=5", "ttl_days and ttl_seconds"),
        ("socket_timeout=abc", "socket_timeout"), ("socket_timeout=nan", "socket_timeout"),
        ("socket_timeout=-1", "socket_timeout"), ("socket_timeout=0", "socket_timeout"),
        ("cache_sessions=" + "9" * 400, "cache_sessions"),
    ],
}


def _url(backend: str, service_urls: dict[str, Callable[[], str]], tmp_path: Path, query: str) -> str:
    base = f"sqlite:///{tmp_path / 'x.db'}" if backend == "sqlite" else service_urls[backend]()
    return f"{base}{'&' if '?' in base else '?'}{query}"


@pytest.mark.parametrize(("backend", "query", "option"),
                         [(b, q, o) for b, cases in BAD_OPTIONS.items() for q, o in cases])
def test_a_bad_store_url_option_is_refused_at_once_naming_it(
    backend: str, query: str, option: str, service_urls: dict[str, Callable[[], str]], tmp_path: Path
) -> None:
    url = _url(backend, service_urls, tmp_path, query)
    started = time.monotonic()
    with pytest.raises(ValueError, match=option) as refused:
        open_store(url).close()
    assert type(refused.value) is ValueError  # not a driver's TypeError, OverflowError or pool error
    assert time.monotonic() - started < 5  # refused on reading the URL, not after connection attempts
    assert not (tmp_path / "x.db").exists()  # nothing made


BAD_KEYWORDS = [  # (backend, keyword options, the option the error must name)
    ("postgres", {"connect_timeout": float("nan")}, "connect_timeout"), ("postgres", {"connect_timeout": "abc"}, "connect_timeout"),
    ("postgres", {"connect_timeout": float("inf")}, "connect_timeout"),
    ("redis", {"socket_timeout": -1}, "socket_timeout"), ("redis", {"socket_timeout": "abc"}, "socket_timeout"),
    ("redis", {"socket_timeout": float("nan")}, "socket_timeout"),
]


@pytest.mark.parametrize(("backend", "options", "option"), BAD_KEYWORDS)
def test_a_bad_store_keyword_option_is_refused_as_its_url_form_is(
    backend: str, options: dict[str, object], option: str, store_url: str
) -> None:
    started = time.monotonic()
    with pytest.raises(ValueError, match=f"^store option {option} must be a number from") as refused:
        open_store(store_url, **options).close()
    assert type(refused.value) is ValueError  # not a driver's TypeError, ProgrammingError or socket words
    assert time.monotonic() - started < 5


@pytest.fixture
def pg_url(service_urls: dict[str, Callable[[], str]]) -> Iterator[str]:
    """A PostgreSQL store URL of its own schema, dropped afterwards."""
    base, name = service_urls["postgres"](), f"t{uuid.uuid4().hex[:10]}"
    yield f"{base}{'&' if '?' in base else '?'}schema={name}"
    drop_namespace("postgres", base, name)


@pytest.mark.parametrize("timeout", ["-1", "0", "2.5", "%205", "30"])
def test_a_connect_timeout_psycopg_takes_opens_the_store(pg_url: str, timeout: str) -> None:
    """psycopg reads ``int(float(value))``, 0 or less as its default (130 s): every such value opens the store,
    given in the URL or as a keyword.
    """
    scope = Scope(user_id="u", agent_id="a", session_id="s")
    with open_store(f"{pg_url}&connect_timeout={timeout}") as store:
        store.append(scope, [StoredMessage("m0", "user", "hello", {"text": "hello"})])
    keyword = float(timeout.replace("%20", ""))
    with open_store(pg_url, connect_timeout=keyword) as store:
        assert [m.id for m in store.get(scope, ["m0"])] == ["m0"]


def test_the_urls_connect_timeout_bounds_the_first_connection() -> None:
    """A server that takes the TCP connection and never answers: the URL's connect_timeout (2 s) gives up, not
    the keyword's default (10 s).
    """
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        started = time.monotonic()
        with pytest.raises(StoreError, match="PostgreSQL"):
            open_store(f"postgresql://u@127.0.0.1:{silent.getsockname()[1]}/db?connect_timeout=2")
        assert time.monotonic() - started < 6


@pytest.mark.parametrize(("query", "name", "value"), [("application_name=my%20app", "application_name", "my app"),
                                                     ("options=-c%20statement_timeout%3D5000", "statement_timeout", "5s"),
                                                     ("application_name=app+1", "application_name", "app+1")])
def test_a_libpq_option_reaches_the_server_as_given(pg_url: str, query: str, name: str, value: str) -> None:
    """libpq decodes ``%20`` and reads ``+`` as a plus: the query decoded and encoded again gave ``my+app``, then,
    encoded with ``%20``, ``app 1``. The options not fullrecall's now stay as written."""
    with open_store(f"{pg_url}&{query}") as store, store._pool().connection() as conn:
        assert conn.execute(f"SHOW {name}").fetchone()[name] == value


@pytest.mark.parametrize(("query", "words"), [
    ("vector_cache_mb=nan", "store option vector_cache_mb must be a number from 0 to 9007199254740991, got 'nan'"),
    ("lexical_in_process=-1", "store option lexical_in_process must be an integer from 0 to 9007199254740991, got '-1'"),
])
def test_a_bad_option_is_worded_alike_on_every_backend(
    query: str, words: str, service_urls: dict[str, Callable[[], str]], tmp_path: Path
) -> None:
    for backend in ("sqlite", "postgres"):
        with pytest.raises(ValueError) as refused:
            open_store(_url(backend, service_urls, tmp_path, query)).close()
        assert str(refused.value) == words


def test_the_url_scheme_takes_any_case(store_url: str) -> None:
    scheme, rest = store_url.split(":", 1)
    scope = Scope(user_id="u", agent_id="a", session_id="s")
    with open_store(store_url) as store:
        store.append(scope, [StoredMessage("m0", "user", "hello", {"text": "hello"})])
    for shown in (scheme.upper(), scheme.capitalize()):
        with open_store(f"{shown}:{rest}") as store:
            assert [m.id for m in store.get(scope, ["m0"])] == ["m0"]


def test_a_mixed_case_sqlite_url_reads_its_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_store("SQLite:///x.db?synchronous=FULL") as store:
        assert store._conn().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("x.db-")] == ["x.db"]


def test_a_sqlite_option_given_empty_is_refused_not_read_as_its_default(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        open_store(f"sqlite:///{tmp_path / 'x.db'}?synchronous=")

"""API keys and other credentials sent in HTTP headers, kept out of every error and log line.

A key is checked once, when a client is made: surrounding whitespace goes (a key read from a file keeps
its newline), and a character no header may carry (a control character, a non-ASCII letter) is refused
naming its position, never the key: the HTTP library would otherwise refuse it at the first request in
an error that quotes the whole header. Whatever a server answers (some echo the request's headers) is
passed through :func:`redact` before it goes into an error: a secret anywhere in it is masked, a very short
one (under 8 characters) wherever it stands as a whole token, so that the rest stays readable.
A store's URL is shown with its password hidden (:func:`shown_url`) or as its address alone (:func:`address`),
and a driver's error about it is shown :func:`without_passwords`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

from .errors import InvalidInput

MASK = "[redacted]"
SHORT = 8  # a secret shorter than this is redacted only where it stands as a whole token
_WORD = re.compile(r"[A-Za-z0-9_]")
_NOT_AFTER_WORD, _NOT_BEFORE_WORD = r"(?<![A-Za-z0-9_])", r"(?![A-Za-z0-9_])"
_SECRET_HEADER_WORDS = ("auth", "key", "token", "secret", "cookie", "signature")


def checked_key(value: str | None, name: str = "api_key") -> str | None:
    """``value`` without surrounding whitespace (None when nothing is left), or :class:`InvalidInput`."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, not {type(value).__name__}")
    value = value.strip()
    for i, char in enumerate(value):
        if not " " <= char <= "~":
            raise InvalidInput(f"{name} holds a character an HTTP header cannot carry at position {i} "
                               "(a control character or a non-ASCII one); the value is not shown")
    return value or None


def checked_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """Extra headers, each value checked as a key is (named by its header, its value not shown)."""
    return {k: checked_key(v, f"header {k!r}") or "" for k, v in (headers or {}).items()}


def secrets_of(key: str | None, headers: Mapping[str, str] | None = None, url: str | None = None) -> tuple[str, ...]:
    """What must never be shown: the key, the values of headers named like credentials, the URL's password."""
    found = [key] if key else []
    found += url_secrets(url) if url else []
    found += [v for k, v in (headers or {}).items() if v and any(w in k.lower() for w in _SECRET_HEADER_WORDS)]
    return tuple(sorted(set(found), key=len, reverse=True))  # a longer secret first: it may contain a shorter one


_QUERY_PASSWORD = re.compile(r"(^|&)([^=&]*password=)([^&]*)", re.IGNORECASE)


def url_secrets(url: str) -> list[str]:
    """The passwords a URL holds, as written and decoded: in its address (``user:password@``) or its query
    (libpq's ``password=``).
    """
    parts = urlsplit(url)
    written = [parts.netloc.rpartition("@")[0].partition(":")[2]] if "@" in parts.netloc else []
    written += [m.group(3) for m in _QUERY_PASSWORD.finditer(parts.query)]
    return [s for w in written if w for s in dict.fromkeys((w, unquote(w)))]


def address(url: str) -> str:
    """A store URL's scheme, host and path: no user, password or options (what a store's errors show of it)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def without_passwords(text: str, url: str) -> str:
    """``text`` (a driver's error about ``url``) with the URL's passwords masked wherever it quotes them."""
    return redact(text, url_secrets(url))


def shown_url(url: str) -> str:
    """``url`` with its password hidden, in the address (``user:***@``) or the query (``password=***``)."""
    parts = urlsplit(url)
    query = _QUERY_PASSWORD.sub(r"\1\2***", parts.query)
    user, at, host = parts.netloc.rpartition("@")
    if ":" in user:
        user = user.partition(":")[0] + ":***"
    netloc = f"{user}{at}{host}"
    if (netloc, query) == (parts.netloc, parts.query):  # as given: urlunsplit would turn sqlite:///a.db into sqlite:/a.db
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def aws_shown(client: object, text: str, limit: int = 300) -> str:
    """An AWS client's error text as an error or a log line may show it: the client's secret key and session token
    masked (a server or proxy may echo the signed request's headers), cut to ``limit`` characters (an error body
    may be megabytes).
    """
    credentials = getattr(getattr(client, "_request_signer", None), "_credentials", None)
    secrets: list[str] = []
    if credentials is not None:
        try:
            frozen = credentials.get_frozen_credentials()
            secrets = [s for s in (frozen.secret_key, frozen.token, frozen.access_key) if s]
        except Exception:  # noqa: BLE001 - no credentials to read: nothing of them can be in the text
            secrets = []
    shown = redact(text, secrets)
    return shown if len(shown) <= limit else shown[:limit] + "..."


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced by :data:`MASK`.

    A secret shorter than :data:`SHORT` characters (``k``, Ollama's customary ``ollama``) is replaced where it
    stands as a whole token, not inside a longer word: masking each of its occurrences would leave a server's
    message unreadable, and such a key is only ever sent, and echoed, whole.
    """
    ordered = sorted({s for s in secrets if s}, key=len, reverse=True)  # a longer one first: it may hold a shorter
    if not ordered:
        return text
    return re.compile("|".join(_pattern(s) for s in ordered)).sub(MASK, text)


def _pattern(secret: str) -> str:
    """The secret as a regular expression: a short one bounded by characters no word goes on with."""
    escaped = re.escape(secret)
    if len(secret) >= SHORT:
        return escaped
    before = _NOT_AFTER_WORD if _WORD.match(secret[0]) else ""
    after = _NOT_BEFORE_WORD if _WORD.match(secret[-1]) else ""
    return f"{before}{escaped}{after}"

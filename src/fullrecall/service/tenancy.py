"""From a key and a request to a storage scope: the tenant always comes from the key.

Clients name the user, agent and conversation; the tenant is never theirs to choose, so
every scope the service builds carries the key's tenant and no route can reach another
tenant's data. A key limited to some users or agents refuses the others (403) and must
name one of its users when it is limited.
"""

from __future__ import annotations

from ..stores._validate import check_id, check_owner_id, check_session_id
from ..stores.base import Scope
from .auth import Principal

MAX_NAME = 200


class Forbidden(PermissionError):
    """The key may not act for this user or agent (``field`` names which)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidName(ValueError):
    """A user, agent, conversation or session id the service does not take; ``field`` names it (a 422's ``field``)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def check_name(value: str | None, field: str) -> str | None:
    """A user, agent or conversation id: a non-empty string of at most 200 characters that a store keeps, or None."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_NAME or "\x00" in value:
        raise InvalidName(f"'{field}' must be a non-empty string of at most {MAX_NAME} characters without NUL", field)
    try:
        check_id(value, f"'{field}'")  # what every store refuses (a lone surrogate, over 256 UTF-8 bytes), named here
    except ValueError as exc:
        raise InvalidName(str(exc), field) from None
    return value


def check_conversation(value: str | None, field: str = "conversation_id") -> str | None:
    """A conversation id (``check_name``) that ``/v1/conversations/{id}`` can carry: no path segment ``.`` or
    ``..``, which every HTTP client and proxy resolves away (``a/../b`` is sent as ``b``), and no line break,
    which no route's path matches, so the conversation written under one would be out of every route's reach;
    and one the library names a conversation by (not blank, no change log:
    :func:`~fullrecall.stores._validate.check_session_id`, refused in its words).
    """
    check_name(value, field)
    if value is not None:
        try:
            check_session_id(value, f"'{field}'")
        except ValueError as exc:
            raise InvalidName(str(exc), field) from None
    if value is not None and any(part in (".", "..") for part in value.split("/")):
        raise InvalidName(f"'{field}' {value!r} has a path segment '.' or '..', which a URL cannot carry (clients "
                          "resolve it away); name the conversation otherwise", field)
    if value is not None and "\n" in value:  # no route's path matches one: written, it could not be read again
        raise InvalidName(f"'{field}' {value!r} holds a line break, which no route's path carries; name the "
                          "conversation otherwise", field)
    return value


def scope_for(principal: Principal, *, user_id: str | None = None, agent_id: str | None = None,
              conversation_id: str | None = None) -> Scope:
    """The scope a request of ``principal`` may touch: its own tenant, an allowed owner."""
    for field, value in (("user_id", user_id), ("agent_id", agent_id)):
        check_name(value, field)
        try:  # the library's rule and words: a user or agent shows something
            check_owner_id(value, f"'{field}'")
        except ValueError as exc:
            raise InvalidName(str(exc), field) from None
    check_conversation(conversation_id)
    for field, value, allowed in (("user_id", user_id, principal.users), ("agent_id", agent_id, principal.agents)):
        if allowed is not None and value not in allowed:
            raise Forbidden(f"this key may not act for {field} {value!r}; it is limited to {list(allowed)}", field)
    return Scope(tenant=principal.tenant, user_id=user_id, agent_id=agent_id, session_id=conversation_id)

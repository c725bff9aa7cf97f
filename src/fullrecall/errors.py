"""Errors fullrecall raises. Each names what went wrong and what was kept."""

from __future__ import annotations

from typing import Any


class FullRecallError(Exception):
    """Base class for every error fullrecall raises on purpose."""


class ContextWindowOverflowError(FullRecallError):
    """The window cannot be shrunk any further (or the manager does not shrink it).

    Raised by ``reduce_context`` so that a caller's overflow-retry loop always ends.
    """


class InvalidInput(FullRecallError, ValueError):
    """Input no backend would store faithfully; the text names the message index and field. Nothing was written."""


class MessageFormatError(InvalidInput):
    """A message does not match any supported shape; the text names its index and field."""


class MessageTypeError(MessageFormatError, TypeError):
    """Messages given as something other than a dict or a list of dicts; also a ``TypeError``, which is what
    MassGen's memory raises there (so its callers' ``except TypeError`` catches it). Nothing was written.
    """


class ArchiveError(FullRecallError):
    """Writing to the archive failed; the messages were kept in the window."""


class SummarizationError(FullRecallError):
    """A summarizer failed; no message was removed."""


class StoreError(FullRecallError):
    """A store could not be reached or refused a write; nothing was acknowledged."""


class StateConflict(StoreError):
    """``put_state(..., expected=v)`` found another version: someone else wrote the document first.

    Nothing was written; ``current`` is the version the store holds (0: no document). Read it
    again and retry, or use ``store.update_state``, which does.
    """

    def __init__(self, message: str, current: int) -> None:
        super().__init__(message)
        self.current = current


class EmbeddingError(FullRecallError):
    """An embedder failed or returned vectors of the wrong shape.

    ``rejected`` is True when the model refused the input itself (a text over its length limit: HTTP 400,
    413 or 422, Bedrock's ValidationException), so the same texts will fail again; a timeout, a connection
    error, a throttle or a server error may pass on the next try.
    """

    def __init__(self, message: str, *, rejected: bool = False) -> None:
        super().__init__(message)
        self.rejected = rejected


EMBEDDING_OUTAGE: tuple[type[Exception], ...] = (EmbeddingError, OSError)
"""What an embedder raises when it cannot answer now: fullrecall's embedders raise ``EmbeddingError``, and a
custom one may let a ``ConnectionError`` or ``TimeoutError`` through. A search then answers from keywords. Any
other exception is taken as a bug in the embedder and reaches the caller."""


class FactExtractionError(FullRecallError):
    """Facts could not be extracted from messages: the chat model failed, or its answer was no JSON array of facts,
    or was cut short. Every word of the messages was kept.

    ``facts``: the facts stored anyway (those complete before a cut), or from ``FactMemory.candidates()`` those
    found before the cut (not stored); ``ids``: the ids of the messages recorded,
    when :class:`~fullrecall.memory.persistent.PersistentMemory` raises it (``errors="raise"``).
    """

    def __init__(self, message: str, *, facts: list[Any] | None = None, ids: list[str] | None = None) -> None:
        super().__init__(message)
        self.facts = list(facts or [])
        self.ids = list(ids or [])


class MemoryInputError(InvalidInput):
    """Bad input to long-term memory (a fact, a pattern, an import line); the text names the item and field.

    Nothing was written.
    """

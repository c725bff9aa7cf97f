"""Procedural memory: which tools, in which order, solved a kind of task well.

After a task, :meth:`ProceduralMemory.evaluate_workflow` scores the run (0-1) and
:meth:`~ProceduralMemory.store_pattern` keeps it when the score reaches the threshold
(0.7 by default). Before a new task, :meth:`~ProceduralMemory.retrieve_patterns` finds the
most similar past tasks and :meth:`~ProceduralMemory.plan_tool_sequence` suggests their
tool order (or a less confident fallback when nothing matches).

A pattern is a structured record: its task signature (the normalized task text), the
ordered steps, how often it succeeded, when it was last used, its average run time, and
an expiry (210 days after it was last stored, by default) honoured on every backend.
Nothing here calls an LLM; similarity uses the local embedder.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..errors import MemoryInputError
from ..stores.base import DEFAULT_TENANT, Record, Store
from ._records import EXPIRES_AT, RecordBook, check_unicode, open_book, public_data

NAMESPACE = "procedures"
DEFAULT_MIN_SUCCESS_SCORE = 0.7
DEFAULT_TTL_DAYS = 210
DEFAULT_MIN_SIMILARITY = 0.4
FALLBACK_CONFIDENCE = 0.3
MAX_TTL_DAYS = 1_000_000  # about 2,700 years: an expiry any date can show (None keeps a pattern for good)

# evaluate_workflow: how much each check weighs (they sum to 1)
W_TOOLS, W_NO_ERRORS, W_RESPONSE, W_SPEED = 0.2, 0.4, 0.25, 0.15

_ERROR_STATUSES = {"error", "failed", "failure"}


def task_signature(query: str) -> str:
    """The normalized task text patterns are keyed by: lower case, words only, single spaces."""
    return " ".join(re.findall(r"\w+", query.lower()))


def is_tool_error(result: Any) -> bool:
    """Whether one tool result reports a failure.

    An exception; a dict with ``status`` "error"/"failed", ``success: False``, ``isError: True``
    or a non-empty ``error``; or a string starting with "error".
    """
    if isinstance(result, BaseException):
        return True
    if isinstance(result, dict):
        status = result.get("status")
        return (
            (isinstance(status, str) and status.lower() in _ERROR_STATUSES)
            or result.get("success") is False
            or result.get("isError") is True
            or bool(result.get("error"))
        )
    if isinstance(result, str):
        return result.strip().lower().startswith("error")
    return False


def pattern_id(book: RecordBook, signature: str, steps: Sequence[str]) -> str:
    """A pattern's id: the same for the same task signature and steps of one owner, another for every other owner."""
    return "p" + book.owned_id(signature, *steps)


def check_pattern_data(data: dict[str, Any]) -> None:
    """Refuse a pattern record's data (e.g. an imported line's) without its task signature and steps."""
    if not isinstance(data.get("signature"), str) or "\x00" in data["signature"]:  # NUL joins an id's parts
        raise MemoryInputError("a pattern's 'data.signature' must be a string (its normalized task, without NUL)")
    steps = data.get("tools_used")
    if not isinstance(steps, list) or not all(isinstance(t, str) and t and "\x00" not in t for t in steps):
        raise MemoryInputError("a pattern's 'data.tools_used' must be a list of tool names (without NUL)")


def owned_pattern(book: RecordBook, record: Record) -> Record:
    """A pattern record (another owner's, as an import brings it) under the id ``book``'s owner gives it.

    So a pattern imported into another owner's memory is the one that owner's :meth:`ProceduralMemory.store_pattern`
    of the same task and tools updates, owners importing one file never share an id, and importing twice finds it.
    """
    check_pattern_data(record.data)
    return replace(record, id=pattern_id(book, record.data["signature"], record.data["tools_used"]))


class ProceduralMemory:
    """Successful tool-calling patterns of one owner (user and agent), in any store.

    ``store`` is a :class:`~fullrecall.stores.base.Store` or a URL; ``embedder`` an
    :class:`~fullrecall.embeddings.Embedder` or a model name (default: the local MiniLM).
    ``fast_execution_ms`` is the run time that still earns the full speed score (it falls
    linearly to zero at three times that). ``clock`` (Unix seconds) is for tests.
    """

    def __init__(
        self,
        store: Store | str = "sqlite:///:memory:",
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        tenant: str = DEFAULT_TENANT,
        embedder: Any = None,
        min_success_score: float = DEFAULT_MIN_SUCCESS_SCORE,
        ttl_days: float | None = DEFAULT_TTL_DAYS,
        min_similarity: float = DEFAULT_MIN_SIMILARITY,
        fast_execution_ms: float = 10_000.0,
        default_tools: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        _check_settings(min_success_score=min_success_score, ttl_days=ttl_days, min_similarity=min_similarity,
                        fast_execution_ms=fast_execution_ms)
        self.store: Store
        self.store, self._owns_store, self.book = open_book(store, NAMESPACE, tenant=tenant, user_id=user_id,
                                                            agent_id=agent_id, embedder=embedder, clock=clock)
        self.min_success_score = min_success_score
        self.ttl_days = ttl_days
        self.min_similarity = min_similarity
        self.fast_execution_ms = fast_execution_ms
        self.default_tools = list(default_tools)
        self.clock = clock

    # -- learning ----------------------------------------------------------------------------
    def store_pattern(
        self,
        query: str,
        tools_used: Sequence[str],
        success_score: float,
        execution_time_ms: float,
        *,
        query_type: str | None = None,
    ) -> str | None:
        """Keep a workflow if ``success_score`` reaches the threshold; return its pattern id, else None.

        The same task solved with the same tools again updates one pattern (success count,
        average time, last use, expiry) instead of adding another. A run that used no tool is not
        kept either, whatever its score: it holds no procedure to suggest.
        """
        _check_pattern(query, tools_used, success_score, execution_time_ms)
        if query_type is not None:
            if not isinstance(query_type, str):
                raise MemoryInputError(f"pattern {query!r}: 'query_type' must be a string or None, not {query_type!r}")
            check_unicode(query_type, f"pattern {query!r}: 'query_type'")
        if success_score < self.min_success_score or not tools_used:
            return None
        signature = task_signature(query)
        steps = [str(t) for t in tools_used]
        new_id = pattern_id(self.book, signature, steps)
        now = self.clock()
        embedded: list[Any] = []  # the query's vector, made once even when a lost race runs ``stored`` again

        def stored(old: Record | None) -> tuple[Record, Any]:
            """The pattern as this run leaves it, from the pattern as held (None: new)."""
            if old is None:
                data: dict[str, Any] = {
                    "query": query, "query_type": query_type, "signature": signature, "tools_used": steps,
                    "success_score": float(success_score), "success_count": 1,
                    "avg_execution_time_ms": float(execution_time_ms), "last_used": now,
                }
                record = Record(id=new_id, namespace=NAMESPACE, text=query, data=data, created_at=now, updated_at=now)
                embedded[:] = embedded or [self.book.embed([query])[0]]
                vector = embedded[0]
            else:
                record, data, vector = old, old.data, None
                n = int(data["success_count"])  # running means, never a sum a float cannot hold
                data["avg_execution_time_ms"] += (float(execution_time_ms) - data["avg_execution_time_ms"]) / (n + 1)
                data["success_score"] += (float(success_score) - data["success_score"]) / (n + 1)
                data["success_count"] = n + 1
                data["last_used"] = now
                data["query_type"] = query_type or data.get("query_type")
                record.updated_at = now
            data[EXPIRES_AT] = now + self.ttl_days * 86400.0 if self.ttl_days is not None else None
            return record, vector

        self.book.update(new_id, stored)  # another writer's run of the same pattern at once is counted too
        return new_id

    def evaluate_workflow(
        self,
        tools_used: Sequence[str],
        tool_results: Sequence[Any],
        response_generated: bool | str | None,
        execution_time_ms: float,
    ) -> float:
        """Score a finished run in [0, 1]: tools were called (0.2), none failed (0.4, by share of
        results without an error, see :func:`is_tool_error`), a response came (0.25), fast enough (0.15).

        A run that called no tool scores at most 0.4: there is no procedure to learn from it.
        Arguments of the wrong kind (a string of tool names, results that are not a list, a time that
        is not a finite number >= 0) raise :class:`~fullrecall.errors.MemoryInputError` naming them.
        """
        if isinstance(tools_used, (str, bytes)) or not isinstance(tools_used, Sequence):
            raise MemoryInputError(f"evaluate_workflow: 'tools_used' must be a list of tool names, not {tools_used!r}")
        if isinstance(tool_results, (str, bytes, Mapping)) or not isinstance(tool_results, Iterable):  # one result
            # given alone (a dict) was read as its keys: a failed run scored 1.0
            raise MemoryInputError(f"evaluate_workflow: 'tool_results' must be a list, not {tool_results!r}")
        if not _is_number(execution_time_ms) or not 0 <= float(execution_time_ms) < math.inf:  # NaN fails too
            raise MemoryInputError("evaluate_workflow: 'execution_time_ms' must be a finite number >= 0, not "
                                   f"{execution_time_ms!r}")
        score = 0.0
        if tools_used:
            score += W_TOOLS
            results = list(tool_results)
            failed = sum(1 for r in results if is_tool_error(r))
            score += W_NO_ERRORS * (1.0 - failed / len(results) if results else 1.0)
        if (response_generated.strip() if isinstance(response_generated, str) else response_generated):
            score += W_RESPONSE
        t = float(execution_time_ms)
        fast = self.fast_execution_ms
        score += W_SPEED * (1.0 if t <= fast else max(0.0, 1.0 - (t - fast) / (2 * fast)))
        return round(min(1.0, max(0.0, score)), 6)

    # -- using -------------------------------------------------------------------------------
    def retrieve_patterns(self, query: str, top_k: int = 3) -> list[dict[str, Any]]:
        """The ``top_k`` stored patterns most similar to ``query`` (at least ``min_similarity``), best first.

        Each is a dict: ``id``, ``query``, ``query_type``, ``tools_used`` (in order),
        ``success_score``, ``success_count``, ``avg_execution_time_ms``, ``last_used``,
        ``expires_at`` and ``similarity``.
        """
        if not isinstance(query, str):
            raise MemoryInputError(f"retrieve_patterns: 'query' must be a string, not {query!r}")
        check_unicode(query, "retrieve_patterns: 'query'")
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise MemoryInputError(f"retrieve_patterns: 'top_k' must be an integer, not {top_k!r}")
        found = self.book.similar(query, self.book.entries(), top_k)  # the cache's: only the best are copied
        return [
            {"id": r.id, **public_data(r), "similarity": s} for r, s in found if s >= self.min_similarity
        ]

    def plan_tool_sequence(self, query: str, past_patterns: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Suggest tools for ``query``: the best past pattern's order (by success score, then use count).

        ``past_patterns`` defaults to :meth:`retrieve_patterns` of ``query``. With none, the
        fallback suggests ``default_tools`` with a confidence of 0.3, below any stored pattern's.
        """
        patterns = list(self.retrieve_patterns(query) if past_patterns is None else _checked_patterns(past_patterns))
        if not patterns:
            return {
                "suggested_tools": list(self.default_tools),
                "reasoning": "No similar successful workflow is stored; falling back to the default tools.",
                "confidence": FALLBACK_CONFIDENCE,
                "pattern_id": None,
                "alternatives": [],
            }
        ranked = sorted(patterns, key=lambda p: (-float(p["success_score"]), -int(p.get("success_count", 1))))
        best = ranked[0]
        similar = f" (similarity {best['similarity']:.2f})" if "similarity" in best else ""
        return {
            "suggested_tools": list(best["tools_used"]),
            "reasoning": (
                f"Based on a previous successful workflow for {best.get('query', 'a similar task')!r}{similar}, "
                f"which succeeded {best.get('success_count', 1)} time(s) with score {float(best['success_score']):.2f}."
            ),
            "confidence": float(best["success_score"]),
            "pattern_id": best.get("id"),
            "alternatives": [list(p["tools_used"]) for p in ranked[1:]],
        }

    # -- housekeeping ------------------------------------------------------------------------
    def patterns(self) -> list[dict[str, Any]]:
        """Every live pattern (expired ones are purged on the way)."""
        return [{"id": r.id, **public_data(r)} for r in self.book.all()]

    def delete_pattern(self, pattern_id: str) -> bool:
        return self.book.delete(pattern_id)

    def close(self) -> None:
        """Close the store if this memory opened it (a store passed in is the caller's to close)."""
        if self._owns_store:
            self.store.close()


def _check_pattern(query: Any, tools_used: Any, success_score: Any, execution_time_ms: Any) -> None:
    if not isinstance(query, str) or not query.strip():
        raise MemoryInputError(f"pattern: 'query' must be a non-empty string, not {query!r}")
    if isinstance(tools_used, str) or not isinstance(tools_used, Sequence) or not all(
            isinstance(t, str) and t for t in tools_used):
        raise MemoryInputError(f"pattern {query!r}: 'tools_used' must be a list of tool names, not {tools_used!r}")
    check_unicode(query, "pattern: 'query'")
    _no_nul(query, "pattern: 'query'")
    for i, tool in enumerate(tools_used):
        check_unicode(tool, f"pattern {query!r}: 'tools_used[{i}]'")
        _no_nul(tool, f"pattern {query!r}: 'tools_used[{i}]'")
    checks = (("success_score", success_score, 1.0), ("execution_time_ms", execution_time_ms, math.inf))
    for name, value, upper in checks:
        if not _is_number(value) or not 0 <= value <= upper or not math.isfinite(float(value)):
            bound = "a number in [0, 1]" if upper == 1.0 else "a finite number >= 0"
            raise MemoryInputError(f"pattern {query!r}: {name!r} must be {bound}, not {value!r}")


def _no_nul(value: str, where: str) -> None:
    r"""A NUL in a pattern's task or a tool's name: refused, as the service and the MCP server refuse it. The
    pattern's id hashes its parts joined by NUL, so ``["fetch\x00plot"]`` would be the pattern ``["fetch", "plot"]``.
    """
    if "\x00" in value:
        raise MemoryInputError(f"{where} must not contain a NUL character, got {value!r}")


def _is_number(value: Any) -> bool:
    """An int or float (not a bool) that a float holds: an integer too large for one is no run time."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _check_settings(**settings: Any) -> None:
    """The constructor's numbers: the score in [0, 1], the similarity in [-1, 1] (a cosine), the TTL (or None)
    and the fast time finite and above 0.
    """
    bounds = {"min_success_score": (0.0, 1.0), "min_similarity": (-1.0, 1.0)}
    for name, value in settings.items():
        if name == "ttl_days" and value is None:
            continue
        low, high = bounds.get(name, (0.0, MAX_TTL_DAYS if name == "ttl_days" else math.inf))
        if not _is_number(value) or not low <= value <= high or not math.isfinite(float(value)) \
                or (name not in bounds and value == 0):
            bound = f"a number in [{low:g}, {high:g}]" if name in bounds else \
                f"a number > 0 and at most {high:,.0f}" if name == "ttl_days" else "a finite number > 0"
            raise MemoryInputError(f"ProceduralMemory: {name!r} must be {bound}"
                                   f"{' (or None)' if name == 'ttl_days' else ''}, not {value!r}")


def _checked_patterns(patterns: Any) -> list[dict[str, Any]]:
    """``plan_tool_sequence``'s ``past_patterns``: dicts with their tools and a success score, else named."""
    if isinstance(patterns, (str, bytes, dict)) or not isinstance(patterns, Iterable):
        raise MemoryInputError(f"plan_tool_sequence: 'past_patterns' must be a list of patterns, not {patterns!r}")
    checked = list(patterns)
    for i, p in enumerate(checked):
        tools = p.get("tools_used") if isinstance(p, dict) else None
        score: Any = p.get("success_score") if isinstance(p, dict) else None
        if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools) \
                or not _is_number(score) or not 0.0 <= float(score) <= 1.0:  # NaN too: it outranked 0.95
            raise MemoryInputError(f"plan_tool_sequence: past pattern {i} must be a dict with 'tools_used' (a list of "
                                   f"tool names) and a 'success_score' in [0, 1], not {p!r}")
        count, similarity = p.get("success_count", 1), p.get("similarity", 0.0)
        if not _is_number(count) or not 0 <= float(count) < math.inf:
            raise MemoryInputError(f"plan_tool_sequence: past pattern {i}: 'success_count' must be a finite number "
                                   f">= 0, not {count!r}")
        if not _is_number(similarity) or not math.isfinite(float(similarity)):
            raise MemoryInputError(f"plan_tool_sequence: past pattern {i}: 'similarity' must be a finite number, "
                                   f"not {similarity!r}")
    return checked

"""Long-term memory over HTTP: ``/v1/memories``, ``/v1/facts`` and ``/v1/patterns``.

The routes are thin: each builds the library's memory for the caller's owner and calls it.

* ``POST /v1/memories/record`` and ``POST /v1/memories/retrieve``:
  :class:`~fullrecall.memory.PersistentMemory` (turns archived verbatim with their embeddings,
  user-stated facts kept by rules; hybrid search across the owner's sessions);
* ``POST /v1/facts``, ``GET /v1/facts``, ``DELETE /v1/facts/{fact_id}``:
  :class:`~fullrecall.memory.FactMemory` (facts with validity intervals; a newer value of an
  attribute supersedes the older one, which ``history=true`` still lists);
* ``POST /v1/patterns``, ``GET /v1/patterns``, ``POST /v1/patterns/search``,
  ``POST /v1/patterns/plan``, ``DELETE /v1/patterns/{pattern_id}``:
  :class:`~fullrecall.memory.ProceduralMemory` (tool sequences that solved a kind of task).

The owner is the key's tenant and the user and agent the request names (query parameters on
``GET``/``DELETE``, body fields on ``POST``), checked against the key's allowed users and agents
by :func:`~.tenancy.scope_for`: no route reaches another tenant's memory, and an id of another
tenant's fact or pattern is simply not found (404). Nothing here calls an LLM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ..memory.facts import Fact
from ..memory.persistent import _line
from .auth import Principal
from .conversations import NotFound, check_text
from .tenancy import check_conversation, check_name, scope_for

if TYPE_CHECKING:
    from ..memory import FactMemory, PersistentMemory, ProceduralMemory
    from .app import Service

MAX_TEXT = 10_000
DEFAULT_SESSION = "default"


class _Body(BaseModel):
    """A request body: no unknown fields, no NUL character anywhere, no NaN or Infinity in a number, an owner (user
    and agent) to act for.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)  # true is no number, "5" no integer
    user_id: str | None = Field(None, max_length=200, description="the user (default owner if unset)")
    agent_id: str | None = Field(None, max_length=200, description="the agent (default owner if unset)")

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any, info: ValidationInfo) -> Any:
        check_text(value, str(info.field_name))
        return value


class RecordBody(_Body):
    messages: list[dict[str, Any]] | dict[str, Any] = Field(
        description="one message or a turn, in any supported shape; system and empty messages are skipped")
    metadata: dict[str, Any] | None = Field(None, description='kept with every message; {"turn": n} makes a retry '
                                                              "store once")
    session_id: str | None = Field(None, min_length=1, max_length=200,
                                   description=f"the session written to (default {DEFAULT_SESSION!r})")


class RetrieveBody(_Body):
    query: str | list[dict[str, Any]] = Field(description="a text, or messages (each of the last three is a query)")
    limit: int = Field(5, ge=1, le=100, description="how many facts and how many messages, at most")
    kinds: list[Literal["fact", "message"]] = Field(["fact", "message"], min_length=1)

    @field_validator("query")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        if isinstance(value, str) and len(value) > MAX_TEXT:
            raise ValueError(f"at most {MAX_TEXT:,} characters")
        return value


class FactBody(_Body):
    text: str = Field(min_length=1, max_length=MAX_TEXT, description="the fact, e.g. 'My city is Lyon'")
    subject: str | None = Field(None, max_length=200)
    attribute: str | None = Field(None, max_length=200, description="a single-valued attribute (found by rules "
                                                                    "in the text when unset)")
    value: str | None = Field(None, max_length=MAX_TEXT)
    valid_from: float | None = Field(None, description="when it became true (Unix seconds; default now)")


class PatternBody(_Body):
    query: str = Field(min_length=1, max_length=MAX_TEXT, description="the task")
    tools_used: list[str] = Field(max_length=1000, description="the tools called, in order")
    success_score: float = Field(ge=0, le=1)
    execution_time_ms: float = Field(ge=0)
    query_type: str | None = Field(None, max_length=200)


class PatternQuery(_Body):
    query: str = Field(min_length=1, max_length=MAX_TEXT, description="the task at hand")
    top_k: int = Field(3, ge=1, le=100)


def fact_out(fact: Fact) -> dict[str, Any]:
    """A fact as the API returns it: every field, ``current`` and its validity interval."""
    return {**fact.to_dict(), "current": fact.is_current,
            "valid": {"from": fact.valid_from, "to": fact.valid_to}}


def router(service: Service, principal: Callable[..., Any]) -> APIRouter:
    """The long-term routes over ``service``'s store and embedder; ``principal`` is the key dependency."""
    routes = APIRouter(tags=["long-term memory"])
    Key = Depends(principal)
    User = Query(None, max_length=200, description="the user (default owner if unset)")
    Agent = Query(None, max_length=200, description="the agent (default owner if unset)")
    embedder = service.indexer.embedder
    store = service.store

    def owner(p: Principal, user_id: str | None, agent_id: str | None) -> tuple[str, str, str]:
        s = scope_for(p, user_id=user_id, agent_id=agent_id)
        return s.tenant, s.user_id or "", s.agent_id or ""  # type: ignore[return-value] # one owner, never ANY

    def memory(p: Principal, user_id: str | None, agent_id: str | None, session_id: str | None = None
               ) -> PersistentMemory:
        from ..memory import PersistentMemory

        tenant, user, agent = owner(p, user_id, agent_id)
        session = check_conversation(session_id, "session_id") or DEFAULT_SESSION
        return PersistentMemory(user, agent, session, store=store, tenant=tenant, embedder=embedder,
                                warm=False)  # one request's: its own search reads what it needs

    def facts(p: Principal, user_id: str | None, agent_id: str | None) -> FactMemory:
        from ..memory import FactMemory

        tenant, user, agent = owner(p, user_id, agent_id)
        return FactMemory(store, user_id=user, agent_id=agent, tenant=tenant, embedder=embedder)

    def procedures(p: Principal, user_id: str | None, agent_id: str | None) -> ProceduralMemory:
        from ..memory import ProceduralMemory

        tenant, user, agent = owner(p, user_id, agent_id)
        return ProceduralMemory(store, user_id=user, agent_id=agent, tenant=tenant, embedder=embedder)

    # -- PersistentMemory -------------------------------------------------------------------------
    @routes.post("/v1/memories/record", status_code=201)
    async def record(body: RecordBody, p: Principal = Key) -> dict:
        """Archive a turn verbatim with its embeddings (and the facts it states); the stored message ids."""
        m = memory(p, body.user_id, body.agent_id, body.session_id)
        ids = await service.writes.run(m.record_sync, body.messages, body.metadata)
        service.metrics.messages.labels(p.tenant).inc(len(ids))
        return {"session_id": m.session_id, "ids": ids}

    @routes.post("/v1/memories/retrieve")
    async def retrieve(body: RetrieveBody, p: Principal = Key) -> dict:
        """The current facts and archived messages most relevant to the query, and the same as context lines."""
        m = memory(p, body.user_id, body.agent_id)
        hits = await service.searches.run(lambda: m.search(body.query, body.limit, kinds=tuple(body.kinds)))
        service.metrics.recalls.labels(p.tenant, "memory").inc()
        return {"hits": [h.to_dict() for h in hits], "context": "\n".join(_line(h) for h in hits)}

    # -- FactMemory -------------------------------------------------------------------------------
    @routes.post("/v1/facts", status_code=201)
    async def remember(body: FactBody, p: Principal = Key) -> dict:
        """Keep a fact (merged into the current one it repeats; a newer value of an attribute supersedes the old)."""
        f = facts(p, body.user_id, body.agent_id)
        fact = await service.writes.run(lambda: f.remember(
            body.text, subject=body.subject, attribute=body.attribute, value=body.value, valid_from=body.valid_from))
        return {"fact": fact_out(fact)}

    @routes.get("/v1/facts")
    def list_facts(p: Principal = Key, user_id: str | None = User, agent_id: str | None = Agent,
                   history: bool = Query(False, description="include superseded facts"),
                   subject: str | None = Query(None, max_length=200),
                   attribute: str | None = Query(None, max_length=200)) -> dict:
        """The owner's current facts (``history=true``: every fact, superseded ones too), by ``valid_from``."""
        f = facts(p, user_id, agent_id)
        found = f.history(subject, attribute) if history else f.current(subject, attribute)
        return {"facts": [fact_out(x) for x in sorted(found, key=lambda x: (x.valid_from, x.stated_at))]}

    @routes.delete("/v1/facts/{fact_id:path}")
    def forget_fact(fact_id: str, p: Principal = Key, user_id: str | None = User, agent_id: str | None = Agent
                    ) -> dict:
        """Delete one fact for good."""
        check_name(fact_id, "fact_id")  # a NUL was a 404 on one store and a driver's refusal (422) on another
        if not facts(p, user_id, agent_id).forget(fact_id):
            raise NotFound(f"fact {fact_id!r} not found")
        return {"id": fact_id, "deleted": True}

    # -- ProceduralMemory -------------------------------------------------------------------------
    @routes.post("/v1/patterns")
    async def store_pattern(body: PatternBody, p: Principal = Key) -> dict:
        """Keep a workflow when its score reaches the threshold; ``pattern_id`` is null when it does not."""
        procedural = procedures(p, body.user_id, body.agent_id)
        pattern_id = await service.writes.run(lambda: procedural.store_pattern(
            body.query, body.tools_used, body.success_score, body.execution_time_ms, query_type=body.query_type))
        return {"pattern_id": pattern_id, "stored": pattern_id is not None,
                "min_success_score": procedural.min_success_score}

    @routes.get("/v1/patterns")
    def list_patterns(p: Principal = Key, user_id: str | None = User, agent_id: str | None = Agent) -> dict:
        """Every live pattern of the owner."""
        return {"patterns": procedures(p, user_id, agent_id).patterns()}

    @routes.post("/v1/patterns/search")
    async def search_patterns(body: PatternQuery, p: Principal = Key) -> dict:
        """The stored patterns most similar to the task, best first, each with its similarity."""
        procedural = procedures(p, body.user_id, body.agent_id)
        found = await service.searches.run(procedural.retrieve_patterns, body.query, body.top_k)
        service.metrics.recalls.labels(p.tenant, "patterns").inc()
        return {"patterns": found}

    @routes.post("/v1/patterns/plan")
    async def plan(body: PatternQuery, p: Principal = Key) -> dict:
        """Suggested tools for the task: the best similar pattern's order, or a less confident fallback."""
        procedural = procedures(p, body.user_id, body.agent_id)
        found = await service.searches.run(procedural.retrieve_patterns, body.query, body.top_k)
        service.metrics.recalls.labels(p.tenant, "patterns").inc()
        return procedural.plan_tool_sequence(body.query, found)

    @routes.delete("/v1/patterns/{pattern_id:path}")
    def forget_pattern(pattern_id: str, p: Principal = Key, user_id: str | None = User,
                       agent_id: str | None = Agent) -> dict:
        """Delete one pattern for good."""
        check_name(pattern_id, "pattern_id")
        if not procedures(p, user_id, agent_id).delete_pattern(pattern_id):
            raise NotFound(f"pattern {pattern_id!r} not found")
        return {"id": pattern_id, "deleted": True}

    return routes

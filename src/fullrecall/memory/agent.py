"""``MemoryAgent``: a small chat loop with both memories around any chat model the project supports.

Each :meth:`MemoryAgent.chat` turn

1. adds the new messages to the session's :class:`~fullrecall.memory.conversation.SyncConversationMemory`
   (durable at once; the window is trimmed or summarized as configured);
2. retrieves what the user's long-term :class:`~fullrecall.memory.persistent.PersistentMemory`
   knows (facts and messages of past sessions), and tool sequences that solved similar tasks
   when a :class:`~fullrecall.memory.procedural.ProceduralMemory` is given;
3. sends the window, its newest user message enriched with what the archive recalls, to the
   model, streaming the answer;
4. records the answer in the conversation and the whole turn in long-term memory.

Memory never stops the conversation unless asked to: a failing memory step is counted and, by
``errors``, logged (``"log"``, the default), raised (``"raise"``) or passed over (``"silent"``).
Nothing on the memory path calls an LLM unless a ``memory_model`` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from typing import Any

from ..errors import FactExtractionError
from ..stores import _validate as V
from ..summarizers.base import Summary
from ..summarizers.chat_models.base import ChatModelError, ChatRequest, ChatResponse, valid_text
from ..summarizers.llm import LLMSummarizer
from ..tokens import default_token_counter
from ._records import checked
from .conversation import SyncConversationMemory
from .persistent import ERROR_MODES, PersistentMemory
from .procedural import ProceduralMemory

log = logging.getLogger("fullrecall.memory")

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant with a long-term memory of this user."
_CHAT_ROLES = ("user", "assistant")
WINDOW_SUFFIX = "#window"  # the conversation window's agent id is the agent's with this suffix


class CountingChatModel:
    """A chat model that counts its calls and those that failed (the memory's own LLM use shows in
    :meth:`MemoryAgent.stats`).
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = getattr(model, "name", type(model).__name__)
        self.calls = 0
        self.failures = 0

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        try:
            return self.model.complete(request)
        except Exception:
            self.failures += 1
            raise

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        try:
            return await self.model.acomplete(request)
        except Exception:
            self.failures += 1
            raise


class MemoryAgent:
    """A chat loop over ``model`` that remembers the user across sessions (see the module docstring).

    ``model`` is a chat model with ``acomplete`` (:class:`~fullrecall.summarizers.chat_models.OpenAIChatModel`,
    :class:`~fullrecall.summarizers.chat_models.BedrockChatModel`, ...), a Strands ``Model`` or
    ``Agent`` (streamed token by token), or ``"env"`` for the one the environment configures.
    The memories default to ones built on ``store`` for ``user_id``/``agent_id`` in ``session_id``
    (a new session unless given); pass ``memory``, ``conversation`` or ``procedural`` to use your own.
    ``memory_model`` (optional) is the chat model the memory itself may use: fact extraction and
    window summaries; its calls are counted. ``window_options`` configure the conversation's
    :class:`~fullrecall.archive.SemanticSummarizingConversationManager` (e.g. ``{"max_history_turns": 10}``).
    """

    def __init__(
        self,
        model: Any,
        *,
        store: Any = "sqlite:///fullrecall_memory.db",
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        memory: PersistentMemory | None = None,
        conversation: SyncConversationMemory | None = None,
        procedural: ProceduralMemory | None = None,
        memory_model: Any = None,
        embedder: Any = None,
        retrieve_limit: int = 5,
        max_tokens: int = 1024,
        temperature: float = 0.3,
        errors: str = "log",
        window_options: dict[str, Any] | None = None,
    ) -> None:
        if errors not in ERROR_MODES:
            raise ValueError(f"errors must be one of {ERROR_MODES}, got {errors!r}")
        from ..embeddings import load_embedder
        from ..stores import open_store

        checked(V.check_owner_id, user_id, "'user_id'")  # refused before a store is opened, as by PersistentMemory
        checked(V.check_owner_id, agent_id, "'agent_id'")
        if session_id:  # (None or "": a new session)
            checked(V.check_session_id, session_id, "MemoryAgent: 'session_id'")
        self.model = _chat_model(model)
        self.memory_model = CountingChatModel(memory_model) if memory_model is not None else None
        # a store opened here from a URL is this agent's to close; the conversation is kept on the memory's store
        self._opened_store = open_store(store) if isinstance(store, str) and memory is None else None
        store = self._opened_store or store
        self._owns_memory, self._owns_conversation = memory is None, conversation is None
        self.session_id = session_id or (conversation.scope.session_id if conversation else None) \
            or (memory.session_id if memory else None) or f"s-{uuid.uuid4().hex}"
        if embedder is None and memory is not None:
            embedder = memory.embedder
        self.embedder = load_embedder(embedder)
        self.memory = memory or PersistentMemory(  # its failed fact extractions reach the agent, as any step's failure
            user_id, agent_id, self.session_id, store=store, embedder=self.embedder, chat_model=self.memory_model,
            errors="raise")
        # the window's log lives beside long-term memory, under its own agent id: the same words are not found twice
        self._conversation_options: dict[str, Any] = {
            "user_id": self.memory.user_id, "agent_id": f"{self.memory.agent_id}{WINDOW_SUFFIX}",
            "tenant": self.memory.tenant,  # a memory passed in of another tenant: its window log is there too
            "embedding_model": self.embedder, **(window_options or {}),
        }
        self._summarizer: _CountingSummarizer | None = None
        if self.memory_model is not None:
            self._summarizer = self._conversation_options["summarizer"] = _CountingSummarizer(self.memory_model)
        self.conversation = conversation or SyncConversationMemory(
            self.memory.store, self.session_id, **self._conversation_options)
        self.procedural = procedural
        self.system_prompt = system_prompt
        self.retrieve_limit = retrieve_limit
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.errors = errors
        self._tokens = default_token_counter()
        self._turn = 0
        self._recalled = False  # whether this turn's model call got remembered context
        self._counts = {"messages": 0, "bytes": 0, "recalls": 0, "failures": 0, "tokens_recorded": 0}
        self.last_context = ""  # the memory the last turn's model call was given (for inspection)

    # -- the loop ------------------------------------------------------------------------------
    async def chat(
        self, messages: str | dict[str, Any] | Sequence[dict[str, Any]], clear_history: bool = False,
        reset_chat: bool = False,
    ) -> AsyncIterator[str]:
        """Stream the answer to ``messages`` (a string is one user message), remembering the turn.

        ``reset_chat`` starts the session's conversation afresh first (as :meth:`reset`);
        ``clear_history`` answers from these messages and memory only, without the conversation so far
        (which is kept). A malformed message raises :class:`~fullrecall.errors.MessageFormatError` (or
        :class:`~fullrecall.errors.MemoryInputError`) naming it before anything is written, whatever ``errors``
        says. The turn is recorded once the answer has been streamed to the end. Memory's own work (the store,
        embeddings, a memory model's summaries and extractions) runs on a worker thread: the event loop goes on.
        """
        new = _as_messages(messages)
        if reset_chat:
            await self.reset()
        self._turn += 1
        request = await asyncio.to_thread(self._request, new, clear_history)
        parts: list[str] = []
        async for chunk in self._stream(request):
            parts.append(chunk)
            yield chunk
        answer = {"role": "assistant", "content": "".join(parts)}
        await asyncio.to_thread(self._record, new, answer)

    async def reset(self) -> None:
        """Clear this session's conversation (its window goes to the archive); long-term memory stays."""
        await asyncio.to_thread(self._reset)

    def _reset(self) -> None:
        with self._guard("reset the conversation"):
            self.conversation.clear()

    async def forget(self) -> dict[str, Any]:
        """Erase what this agent keeps of its user: long-term memory (every session's messages, facts, patterns
        and sessions under the memory's owner, as ``memory.clear()``) and the conversation window's log of
        every session (another owner, the agent id with ``#window``), this session's included: its window
        starts empty. Returns the per-kind counts of both, added up, and what may remain (``remaining``,
        as a store's ``forget`` says). A failure raises, whatever ``errors`` says: an erasure is never
        taken for done when it is not.
        """
        return await asyncio.to_thread(self._forget)

    def _forget(self) -> dict[str, Any]:
        counts = [self.memory.clear(),
                  self.conversation.forget(),  # this session's log, and its window in process: empty
                  self.conversation.store.forget(replace(self.conversation.scope, session_id=None))]  # the others'
        self._counts["tokens_recorded"] = 0  # erased words are not tokens the window saved
        out: dict[str, Any] = {k: sum(c.get(k, 0) for c in counts) for k in dict.fromkeys(k for c in counts for k in c)
                               if k != "remaining"}
        out["remaining"] = [r for c in counts for r in c.get("remaining", [])]
        return out

    def stats(self) -> dict[str, Any]:
        """What memory did: messages and bytes recorded, tokens the window saved by summaries and trimming,
        recalls that reached the model, facts and patterns known, LLM calls memory made (``llm_calls``) and
        those that failed (``llm_failures``), window summaries written without the memory model because it
        kept failing (``summary_fallbacks``), fact extractions that failed (``extraction_failures``: in the memory
        the agent makes, each is also a failed memory step), failures of memory steps.
        """
        out: dict[str, Any] = {k: v for k, v in self._counts.items() if k != "tokens_recorded"}
        out.update(tokens_saved=0, facts=0, patterns=0)
        # an observer: a store that cannot be read now leaves these at 0 (the failure shows in the next turn)
        with contextlib.suppress(Exception):
            window = sum(self._tokens.count(_text(m)) for m in self.conversation.messages)
            out["tokens_saved"] = max(0, self._counts["tokens_recorded"] - window)
        with contextlib.suppress(Exception):
            out["facts"] = len(self.memory.facts.current())
        if self.procedural is not None:
            with contextlib.suppress(Exception):
                out["patterns"] = len(self.procedural.patterns())
        out["llm_calls"] = self.memory_model.calls if self.memory_model is not None else 0
        out["llm_failures"] = self.memory_model.failures if self.memory_model is not None else 0
        out["summary_fallbacks"] = self._summarizer.fallbacks if self._summarizer is not None else 0
        out["extraction_failures"] = getattr(self.memory, "extraction_failures", 0)
        out["failures"] = self._counts["failures"]
        return out

    def close(self) -> None:
        """Close what this agent opened: the memories it made (the window's background indexing finished) and
        the store it opened from a URL. A memory, conversation or store passed in is the caller's to close.
        Calling it twice is harmless.
        """
        if self._owns_conversation:
            self._owns_conversation = False
            self.conversation.close()
        if self._owns_memory:
            self._owns_memory = False
            self.memory.close()
        if self._opened_store is not None:
            store, self._opened_store = self._opened_store, None
            store.close()

    # -- steps ---------------------------------------------------------------------------------
    def _request(self, new: list[dict[str, Any]], clear_history: bool) -> ChatRequest:
        """The model call for the new messages: added to the conversation, with what memory recalls for them."""
        with self._guard("add to the conversation"):
            self.conversation.add(new)
        query = [m for m in new if m.get("role") != "system"] or new
        self._recalled = False  # set by either step that adds remembered context: the turn counts once
        context = self._retrieve(query)
        window = new if clear_history else self._window(new)
        if self._recalled:
            self._counts["recalls"] += 1
        return ChatRequest(system=self._system(new, context), messages=tuple(_chat_messages(window)),
                           max_tokens=self.max_tokens, temperature=self.temperature)

    def _retrieve(self, query: list[dict[str, Any]]) -> str:
        """Long-term memory and procedures relevant to the turn, as text for the system prompt."""
        blocks: list[str] = []
        with self._guard("retrieve from long-term memory"):
            hits = self.memory.search(query, self.retrieve_limit)
            if hits:
                blocks.append("What you remember about this user:\n" + "\n".join(
                    f"- [{h.kind}] {h.text}" for h in hits))
        if self.procedural is not None:
            text = " ".join(_text(m) for m in query)
            with self._guard("retrieve procedures"):
                plan = self.procedural.plan_tool_sequence(text)
                if plan["pattern_id"] is not None:
                    blocks.append(f"Tools that solved similar tasks:\n- in order: {', '.join(plan['suggested_tools'])} "
                                  f"({plan['reasoning']})")
        if blocks:
            self._recalled = True
        self.last_context = "\n\n".join(blocks)
        return self.last_context

    def _window(self, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The conversation window with archive recall added (just the new messages if memory failed)."""
        window = list(new)
        with self._guard("recall from the archive"):
            stored = self.conversation.model_input()
            if stored:
                window = stored
                if stored != self.conversation.messages:
                    self._recalled = True
        return window

    def _system(self, new: list[dict[str, Any]], context: str) -> str:
        own = [_text(m) for m in new if m.get("role") in ("system", "developer")]
        parts = [self.system_prompt, *own]
        if context:
            parts.append("Memory (use it when it helps; it may be out of date):\n" + context)
        return "\n\n".join(p for p in parts if p)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[str]:
        stream = getattr(self.model, "stream_text", None)
        if stream is not None:
            async for chunk in stream(request):
                yield chunk
            return
        response = await self.model.acomplete(request)
        if response.text:
            yield response.text

    def _record(self, new: list[dict[str, Any]], answer: dict[str, Any]) -> None:
        with self._guard("add the answer to the conversation"):
            self.conversation.add(answer)
        turn = [m for m in new if m.get("role") not in ("system", "developer")] + [answer]
        with self._guard("record to long-term memory"):
            try:
                ids = self.memory.record_sync(turn, {"turn": f"{self.session_id}:{self._turn}"})
            except FactExtractionError as exc:  # the turn's words are recorded all the same
                self._recorded(turn, exc.ids)
                raise
            self._recorded(turn, ids)

    def _recorded(self, turn: list[dict[str, Any]], ids: list[str]) -> None:
        self._counts["messages"] += len(ids)
        for m in turn:
            text = _text(m)
            self._counts["bytes"] += len(text.encode())
            self._counts["tokens_recorded"] += self._tokens.count(text)

    @contextlib.contextmanager
    def _guard(self, step: str) -> Iterator[None]:
        """Count a memory step's failure and handle it as ``errors`` says."""
        try:
            yield
        except Exception as exc:
            self._counts["failures"] += 1
            if self.errors == "raise":
                raise
            if self.errors == "log":
                step = "extract facts" if isinstance(exc, FactExtractionError) else step  # the words are recorded
                log.warning("memory could not %s (the chat goes on): %s: %s", step, type(exc).__name__, exc)


class _CountingSummarizer(LLMSummarizer):
    """The window's summarizer over the memory model, counting the summaries written without it (a fallback, or
    an error that kept every message).
    """

    fallbacks = 0

    def summarize(self, messages: Sequence[Any], previous_summary: str | None = None) -> Summary:
        try:
            return self._note(super().summarize(messages, previous_summary))
        except Exception:
            self.fallbacks += 1
            raise

    async def asummarize(self, messages: Sequence[Any], previous_summary: str | None = None) -> Summary:
        try:
            return self._note(await super().asummarize(messages, previous_summary))
        except Exception:
            self.fallbacks += 1
            raise

    def _note(self, summary: Summary) -> Summary:
        self.fallbacks += summary.report.fallback is not None
        return summary


class _StrandsStream:
    """A Strands ``Model`` (or ``Agent``, or a :class:`StrandsChatModel` and its settings) streamed as text chunks
    (and ``acomplete`` for completeness).
    """

    def __init__(self, model_or_agent: Any) -> None:
        from ..summarizers.chat_models.strands import StrandsChatModel

        is_chat_model = isinstance(model_or_agent, StrandsChatModel)
        self._inner = model_or_agent if is_chat_model else StrandsChatModel(model_or_agent)
        self.name = self._inner.name

    async def stream_text(self, request: ChatRequest) -> AsyncIterator[str]:
        """The answer's text as it comes, each try's stream within the model's ``deadline`` and its text within its
        ``max_response_bytes`` (UTF-8; a ChatModelError past either).

        A try that fails before any of its text reached the caller is tried again as the summarizer's call would be
        (the model's ``max_retries`` and backoff, a retryable error only: throttling, a timeout, a connection's
        failure, a stream cut short); once text has gone out a retry would repeat it, so the error is raised.
        """
        for attempt in range(self._inner.max_retries + 1):
            sent = False
            try:
                async for text in self._try(request):
                    sent = True
                    yield text
                return
            except ChatModelError as error:
                if sent:
                    raise
                await asyncio.sleep(self._inner.retry_delay(error, attempt))

    async def _try(self, request: ChatRequest) -> AsyncIterator[str]:
        """One try's text, its whole stream within the deadline."""
        system = "\n\n".join(p for p in (self._inner.system_prompt, request.system) if p) or None
        events = self._inner.answer_stream(request, system)  # the summarizer's reading: the same errors, the same rule
        deadline = self._inner.deadline
        end = asyncio.get_running_loop().time() + deadline
        try:
            while True:
                try:
                    text, _ = await asyncio.wait_for(anext(events), max(0.0, end - asyncio.get_running_loop().time()))
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise ChatModelError(f"{self.name} timed out: no complete answer within the deadline of "
                                         f"{deadline:g} s per request", retryable=True) from None
                if text:
                    yield valid_text(text)
        finally:  # the provider's stream closed whichever way this one ends (a caller may stop reading)
            await events.aclose()

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        return await self._inner.acomplete(request)


def _chat_model(model: Any) -> Any:
    if isinstance(model, str) and model == "env":
        from ..summarizers.chat_models import chat_model_from_env

        return chat_model_from_env()
    from ..summarizers.chat_models.strands import StrandsChatModel

    if hasattr(model, "acomplete") and not isinstance(model, StrandsChatModel):
        return model
    if hasattr(model, "stream") or hasattr(model, "model"):  # a StrandsChatModel's settings hold when it streams
        return _StrandsStream(model)
    raise TypeError(f"expected a chat model (with acomplete), a Strands Model or Agent, or 'env'; "
                    f"got {type(model).__name__}")


def _as_messages(messages: Any) -> list[dict[str, Any]]:
    from ..errors import MemoryInputError
    from ..messages.formats import parse_messages

    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    elif isinstance(messages, dict):
        messages = [messages]
    messages = list(messages)
    if not messages:
        raise MemoryInputError("chat: 'messages' is empty")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise MemoryInputError(f"chat: message {i} must be a dict with a 'role', not {m!r}")
    parse_messages(messages)  # a malformed message is the caller's error, named, before anything is written
    return messages


def _text(message: dict[str, Any]) -> str:
    """A message's text, whatever its shape (OpenAI, Bedrock/Strands or Anthropic content)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _chat_messages(window: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The window as the plain user/assistant turns every chat model takes (others become user text)."""
    out: list[dict[str, str]] = []
    for m in window:
        role = m.get("role")
        if role in ("system", "developer"):
            continue
        text = _text(m)
        if not text:
            continue
        role = role if role in _CHAT_ROLES else "user"
        if out and out[-1]["role"] == role:  # providers want alternating turns
            out[-1] = {"role": role, "content": out[-1]["content"] + "\n\n" + text}
        else:
            out.append({"role": role, "content": text})
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": "(conversation continues)"})
    return out

"""Window management and recall for LangGraph and LangChain agents.

:class:`FullrecallWindow` keeps, per LangGraph thread, a durable
:class:`~fullrecall.memory.SyncConversationMemory` (window + verbatim archive in one
fullrecall store) and turns the graph's message list into what the model
should see: the window (oldest turns summarized or dropped, after being
archived) with the newest user message enriched by recalled archived turns.

* ``create_react_agent(..., pre_model_hook=window.pre_model_hook)``: returns
  ``llm_input_messages``, so the saved state keeps every message; with
  ``trim_state=True`` it also returns ``messages`` as
  ``[RemoveMessage(REMOVE_ALL_MESSAGES), *window]``, so the state itself is
  the window (never the enriched text).
* ``create_agent(..., middleware=[window.middleware()])``: a ``wrap_model_call``
  that changes only what the model sees (plus, with ``trim_state=True``, a
  ``before_model`` that trims the state).

Messages are converted to the OpenAI shape for the managers and back; a
message the managers left unchanged goes to the model as the very LangChain
object it was. Each message is added to the memory once, keyed by its
LangChain id (also its archive id): those after the memory's newest message
are new, and so is one inserted before it that the log lacks. The thread is
``config["configurable"]["thread_id"]`` (``"default"`` without one); the owner
is ``user_id`` (or the config's ``user_id``) and ``agent_id``. An owner or thread that shows nothing
is refused (:class:`~fullrecall.errors.InvalidInput`) before anything is written.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AnyMessage,
    BaseMessage,
    RemoveMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from ..errors import InvalidInput
from ..memory.conversation import SyncConversationMemory
from ..stores import open_store
from ..stores._validate import check_id, check_owner, check_owner_id, check_session_id
from ..stores.base import Scope, Store
from ._langgraph_threads import Thread, Threads

__all__ = ["FullrecallWindow"]

_MARK = "langgraph_id"  # metadata key: the LangChain id of the message a window dict came from
_MADE = re.compile(r"fullrecall-(?:user|assistant|system)-[0-9a-f]{20}")  # the id of a message the managers made

ManagerFactory = Callable[[Scope], Any]


class FullrecallWindow:
    """What the model sees, kept in budget with full recall, for any number of LangGraph threads.

    ``store``: a fullrecall Store or URL (window, archive and vectors live there).
    ``manager``: a function ``Scope -> ConversationManager`` for your own manager;
    by default a :class:`~fullrecall.archive.SemanticSummarizingConversationManager`
    built with ``manager_options`` (e.g. ``max_history_turns=20``,
    ``preserve_recent_messages=8``, ``summarizer=...``, ``embedding_model=...``).
    ``recall``: enrich the newest user message with archived context (needs a
    semantic manager). ``trim_state``: also replace the graph's messages with the
    window (see the module docstring). ``max_threads``: how many threads' locks and
    known message ids are kept in this process (the least recently used go first).
    """

    def __init__(
        self,
        store: Store | str = "sqlite:///:memory:",
        *,
        manager: ManagerFactory | None = None,
        recall: bool = True,
        trim_state: bool = False,
        user_id: str | None = None,
        agent_id: str = "",
        hook_options: dict[str, Any] | None = None,
        max_threads: int = 1024,
        **manager_options: Any,
    ) -> None:
        if manager_options.get("background_indexing"):
            raise InvalidInput("FullrecallWindow: background_indexing is not supported (the window builds each "
                               "thread's manager afresh at every model call, so each would start an indexing "
                               "thread that nothing stops); archived messages are embedded in the call")
        check_owner(user_id, agent_id)  # one that shows nothing, refused before the store is opened
        self.store: Store = open_store(store) if isinstance(store, str) else store
        self.recall = recall
        self.trim_state = trim_state
        self.user_id = user_id
        self.agent_id = agent_id
        self.hook_options = dict(hook_options or {})
        self._factory = manager
        self._manager_options = manager_options
        self._models_loaded = False
        self._threads = Threads(max_threads)  # per thread (LRU): its lock, the ids its log is known to hold
        self._locks_guard = threading.Lock()

    # -- the core: LangChain messages in, window and model input out -----------------------------------

    def scope(self, config: Mapping[str, Any] | None = None) -> Scope:
        """The fullrecall scope of the thread a run config names."""
        configurable = (config or {}).get("configurable") or {}
        given_user, given_thread = configurable.get("user_id"), configurable.get("thread_id")
        # an id that is falsy is still an id: user 0 is not the default owner, nor thread 0 the "default" thread
        user = self.user_id if self.user_id is not None else "" if given_user is None else str(given_user)
        thread = "default" if given_thread is None or given_thread == "" else str(given_thread)
        check_owner_id(user, "'user_id'")  # the config's, refused before its thread's memory is built
        check_session_id(thread, "'thread_id'")
        return Scope(user_id=user, agent_id=self.agent_id, session_id=thread)

    def memory(self, scope: Scope) -> SyncConversationMemory:
        """The thread's memory as the store has it now (a fresh object: other processes' writes are seen)."""
        from ..archive import SemanticMemoryHook, SemanticSummarizingConversationManager

        user, agent = scope.user_id, scope.agent_id
        if not isinstance(user, str) or not isinstance(agent, str):
            raise ValueError("a thread's memory belongs to one owner: ANY is only for reads")
        if self._factory is not None:
            manager = self._factory(scope)
        else:
            manager = SemanticSummarizingConversationManager(
                store=self.store, session_id=scope.session_id or "default", user_id=user,
                agent_id=agent, **self._options())
        semantic = isinstance(manager, SemanticSummarizingConversationManager)
        hook = SemanticMemoryHook(enabled=self.recall and semantic, manager=manager if semantic else None,
                                  **self.hook_options)
        return SyncConversationMemory(self.store, scope.session_id or "default", user_id=user,
                                      agent_id=agent, manager=manager, hook=hook)

    def _options(self) -> dict[str, Any]:
        """The default manager's options, its embedder (and reranker) loaded once, not at every model call."""
        with self._locks_guard:
            if not self._models_loaded:
                from ..embeddings import load_embedder, load_reranker

                options = self._manager_options
                model = options.get("embedding_model")
                if model is None or isinstance(model, str):
                    options["embedding_model"] = load_embedder(
                        model, aws_region=options.get("aws_region"),
                        embedding_dimensions=options.get("embedding_dimensions"))
                if isinstance(options.get("reranker_model"), str):
                    options["reranker_model"] = load_reranker(options["reranker_model"])
                self._models_loaded = True
            return self._manager_options

    @property
    def embedder(self) -> Any:
        """The embedder the default manager archives and recalls with (loaded on first use)."""
        return self._options()["embedding_model"]

    def view(
        self, messages: Sequence[AnyMessage], config: Mapping[str, Any] | None = None
    ) -> tuple[list[BaseMessage], list[BaseMessage]]:
        """(window, model input) for the graph's ``messages``; new messages are recorded durably first."""
        scope = self.scope(config)
        with self._threads.hold(scope) as thread:
            memory = self.memory(scope)
            ids = [_message_id(m, i) for i, m in enumerate(messages)]
            # what the state no longer holds leaves the window for the archive first: it is not shown, not counted
            held = set(ids)
            memory.leave([i for i, d in enumerate(memory.messages) if (mark := _mark(d)) is not None and mark not in held])
            new = _unseen(memory.messages, ids, memory.manager.removed_message_count, _known_to(memory, thread, held))
            if new:
                # keyed by their LangChain ids, so a message the memory holds already is never stored twice
                memory.add([_to_dict(messages[i], ids[i]) for i in new], keys=[ids[i] for i in new])
            originals = dict(zip(ids, messages))
            window = _as_the_state_has_it(memory.messages, memory.window_rows(), originals)
            return _to_langchain(window, originals), _to_langchain(memory.hook.enrich(window), originals)

    def reduce(
        self, messages: Sequence[AnyMessage], config: Mapping[str, Any] | None, error: BaseException | None = None
    ) -> tuple[list[BaseMessage], list[BaseMessage]]:
        """After a context overflow: shrink the thread's window (summarize or trim), then ``view`` it again.

        Raises :class:`~fullrecall.errors.ContextWindowOverflowError` when the window cannot shrink any further,
        so an overflow-retry loop always ends.
        """
        scope = self.scope(config)
        with self._threads.hold(scope):
            self.view(messages, config)  # records anything new first
            self.memory(scope).reduce_context(error)
        return self.view(messages, config)

    # -- LangGraph: create_react_agent(pre_model_hook=...) ------------------------------------------------

    def pre_model_hook(self, state: Any) -> dict[str, Any]:
        """For ``create_react_agent``: ``llm_input_messages`` (and, with ``trim_state``, ``messages``)."""
        from langgraph.config import get_config

        messages = state["messages"] if isinstance(state, dict) else state.messages
        window, model_input = self.view(messages, get_config())
        update: dict[str, Any] = {"llm_input_messages": model_input}
        if self.trim_state:
            update["messages"] = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *window]
        return update

    # -- LangChain: create_agent(middleware=[...]) --------------------------------------------------------

    def middleware(self) -> Any:
        """An ``AgentMiddleware`` for ``langchain.agents.create_agent`` doing what ``pre_model_hook`` does."""
        from ._langchain_middleware import FullrecallMiddleware

        return FullrecallMiddleware(self)

    async def aview(
        self, messages: Sequence[AnyMessage], config: Mapping[str, Any] | None = None
    ) -> tuple[list[BaseMessage], list[BaseMessage]]:
        return await asyncio.to_thread(self.view, messages, config)


# -- conversions -----------------------------------------------------------------------------------------------


def _message_id(message: BaseMessage, index: int) -> str:
    """The message's id as the window and the store know it: its LangChain id, or a digest of it when the store
    does not take it as an identifier (LangChain takes any string: too long, a NUL, a lone surrogate); one
    derived from its place and content when it has none (add_messages gives ids).
    """
    if message.id:
        try:
            return check_id(message.id, "id")
        except InvalidInput:
            return f"fullrecall-id-{hashlib.sha256(message.id.encode('utf-8', 'surrogatepass')).hexdigest()[:40]}"
    (body,) = convert_to_openai_messages([message])
    return f"fullrecall-{index}-{_digest(body)}"


def _to_dict(message: BaseMessage, message_id: str) -> dict[str, Any]:
    """The OpenAI-shape dict of a LangChain message, marked with its id (the archive's id for it too)."""
    (out,) = convert_to_openai_messages([message])
    out["metadata"] = {"id": message_id, _MARK: message_id}
    return out


def _as_the_state_has_it(window: list[dict[str, Any]], rows: list[Any], originals: dict[str, AnyMessage]
                         ) -> list[dict[str, Any]]:
    """The memory's window as the graph's state has it now: the state is the conversation.

    A message the state no longer holds (removed, or left behind by a fork from an earlier checkpoint when a
    question was edited or a reply regenerated) has left the window for the archive (``view``); one that cannot
    leave it (a pinned system message) is not shown either. A message the state holds
    otherwise than it was recorded (replaced under its own id: a correction by a human in the loop) is shown as
    the state has it; one the window changed itself (a long tool result it cut) as the window has it. The
    state's messages are shown in the state's order.
    """
    out = []
    for d, row in zip(window, rows, strict=True):
        mark = _mark(d)
        if mark is not None and mark not in originals:
            continue
        if mark is not None and row is not None and (now := _to_dict(originals[mark], mark)) != row.data:
            d = now
        out.append(d)
    # the state's messages in the state's order (one inserted before others was recorded after them), each
    # kept in a place a state message held: a summary or a pinned system message stays where it is
    order = {mark: i for i, mark in enumerate(originals)}
    places = [k for k, d in enumerate(out) if _mark(d) is not None]
    for k, d in zip(places, sorted((out[k] for k in places), key=lambda d: order[_mark(d) or ""])):
        out[k] = d
    return out


def _known_to(memory: SyncConversationMemory, thread: Thread, state: set[str]) -> Callable[[list[str]], set[str]]:
    """``logged(ids)``: those of ``ids`` the thread's log holds, each looked up in the store once while the log
    is unchanged (a state of a thousand messages costs no look-up per model call); after a forget or a deletion
    by any path (the log's mark moved) they are looked up again. The thread keeps only ids its state holds.
    """
    mark = memory.log_mark
    known = thread.known(mark)

    def logged(ids: list[str]) -> set[str]:
        found = set(known)
        if fresh := [i for i in ids if i not in found]:
            found |= memory.logged(fresh)
        thread.remember(mark, found, state)
        return {i for i in ids if i in found}

    return logged


def _mark(d: dict[str, Any]) -> str | None:
    meta = d.get("metadata")
    return meta.get(_MARK) if isinstance(meta, dict) else None


def _unseen(window: list[dict[str, Any]], ids: list[str], removed: int, logged: Callable[[list[str]], set[str]]
            ) -> list[int]:
    """Indices of the graph messages the memory has not recorded, in the state's order.

    Those after the newest one the window holds are new; one before it that the window does not hold is new
    unless the log has it (``logged(ids)``: those of ``ids`` it holds): a message inserted into the state, not
    appended, is recorded too. A summary the managers wrote (back in the state with ``trim_state``) is never new.
    """
    marks = [m for m in (_mark(d) for d in window) if m]
    if not marks and not removed:
        return [i for i in range(len(ids)) if not _MADE.fullmatch(ids[i])]  # a new thread
    known = set(marks)
    found = [i for i, m in enumerate(ids) if m not in known and not _MADE.fullmatch(m)]
    # after the newest recorded message all is new; before it, only what the log lacks (the state rewritten
    # by someone else, or a message inserted): one look-up, of the ids the window does not hold
    cut = len(ids) - ids[::-1].index(marks[-1]) if marks and marks[-1] in ids else len(ids)
    earlier = [ids[i] for i in found if i < cut]
    have = logged(earlier) if earlier else set()
    return [i for i in found if i >= cut or ids[i] not in have]


def _to_langchain(window: list[dict[str, Any]], originals: dict[str, AnyMessage]) -> list[BaseMessage]:
    """LangChain messages for window dicts: the original object where the dict is unchanged."""
    out: list[BaseMessage] = []
    for d in window:
        mark = _mark(d)
        original = originals.get(mark) if mark else None
        body = {k: v for k, v in d.items() if k != "metadata"}
        if original is not None and convert_to_openai_messages([original])[0] == body:
            out.append(original)
            continue
        (message,) = convert_to_messages([body])
        message.id = (original.id if original is not None else None) or mark or _summary_id(d)
        out.append(message)
    return out


def _digest(d: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()[:20]


def _summary_id(d: dict[str, Any]) -> str:
    """A stable id for a message the managers made (a summary): a digest of its content."""
    return f"fullrecall-{d.get('role', 'message')}-{_digest(d)}"

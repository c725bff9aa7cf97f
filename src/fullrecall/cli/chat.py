"""``fullrecall chat``: an interactive chat with memory, showing what was recalled and when the window was summarized.

Each line you type is added to a durable conversation (``--store``, ``--user``, ``--session``);
the model gets the active window with recalled context from the archive added to your
message. After each answer the chat shows the recalled messages (position, score) and, when
the window manager summarized, how many messages left the window. The model is
``--model scripted`` (canned answers, offline), an OpenAI-compatible endpoint (``--provider
openai --model NAME --base-url URL``), Amazon Bedrock (``--provider bedrock --model ID``), a
Strands model (``--provider strands --model package.module:factory``), or what the environment
configures (``FULLRECALL_LLM_MODEL``, ``FULLRECALL_BEDROCK_MODEL_ID``, ...). ``/quit`` or end of input ends it.
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_store, opened_store

SYSTEM = "You are a helpful assistant with a long memory. Use the recalled context when it is relevant."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store(parser, session=False)
    parser.add_argument("--session", default="chat", help="the conversation (default: chat)")
    parser.add_argument("--model", help="'scripted' (offline), a model name or id (default: from the environment)")
    parser.add_argument("--provider", choices=("openai", "bedrock", "strands"),
                        help="where --model runs (default: openai for a name, or what the environment says)")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint (env FULLRECALL_LLM_BASE_URL)")
    parser.add_argument("--api-key", help="its API key (env FULLRECALL_LLM_API_KEY or OPENAI_API_KEY)")
    parser.add_argument("--region", help="AWS region for Bedrock (env AWS_REGION)")
    parser.add_argument("--system", default=SYSTEM, help="the system prompt")
    parser.add_argument("--max-turns", type=int, default=10,
                        help="the window manager's max_history_turns: past it, the window is summarized (default 10)")
    parser.add_argument("--max-answer-tokens", type=int, default=800,
                        help="the most tokens the model may answer with (default 800)")


class ScriptedModel:
    """Canned answers, offline: it says what it was given, so recall is visible without an LLM."""

    name = "scripted"

    def __init__(self) -> None:
        self.turns = 0

    def complete(self, request: Any) -> Any:
        from ..summarizers.chat_models.base import ChatResponse

        self.turns += 1
        question = request.messages[-1]["content"] if request.messages else ""
        recalled = "---Previous Context---" in question
        asked = question.rsplit("Current question:", 1)[-1].strip() if "Current question:" in question else question
        return ChatResponse(f"(scripted answer {self.turns}) You said: {asked!r}."
                            + (" Earlier messages were recalled for me." if recalled else ""), model="scripted")

    async def acomplete(self, request: Any) -> Any:
        return self.complete(request)


def chat_model(args: argparse.Namespace) -> Any:
    """The chat model the options (or the environment) choose."""
    if args.model == "scripted":
        return ScriptedModel()
    if args.provider == "strands":
        return strands_model(args.model)
    if args.provider == "bedrock":
        from ..summarizers.chat_models.bedrock import BedrockChatModel

        return BedrockChatModel.from_env(**{k: v for k, v in (("model_id", args.model), ("region", args.region)) if v})
    if args.provider == "openai" or args.model or args.base_url:
        from ..summarizers.chat_models.openai import OpenAIChatModel

        return OpenAIChatModel.from_env(**{k: v for k, v in (("model", args.model), ("base_url", args.base_url),
                                                           ("api_key", args.api_key)) if v})
    from ..summarizers.chat_models.base import ChatModelError
    from ..summarizers.chat_models.env import chat_model_from_env

    try:
        return chat_model_from_env()
    except ChatModelError as exc:
        raise ChatModelError(f"{exc}; or --model with --provider, or --model scripted to chat offline") from None


def strands_model(target: str | None) -> Any:
    """The Strands model ``--model package.module:name`` names (a Model, an Agent, or a function returning one);
    a ValueError naming ``--model`` when it names none.
    """
    import importlib

    from ..summarizers.chat_models.strands import StrandsChatModel

    if not target or ":" not in target:
        raise ValueError("--provider strands needs --model package.module:name (a Model, an Agent, or a "
                         "function returning one)")
    module, _, attr = target.partition(":")
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as exc:  # the module, or one it imports
        raise ValueError(f"--model {target!r}: no module named {exc.name!r}") from None
    if not hasattr(found, attr):
        raise ValueError(f"--model {target!r}: module {module!r} has no {attr!r}")
    made = getattr(found, attr)
    if callable(made) and not hasattr(made, "stream"):  # a function (or class) that makes the model
        try:
            made = made()
        except Exception as exc:  # noqa: BLE001 - the user's code: its failure is the option's error, one line
            raise ValueError(f"--model {target!r}: calling {attr!r} failed ({type(exc).__name__}: {exc})") from None
    try:
        return StrandsChatModel(made)
    except TypeError:
        raise ValueError(f"--model {target!r}: not a Strands Model or Agent (a {type(made).__name__})") from None


def as_chat(messages: list[dict[str, Any]]) -> tuple[dict[str, str], ...]:
    """The window as plain ``{"role", "content"}`` turns (roles other than user and assistant folded to user)."""
    from .common import message_text

    out: list[dict[str, str]] = []
    for m in messages:
        role = m.get("role") if m.get("role") in ("user", "assistant") else "user"
        text = message_text(m)
        if out and out[-1]["role"] == role:
            out[-1] = {"role": role, "content": out[-1]["content"] + "\n\n" + text}
        else:
            out.append({"role": str(role), "content": text})
    return tuple(out)


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    import uuid

    from ..memory.conversation import SyncConversationMemory
    from ..stores._validate import check_session_id
    from ..summarizers.chat_models.base import ChatRequest
    from ..transfer._common import register
    from .common import emit, message_text, scope, shorten

    if args.max_turns < 2:
        raise ValueError("--max-turns must be at least 2")
    if args.max_answer_tokens < 1:  # before any message is stored: a provider refuses it with the first one
        raise ValueError("--max-answer-tokens must be at least 1")
    # --system as every request carries it, checked before any message is stored (a request refuses it)
    ChatRequest(system=args.system, messages=({"role": "user", "content": "check"},), max_tokens=1)
    model = chat_model(args)
    own = scope(args, args.session)  # checked before the store is made: a refused option leaves no file behind
    check_session_id(args.session, "--session")
    with opened_store(args) as store:
        register(store, own)
        memory = SyncConversationMemory(store, args.session, user_id=own.user_id or None,
                                        agent_id=own.agent_id or None, tenant=own.tenant, max_history_turns=args.max_turns,
                                        preserve_recent_messages=max(1, args.max_turns // 2))
        interactive = sys.stdin.isatty()
        if not args.json:
            print(f"chatting in conversation {args.session!r} with {model.name} ({len(memory)} messages in the "
                  "window); /quit ends", flush=True)
        while True:
            if interactive:
                print("you> ", end="", flush=True)
            line = sys.stdin.readline()
            if not line or line.strip() in ("/quit", "/exit"):
                break
            text = line.rstrip("\n")
            if not text.strip():
                continue
            removed = memory.manager.removed_message_count
            summaries = len(memory.manager.archive.summaries())
            memory.add({"role": "user", "content": text, "id": uuid.uuid4().hex})
            memory.hook.last_recall = None
            window = memory.model_input()
            recall = memory.hook.last_recall
            answer = model.complete(ChatRequest(system=args.system, messages=as_chat(window),
                                                max_tokens=args.max_answer_tokens))
            memory.add({"role": "assistant", "content": answer.text, "id": uuid.uuid4().hex})
            hits: list[Any] = recall.hits if recall else []
            shown: list[Any] = recall.messages if recall else []
            scores = {h.position: h.score for h in hits}
            recalled = [{"position": m.position, "role": m.role, "text": message_text(m.data),
                         "score": scores.get(m.position)} for m in shown]
            left = memory.manager.removed_message_count - removed
            new = memory.manager.archive.summaries()[summaries:]
            summarized = {"archived": left, "summaries": [{"covers": s["covers"], "text": s["text"]} for s in new]
                          } if left or new else None
            if args.json:
                print(json.dumps({"user": text, "answer": answer.text, "model": model.name, "recalled": recalled,
                                  "summarized": summarized, "window": len(memory)}, ensure_ascii=False), flush=True)
                continue
            print(f"assistant> {answer.text}")
            if recalled:
                print(f"  recalled {len(recalled)} archived messages"
                      + (f" in {recall.elapsed_ms:.0f} ms" if recall else "") + ":")
                for r in recalled:
                    score = f"score {r['score']:.3f}" if r["score"] is not None else "context"
                    print(f"    [{r['position']}] {r['role']}: {shorten(r['text'], 80)}  ({score})")
            if summarized:
                print(f"  window summarized: {left} messages left it for the archive (window now {len(memory)})")
            sys.stdout.flush()
        if not args.json:
            emit(args, None, f"bye: conversation {args.session!r} holds {store.count(own)} messages")
    return 0

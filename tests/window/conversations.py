"""Hypothesis strategies: random conversations with tool pairs, in every shape.

A conversation is built from turns: a user question, then zero or more tool
rounds (an assistant turn calling 1-3 tools, then their results), then an
assistant answer. Each shape renders the same turns its own way.
"""

from __future__ import annotations

from hypothesis import strategies as st

SHAPES = ("converse", "openai", "anthropic")

texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=40)


@st.composite
def turns(draw, max_turns: int = 14):
    """Abstract turns: ("ask", text), ("calls", [(id, name, input)]), ("results", [(id, text)]), ("answer", text).

    Tool ids are unique, or (as local models send them) restart at ``call_0`` in every round.
    """
    out, counter = [], 0
    reuse_ids = draw(st.booleans())
    for _ in range(draw(st.integers(1, max_turns))):
        out.append(("ask", draw(texts)))
        for _ in range(draw(st.integers(0, 2))):
            calls = []
            for k in range(draw(st.integers(1, 3))):
                counter += 1
                calls.append((f"call_{k if reuse_ids else counter}", draw(st.sampled_from(["search", "calc", "read"])), {"q": draw(texts)}))
            out.append(("calls", calls))
            out.append(("results", [(cid, draw(texts) * draw(st.sampled_from([1, 1, 200]))) for cid, _, _ in calls]))
        out.append(("answer", draw(texts)))
    return out


def render(turn_list, shape: str) -> list[dict]:
    """The turns as a list of message dicts of ``shape``."""
    out: list[dict] = []
    for kind, value in turn_list:
        if shape == "converse":
            out.append(_converse(kind, value))
        elif shape == "anthropic":
            out.append(_anthropic(kind, value))
        else:
            out.extend(_openai(kind, value))
    return out


def _converse(kind, value):
    if kind == "ask":
        return {"role": "user", "content": [{"text": value}]}
    if kind == "answer":
        return {"role": "assistant", "content": [{"text": value}]}
    if kind == "calls":
        return {"role": "assistant", "content": [{"toolUse": {"toolUseId": i, "name": n, "input": a}} for i, n, a in value]}
    return {"role": "user", "content": [{"toolResult": {"toolUseId": i, "status": "success", "content": [{"text": t}]}} for i, t in value]}


def _anthropic(kind, value):
    if kind == "ask":
        return {"role": "user", "content": value}
    if kind == "answer":
        return {"role": "assistant", "content": [{"type": "text", "text": value}]}
    if kind == "calls":
        return {"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in value]}
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": t} for i, t in value]}


def _openai(kind, value):
    import json

    if kind == "ask":
        return [{"role": "user", "content": value}]
    if kind == "answer":
        return [{"role": "assistant", "content": value}]
    if kind == "calls":
        return [{"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in value]}]
    return [{"role": "tool", "tool_call_id": i, "content": t} for i, t in value]


conversations = st.tuples(turns(), st.sampled_from(SHAPES)).map(lambda ts: (render(ts[0], ts[1]), ts[1]))

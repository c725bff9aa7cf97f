"""Integrations with agent frameworks other than Strands (which has ``fullrecall.strands``).

* :mod:`fullrecall.integrations.langgraph_store`: ``FullrecallStore``, a LangGraph ``BaseStore``;
* :mod:`fullrecall.integrations.langgraph_window`: ``FullrecallWindow``, window management and
  recall for ``create_react_agent`` (``pre_model_hook``) and ``create_agent`` (middleware).

Both need ``pip install 'fullrecall[langgraph]'``; nothing here is imported by ``import fullrecall``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FullrecallStore", "FullrecallWindow"]


def __getattr__(name: str) -> Any:
    if name == "FullrecallStore":
        from .langgraph_store import FullrecallStore

        return FullrecallStore
    if name == "FullrecallWindow":
        from .langgraph_window import FullrecallWindow

        return FullrecallWindow
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The top-level package: every lazy export resolves, type checkers see each one, and the import stays light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import fullrecall


def test_every_export_resolves_and_is_declared_for_type_checkers():
    source = Path(fullrecall.__file__).read_text()
    typed: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typed |= {alias.name for imp in node.body if isinstance(imp, ast.ImportFrom) for alias in imp.names}
    assert typed == set(fullrecall._EXPORTS)
    for name in fullrecall._EXPORTS:
        assert getattr(fullrecall, name) is not None
    assert (Path(fullrecall.__file__).parent / "py.typed").exists()


def test_import_pulls_in_no_optional_dependency():
    heavy = ["numpy", "onnxruntime", "torch", "psycopg", "redis", "strands", "fastapi", "langgraph", "mcp", "httpx"]
    code = f"import sys, fullrecall; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"

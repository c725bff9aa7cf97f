"""Browser fixtures: the service under uvicorn on a seeded SQLite store, headless Chromium, a screenshot folder.

Seed, server and browser come from ``scripts/inspector_screenshot.py`` (the docs' screenshot uses the same).
Without Chromium, chromedriver or selenium the browser tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("inspector_screenshot", ROOT / "scripts" / "inspector_screenshot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def shot() -> Any:
    """``scripts/inspector_screenshot.py`` as a module: its seed, server and browser."""
    return _script()


def _missing(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} [CI=true: failing instead of skipping]; scripts/setup.sh installs it")
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser(shot: Any) -> Iterator[Any]:
    """Headless Debian Chromium through Selenium, for the whole module."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        _missing("selenium is not installed (pip install 'fullrecall[test]')")
    for path in (shot.CHROMIUM, shot.CHROMEDRIVER):
        if not shutil.which(path):
            _missing(f"{path} is missing (apt-get install chromium chromium-driver)")
    driver = shot.chromium(1280, 1400)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def served(shot: Any, tmp_path_factory: pytest.TempPathFactory, default_embedder: Any
           ) -> Iterator[tuple[str, Any, dict]]:
    """``(base URL, Service, seeded data)`` of a real server on a SQLite store."""
    pytest.importorskip("uvicorn")
    url = f"sqlite:///{tmp_path_factory.mktemp('inspector') / 'memory.db'}"
    with shot.serving(url, default_embedder) as (base, service):
        yield base, service, shot.seed(service)


@pytest.fixture(scope="module")
def artifacts() -> Path:
    """Where screenshots go: ``$FULLRECALL_ARTIFACTS`` or tmp/artifacts/ui (not committed)."""
    path = Path(os.environ.get("FULLRECALL_ARTIFACTS", ROOT / "tmp" / "artifacts")) / "ui"
    path.mkdir(parents=True, exist_ok=True)
    return path

"""Every backend against the one conformance suite (servers come from ``conftest.py``)."""

from pathlib import Path

import pytest
from conformance import StoreConformance


class TestConformance(StoreConformance):
    """Parametrized over sqlite, postgres and redis by the ``backend`` fixture."""


class TestSQLiteFTS5Conformance(StoreConformance):
    """SQLite with every keyword search on FTS5 (``lexical_in_process=0``): the path a scope larger than
    ``lexical_in_process`` messages takes, which the suite's small scopes would not reach otherwise.
    """

    @pytest.fixture
    def backend(self) -> str:
        return "sqlite"

    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'memory.db'}?lexical_in_process=0"

"""Every backend against the one conformance suite (servers come from ``conftest.py``)."""

from conformance import StoreConformance


class TestConformance(StoreConformance):
    """Parametrized over sqlite, postgres and redis by the ``backend`` fixture."""

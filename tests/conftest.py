"""Fixtures every test shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pes_agent.providers import registry


@pytest.fixture(autouse=True)
def _provider_registry_restored() -> Iterator[None]:
    """Providers a test registers are gone after it, so no test sees another's names."""
    saved = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)

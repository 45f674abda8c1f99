"""Fixtures every test shares."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from pes_agent.providers import registry

from .helpers import AgentBuilder


@pytest.fixture(autouse=True)
def _provider_registry_restored() -> Iterator[None]:
    """Providers a test registers are gone after it, so no test sees another's names."""
    saved = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)


@pytest.fixture
async def build_agent() -> AsyncIterator[AgentBuilder]:
    """`build_agent(provider=..., tools=[...])` is `create_agent`; every agent it built is
    closed when the test ends."""
    builder = AgentBuilder()
    yield builder
    await builder.aclose()

"""Shared pieces for the ECS agent tests: an event log, tools and a world with observations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from ecs_core import World
from pes_agent import InMemoryStorage, ObservationManager, tool
from pes_agent.ecs.services import attach_services, close_services
from pes_agent.providers.base import LLMRequest, ProviderEvent


class EventLog:
    """Every event of the subscribed classes, in publication order."""

    def __init__(self, world: World, *types: type[Any]) -> None:
        self.events: list[Any] = []
        for event_type in types:
            world.events.subscribe(event_type, self.events.append)

    def of(self, event_type: type[Any]) -> list[Any]:
        """The logged events of exactly `event_type`."""
        return [e for e in self.events if type(e) is event_type]

    def kinds(self) -> list[str]:
        """The class names of the logged events, in order."""
        return [type(e).__name__ for e in self.events]


@pytest.fixture
def observations() -> ObservationManager:
    return ObservationManager(InMemoryStorage())


@pytest.fixture
async def world(observations: ObservationManager) -> AsyncIterator[World]:
    """A world whose agent systems record into `observations`; its services closed after."""
    world = World()
    attach_services(world, observations=observations)
    yield world
    await close_services(world)


class Calls:
    """What the test tools were called with, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, dict[str, Any]]] = []


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def add_tool(calls: Calls) -> Any:
    """An `add(a, b)` tool that logs its calls."""

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.log.append(("add", {"a": a, "b": b}))
        return a + b

    return add


class RawEvents:
    """A provider that streams exactly the given events (what real adapters may send)."""

    name = "raw"
    model = "raw-model"

    def __init__(self, *events: ProviderEvent) -> None:
        self.events = events

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        for event in self.events:
            yield event

    async def aclose(self) -> None:
        """Nothing to release."""

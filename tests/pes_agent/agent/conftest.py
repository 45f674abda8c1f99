"""Shared pieces for the agent pipeline tests: tools, plan builders and a recorder."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from pes_agent import Observation, ObservationType, testing, tool

plan_json = partial(testing.plan_json, title="A title")
"""A planning answer in the JSON protocol with the given tool calls (and a title)."""

call = testing.plan_call


class Events:
    """A shared log of what tools did, in order, for ordering assertions."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def index(self, entry: str) -> int:
        return self.log.index(entry)


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
def tools(events: Events) -> list[Any]:
    """add, slow_echo (async, 50 ms), explode (raises), sleepy (sleeps 10 s), get_city."""

    @tool
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        events.log.append(f"add:{a}+{b}")
        return a + b

    @tool
    async def slow_echo(text: str, delay: float = 0.05) -> str:
        """Echo text after a delay."""
        events.log.append(f"start:{text}")
        await asyncio.sleep(delay)
        events.log.append(f"end:{text}")
        return text

    @tool
    def explode(reason: str) -> str:
        """Always fail with the given reason."""
        raise RuntimeError(reason)

    @tool
    async def sleepy(seconds: float) -> str:
        """Sleep, noting whether the sleep was cancelled."""
        events.log.append("sleepy:start")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            events.log.append("sleepy:cancelled")
            raise
        return "rested"

    @tool
    def get_city(name: str) -> dict[str, Any]:
        """Facts about a city."""
        return {"name": name, "population": 2_100_000, "districts": ["north", "south"]}

    return [add, slow_echo, explode, sleepy, get_city]


class Recorder:
    """Collects observations delivered to a subscriber."""

    def __init__(self) -> None:
        self.seen: list[Observation] = []

    def __call__(self, observation: Observation) -> None:
        self.seen.append(observation)

    def types(self) -> list[ObservationType]:
        return [o.type for o in self.seen]

    def of(self, kind: ObservationType) -> list[Observation]:
        return [o for o in self.seen if o.type is kind]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


Responder = Callable[[Any], str]

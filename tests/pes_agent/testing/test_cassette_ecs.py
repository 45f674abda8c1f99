"""Record/replay for ECS agents: an entity whose `LLMComponent` holds a `RecordingProvider`
around a real SDK provider runs against the loopback server; the same entity built again
with a `ReplayProvider`, the server stopped, ends the same way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ecs_core import Runner, StopReason, World
from pes_agent import InMemoryStorage, ObservationManager, UsageLimits
from pes_agent.ecs import (
    AgentIdentityComponent,
    ChatMessage,
    ConversationComponent,
    ErrorHandlingSystem,
    LLMComponent,
    ReasoningSystem,
    SystemPromptComponent,
    ToolExecutionSystem,
    ToolRegistryComponent,
    UsageLimitsComponent,
    UsageSpentComponent,
)
from pes_agent.ecs.services import attach_services, close_services
from pes_agent.providers.base import LLMProvider
from pes_agent.testing import RecordingProvider, ReplayProvider
from pes_agent.usage import Usage
from tests.pes_agent.providers.model_server import Call, ModelServer, Reply

from .runs import APIS, comparable, get_weather, multiply, sdk_provider

ANSWER = "Sunny and 18 °C in Paris; 12 × 7 = 84."
THREAD = "ecs-cassette"


@dataclass(slots=True)
class EntityRun:
    """What an ECS agent's run left behind."""

    terminal: str
    ticks: int
    history: list[ChatMessage]
    usage: Usage
    observations: list[dict[str, Any]]


async def run_entity(provider: LLMProvider) -> EntityRun:
    """A ReAct entity (reasoning, tool execution, error handling) with `provider`, run to its
    end in a world of its own; the provider is closed after."""
    observations = ObservationManager(InMemoryStorage())
    world = World()
    attach_services(world, observations=observations)
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    world.register_system(ErrorHandlingSystem(), priority=99)
    entity = world.create_entity(
        LLMComponent(provider),
        SystemPromptComponent("Use the tools, then answer in one sentence."),
        ConversationComponent([ChatMessage("user", "Weather in Paris, and 12*7?")]),
        ToolRegistryComponent([get_weather, multiply]),
        AgentIdentityComponent(THREAD),
        UsageLimitsComponent(UsageLimits(total_tokens=100_000)),
    )
    try:
        result = await Runner().run(world, until=entity, max_ticks=20)
        assert result.reason is StopReason.TERMINATED
        return EntityRun(
            terminal=result.terminals[entity].reason,
            ticks=result.ticks,
            history=list(world.require_component(entity, ConversationComponent).messages),
            usage=world.require_component(entity, UsageSpentComponent).usage,
            observations=comparable(await observations.get_observations(THREAD)),
        )
    finally:
        await close_services(world)
        await provider.aclose()


@pytest.mark.parametrize("api", APIS)
async def test_an_ecs_agent_recorded_through_a_real_sdk_replays_with_the_server_stopped(
    api: str, tmp_path: Path
) -> None:
    """Native tool calls (both in one turn), their results, the answer, the usage spent and
    the observations are the recorded run's."""
    cassette = tmp_path / "ecs.jsonl"
    async with ModelServer() as server:
        server.script(
            Reply(
                thinking="Both at once.",
                tool_calls=(
                    Call("get_weather", {"city": "Paris"}, fragments=2),
                    Call("multiply", {"b": 7, "a": 12}, fragments=3),
                ),
                input_tokens=50,
                output_tokens=12,
            ),
            Reply(ANSWER, input_tokens=90, output_tokens=15),
        )
        recorded = await run_entity(RecordingProvider(sdk_provider(server, api), cassette))
        assert len(server.requests) == 2
    assert recorded.terminal == "reasoning_complete"
    assert [(m.role, m.content) for m in recorded.history][-3:] == [
        ("tool", '{"city": "Paris", "sky": "sunny", "celsius": 18}'),
        ("tool", "84"),
        ("assistant", ANSWER),
    ]
    assert (recorded.usage.requests, recorded.usage.output_tokens) == (2, 27)
    kinds = [o["type"] for o in recorded.observations]
    assert kinds.count("LLM_STREAM_START") == 2
    assert kinds.count("TOOL_EXECUTION") == 2

    replay = ReplayProvider(cassette)
    replayed = await run_entity(replay)

    assert replayed == recorded
    assert replay.remaining == 0

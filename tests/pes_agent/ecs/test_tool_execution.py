"""ToolExecutionSystem: cleared pending calls run through the PES executor; errors are results."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

from ecs_core import World
from pes_agent import ObservationManager, ObservationType, tool
from pes_agent.ecs.components import (
    AgentIdentityComponent,
    ConversationComponent,
    PendingToolCallsComponent,
    ToolRegistryComponent,
    ToolResultsComponent,
)
from pes_agent.ecs.messages import ChatMessage, ToolCall
from pes_agent.ecs.tool_execution import ToolExecutionSystem
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext
from pes_agent.tools.base import ToolResult
from pes_agent.tools.registry import ToolRegistry

from .conftest import Calls


@tool
async def nap(seconds: float) -> str:
    """Sleep, then say so."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@tool
def explode() -> str:
    """Always fails."""
    raise ValueError("kaboom")


@tool
def weather(city: str) -> dict[str, Any]:
    """The weather as structured data."""
    return {"city": city, "celsius": 21}


def waiting_entity(world: World, tools: Any, *calls: ToolCall) -> int:
    """An entity whose model asked for `calls` (already in the conversation), with no gates."""
    return world.create_entity(
        ConversationComponent(
            [ChatMessage("user", "go"), ChatMessage("assistant", tool_calls=list(calls))]
        ),
        ToolRegistryComponent(tools),
        PendingToolCallsComponent(list(calls)),
        ToolResultsComponent(),
    )


def tool_messages(world: World, entity: int) -> list[ChatMessage]:
    return [
        m
        for m in world.require_component(entity, ConversationComponent).messages
        if m.role == "tool"
    ]


@pytest.fixture
def execution(world: World) -> ToolExecutionSystem:
    system = ToolExecutionSystem(tool_timeout_s=0.5)
    world.register_system(system, priority=5)
    return system


@pytest.mark.usefixtures("execution")
async def test_a_call_runs_and_is_answered_by_its_id(
    world: World, add_tool: Any, calls: Calls
) -> None:
    """A cleared call runs; its tool message answers its id and the queue is removed."""
    entity = waiting_entity(world, [add_tool], ToolCall("c1", "add", {"a": 2, "b": 3}))
    await world.process()
    assert calls.log == [("add", {"a": 2, "b": 3})]
    assert tool_messages(world, entity) == [ChatMessage("tool", "5", tool_call_id="c1", name="add")]
    [result] = world.require_component(entity, ToolResultsComponent).results
    assert (result.call_id, result.status, result.output) == ("c1", "success", 5)
    assert not world.has_component(entity, PendingToolCallsComponent)


@pytest.mark.usefixtures("execution")
async def test_structured_output_is_sent_as_json(world: World) -> None:
    """A dict result reaches the model as JSON text."""
    entity = waiting_entity(world, [weather], ToolCall("w", "weather", {"city": "Paris"}))
    await world.process()
    assert tool_messages(world, entity)[0].content == '{"city": "Paris", "celsius": 21}'


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (ToolCall("e", "explode"), "Error: ValueError: kaboom"),
        (ToolCall("u", "unknown"), 'Error: Tool "unknown" is not registered.'),
        (ToolCall("i", "add", {"a": "many"}), 'Error: Invalid arguments for tool "add"'),
        (ToolCall("t", "nap", {"seconds": 5}), 'Error: Tool "nap" timed out after 0.5s.'),
    ],
    ids=["raises", "unknown-tool", "invalid-arguments", "timeout"],
)
@pytest.mark.usefixtures("execution")
async def test_failures_are_error_results_never_exceptions(
    world: World, add_tool: Any, call: ToolCall, expected: str
) -> None:
    """A tool that raises, an unknown tool, bad arguments and a timeout all answer the call."""
    entity = waiting_entity(world, [add_tool, explode, nap], call)
    await world.process()
    [message] = tool_messages(world, entity)
    assert message.tool_call_id == call.id
    assert message.content.startswith(expected)
    assert world.require_component(entity, ToolResultsComponent).results[0].status == "error"
    assert not world.has_component(entity, PendingToolCallsComponent)


@pytest.mark.usefixtures("execution")
async def test_an_entity_without_tools_gets_its_calls_answered(world: World) -> None:
    """Calls made without a ToolRegistryComponent are answered as not registered."""
    entity = world.create_entity(
        ConversationComponent([ChatMessage("user", "x")]),
        PendingToolCallsComponent([ToolCall("c", "add", {})]),
    )
    await world.process()
    assert "not registered" in tool_messages(world, entity)[0].content
    assert world.require_component(entity, ToolResultsComponent).results[0].call_id == "c"


@pytest.mark.usefixtures("execution")
async def test_a_non_tool_in_the_registry_component_is_an_error_result(world: World) -> None:
    """A plain function in the component answers the calls with how to fix it."""

    def bare(x: int) -> int:
        return x

    entity = waiting_entity(world, [bare], ToolCall("c", "bare", {"x": 1}))
    await world.process()
    assert "@tool" in tool_messages(world, entity)[0].content


@pytest.mark.usefixtures("execution")
async def test_calls_of_one_turn_run_concurrently(world: World) -> None:
    """Three 0.2 s tool calls of one turn take about 0.2 s, not 0.6 s."""
    entity = waiting_entity(
        world, ToolRegistry([nap]), *(ToolCall(f"n{i}", "nap", {"seconds": 0.2}) for i in range(3))
    )
    started = time.perf_counter()
    await world.process()
    assert time.perf_counter() - started < 0.45
    assert [m.tool_call_id for m in tool_messages(world, entity)] == ["n0", "n1", "n2"]


@pytest.mark.usefixtures("execution")
async def test_entities_run_their_tools_side_by_side(world: World) -> None:
    """Two entities' slow tools overlap: one entity's tool does not hold up another's."""
    for name in ("a", "b"):
        waiting_entity(world, [nap], ToolCall(name, "nap", {"seconds": 0.3}))
    started = time.perf_counter()
    await world.process()
    assert time.perf_counter() - started < 0.55


@pytest.mark.usefixtures("execution")
async def test_calls_are_recorded_as_tool_call_and_tool_execution(
    world: World, add_tool: Any, observations: ObservationManager
) -> None:
    """A call records TOOL_CALL, then TOOL_EXECUTION parented to it, on the entity's thread."""
    entity = waiting_entity(world, [add_tool], ToolCall("c1", "add", {"a": 1, "b": 1}))
    world.add_component(entity, AgentIdentityComponent("tools-thread"))
    await world.process()
    started, ended = await observations.get_observations("tools-thread")
    assert (started.type, ended.type) == (ObservationType.TOOL_CALL, ObservationType.TOOL_EXECUTION)
    assert started.content["arguments"] == {"a": 1, "b": 1}
    assert ended.parent_id == started.id
    assert (ended.content["callId"], ended.content["status"], ended.content["output"]) == (
        "c1",
        "success",
        2,
    )


class BrokenExecutor:
    """An executor that loses results."""

    async def execute(
        self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext
    ) -> list[ToolResult]:
        return []


async def test_a_broken_executor_still_answers_every_call(world: World, add_tool: Any) -> None:
    """An executor returning the wrong number of results gives error answers, not a crash."""
    world.register_system(ToolExecutionSystem(executor=BrokenExecutor()), priority=5)
    entity = waiting_entity(world, [add_tool], ToolCall("c1", "add", {"a": 1, "b": 1}))
    await world.process()
    [message] = tool_messages(world, entity)
    assert "BrokenExecutor returned 0 result(s) for 1 call(s)" in message.content
    assert not world.has_component(entity, PendingToolCallsComponent)

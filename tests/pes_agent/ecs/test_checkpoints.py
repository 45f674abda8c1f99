"""CheckpointSystem and the checkpoints API: snapshots, restore, undo, live objects by name."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ecs_core import EntityId, ErrorComponent, Runner, TerminalComponent, World
from pes_agent.ecs import checkpoints
from pes_agent.ecs.checkpoints import Checkpoint, CheckpointSystem, LiveRef
from pes_agent.ecs.components import (
    CheckpointComponent,
    ConversationComponent,
    LLMComponent,
    PlanComponent,
    StreamingComponent,
    ToolApprovalComponent,
    ToolRegistryComponent,
    UserInputComponent,
)
from pes_agent.ecs.events import CheckpointCreatedEvent, CheckpointRestoredEvent
from pes_agent.ecs.messages import ChatMessage, ToolCall
from pes_agent.ecs.reasoning import ReasoningSystem
from pes_agent.ecs.services import close_services
from pes_agent.ecs.tool_execution import ToolExecutionSystem
from pes_agent.errors import UsageError
from pes_agent.testing import ScriptedProvider, ScriptedResponse
from pes_agent.tools import ToolRegistry, tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def double(x: int) -> int:
    """Double an integer."""
    return 2 * x


class Progress:
    """A test system: each tick appends a message and advances the plan, like a working agent."""

    async def process(self, world: World) -> None:
        for _, (conversation, plan) in world.query(ConversationComponent, PlanComponent):
            conversation.messages.append(ChatMessage("user", f"tick {world.ticks + 1}"))
            plan.current_step += 1


@pytest.fixture
async def world() -> AsyncIterator[World]:
    world = World()
    world.register_system(Progress(), priority=0)
    world.register_system(CheckpointSystem(), priority=15)
    yield world
    await close_services(world)


def agent(world: World, *extra: object, keep: int = 10, every: int = 1) -> EntityId:
    return world.create_entity(
        ConversationComponent([ChatMessage("system", "s")]),
        PlanComponent(["a", "b", "c", "d", "e", "f"]),
        CheckpointComponent(every_n_ticks=every, keep=keep),
        *extra,
    )


def state(world: World, entity: EntityId) -> tuple[list[str], int]:
    conversation = world.get_component(entity, ConversationComponent)
    plan = world.get_component(entity, PlanComponent)
    assert conversation is not None
    assert plan is not None
    return [m.content for m in conversation.messages], plan.current_step


def snapshots(world: World, entity: EntityId) -> list[Checkpoint]:
    component = world.get_component(entity, CheckpointComponent)
    assert component is not None
    return list(component.snapshots)


async def ticks(world: World, n: int) -> None:
    for _ in range(n):
        await world.process()


def walk(value: Any, seen: set[int] | None = None) -> list[Any]:
    """Every object reachable from `value` through containers and dataclass fields."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    found = [value]
    if isinstance(value, list | tuple | set | frozenset):
        for item in value:
            found += walk(item, seen)
    elif isinstance(value, dict):
        for item in value.values():
            found += walk(item, seen)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            found += walk(getattr(value, name), seen)
    return found


async def test_snapshots_every_tick_keeping_the_newest(world: World) -> None:
    """Each tick adds a checkpoint announced by index; only the newest `keep` remain."""
    created: list[CheckpointCreatedEvent] = []
    world.events.subscribe(CheckpointCreatedEvent, created.append)
    entity = agent(world, keep=3)
    await ticks(world, 5)
    assert [e.index for e in created] == [1, 2, 3, 4, 5]
    assert {e.entity_id for e in created} == {entity}
    assert checkpoints.indices(world, entity) == (3, 4, 5)


async def test_every_n_ticks(world: World) -> None:
    """With every_n_ticks=2 a checkpoint is taken every second tick."""
    entity = agent(world, every=2)
    await ticks(world, 6)
    assert checkpoints.indices(world, entity) == (2, 4, 6)
    assert state(world, entity)[1] == 6
    await checkpoints.restore(world, entity, 4)
    assert state(world, entity)[1] == 4


async def test_restore_brings_back_conversation_and_plan(world: World) -> None:
    """Restoring a checkpoint brings back the messages and plan of that moment."""
    restored: list[CheckpointRestoredEvent] = []
    world.events.subscribe(CheckpointRestoredEvent, restored.append)
    entity = agent(world)
    await ticks(world, 4)
    assert await checkpoints.restore(world, entity, 2) == 2
    assert state(world, entity) == (["s", "tick 1", "tick 2"], 2)
    assert [(e.entity_id, e.index) for e in restored] == [(entity, 2)]
    # The history goes on from checkpoint 2: the later ones are forgotten, indices not reused.
    assert checkpoints.indices(world, entity) == (1, 2)
    await world.process()
    assert checkpoints.indices(world, entity) == (1, 2, 5)
    assert state(world, entity) == (["s", "tick 1", "tick 2", "tick 5"], 3)


async def test_undo_twice_steps_back_twice(world: World) -> None:
    """Each undo goes back one checkpoint; with fewer than two left it is a clear error."""
    entity = agent(world)
    await ticks(world, 4)
    assert state(world, entity)[1] == 4
    assert await checkpoints.undo(world, entity) == 3
    assert state(world, entity) == (["s", "tick 1", "tick 2", "tick 3"], 3)
    assert await checkpoints.undo(world, entity) == 2
    assert state(world, entity) == (["s", "tick 1", "tick 2"], 2)
    assert await checkpoints.undo(world, entity) == 1
    with pytest.raises(UsageError, match="nothing to undo"):
        await checkpoints.undo(world, entity)
    assert state(world, entity) == (["s", "tick 1"], 1)


async def test_unknown_index_is_a_clear_error(world: World) -> None:
    """Restoring an index that was never taken, or was dropped, names the ones available."""
    entity = agent(world, keep=2)
    await ticks(world, 3)
    with pytest.raises(UsageError, match=r"no checkpoint 1; it can restore \[2, 3\]"):
        await checkpoints.restore(world, entity, 1)
    assert state(world, entity)[1] == 3


async def test_entity_without_checkpoint_component_is_a_clear_error(world: World) -> None:
    """restore and undo on an entity that never had checkpoints say how to add them."""
    entity = world.create_entity(ConversationComponent())
    with pytest.raises(UsageError, match="no CheckpointComponent"):
        await checkpoints.restore(world, entity, 1)
    with pytest.raises(UsageError, match="no CheckpointComponent"):
        await checkpoints.undo(world, entity)
    assert checkpoints.indices(world, entity) == ()


async def test_snapshots_never_nest_and_do_not_grow(world: World) -> None:
    """A checkpoint holds no CheckpointComponent or earlier checkpoint; its size stays flat."""
    world.remove_system(world.systems[0])  # a static entity: every snapshot is the same state
    entity = agent(world, keep=30)
    await ticks(world, 12)
    taken = snapshots(world, entity)
    sizes = {len(pickle.dumps(c.components)) for c in taken}
    assert len(sizes) == 1
    for checkpoint in taken:
        reachable = walk(checkpoint.components)
        assert not any(isinstance(o, Checkpoint | CheckpointComponent) for o in reachable)


async def test_checkpoint_is_a_deep_copy(world: World) -> None:
    """Changing the live conversation, or a restored copy, never changes a checkpoint."""
    entity = agent(world)
    await ticks(world, 2)
    conversation = world.get_component(entity, ConversationComponent)
    assert conversation is not None
    conversation.messages[0].content = "edited in place"
    await checkpoints.restore(world, entity, 1)
    assert state(world, entity)[0] == ["s", "tick 1"]
    restored = world.get_component(entity, ConversationComponent)
    assert restored is not None
    restored.messages[0].content = "edited again"
    restored.messages.append(ChatMessage("user", "more"))
    await checkpoints.restore(world, entity, 1)
    assert state(world, entity)[0] == ["s", "tick 1"]


async def test_restore_removes_later_components_and_returns_dropped_ones(world: World) -> None:
    """The component set is the checkpoint's; the CheckpointComponent itself is kept as is."""
    entity = agent(world, StreamingComponent())
    await world.process()
    world.remove_component(entity, StreamingComponent)
    world.add_component(entity, TerminalComponent("done"))
    settings = world.get_component(entity, CheckpointComponent)
    await checkpoints.restore(world, entity, 1)
    assert world.has_component(entity, StreamingComponent)
    assert not world.has_component(entity, TerminalComponent)
    assert world.get_component(entity, CheckpointComponent) is settings


async def test_provider_and_tools_are_recorded_by_name_and_reattached(world: World) -> None:
    """Live objects are not copied: the checkpoint names them, restore re-attaches them."""
    model = ScriptedProvider(["hi"])
    registry = ToolRegistry([add])
    entity = agent(world, LLMComponent(model), ToolRegistryComponent(registry))
    await world.process()
    checkpoint = snapshots(world, entity)[0]
    reachable = walk(checkpoint.components)
    assert not any(o is model or o is registry or o is add for o in reachable)
    assert {(ref.where(), ref.name) for ref in checkpoint.live} == {
        ("LLMComponent.provider", "scripted:scripted-model"),
        ("ToolRegistryComponent.tools", "ToolRegistry['add']"),
    }
    await world.process()
    await checkpoints.undo(world, entity)
    llm = world.get_component(entity, LLMComponent)
    tools = world.get_component(entity, ToolRegistryComponent)
    assert llm is not None
    assert tools is not None
    assert llm.provider is model
    assert tools.tools is registry


async def test_tool_list_is_reattached_by_tool_name(world: World) -> None:
    """A tool list comes back with its own tools, found by name among the current objects."""
    entity = agent(world, ToolRegistryComponent([add, double]))
    await world.process()

    @tool(name="double")
    def newer_double(x: int) -> int:
        """Double an integer, a newer version of the tool."""
        return x + x

    @tool
    def later() -> int:
        """A tool added after the checkpoint."""
        return 0

    world.add_component(entity, ToolRegistryComponent([later, newer_double, add]))
    await checkpoints.restore(world, entity, 1)
    tools = world.get_component(entity, ToolRegistryComponent)
    assert tools is not None
    assert list(tools.tools) == [add, newer_double]


async def test_missing_live_object_fails_and_changes_nothing(world: World) -> None:
    """A checkpoint whose provider object is gone cannot be restored; the entity is untouched."""
    entity = agent(world, LLMComponent(ScriptedProvider([])))
    await ticks(world, 2)
    world.remove_component(entity, LLMComponent)
    before = state(world, entity)
    with pytest.raises(UsageError, match=r"'scripted:scripted-model' at LLMComponent\.provider"):
        await checkpoints.restore(world, entity, 1)
    assert state(world, entity) == before
    assert not world.has_component(entity, LLMComponent)
    assert checkpoints.indices(world, entity) == (1, 2)


async def test_provider_named_by_string_is_plain_data(world: World) -> None:
    """A provider given by name is copied as data; it is resolved through the pool as always."""
    entity = agent(world, LLMComponent("openai:gpt-4o-mini"))
    await world.process()
    assert snapshots(world, entity)[0].live == ()
    world.remove_component(entity, LLMComponent)
    await checkpoints.restore(world, entity, 1)
    llm = world.get_component(entity, LLMComponent)
    assert llm is not None
    assert llm.provider == "openai:gpt-4o-mini"


async def test_futures_are_reattached_when_they_still_exist(world: World) -> None:
    """Waiting futures come back as the current ones; those gone are left out, not copied."""
    loop = asyncio.get_running_loop()
    kept: asyncio.Future[bool] = loop.create_future()
    gone: asyncio.Future[bool] = loop.create_future()
    question: asyncio.Future[str] = loop.create_future()
    approval = ToolApprovalComponent(waiting={"c1": kept, "c2": gone}, asked_at={"c1": 1.0})
    entity = agent(world, approval, UserInputComponent("name?", future=question))
    await world.process()
    del approval.waiting["c2"]
    world.remove_component(entity, UserInputComponent)
    await checkpoints.restore(world, entity, 1)
    restored_approval = world.get_component(entity, ToolApprovalComponent)
    restored_input = world.get_component(entity, UserInputComponent)
    assert restored_approval is not None
    assert restored_input is not None
    assert restored_approval.waiting == {"c1": kept}
    assert restored_approval.waiting["c1"] is kept
    assert restored_approval.asked_at == {"c1": 1.0}
    assert restored_input.prompt == "name?"
    assert restored_input.future is None
    assert all(
        isinstance(ref, LiveRef) and ref.optional for ref in snapshots(world, entity)[0].live
    )


async def test_finished_entity_is_snapshotted_once_then_left_alone(world: World) -> None:
    """After an entity finishes its final state is checkpointed once; idle ticks add none."""
    entity = agent(world, keep=3)
    await ticks(world, 2)
    world.add_component(entity, TerminalComponent("reasoning_complete"))
    await ticks(world, 5)
    assert checkpoints.indices(world, entity) == (1, 2, 3)
    assert snapshots(world, entity)[-1].terminal
    await checkpoints.undo(world, entity)
    assert not world.has_component(entity, TerminalComponent)
    await world.process()
    assert checkpoints.indices(world, entity) == (1, 2, 4)


async def test_wrong_settings_are_an_error_on_the_entity(world: World) -> None:
    """every_n_ticks below 1 puts an ErrorComponent on that entity and takes no checkpoint."""
    entity = agent(world, every=0)
    fine = agent(world)
    await world.process()
    error = world.get_component(entity, ErrorComponent)
    assert error is not None
    assert isinstance(error.error, UsageError)
    assert checkpoints.indices(world, entity) == ()
    assert checkpoints.indices(world, fine) == (1,)


async def test_restored_react_agent_keeps_working_with_its_provider_and_tools() -> None:
    """After an undo the same scripted model and tools carry the ReAct loop to a new answer."""
    runs: list[str] = []

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        runs.append(key)
        return f"value of {key}"

    model = ScriptedProvider(
        [
            ScriptedResponse(tool_calls=[ToolCall("c1", "lookup", {"key": "a"})]),
            "a is 'value of a'.",
            # After the undo the model takes another route through the same tool.
            ScriptedResponse(tool_calls=[ToolCall("c2", "lookup", {"key": "b"})]),
            "b is 'value of b'.",
        ]
    )
    world = World()
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    world.register_system(CheckpointSystem(), priority=15)
    entity = world.create_entity(
        LLMComponent(model),
        ConversationComponent([ChatMessage("user", "look a up")]),
        ToolRegistryComponent([lookup]),
        CheckpointComponent(),
    )
    try:
        first = await Runner().run(world, until=entity, max_ticks=10)
        assert first.terminals[entity].reason == "reasoning_complete"
        await checkpoints.restore(world, entity, 1)  # the tool has answered, no reply yet
        assert not world.has_component(entity, TerminalComponent)
        second = await Runner().run(world, until=entity, max_ticks=10)
        assert second.terminals[entity].reason == "reasoning_complete"
    finally:
        await close_services(world)
    assert runs == ["a", "b"]
    assert model.calls == 4
    conversation = world.get_component(entity, ConversationComponent)
    assert conversation is not None
    assert [m.content for m in conversation.messages if m.role == "tool"] == [
        "value of a",
        "value of b",
    ]
    assert conversation.messages[-1].content == "b is 'value of b'."


async def test_error_reports_are_not_checkpointed(world: World) -> None:
    """An ErrorComponent is a one-tick report: not snapshotted, not brought back or removed."""
    entity = agent(world)
    world.add_component(entity, ErrorComponent(RuntimeError("old"), "Other"))
    await ticks(world, 2)
    assert not any(isinstance(c, ErrorComponent) for c in snapshots(world, entity)[0].components)
    world.remove_component(entity, ErrorComponent)
    await checkpoints.restore(world, entity, 1)
    assert not world.has_component(entity, ErrorComponent)

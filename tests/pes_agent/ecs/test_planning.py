"""PlanningSystem: one "Step k/n" user message and one model answer per plan step."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ecs_core import EntityId, ErrorComponent, Runner, TerminalComponent, World
from pes_agent import ProviderError
from pes_agent.ecs.components import (
    ConversationComponent,
    LLMComponent,
    PendingToolCallsComponent,
    PlanComponent,
    ToolRegistryComponent,
)
from pes_agent.ecs.events import PlanStepCompletedEvent
from pes_agent.ecs.messages import ChatMessage, ToolCall
from pes_agent.ecs.planning import PlanFailuresComponent, PlanningSystem, step_message
from pes_agent.ecs.reasoning import ReasoningSystem
from pes_agent.ecs.tool_execution import ToolExecutionSystem
from pes_agent.errors import UsageError
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, ScriptedResponse

from .conftest import EventLog

TASK = ChatMessage("user", "Write a haiku about rain.")


def failing(request: LLMRequest) -> str:
    """A scripted entry whose call fails like a provider outage."""
    raise RuntimeError("model down")


def planner(world: World, model: ScriptedProvider, steps: list[str], *extra: object) -> EntityId:
    """An entity with a model, a task and a plan of `steps`."""
    return world.create_entity(
        LLMComponent(model), ConversationComponent([TASK]), PlanComponent(steps), *extra
    )


def history(world: World, entity: EntityId) -> list[ChatMessage]:
    return world.require_component(entity, ConversationComponent).messages


@pytest.fixture
def planning(world: World) -> PlanningSystem:
    system = PlanningSystem()
    world.register_system(system, priority=0)
    return system


@pytest.mark.usefixtures("planning")
async def test_a_step_is_sent_as_a_user_message_and_answered(world: World) -> None:
    """The first step goes to the model as "Step 1/2: ..." after the task, and both are kept."""
    model = ScriptedProvider(["Rain on the roof."])
    log = EventLog(world, PlanStepCompletedEvent)
    entity = planner(world, model, ["Pick an image", "Write the haiku"])
    await world.process()
    request = model.requests[0]
    assert request.phase == "plan_step"
    assert [(m.role, m.content) for m in request.messages] == [
        ("user", TASK.content),
        ("user", "Step 1/2: Pick an image"),
    ]
    assert history(world, entity) == [
        TASK,
        ChatMessage("user", "Step 1/2: Pick an image"),
        ChatMessage("assistant", "Rain on the roof."),
    ]
    plan = world.require_component(entity, PlanComponent)
    assert (plan.current_step, plan.completed) == (1, False)
    assert log.events == [PlanStepCompletedEvent(entity, 0, "Pick an image")]
    assert not world.has_component(entity, TerminalComponent)


async def test_a_plan_is_walked_to_the_end_and_the_entity_finishes(world: World) -> None:
    """Each step is one call and one event; after the last the plan completes and the entity ends,
    while ReasoningSystem (registered alongside) never calls the model."""
    world.register_system(PlanningSystem(), priority=0)
    world.register_system(ReasoningSystem(), priority=0)
    model = ScriptedProvider(["one", "two", "three", "never sent"])
    log = EventLog(world, PlanStepCompletedEvent)
    entity = planner(world, model, ["a", "b", "c"])
    result = await Runner().run(world, until=entity, max_ticks=10)
    assert result.ticks == 3
    assert world.require_component(entity, TerminalComponent).reason == "plan_completed"
    plan = world.require_component(entity, PlanComponent)
    assert (plan.current_step, plan.completed) == (3, True)
    assert model.calls == 3
    assert [(e.step_index, e.step_description) for e in log.events] == [
        (0, "a"),
        (1, "b"),
        (2, "c"),
    ]
    assert [m.content for m in history(world, entity)[1:]] == [
        "Step 1/3: a",
        "one",
        "Step 2/3: b",
        "two",
        "Step 3/3: c",
        "three",
    ]


async def test_without_a_terminal_reason_a_completed_plan_leaves_the_entity_running(
    world: World,
) -> None:
    """With terminal_reason=None the plan completes but no TerminalComponent is added."""
    world.register_system(PlanningSystem(terminal_reason=None), priority=0)
    model = ScriptedProvider(["done"])
    entity = planner(world, model, ["only step"])
    await world.process()
    await world.process()
    assert world.require_component(entity, PlanComponent).completed
    assert not world.has_component(entity, TerminalComponent)
    assert model.calls == 1


@pytest.mark.usefixtures("planning")
async def test_a_failed_call_keeps_the_step_and_the_retry_sends_the_same_request(
    world: World,
) -> None:
    """A failure leaves an error, no new message and the step unchanged; the retry succeeds."""
    model = ScriptedProvider([failing, "answer"])
    entity = planner(world, model, ["a", "b"])
    await world.process()
    error = world.require_component(entity, ErrorComponent)
    assert isinstance(error.error, ProviderError)
    assert error.system_name == "PlanningSystem"
    assert history(world, entity) == [TASK]
    assert world.require_component(entity, PlanComponent).current_step == 0
    assert world.require_component(entity, PlanFailuresComponent).consecutive == 1
    world.remove_component(entity, ErrorComponent)
    await world.process()
    assert model.requests[0].messages == model.requests[1].messages
    assert world.require_component(entity, PlanComponent).current_step == 1
    assert not world.has_component(entity, PlanFailuresComponent)


async def test_failures_in_a_row_end_the_entity_after_max_failures(world: World) -> None:
    """A model that always fails costs exactly max_failures calls, then "plan_failed"."""
    world.register_system(PlanningSystem(max_failures=2), priority=0)
    model = ScriptedProvider([failing], repeat=True)
    entity = planner(world, model, ["a"])
    result = await Runner().run(world, until=entity, max_ticks=10)
    assert result.ticks == 2
    assert model.calls == 2
    assert world.require_component(entity, TerminalComponent).reason == "plan_failed"
    assert world.require_component(entity, PlanComponent).current_step == 0


@pytest.mark.usefixtures("planning")
async def test_a_scripted_model_running_out_ends_the_entity(world: World) -> None:
    """ScriptExhaustedError ends the entity with reason provider_exhausted."""
    entity = planner(world, ScriptedProvider([]), ["a"])
    await world.process()
    assert world.require_component(entity, TerminalComponent).reason == "provider_exhausted"


async def test_a_step_with_tool_calls_continues_after_the_results(
    world: World, add_tool: Any
) -> None:
    """Tool calls keep the step open; after the results the step goes on without a new step
    message and completes with the next text answer."""
    world.register_system(PlanningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    call = ToolCall("c1", "add", {"a": 2, "b": 3})
    model = ScriptedProvider([ScriptedResponse("Adding.", tool_calls=[call]), "It is 5."])
    log = EventLog(world, PlanStepCompletedEvent)
    entity = planner(world, model, ["Add 2 and 3"], ToolRegistryComponent([add_tool]))
    await world.process()
    assert [t.name for t in model.requests[0].tools] == ["add"]
    assert world.require_component(entity, PlanComponent).current_step == 0
    assert log.events == []
    assert not world.has_component(entity, PendingToolCallsComponent)  # executed at [5]
    await world.process()
    assert [(m.role, m.content) for m in model.requests[1].messages[-3:]] == [
        ("user", "Step 1/1: Add 2 and 3"),
        ("assistant", "Adding."),
        ("tool", "5"),
    ]
    assert [m.content for m in history(world, entity)].count("Step 1/1: Add 2 and 3") == 1
    assert world.require_component(entity, PlanComponent).completed
    assert log.events == [PlanStepCompletedEvent(entity, 0, "Add 2 and 3")]


@pytest.mark.usefixtures("planning")
async def test_a_plan_past_its_last_step_completes_without_a_call(world: World) -> None:
    """A plan whose current_step is past its steps (a revision left none) just completes."""
    model = ScriptedProvider(["x"])
    entity = planner(world, model, ["a"])
    world.require_component(entity, PlanComponent).current_step = 1
    await world.process()
    assert model.calls == 0
    assert world.require_component(entity, PlanComponent).completed
    assert world.require_component(entity, TerminalComponent).reason == "plan_completed"


@pytest.mark.parametrize(
    "plan",
    [PlanComponent([]), PlanComponent(["a"], completed=True)],
    ids=["no-steps", "completed"],
)
@pytest.mark.usefixtures("planning")
async def test_an_empty_or_completed_plan_drives_nothing(world: World, plan: PlanComponent) -> None:
    """No call and no terminal for a plan without steps or already completed."""
    model = ScriptedProvider(["x"])
    entity = world.create_entity(LLMComponent(model), ConversationComponent([TASK]), plan)
    await world.process()
    assert model.calls == 0
    assert not world.has_component(entity, TerminalComponent)


@pytest.mark.usefixtures("planning")
async def test_entities_take_their_steps_concurrently(world: World) -> None:
    """Two entities' slow step calls overlap within one tick."""
    first = planner(world, ScriptedProvider(["x"], latency_s=0.3), ["a"])
    second = planner(world, ScriptedProvider(["y"], latency_s=0.3), ["b"])
    started = time.perf_counter()
    await world.process()
    assert time.perf_counter() - started < 0.55
    assert world.require_component(first, PlanComponent).completed
    assert world.require_component(second, PlanComponent).completed


def test_step_message_counts_from_one_and_keeps_braces() -> None:
    """The step text is copied as it is, braces included (never formatted)."""
    plan = PlanComponent(["a", "use {step_1_result} and {}"], current_step=1)
    assert step_message(plan) == ChatMessage("user", "Step 2/2: use {step_1_result} and {}")


def test_max_failures_must_be_positive() -> None:
    """A failure cap below one is a usage error."""
    with pytest.raises(UsageError, match="max_failures"):
        PlanningSystem(max_failures=0)

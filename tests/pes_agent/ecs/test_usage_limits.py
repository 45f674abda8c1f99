"""UsageLimitsComponent: an ECS entity held to the usage limits of PES runs, ending with
``"usage_limit"`` while the other entities go on."""

from __future__ import annotations

from typing import Any

import pytest

from ecs_core import EntityId, ErrorComponent, Runner, TerminalComponent, World
from pes_agent import ObservationManager, ObservationType, UsageLimits
from pes_agent.ecs import (
    ChatMessage,
    CheckpointComponent,
    CheckpointSystem,
    CompactionComponent,
    CompactionSystem,
    ConversationComponent,
    ErrorHandlingSystem,
    ErrorOccurredEvent,
    LLMComponent,
    PendingToolCallsComponent,
    PlanComponent,
    PlanningSystem,
    ReasoningFailuresComponent,
    ReasoningSystem,
    TerminalCleanupSystem,
    ToolCall,
    ToolExecutionSystem,
    ToolRegistryComponent,
    UsageLimitsComponent,
    UsageSpentComponent,
    checkpoints,
)
from pes_agent.errors import UsageError, UsageLimitExceeded
from pes_agent.testing import ScriptedProvider, ScriptedResponse
from pes_agent.usage import Usage

from .conftest import Calls, EventLog


def answer(
    text: str = "",
    *calls: ToolCall,
    input_tokens: int = 10,
    output_tokens: int = 5,
    retried_output_tokens: int = 0,
) -> ScriptedResponse:
    """A scripted answer reporting exactly the given tokens."""
    usage = Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        retried_output_tokens=retried_output_tokens,
        total_tokens=input_tokens + output_tokens + retried_output_tokens,
        requests=1,
    )
    return ScriptedResponse(text, tool_calls=calls, usage=usage)


def add_call(n: int) -> ToolCall:
    return ToolCall(f"c{n}", "add", {"a": n, "b": 1})


def react_model(rounds: int, *, final: str = "Done.") -> ScriptedProvider:
    """A model that calls `add` once a turn for `rounds` turns, then answers `final`."""
    return ScriptedProvider([*(answer("", add_call(n)) for n in range(1, rounds + 1)), final])


def agent(
    world: World, model: ScriptedProvider, limits: UsageLimits | None, tools: list[Any]
) -> EntityId:
    components: list[object] = [
        LLMComponent(model),
        ConversationComponent([ChatMessage("user", "Add things up.")]),
        ToolRegistryComponent(tools),
    ]
    if limits is not None:
        components.append(UsageLimitsComponent(limits))
    return world.create_entity(*components)


@pytest.fixture
def log(world: World) -> EventLog:
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    world.register_system(ErrorHandlingSystem(), priority=99)
    return EventLog(world, ErrorOccurredEvent)


async def run(world: World, *entities: EntityId) -> None:
    await Runner().run(world, until=list(entities), max_ticks=20)


def reason(world: World, entity: EntityId) -> str:
    return world.require_component(entity, TerminalComponent).reason


def messages(world: World, entity: EntityId) -> list[ChatMessage]:
    return world.require_component(entity, ConversationComponent).messages


def breach(log: EventLog) -> UsageLimitExceeded:
    """The one usage-limit error reported."""
    (event,) = log.of(ErrorOccurredEvent)
    assert isinstance(event.error, UsageLimitExceeded)
    return event.error


async def test_requests_stop_the_entity_before_the_call_it_has_no_room_for(
    world: World, log: EventLog, add_tool: Any, calls: Calls, observations: ObservationManager
) -> None:
    """With requests=1 the tool round runs, the second model call is never made, and the
    entity ends with "usage_limit" and an ERROR observation naming the limit and figures."""
    model = react_model(1)
    entity = agent(world, model, UsageLimits(requests=1), [add_tool])
    await run(world, entity)
    assert reason(world, entity) == "usage_limit"
    assert model.calls == 1
    assert calls.log == [("add", {"a": 1, "b": 1})]
    assert messages(world, entity)[-1].role == "tool"
    error = breach(log)
    assert (error.limit, error.used, error.allowed) == ("requests", 1, 1)
    assert str(error).startswith("requests: 1 used, limit 1")
    assert log.of(ErrorOccurredEvent)[0].system_name == "ReasoningSystem"
    errors = await observations.get_observations(f"entity-{entity}", types=[ObservationType.ERROR])
    assert [o.content["error"] for o in errors] == [str(error)]
    assert world.require_component(entity, UsageSpentComponent).requests == 1


async def test_reaching_the_requests_limit_exactly_lets_the_entity_finish(
    world: World, log: EventLog, add_tool: Any
) -> None:
    """With requests=2, a tool round and a final answer are exactly two calls: it finishes."""
    model = react_model(1)
    entity = agent(world, model, UsageLimits(requests=2), [add_tool])
    await run(world, entity)
    assert reason(world, entity) == "reasoning_complete"
    assert messages(world, entity)[-1] == ChatMessage("assistant", "Done.")
    assert log.events == []


async def test_an_answer_crossing_input_tokens_is_not_appended(
    world: World, log: EventLog, add_tool: Any
) -> None:
    """The second answer takes input tokens to 20 over a limit of 15: it is dropped, the
    entity ends with "usage_limit", and the spend keeps the tokens that were used."""
    model = react_model(1, final=answer("Done.", input_tokens=10))
    entity = agent(world, model, UsageLimits(input_tokens=15), [add_tool])
    await run(world, entity)
    assert reason(world, entity) == "usage_limit"
    assert model.calls == 2
    assert [m.role for m in messages(world, entity)] == ["user", "assistant", "tool"]
    error = breach(log)
    assert (error.limit, error.used, error.allowed) == ("input_tokens", 20, 15)
    assert str(error) == "input_tokens: 20 used, limit 15"
    spent = world.require_component(entity, UsageSpentComponent)
    assert (spent.requests, spent.usage.input_tokens) == (2, 20)


async def test_retried_output_tokens_count_and_a_crossing_answer_queues_no_calls(
    world: World, log: EventLog, add_tool: Any, calls: Calls
) -> None:
    """5 output tokens plus 4 of a retried attempt cross output_tokens=8: the answer's tool
    call is neither appended nor queued, and never runs."""
    model = ScriptedProvider([answer("", add_call(1), retried_output_tokens=4), "Done."])
    entity = agent(world, model, UsageLimits(output_tokens=8), [add_tool])
    await run(world, entity)
    assert reason(world, entity) == "usage_limit"
    assert messages(world, entity) == [ChatMessage("user", "Add things up.")]
    assert not world.has_component(entity, PendingToolCallsComponent)
    assert calls.log == []
    assert str(breach(log)) == "output_tokens: 9 used, limit 8"


async def test_total_tokens_reached_exactly_finishes_and_the_next_turn_is_refused(
    world: World, add_tool: Any
) -> None:
    """Two answers of 15 tokens reach total_tokens=30 exactly and the entity answers; the next
    user message finds no room: no call is made, and TerminalCleanupSystem (by default) leaves
    the "usage_limit" end in place."""
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(TerminalCleanupSystem(), priority=1)
    world.register_system(ToolExecutionSystem(), priority=5)
    model = react_model(1, final=answer("Done."))
    entity = agent(world, model, UsageLimits(total_tokens=30), [add_tool])
    for _ in range(3):
        await world.process()
    assert messages(world, entity)[-1] == ChatMessage("assistant", "Done.")
    assert not world.has_component(entity, TerminalComponent)  # lifted: a chat loop goes on
    messages(world, entity).append(ChatMessage("user", "And again?"))
    for _ in range(3):
        await world.process()
    assert model.calls == 2
    assert reason(world, entity) == "usage_limit"
    error = world.require_component(entity, ErrorComponent).error
    assert str(error) == "total_tokens: 30 used, limit 30; the run needs another model call"


async def test_tool_calls_beyond_the_limit_do_not_run_and_are_answered(
    world: World, log: EventLog, add_tool: Any, calls: Calls, observations: ObservationManager
) -> None:
    """With tool_calls=1 and two calls in one turn, the first runs, the second is answered
    with an error naming the limit, and the model is not asked again."""
    model = ScriptedProvider([answer("", add_call(1), add_call(2)), "Done."])
    entity = agent(world, model, UsageLimits(tool_calls=1), [add_tool])
    await run(world, entity)
    assert reason(world, entity) == "usage_limit"
    assert calls.log == [("add", {"a": 1, "b": 1})]
    assert model.calls == 1
    tool_messages = [m for m in messages(world, entity) if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in tool_messages] == [
        ("c1", "2"),
        ("c2", "Error: Not run: tool_calls: 1 used, limit 1; the run needs another tool call"),
    ]
    assert not world.has_component(entity, PendingToolCallsComponent)
    error = breach(log)
    assert (error.limit, error.used, error.allowed) == ("tool_calls", 1, 1)
    assert log.of(ErrorOccurredEvent)[0].system_name == "ToolExecutionSystem"
    executions = await observations.get_observations(
        f"entity-{entity}", types=[ObservationType.TOOL_EXECUTION]
    )
    assert [o.content["status"] for o in executions] == ["success", "error"]


async def test_tool_calls_count_across_turns(world: World, log: EventLog, add_tool: Any) -> None:
    """tool_calls=2 allows one call in each of two turns, exactly; the third turn's call does
    not run."""
    model = react_model(3)
    entity = agent(world, model, UsageLimits(tool_calls=2), [add_tool])
    await run(world, entity)
    assert reason(world, entity) == "usage_limit"
    assert model.calls == 3
    assert world.require_component(entity, UsageSpentComponent).tool_calls == 2
    assert messages(world, entity)[-1].content.startswith("Error: Not run: tool_calls: 2 used")


async def test_one_entity_over_budget_does_not_stop_another(
    world: World, log: EventLog, add_tool: Any
) -> None:
    """Two entities run the same script side by side: the one with requests=1 ends with
    "usage_limit", the other (no limits) finishes its answer."""
    limited = agent(world, react_model(2), UsageLimits(requests=1), [add_tool])
    free = agent(world, react_model(2), None, [add_tool])
    await run(world, limited, free)
    assert reason(world, limited) == "usage_limit"
    assert reason(world, free) == "reasoning_complete"
    assert messages(world, free)[-1] == ChatMessage("assistant", "Done.")
    assert not world.has_component(free, UsageSpentComponent)
    assert [event.entity_id for event in log.of(ErrorOccurredEvent)] == [limited]


async def test_a_restored_entity_keeps_its_limits_and_what_it_spent(
    world: World, log: EventLog, add_tool: Any
) -> None:
    """Restoring the checkpoint after the first call brings back that conversation and the
    limits, but not the spent calls: the next call is refused again and never made."""
    world.register_system(CheckpointSystem(), priority=15)
    model = react_model(2)
    entity = agent(world, model, UsageLimits(requests=2), [add_tool])
    world.add_component(entity, CheckpointComponent())
    await run(world, entity)
    assert reason(world, entity) == "usage_limit"
    assert model.calls == 2

    await checkpoints.restore(world, entity, 1)
    assert not world.has_component(entity, TerminalComponent)
    assert len(messages(world, entity)) == 3  # user, assistant with a call, tool
    assert world.require_component(entity, UsageLimitsComponent).limits.requests == 2
    assert world.require_component(entity, UsageSpentComponent).requests == 2
    await run(world, entity)
    assert reason(world, entity) == "usage_limit"
    assert model.calls == 2
    assert len(messages(world, entity)) == 3


async def test_other_systems_model_calls_are_held_to_the_limits(world: World) -> None:
    """A compaction summary the entity has no room for is not asked for: the entity ends with
    "usage_limit" and the history stays as it was."""
    world.register_system(CompactionSystem(), priority=20)
    model = ScriptedProvider(["A summary."])
    history = [ChatMessage("user", "word " * 50), ChatMessage("assistant", "fine " * 50)] * 3
    entity = world.create_entity(
        LLMComponent(model),
        ConversationComponent(list(history)),
        CompactionComponent(threshold_tokens=20, keep_recent=2),
        UsageLimitsComponent(UsageLimits(requests=0)),
    )
    await world.process()
    assert model.calls == 0
    assert reason(world, entity) == "usage_limit"
    assert messages(world, entity) == history
    failure = world.require_component(entity, ErrorComponent)
    assert isinstance(failure.error, UsageLimitExceeded)
    assert failure.system_name == "CompactionSystem"


async def test_plan_steps_count_and_a_step_without_room_is_not_started(world: World) -> None:
    """With requests=1 the first plan step is answered; the second step's message is never
    appended and the plan stays at that step."""
    world.register_system(PlanningSystem(), priority=0)
    model = ScriptedProvider(["Three facts.", "A report."])
    entity = world.create_entity(
        LLMComponent(model),
        ConversationComponent([ChatMessage("user", "Write a report.")]),
        PlanComponent(["Collect facts", "Draft the report"]),
        UsageLimitsComponent(UsageLimits(requests=1)),
    )
    await run(world, entity)
    assert reason(world, entity) == "usage_limit"
    assert model.calls == 1
    assert world.require_component(entity, PlanComponent).current_step == 1
    assert messages(world, entity)[-1] == ChatMessage("assistant", "Three facts.")
    failure = world.require_component(entity, ErrorComponent)
    assert (failure.system_name, str(failure.error)) == (
        "PlanningSystem",
        "requests: 1 used, limit 1; the run needs another model call",
    )


def test_the_component_refuses_anything_but_usage_limits() -> None:
    """A dict of limits is a mistake with a fix: the UsageError shows how to write it."""
    with pytest.raises(UsageError, match=r"takes a UsageLimits, got dict .*UsageLimits\("):
        UsageLimitsComponent({"requests": 3})  # type: ignore[arg-type]


async def test_a_usage_limit_is_not_counted_as_a_reasoning_failure(world: World) -> None:
    """Even with max_failures=1 the end stays "usage_limit", not "reasoning_failed"."""
    world.register_system(ReasoningSystem(max_failures=1), priority=0)
    model = ScriptedProvider(["Done."])
    entity = agent(world, model, UsageLimits(requests=0), [])
    await world.process()
    assert model.calls == 0
    assert reason(world, entity) == "usage_limit"
    assert not world.has_component(entity, ReasoningFailuresComponent)

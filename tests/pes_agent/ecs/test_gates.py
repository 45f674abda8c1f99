"""PermissionSystem and ToolApprovalSystem: no pending call runs unless every gate cleared it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ecs_core import HandlerErrorEvent, World
from pes_agent.ecs.components import (
    ApprovalPolicy,
    ConversationComponent,
    LLMComponent,
    PendingToolCallsComponent,
    PermissionComponent,
    ToolApprovalComponent,
    ToolRegistryComponent,
    ToolResultsComponent,
)
from pes_agent.ecs.events import ToolApprovalRequestedEvent, ToolApprovedEvent, ToolDeniedEvent
from pes_agent.ecs.gates import PermissionSystem, ToolApprovalSystem
from pes_agent.ecs.messages import ChatMessage, ToolCall
from pes_agent.ecs.reasoning import ReasoningSystem
from pes_agent.ecs.tool_execution import ToolExecutionSystem
from pes_agent.testing import ScriptedProvider, ScriptedResponse

from .conftest import Calls, EventLog

ADD = ToolCall("c1", "add", {"a": 1, "b": 2})
GATE_EVENTS = (ToolApprovalRequestedEvent, ToolApprovedEvent, ToolDeniedEvent)


@pytest.fixture
def systems(world: World) -> World:
    """The world with both gates [-5] and tool execution [5] registered."""
    world.register_system(PermissionSystem(), priority=-5)
    world.register_system(ToolApprovalSystem(), priority=-5)
    world.register_system(ToolExecutionSystem(), priority=5)
    return world


def gated(world: World, add_tool: Any, *gates: object, call: ToolCall = ADD) -> int:
    """An entity whose model asked for `call`, behind `gates`."""
    return world.create_entity(
        ConversationComponent(
            [ChatMessage("user", "add"), ChatMessage("assistant", tool_calls=[call])]
        ),
        ToolRegistryComponent([add_tool]),
        PendingToolCallsComponent([call]),
        ToolResultsComponent(),
        *gates,
    )


def last_message(world: World, entity: int) -> ChatMessage:
    return world.require_component(entity, ConversationComponent).messages[-1]


def assert_refused(world: World, entity: int, calls: Calls, reason: str) -> None:
    """The call did not run, and a tool message with `reason` answers its id."""
    assert calls.log == []
    message = last_message(world, entity)
    assert (message.role, message.tool_call_id) == ("tool", ADD.id)
    assert reason in message.content
    assert world.require_component(entity, ToolResultsComponent).results[0].status == "error"
    assert not world.has_component(entity, PendingToolCallsComponent)


# Permission ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("systems")
async def test_a_denied_tool_is_refused_and_answered(
    world: World, add_tool: Any, calls: Calls
) -> None:
    """A tool in `denied` never runs; its call gets a tool message and a ToolDeniedEvent."""
    log = EventLog(world, *GATE_EVENTS)
    entity = gated(world, add_tool, PermissionComponent(denied={"add"}))
    await world.process()
    assert_refused(world, entity, calls, 'tool "add" is not permitted')
    [denied] = log.of(ToolDeniedEvent)
    assert (denied.entity_id, denied.tool_call) == (entity, ADD)


@pytest.mark.usefixtures("systems")
async def test_only_allowed_tools_run(world: World, add_tool: Any, calls: Calls) -> None:
    """With `allowed` set, a tool outside it is refused and one inside it runs."""
    outside = gated(world, add_tool, PermissionComponent(allowed={"search"}))
    inside = gated(world, add_tool, PermissionComponent(allowed={"add"}), call=ADD)
    await world.process()
    assert "not among the tools" in last_message(world, outside).content
    assert last_message(world, inside).content == "3"
    assert calls.log == [("add", {"a": 1, "b": 2})]


# Approval policies -----------------------------------------------------------------------------


@pytest.mark.usefixtures("systems")
async def test_always_approve_runs_the_call(world: World, add_tool: Any, calls: Calls) -> None:
    """ALWAYS_APPROVE clears the call (ToolApprovedEvent) and it runs in the same tick."""
    log = EventLog(world, *GATE_EVENTS)
    entity = gated(world, add_tool, ToolApprovalComponent(ApprovalPolicy.ALWAYS_APPROVE))
    await world.process()
    assert calls.log == [("add", {"a": 1, "b": 2})]
    assert log.kinds() == ["ToolApprovedEvent"]
    assert last_message(world, entity).content == "3"


@pytest.mark.usefixtures("systems")
async def test_always_deny_refuses_the_call(world: World, add_tool: Any, calls: Calls) -> None:
    """ALWAYS_DENY refuses every call with a ToolDeniedEvent."""
    log = EventLog(world, *GATE_EVENTS)
    entity = gated(world, add_tool, ToolApprovalComponent(ApprovalPolicy.ALWAYS_DENY))
    await world.process()
    assert_refused(world, entity, calls, "denied by this agent's policy")
    assert log.kinds() == ["ToolDeniedEvent"]


@pytest.mark.usefixtures("systems")
async def test_require_approval_without_a_subscriber_denies(
    world: World, add_tool: Any, calls: Calls
) -> None:
    """Nobody to ask means no approval: the call is refused at once."""
    entity = gated(world, add_tool, ToolApprovalComponent())
    await world.process()
    assert_refused(world, entity, calls, "nothing subscribes to ToolApprovalRequestedEvent")


@pytest.mark.usefixtures("systems")
async def test_an_immediate_yes_runs_the_call_in_the_same_tick(
    world: World, add_tool: Any, calls: Calls
) -> None:
    """A subscriber answering inside the handler gets the call run in that tick."""
    log = EventLog(world, *GATE_EVENTS)
    world.events.subscribe(ToolApprovalRequestedEvent, lambda e: e.future.set_result(True))
    entity = gated(world, add_tool, ToolApprovalComponent())
    await world.process()
    assert calls.log == [("add", {"a": 1, "b": 2})]
    assert log.kinds() == ["ToolApprovalRequestedEvent", "ToolApprovedEvent"]
    assert log.of(ToolApprovalRequestedEvent)[0].tool_call == ADD
    assert world.require_component(entity, ToolApprovalComponent).waiting == {}


@pytest.mark.parametrize("answer", [False, "yes", 1])
@pytest.mark.usefixtures("systems")
async def test_anything_but_true_denies(
    world: World, add_tool: Any, calls: Calls, answer: Any
) -> None:
    """Only an explicit True approves; False or a truthy mistake refuses the call."""
    world.events.subscribe(ToolApprovalRequestedEvent, lambda e: e.future.set_result(answer))
    entity = gated(world, add_tool, ToolApprovalComponent())
    await world.process()
    assert_refused(world, entity, calls, "a person denied")


@pytest.mark.usefixtures("systems")
async def test_waiting_spans_ticks_without_blocking_other_entities(
    world: World, add_tool: Any, calls: Calls
) -> None:
    """An unanswered question holds only its own call, across ticks, until the answer comes."""
    questions: list[ToolApprovalRequestedEvent] = []
    world.events.subscribe(ToolApprovalRequestedEvent, questions.append)
    asking = gated(world, add_tool, ToolApprovalComponent(timeout_s=60))
    free = gated(world, add_tool)
    for _ in range(3):
        await world.process()
    assert len(questions) == 1  # asked once, not once per tick
    assert last_message(world, free).content == "3"  # the other entity went on
    assert world.require_component(asking, PendingToolCallsComponent).tool_calls == [ADD]
    assert len(calls.log) == 1
    questions[0].future.set_result(True)
    await world.process()
    assert last_message(world, asking).content == "3"
    assert len(calls.log) == 2


@pytest.mark.usefixtures("systems")
async def test_no_answer_within_the_timeout_denies(
    world: World, add_tool: Any, calls: Calls
) -> None:
    """When timeout_s passes without an answer the call is refused and the question withdrawn."""
    questions: list[ToolApprovalRequestedEvent] = []
    world.events.subscribe(ToolApprovalRequestedEvent, questions.append)
    entity = gated(world, add_tool, ToolApprovalComponent(timeout_s=0.05))
    await world.process()
    assert world.has_component(entity, PendingToolCallsComponent)
    await asyncio.sleep(0.1)
    await world.process()
    assert_refused(world, entity, calls, "within 0.05s")
    assert questions[0].future.cancelled()


@pytest.mark.usefixtures("systems")
async def test_a_person_is_asked_only_about_permitted_calls(
    world: World, add_tool: Any, calls: Calls
) -> None:
    """With both gates, a call the permissions refuse is never put to a person."""
    log = EventLog(world, *GATE_EVENTS)
    world.events.subscribe(ToolApprovalRequestedEvent, lambda e: e.future.set_result(True))
    entity = gated(world, add_tool, PermissionComponent(denied={"add"}), ToolApprovalComponent())
    await world.process()
    await world.process()
    assert_refused(world, entity, calls, "not permitted")
    assert log.kinds() == ["ToolDeniedEvent"]


@pytest.mark.usefixtures("systems")
async def test_both_gates_must_clear_a_call(world: World, add_tool: Any, calls: Calls) -> None:
    """A call the permissions allow still waits for the approval gate, then runs."""
    world.events.subscribe(ToolApprovalRequestedEvent, lambda e: e.future.set_result(True))
    entity = gated(world, add_tool, PermissionComponent(allowed={"add"}), ToolApprovalComponent())
    for _ in range(2):  # the approval gate may run before the permission gate in a tick
        await world.process()
    assert last_message(world, entity).content == "3"
    assert len(calls.log) == 1


async def test_a_gate_without_its_system_holds_the_calls(
    world: World, add_tool: Any, calls: Calls
) -> None:
    """A gate component whose system is not registered keeps its calls from running at all."""
    world.register_system(ToolExecutionSystem(), priority=5)
    entity = gated(world, add_tool, ToolApprovalComponent(ApprovalPolicy.ALWAYS_APPROVE))
    for _ in range(3):
        await world.process()
    assert calls.log == []
    assert world.require_component(entity, PendingToolCallsComponent).tool_calls == [ADD]


@pytest.mark.usefixtures("systems")
async def test_a_failing_approval_handler_is_reported_and_approves_nothing(
    world: World, add_tool: Any, calls: Calls
) -> None:
    """Regression (reference defect): a raising handler is published as HandlerErrorEvent,
    and the call it never answered is denied when its time is up, never run."""
    errors = EventLog(world, HandlerErrorEvent)

    def broken(event: ToolApprovalRequestedEvent) -> None:
        raise RuntimeError("approver crashed")

    world.events.subscribe(ToolApprovalRequestedEvent, broken)
    entity = gated(world, add_tool, ToolApprovalComponent(timeout_s=0.05))
    await world.process()
    [reported] = errors.of(HandlerErrorEvent)
    assert str(reported.exception) == "approver crashed"
    await asyncio.sleep(0.1)
    await world.process()
    assert_refused(world, entity, calls, "no one approved")


# No bypass under same-tick scheduling ----------------------------------------------------------


@pytest.mark.parametrize(
    "gate",
    [
        ToolApprovalComponent(ApprovalPolicy.ALWAYS_DENY),
        ToolApprovalComponent(ApprovalPolicy.REQUIRE_APPROVAL),
        PermissionComponent(denied={"add"}),
        PermissionComponent(allowed=set()),
    ],
    ids=["always-deny", "require-approval-nobody-asked", "denied-tool", "nothing-allowed"],
)
async def test_a_call_made_this_tick_never_runs_before_the_gates_saw_it(
    world: World, add_tool: Any, calls: Calls, gate: object
) -> None:
    """Regression: reasoning [0] makes a call after the gates [-5] ran and execution [5] runs
    later in the same tick; the call must still never run, then or after."""
    model = ScriptedProvider([ScriptedResponse(tool_calls=[ADD]), "I could not add."])
    world.register_system(PermissionSystem(), priority=-5)
    world.register_system(ToolApprovalSystem(), priority=-5)
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    entity = world.create_entity(
        LLMComponent(model),
        ConversationComponent([ChatMessage("user", "add 1 and 2")]),
        ToolRegistryComponent([add_tool]),
        gate,
    )
    await world.process()  # the tick the call is made in
    assert calls.log == []
    assert world.require_component(entity, PendingToolCallsComponent).tool_calls == [ADD]
    for _ in range(3):
        await world.process()
    assert calls.log == []
    roles = [
        (m.role, m.tool_call_id)
        for m in world.require_component(entity, ConversationComponent).messages
    ]
    assert roles == [("user", None), ("assistant", None), ("tool", "c1"), ("assistant", None)]


async def test_an_approved_call_made_this_tick_waits_for_the_next_gate_pass(
    world: World, add_tool: Any, calls: Calls
) -> None:
    """Even an always-approving gate must see the call first: it runs in the next tick."""
    model = ScriptedProvider([ScriptedResponse(tool_calls=[ADD]), "3"])
    world.register_system(ToolApprovalSystem(), priority=-5)
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    world.create_entity(
        LLMComponent(model),
        ConversationComponent([ChatMessage("user", "add 1 and 2")]),
        ToolRegistryComponent([add_tool]),
        ToolApprovalComponent(ApprovalPolicy.ALWAYS_APPROVE),
    )
    await world.process()
    assert calls.log == []
    await world.process()
    assert calls.log == [("add", {"a": 1, "b": 2})]


@pytest.mark.usefixtures("systems")
async def test_a_call_both_gates_would_refuse_is_answered_once(
    world: World, add_tool: Any, calls: Calls
) -> None:
    """Two refusing gates answer each call exactly once (a second answer breaks the model API)."""
    other = ToolCall("c2", "search", {"q": "x"})
    entity = world.create_entity(
        ConversationComponent(
            [ChatMessage("user", "go"), ChatMessage("assistant", tool_calls=[ADD, other])]
        ),
        ToolRegistryComponent([add_tool]),
        PendingToolCallsComponent([ADD, other]),
        PermissionComponent(denied={"search"}),
        ToolApprovalComponent(ApprovalPolicy.ALWAYS_DENY),
    )
    for _ in range(3):
        await world.process()
    answers = [
        m.tool_call_id
        for m in world.require_component(entity, ConversationComponent).messages
        if m.role == "tool"
    ]
    assert sorted(answers) == ["c1", "c2"]
    assert calls.log == []

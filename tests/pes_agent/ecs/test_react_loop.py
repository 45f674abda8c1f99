"""The systems together: a ReAct loop run by ecs_core.Runner, and the reference framework's
defects that must not exist here."""

from __future__ import annotations

from typing import Any

from ecs_core import ErrorOccurredEvent as SystemFailedEvent
from ecs_core import HandlerErrorEvent, Runner, StopReason, TerminalComponent, World
from pes_agent import ObservationManager, ObservationType
from pes_agent.ecs.components import (
    AgentIdentityComponent,
    ConversationComponent,
    LLMComponent,
    StreamingComponent,
    SystemPromptComponent,
    ToolRegistryComponent,
    ToolResultsComponent,
)
from pes_agent.ecs.events import StreamContentDeltaEvent
from pes_agent.ecs.gates import PermissionSystem, ToolApprovalSystem
from pes_agent.ecs.lifecycle import ErrorHandlingSystem, TerminalCleanupSystem
from pes_agent.ecs.messages import ChatMessage, ToolCall
from pes_agent.ecs.reasoning import ReasoningSystem
from pes_agent.ecs.tool_execution import ToolExecutionSystem
from pes_agent.ecs.user_input import UserInputSystem
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, ScriptedResponse

from .conftest import Calls, EventLog


def register_all(world: World) -> None:
    """The conversational systems at their DESIGN priorities."""
    world.register_system(UserInputSystem(), priority=-10)
    world.register_system(PermissionSystem(), priority=-5)
    world.register_system(ToolApprovalSystem(), priority=-5)
    world.register_system(ReasoningSystem(), priority=0)
    world.register_system(ToolExecutionSystem(), priority=5)
    world.register_system(ErrorHandlingSystem(), priority=99)


def react_model(*rounds: list[ToolCall], answer: str = "Done.") -> ScriptedProvider:
    """A model that makes each round of calls in turn, then answers."""
    return ScriptedProvider([*(ScriptedResponse(tool_calls=calls) for calls in rounds), answer])


def react_entity(world: World, model: ScriptedProvider, tools: list[Any], *extra: object) -> int:
    return world.create_entity(
        LLMComponent(model),
        SystemPromptComponent("Use the tools."),
        ConversationComponent([ChatMessage("user", "Compute (1+2)+4.")]),
        ToolRegistryComponent(tools),
        *extra,
    )


async def test_a_react_agent_runs_tool_rounds_to_its_answer(
    world: World, add_tool: Any, calls: Calls, observations: ObservationManager
) -> None:
    """Two tool rounds then an answer; results reach the model as tool messages by call id."""
    register_all(world)
    model = react_model(
        [ToolCall("c1", "add", {"a": 1, "b": 2})],
        [ToolCall("c2", "add", {"a": 3, "b": 4})],
        answer="(1+2)+4 = 7",
    )
    entity = react_entity(world, model, [add_tool], AgentIdentityComponent("react"))
    result = await Runner().run(world, until=entity, max_ticks=20)
    assert result.reason is StopReason.TERMINATED
    assert result.ticks == 3
    assert result.terminals[entity].reason == "reasoning_complete"
    assert calls.log == [("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})]
    history = world.require_component(entity, ConversationComponent).messages
    assert [(m.role, m.tool_call_id, m.content) for m in history] == [
        ("user", None, "Compute (1+2)+4."),
        ("assistant", None, ""),
        ("tool", "c1", "3"),
        ("assistant", None, ""),
        ("tool", "c2", "7"),
        ("assistant", None, "(1+2)+4 = 7"),
    ]
    second = model.requests[1].messages
    assert [(m.role, m.tool_call_id) for m in second][-2:] == [("assistant", None), ("tool", "c1")]
    assert second[-2].tool_calls == (ToolCall("c1", "add", {"a": 1, "b": 2}),)
    assert world.require_component(entity, ToolResultsComponent).results[0].call_id == "c2"
    kinds = [o.type for o in await observations.get_observations("react")]
    assert kinds.count(ObservationType.LLM_STREAM_START) == 3
    assert kinds.count(ObservationType.TOOL_CALL) == 2
    assert kinds.count(ObservationType.TOOL_EXECUTION) == 2


async def test_a_finished_entity_does_not_stop_the_others(
    world: World, add_tool: Any, calls: Calls
) -> None:
    """Regression (reference defect): one entity's TerminalComponent ends only that entity;
    the Runner keeps ticking until every watched entity is done."""
    register_all(world)
    quick = react_entity(world, ScriptedProvider(["No tools needed."]), [add_tool])
    slow = react_entity(
        world,
        react_model(
            [ToolCall("a", "add", {"a": 1, "b": 2})], [ToolCall("b", "add", {"a": 3, "b": 4})]
        ),
        [add_tool],
    )
    result = await Runner().run(world, until=[quick, slow], max_ticks=20)
    assert result.reason is StopReason.TERMINATED
    assert result.ticks == 3
    assert len(calls.log) == 2
    assert world.require_component(slow, ConversationComponent).messages[-1].content == "Done."


async def test_a_failing_system_does_not_stop_the_agent_systems(
    world: World, add_tool: Any
) -> None:
    """Regression (reference defect): a system raising at the reasoning priority is reported
    and its siblings still finish their work in that tick."""

    class Broken:
        async def process(self, world: World) -> None:
            raise RuntimeError("broken system")

    failures = EventLog(world, SystemFailedEvent)
    register_all(world)
    world.register_system(Broken(), priority=0)
    entity = react_entity(world, ScriptedProvider(["fine"]), [add_tool])
    await world.process()
    assert world.require_component(entity, TerminalComponent).reason == "reasoning_complete"
    assert [e.system_name for e in failures.events] == ["Broken"]


async def test_a_failing_stream_handler_is_reported_and_the_turn_completes(
    world: World, add_tool: Any
) -> None:
    """Regression (reference defect): a stream handler that raises is published as a
    HandlerErrorEvent, not swallowed, and the model's answer still lands."""
    register_all(world)
    handler_errors = EventLog(world, HandlerErrorEvent)

    def broken(event: StreamContentDeltaEvent) -> None:
        raise RuntimeError("ui crashed")

    world.events.subscribe(StreamContentDeltaEvent, broken)
    entity = react_entity(world, ScriptedProvider(["answer"]), [add_tool], StreamingComponent())
    await world.process()
    assert handler_errors.events
    assert {str(e.exception) for e in handler_errors.events} == {"ui crashed"}
    assert world.require_component(entity, ConversationComponent).messages[-1].content == "answer"


async def test_a_chat_entity_answers_each_user_message_exactly_once(world: World) -> None:
    """With terminal cleanup the entity stays alive, and it only speaks after a new user turn."""
    register_all(world)
    world.register_system(TerminalCleanupSystem(), priority=1)

    def echo(request: LLMRequest) -> str:
        return f"echo: {request.messages[-1].content}"

    model = ScriptedProvider([echo], repeat=True)
    entity = world.create_entity(
        LLMComponent(model), ConversationComponent([ChatMessage("user", "one")])
    )
    for _ in range(3):
        await world.process()
    world.require_component(entity, ConversationComponent).messages.append(
        ChatMessage("user", "two")
    )
    for _ in range(3):
        await world.process()
    assert model.calls == 2
    assert [m.content for m in world.require_component(entity, ConversationComponent).messages] == [
        "one",
        "echo: one",
        "two",
        "echo: two",
    ]
    assert not world.has_component(entity, TerminalComponent)

"""ReasoningSystem: one model turn per ready entity per tick, with native tools."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ecs_core import ErrorComponent, TerminalComponent, World
from pes_agent import ObservationManager, ObservationType, ProviderError
from pes_agent.ecs.components import (
    AgentIdentityComponent,
    ConversationComponent,
    LLMComponent,
    PendingToolCallsComponent,
    PlanComponent,
    PlanSearchComponent,
    ReasoningFailuresComponent,
    StreamingComponent,
    SystemPromptComponent,
    ToolRegistryComponent,
    ToolResultsComponent,
    UserInputComponent,
)
from pes_agent.ecs.events import StreamContentDeltaEvent, StreamEndEvent, StreamStartEvent
from pes_agent.ecs.messages import ChatMessage, ToolCall
from pes_agent.ecs.reasoning import ReasoningSystem
from pes_agent.errors import UsageError
from pes_agent.providers.base import LLMRequest, StreamMetadata, ToolCallEvent
from pes_agent.testing import ScriptedProvider, ScriptedResponse
from pes_agent.tools.registry import ToolRegistry
from pes_agent.usage import Usage

from .conftest import EventLog, RawEvents


def agent(world: World, model: ScriptedProvider, *extra: object, text: str = "What is 1+2?") -> int:
    """An entity with a model and a conversation holding one user message."""
    return world.create_entity(
        LLMComponent(model), ConversationComponent([ChatMessage("user", text)]), *extra
    )


def failing(request: LLMRequest) -> str:
    """A scripted entry whose call fails like a provider outage."""
    raise RuntimeError("model down")


@pytest.fixture
def reasoning(world: World) -> ReasoningSystem:
    system = ReasoningSystem()
    world.register_system(system, priority=0)
    return system


@pytest.mark.usefixtures("reasoning")
async def test_a_final_answer_is_appended_and_ends_that_entity(world: World) -> None:
    """An answer without tool calls becomes the last message and the entity's terminal."""
    entity = agent(world, ScriptedProvider(["3"]))
    await world.process()
    messages = world.require_component(entity, ConversationComponent).messages
    assert messages[-1] == ChatMessage("assistant", "3")
    assert world.require_component(entity, TerminalComponent).reason == "reasoning_complete"
    assert not world.has_component(entity, PendingToolCallsComponent)


@pytest.mark.usefixtures("reasoning")
async def test_tool_calls_become_pending_with_an_empty_result_list(
    world: World, add_tool: Any
) -> None:
    """Native tool calls land in the assistant message and in PendingToolCallsComponent."""
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    model = ScriptedProvider([ScriptedResponse("Let me add.", tool_calls=[call])])
    entity = agent(world, model, ToolRegistryComponent([add_tool]))
    await world.process()
    assert [t.name for t in model.requests[0].tools] == ["add"]
    last = world.require_component(entity, ConversationComponent).messages[-1]
    assert (last.role, last.content, last.tool_calls) == ("assistant", "Let me add.", [call])
    assert world.require_component(entity, PendingToolCallsComponent).tool_calls == [call]
    assert world.require_component(entity, ToolResultsComponent).results == []
    assert not world.has_component(entity, TerminalComponent)


@pytest.mark.usefixtures("reasoning")
async def test_a_tool_registry_offers_its_tools(world: World, add_tool: Any) -> None:
    """A `ToolRegistry` in the component offers every registered tool's schema."""
    model = ScriptedProvider(["ok"])
    agent(world, model, ToolRegistryComponent(ToolRegistry([add_tool])))
    await world.process()
    assert [t.name for t in model.requests[0].tools] == ["add"]


@pytest.mark.usefixtures("reasoning")
async def test_system_prompt_is_sent_first_and_never_stored(world: World) -> None:
    """SystemPromptComponent goes first in the request and stays out of the conversation."""
    model = ScriptedProvider(["ok"])
    entity = agent(world, model, SystemPromptComponent("You add numbers."))
    world.require_component(entity, LLMComponent).system_prompt = "ignored"
    await world.process()
    sent = model.requests[0].messages
    assert (sent[0].role, sent[0].content) == ("system", "You add numbers.")
    assert all(
        m.role != "system" for m in world.require_component(entity, ConversationComponent).messages
    )


@pytest.mark.usefixtures("reasoning")
async def test_no_model_call_after_a_final_answer(world: World) -> None:
    """Once the last message is a final answer, later ticks never call the model again."""
    model = ScriptedProvider(["3"])
    entity = agent(world, model)
    await world.process()
    world.remove_component(entity, TerminalComponent)  # as TerminalCleanupSystem would
    for _ in range(3):
        await world.process()
    assert model.calls == 1
    assert not world.has_component(entity, TerminalComponent)


@pytest.mark.usefixtures("reasoning")
async def test_a_new_user_message_after_a_final_answer_gets_a_turn(world: World) -> None:
    """A user message added after the final answer makes the entity ready again."""
    model = ScriptedProvider(["3", "7"])
    entity = agent(world, model)
    await world.process()
    world.remove_component(entity, TerminalComponent)
    world.require_component(entity, ConversationComponent).messages.append(
        ChatMessage("user", "and 3+4?")
    )
    await world.process()
    assert model.calls == 2
    assert world.require_component(entity, ConversationComponent).messages[-1].content == "7"


@pytest.mark.parametrize(
    "blocker",
    [
        TerminalComponent("done"),
        PendingToolCallsComponent([ToolCall("c1", "add", {})]),
        UserInputComponent("name?"),
        PlanComponent(["step one"]),
        PlanSearchComponent("goal"),
    ],
    ids=["terminal", "pending-tools", "user-input", "active-plan", "active-search"],
)
@pytest.mark.usefixtures("reasoning")
async def test_entities_waiting_or_driven_elsewhere_are_skipped(
    world: World, blocker: object
) -> None:
    """No model call for an entity that is finished, waiting, or driven by another system."""
    model = ScriptedProvider(["x"])
    agent(world, model, blocker)
    await world.process()
    assert model.calls == 0


@pytest.mark.parametrize(
    "done", [PlanComponent(["a"], completed=True), PlanSearchComponent("g", search_active=False)]
)
@pytest.mark.usefixtures("reasoning")
async def test_a_finished_plan_or_search_no_longer_blocks(world: World, done: object) -> None:
    """A completed plan or a finished search leaves the entity to the ReAct loop."""
    model = ScriptedProvider(["x"])
    agent(world, model, done)
    await world.process()
    assert model.calls == 1


@pytest.mark.usefixtures("reasoning")
async def test_an_empty_conversation_is_not_sent(world: World) -> None:
    """An entity with nothing to answer yet makes no call."""
    model = ScriptedProvider(["x"])
    world.create_entity(LLMComponent(model), ConversationComponent())
    await world.process()
    assert model.calls == 0


@pytest.mark.usefixtures("reasoning")
async def test_a_scripted_model_running_out_ends_the_entity(world: World) -> None:
    """ScriptExhaustedError ends the entity with reason provider_exhausted."""
    entity = agent(world, ScriptedProvider([]))
    await world.process()
    assert world.require_component(entity, TerminalComponent).reason == "provider_exhausted"


@pytest.mark.usefixtures("reasoning")
async def test_failures_are_errors_until_three_in_a_row_end_the_entity(world: World) -> None:
    """Each failure leaves an ErrorComponent; the third consecutive one ends the entity."""
    entity = agent(world, ScriptedProvider([failing, failing, failing]))
    for expected in (1, 2):
        await world.process()
        error = world.require_component(entity, ErrorComponent)
        assert isinstance(error.error, ProviderError)
        assert error.system_name == "ReasoningSystem"
        assert world.require_component(entity, ReasoningFailuresComponent).consecutive == expected
        assert not world.has_component(entity, TerminalComponent)
    await world.process()
    assert world.require_component(entity, TerminalComponent).reason == "reasoning_failed"


@pytest.mark.usefixtures("reasoning")
async def test_a_success_resets_the_failure_count(world: World) -> None:
    """Failures only end the entity when consecutive: a success in between resets the count."""
    entity = agent(world, ScriptedProvider([failing, failing, "fine"]))
    await world.process()
    await world.process()
    await world.process()
    assert not world.has_component(entity, ReasoningFailuresComponent)
    assert world.require_component(entity, TerminalComponent).reason == "reasoning_complete"


def test_max_failures_must_be_positive() -> None:
    """A failure cap below one is a usage error."""
    with pytest.raises(UsageError, match="max_failures"):
        ReasoningSystem(max_failures=0)


@pytest.mark.usefixtures("reasoning")
async def test_one_failing_entity_does_not_stop_the_others(world: World) -> None:
    """Regression (reference defect): a provider failure on one entity leaves the rest running."""
    broken = agent(world, ScriptedProvider([failing]))
    healthy = agent(world, ScriptedProvider(["fine"]))
    await world.process()
    assert world.has_component(broken, ErrorComponent)
    assert world.require_component(healthy, TerminalComponent).reason == "reasoning_complete"


@pytest.mark.usefixtures("reasoning")
async def test_entities_are_called_concurrently(world: World) -> None:
    """Three slow models answer in one model latency, not three."""
    for _ in range(3):
        agent(world, ScriptedProvider(["x"], latency_s=0.3))
    started = time.perf_counter()
    await world.process()
    assert time.perf_counter() - started < 0.6


@pytest.mark.usefixtures("reasoning")
async def test_an_unusable_tool_call_is_answered_at_once_and_never_pending(world: World) -> None:
    """A call whose arguments were not valid JSON gets an error tool message, never a run."""
    good = ToolCall("ok", "add", {"a": 1, "b": 2})
    model = RawEvents(
        ToolCallEvent(ToolCall("bad", "add"), error="arguments are not valid JSON", raw="{oops"),
        ToolCallEvent(good),
        StreamMetadata(Usage()),
    )
    entity = world.create_entity(
        LLMComponent(model), ConversationComponent([ChatMessage("user", "add")])
    )
    await world.process()
    messages = world.require_component(entity, ConversationComponent).messages
    assert [c.id for c in messages[-2].tool_calls or []] == ["bad", "ok"]
    assert messages[-1].role == "tool"
    assert messages[-1].tool_call_id == "bad"
    assert "not valid JSON" in messages[-1].content
    assert world.require_component(entity, PendingToolCallsComponent).tool_calls == [good]
    [result] = world.require_component(entity, ToolResultsComponent).results
    assert (result.call_id, result.status) == ("bad", "error")


@pytest.mark.usefixtures("reasoning")
async def test_streaming_component_publishes_the_stream_events(world: World) -> None:
    """With StreamingComponent the entity's stream events reach the world's bus; disabled, none."""
    log = EventLog(world, StreamStartEvent, StreamContentDeltaEvent, StreamEndEvent)
    streamed = agent(world, ScriptedProvider(["streamed"], chunk_size=3), StreamingComponent())
    agent(world, ScriptedProvider(["quiet"]), StreamingComponent(enabled=False))
    await world.process()
    assert {e.entity_id for e in log.events} == {streamed}
    assert "".join(e.text for e in log.of(StreamContentDeltaEvent)) == "streamed"
    assert log.of(StreamEndEvent) == [StreamEndEvent(streamed, "streamed", None)]


@pytest.mark.usefixtures("reasoning")
async def test_a_failed_streamed_call_still_ends_the_stream(world: World) -> None:
    """A failing call publishes StreamEndEvent with the error."""
    log = EventLog(world, StreamStartEvent, StreamEndEvent)
    agent(world, ScriptedProvider([failing]), StreamingComponent())
    await world.process()
    assert log.kinds() == ["StreamStartEvent", "StreamEndEvent"]
    assert "model down" in (log.of(StreamEndEvent)[0].error or "")


@pytest.mark.usefixtures("reasoning")
async def test_turns_are_recorded_as_reasoning_observations(
    world: World, observations: ObservationManager
) -> None:
    """Each turn records the stream observations of phase reasoning on the entity's thread."""
    agent(world, ScriptedProvider(["x"]), AgentIdentityComponent("thread-r"))
    await world.process()
    recorded = await observations.get_observations("thread-r")
    assert recorded[0].type is ObservationType.LLM_STREAM_START
    assert recorded[-1].type is ObservationType.LLM_STREAM_END
    assert {o.content["phase"] for o in recorded} == {"reasoning"}

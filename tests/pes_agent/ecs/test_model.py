"""The shared per-entity model call: prompt, provider pool, stream events and observations."""

from __future__ import annotations

from typing import Any

import pytest

from ecs_core import World
from pes_agent import ObservationManager, ObservationType, ProviderConfig, ScriptExhaustedError
from pes_agent.ecs._model import call_model, system_prompt_of
from pes_agent.ecs.components import (
    AgentIdentityComponent,
    LLMComponent,
    SystemPromptComponent,
)
from pes_agent.ecs.events import (
    StreamContentDeltaEvent,
    StreamContentStartEvent,
    StreamEndEvent,
    StreamReasoningDeltaEvent,
    StreamReasoningEndEvent,
    StreamStartEvent,
)
from pes_agent.ecs.messages import ChatMessage, ToolCall
from pes_agent.ecs.services import attach_services, close_services, services_of
from pes_agent.errors import UsageError
from pes_agent.providers.base import StreamMetadata, StreamRestart, TokenDelta
from pes_agent.providers.registry import ProviderPool, register_provider
from pes_agent.testing import ScriptedProvider, ScriptedResponse
from pes_agent.usage import Usage

from .conftest import EventLog, RawEvents

STREAM_EVENTS = (
    StreamStartEvent,
    StreamReasoningDeltaEvent,
    StreamReasoningEndEvent,
    StreamContentStartEvent,
    StreamContentDeltaEvent,
    StreamEndEvent,
)


class ClosingProvider(ScriptedProvider):
    """A scripted provider that remembers being closed."""

    closed: int = 0

    async def aclose(self) -> None:
        type(self).closed += 1


async def test_system_prompt_goes_first_and_tool_messages_keep_their_ids(world: World) -> None:
    """The prompt is the system prompt, then the messages with their tool calls and call ids."""
    model = ScriptedProvider(["done"])
    entity = world.create_entity(LLMComponent(model))
    messages = [
        ChatMessage("user", "add 1 and 2"),
        ChatMessage("assistant", tool_calls=[ToolCall("c1", "add", {"a": 1, "b": 2})]),
        ChatMessage("tool", "3", tool_call_id="c1", name="add"),
    ]
    response = await call_model(
        world, entity, messages, phase="reasoning", system_prompt="Be brief."
    )
    assert response.text == "done"
    sent = model.requests[0].messages
    assert [m.role for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[0].content == "Be brief."
    assert sent[2].tool_calls == (ToolCall("c1", "add", {"a": 1, "b": 2}),)
    assert (sent[3].tool_call_id, sent[3].name) == ("c1", "add")
    assert len(messages) == 3


async def test_llm_parameters_and_tools_reach_the_request(world: World, add_tool: Any) -> None:
    """Temperature, max tokens and the offered tool schemas are part of the request."""
    model = ScriptedProvider(["ok"])
    entity = world.create_entity(LLMComponent(model, temperature=0.2, max_tokens=50))
    await call_model(
        world, entity, [ChatMessage("user", "hi")], phase="reasoning", tools=[add_tool.schema]
    )
    request = model.requests[0]
    assert (request.temperature, request.max_tokens) == (0.2, 50)
    assert [t.name for t in request.tools] == ["add"]
    assert request.phase == "reasoning"


def test_system_prompt_component_wins_over_the_llm_component() -> None:
    """`SystemPromptComponent` is the entity's system prompt even when the LLM has one."""
    world = World()
    both = world.create_entity(
        LLMComponent("x:y", system_prompt="llm"), SystemPromptComponent("sp")
    )
    llm_only = world.create_entity(LLMComponent("x:y", system_prompt="llm"))
    neither = world.create_entity()
    assert system_prompt_of(world, both) == "sp"
    assert system_prompt_of(world, llm_only) == "llm"
    assert system_prompt_of(world, neither) is None


async def test_an_entity_without_an_llm_is_a_usage_error(world: World) -> None:
    """Calling the model for an entity with no LLMComponent says how to add one."""
    entity = world.create_entity()
    with pytest.raises(UsageError, match="LLMComponent"):
        await call_model(world, entity, [ChatMessage("user", "hi")], phase="reasoning")


async def test_provider_names_resolve_through_one_pool_per_world() -> None:
    """Two entities naming the same model share one provider, closed with the services."""
    register_provider("ecs-model-test", lambda config: ClosingProvider(["a", "b"]), replace=True)
    ClosingProvider.closed = 0
    world = World()
    first = world.create_entity(LLMComponent("ecs-model-test:m"))
    second = world.create_entity(LLMComponent(ProviderConfig("ecs-model-test", "m")))
    await call_model(world, first, [ChatMessage("user", "1")], phase="reasoning")
    await call_model(world, second, [ChatMessage("user", "2")], phase="reasoning")
    provider = services_of(world).providers.get("ecs-model-test:m")
    assert isinstance(provider, ClosingProvider)
    assert provider.calls == 2
    await close_services(world)
    assert ClosingProvider.closed == 1


async def test_a_pool_passed_in_stays_open_for_its_owner() -> None:
    """`close_services` leaves a pool given to `attach_services` open."""
    register_provider("ecs-model-test2", lambda config: ClosingProvider(["a"]), replace=True)
    ClosingProvider.closed = 0
    world = World()
    async with ProviderPool() as pool:
        attach_services(world, providers=pool)
        entity = world.create_entity(LLMComponent("ecs-model-test2:m"))
        await call_model(world, entity, [ChatMessage("user", "1")], phase="reasoning")
        await close_services(world)
        assert ClosingProvider.closed == 0
    assert ClosingProvider.closed == 1


def test_services_are_attached_once() -> None:
    """A second `attach_services` on one world is refused."""
    world = World()
    attach_services(world)
    with pytest.raises(UsageError, match="already has agent services"):
        attach_services(world)


async def test_stream_events_follow_reasoning_then_content(world: World) -> None:
    """With stream events on, thinking deltas end before the content starts, then the end."""
    model = ScriptedProvider([ScriptedResponse("Hello there", thinking=["hmm, ok"])], chunk_size=4)
    entity = world.create_entity(LLMComponent(model))
    log = EventLog(world, *STREAM_EVENTS)
    await call_model(
        world, entity, [ChatMessage("user", "hi")], phase="reasoning", stream_events=True
    )
    kinds = log.kinds()
    assert kinds[0] == "StreamStartEvent"
    assert kinds[-1] == "StreamEndEvent"
    assert kinds.index("StreamReasoningEndEvent") < kinds.index("StreamContentStartEvent")
    assert "".join(e.text for e in log.of(StreamReasoningDeltaEvent)) == "hmm, ok"
    assert log.of(StreamReasoningEndEvent)[0].text == "hmm, ok"
    assert "".join(e.text for e in log.of(StreamContentDeltaEvent)) == "Hello there"
    assert log.of(StreamEndEvent) == [StreamEndEvent(entity, "Hello there", None)]
    assert log.of(StreamStartEvent) == [StreamStartEvent(entity, "scripted", "scripted-model")]
    assert all(e.entity_id == entity for e in log.events)


async def test_a_failed_call_still_ends_its_stream_and_raises(world: World) -> None:
    """A provider failure publishes StreamEndEvent with the error, then raises."""
    entity = world.create_entity(LLMComponent(ScriptedProvider([])))
    log = EventLog(world, StreamStartEvent, StreamEndEvent)
    with pytest.raises(ScriptExhaustedError):
        await call_model(
            world, entity, [ChatMessage("user", "hi")], phase="reasoning", stream_events=True
        )
    assert log.kinds() == ["StreamStartEvent", "StreamEndEvent"]
    assert "ran out of responses" in (log.of(StreamEndEvent)[0].error or "")


async def test_no_stream_events_unless_asked(world: World) -> None:
    """Without stream_events nothing is published on the world's bus."""
    entity = world.create_entity(LLMComponent(ScriptedProvider(["hi"])))
    log = EventLog(world, *STREAM_EVENTS)
    await call_model(world, entity, [ChatMessage("user", "hi")], phase="reasoning")
    assert log.events == []


async def test_observations_are_filed_under_the_entity_identity(
    world: World, observations: ObservationManager
) -> None:
    """The call records PES stream observations and a THOUGHTS per block on the entity's thread."""
    model = ScriptedProvider([ScriptedResponse("x", thinking=["one", "two"])])
    entity = world.create_entity(LLMComponent(model), AgentIdentityComponent("t-1", "trace-1"))
    await call_model(world, entity, [ChatMessage("user", "hi")], phase="reasoning")
    recorded = await observations.get_observations("t-1")
    assert [o.type for o in recorded] == [
        ObservationType.LLM_STREAM_START,
        ObservationType.THOUGHTS,
        ObservationType.THOUGHTS,
        ObservationType.LLM_STREAM_METADATA,
        ObservationType.LLM_STREAM_END,
    ]
    assert {o.trace_id for o in recorded} == {"trace-1"}
    assert recorded[0].content["phase"] == "reasoning"


async def test_default_identity_is_derived_from_the_entity(
    world: World, observations: ObservationManager
) -> None:
    """Without an identity component, observations go to thread and trace "entity-<id>"."""
    entity = world.create_entity(LLMComponent(ScriptedProvider(["x"])))
    await call_model(world, entity, [ChatMessage("user", "hi")], phase="reasoning")
    recorded = await observations.get_observations(f"entity-{entity}")
    assert len(recorded) == 3
    assert recorded[0].trace_id == f"entity-{entity}"


async def test_a_provider_retry_ends_the_shown_stream_and_starts_anew(world: World) -> None:
    """A restart mid-stream ends what was shown with an error and starts a fresh stream."""
    model = RawEvents(
        TokenDelta("Hel"),
        StreamRestart("connection dropped", 1),
        TokenDelta("Hello"),
        StreamMetadata(Usage()),
    )
    entity = world.create_entity(LLMComponent(model))
    log = EventLog(world, *STREAM_EVENTS)
    response = await call_model(
        world, entity, [ChatMessage("user", "hi")], phase="reasoning", stream_events=True
    )
    assert response.text == "Hello"
    assert log.kinds() == [
        "StreamStartEvent",
        "StreamContentStartEvent",
        "StreamContentDeltaEvent",
        "StreamEndEvent",
        "StreamStartEvent",
        "StreamContentStartEvent",
        "StreamContentDeltaEvent",
        "StreamEndEvent",
    ]
    interrupted, finished = log.of(StreamEndEvent)
    assert interrupted.content == "Hel"
    assert "connection dropped" in (interrupted.error or "")
    assert (finished.content, finished.error) == ("Hello", None)

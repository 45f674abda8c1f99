"""TerminalCleanupSystem and ErrorHandlingSystem: ends that can be undone, errors reported once."""

from __future__ import annotations

import logging

import pytest

from ecs_core import ErrorComponent, HandlerErrorEvent, TerminalComponent, World
from pes_agent import ObservationManager, ObservationType, ProviderError
from pes_agent.ecs.components import AgentIdentityComponent
from pes_agent.ecs.events import ErrorOccurredEvent
from pes_agent.ecs.lifecycle import ErrorHandlingSystem, TerminalCleanupSystem

from .conftest import EventLog


async def test_cleanup_removes_only_the_chosen_reasons(world: World) -> None:
    """The default reason is removed; any other terminal stays."""
    world.register_system(TerminalCleanupSystem(), priority=1)
    answered = world.create_entity(TerminalComponent("reasoning_complete"))
    failed = world.create_entity(TerminalComponent("reasoning_failed"))
    await world.process()
    assert not world.has_component(answered, TerminalComponent)
    assert world.require_component(failed, TerminalComponent).reason == "reasoning_failed"


async def test_cleanup_reasons_are_configurable(world: World) -> None:
    """Reasons given to the system replace the default."""
    world.register_system(TerminalCleanupSystem({"paused"}), priority=1)
    paused = world.create_entity(TerminalComponent("paused"))
    answered = world.create_entity(TerminalComponent("reasoning_complete"))
    await world.process()
    assert not world.has_component(paused, TerminalComponent)
    assert world.has_component(answered, TerminalComponent)


@pytest.fixture
def errors(world: World) -> EventLog:
    world.register_system(ErrorHandlingSystem(), priority=99)
    return EventLog(world, ErrorOccurredEvent)


async def test_each_error_is_published_and_removed(world: World, errors: EventLog) -> None:
    """Every ErrorComponent becomes one ErrorOccurredEvent and is gone after the tick."""
    boom = ValueError("boom")
    entity = world.create_entity(ErrorComponent(boom, "SomeSystem"))
    other = world.create_entity(ErrorComponent(KeyError("k"), "OtherSystem"))
    await world.process()
    assert ErrorOccurredEvent(entity, boom, "SomeSystem") in errors.events
    assert {e.entity_id for e in errors.events} == {entity, other}
    assert not world.has_component(entity, ErrorComponent)
    await world.process()
    assert len(errors.events) == 2


async def test_each_error_is_logged(
    world: World, errors: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    """The error is logged at ERROR level with the failing system's name."""
    world.create_entity(ErrorComponent(ValueError("boom"), "SomeSystem"))
    with caplog.at_level(logging.ERROR, logger="pes_agent.ecs.errors"):
        await world.process()
    [record] = [r for r in caplog.records if r.name == "pes_agent.ecs.errors"]
    assert "SomeSystem" in record.getMessage()
    assert "boom" in record.getMessage()


async def test_each_error_is_an_error_observation(
    world: World, errors: EventLog, observations: ObservationManager
) -> None:
    """With observations, an ERROR observation names the system and the message."""
    world.create_entity(
        ErrorComponent(ProviderError("model down"), "ReasoningSystem"),
        AgentIdentityComponent("err-thread"),
    )
    await world.process()
    [recorded] = await observations.get_observations("err-thread")
    assert recorded.type is ObservationType.ERROR
    assert recorded.content == {"phase": "ReasoningSystem", "error": "model down"}


async def test_a_failing_error_handler_is_reported_not_swallowed(
    world: World, errors: EventLog
) -> None:
    """Regression (reference defect): a handler that raises is published as HandlerErrorEvent,
    the other handlers still run and the error is still cleared."""
    handler_errors = EventLog(world, HandlerErrorEvent)

    def broken(event: ErrorOccurredEvent) -> None:
        raise RuntimeError("handler bug")

    world.events.subscribe(ErrorOccurredEvent, broken)
    later = EventLog(world, ErrorOccurredEvent)
    entity = world.create_entity(ErrorComponent(ValueError("boom"), "S"))
    await world.process()
    [reported] = handler_errors.of(HandlerErrorEvent)
    assert str(reported.exception) == "handler bug"
    assert len(errors.events) == len(later.events) == 1
    assert not world.has_component(entity, ErrorComponent)


async def test_a_handler_may_attach_a_new_error(world: World, errors: EventLog) -> None:
    """An error a handler attaches while handling one is kept for the next tick, not lost."""

    def escalate(event: ErrorOccurredEvent) -> None:
        if event.system_name == "first":
            world.add_component(event.entity_id, ErrorComponent(ValueError("2"), "second"))

    world.events.subscribe(ErrorOccurredEvent, escalate)
    entity = world.create_entity(ErrorComponent(ValueError("1"), "first"))
    await world.process()
    assert world.require_component(entity, ErrorComponent).system_name == "second"
    await world.process()
    assert [e.system_name for e in errors.events] == ["first", "second"]

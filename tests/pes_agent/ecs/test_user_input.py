"""UserInputSystem: a question published once, answered across ticks, never blocking others."""

from __future__ import annotations

import asyncio

import pytest

from ecs_core import ErrorComponent, TerminalComponent, World
from pes_agent.ecs.components import (
    ConversationComponent,
    LLMComponent,
    PendingToolCallsComponent,
    UserInputComponent,
)
from pes_agent.ecs.events import UserInputRequestedEvent
from pes_agent.ecs.messages import ChatMessage, ToolCall
from pes_agent.ecs.reasoning import ReasoningSystem
from pes_agent.ecs.user_input import UserInputSystem
from pes_agent.errors import UsageError
from pes_agent.testing import ScriptedProvider


@pytest.fixture
def questions(world: World) -> list[UserInputRequestedEvent]:
    """The world with UserInputSystem [-10]; the questions it publishes, unanswered."""
    world.register_system(UserInputSystem(), priority=-10)
    asked: list[UserInputRequestedEvent] = []
    world.events.subscribe(UserInputRequestedEvent, asked.append)
    return asked


def messages(world: World, entity: int) -> list[ChatMessage]:
    return world.require_component(entity, ConversationComponent).messages


async def test_the_answer_becomes_a_user_message(
    world: World, questions: list[UserInputRequestedEvent]
) -> None:
    """Once the future holds the answer, it is a user message and the component is gone."""
    entity = world.create_entity(ConversationComponent(), UserInputComponent("Your name?"))
    await world.process()
    [question] = questions
    assert (question.entity_id, question.prompt) == (entity, "Your name?")
    question.future.set_result("Ada")
    await world.process()
    assert messages(world, entity) == [ChatMessage("user", "Ada")]
    assert not world.has_component(entity, UserInputComponent)


async def test_waiting_spans_ticks_and_asks_once(
    world: World, questions: list[UserInputRequestedEvent]
) -> None:
    """An unanswered question is published once and the entity keeps waiting, tick after tick."""
    entity = world.create_entity(ConversationComponent(), UserInputComponent("?"))
    for _ in range(5):
        await world.process()
    assert len(questions) == 1
    assert world.has_component(entity, UserInputComponent)
    assert messages(world, entity) == []


async def test_a_waiting_entity_does_not_block_another(
    world: World, questions: list[UserInputRequestedEvent]
) -> None:
    """While one entity waits for a person, another entity's model turn goes on."""
    world.register_system(ReasoningSystem(), priority=0)
    waiting = world.create_entity(
        LLMComponent(ScriptedProvider([])),
        ConversationComponent([ChatMessage("user", "hi")]),
        UserInputComponent("more?"),
    )
    busy = world.create_entity(
        LLMComponent(ScriptedProvider(["hello"])),
        ConversationComponent([ChatMessage("user", "hi")]),
    )
    await world.process()
    assert messages(world, busy)[-1] == ChatMessage("assistant", "hello")
    assert not world.has_component(waiting, TerminalComponent)  # its model was never called


async def test_an_answer_given_inside_the_handler_lands_in_the_same_tick(world: World) -> None:
    """A subscriber answering at once gets its message added in that tick."""
    world.register_system(UserInputSystem(), priority=-10)
    world.events.subscribe(UserInputRequestedEvent, lambda e: e.future.set_result("now"))
    entity = world.create_entity(UserInputComponent("?"))
    await world.process()
    assert messages(world, entity) == [ChatMessage("user", "now")]


async def test_no_answer_within_the_timeout_ends_the_entity(
    world: World, questions: list[UserInputRequestedEvent]
) -> None:
    """After timeout_s without an answer: ErrorComponent and user_input_timeout."""
    entity = world.create_entity(ConversationComponent(), UserInputComponent("?", timeout_s=0.05))
    await world.process()
    assert not world.has_component(entity, TerminalComponent)
    await asyncio.sleep(0.1)
    await world.process()
    assert world.require_component(entity, TerminalComponent).reason == "user_input_timeout"
    assert isinstance(world.require_component(entity, ErrorComponent).error, TimeoutError)
    assert not world.has_component(entity, UserInputComponent)
    assert questions[0].future.cancelled()


async def test_nobody_to_ask_is_a_timeout_not_a_hang(world: World) -> None:
    """With no subscriber the entity ends at once instead of waiting forever."""
    world.register_system(UserInputSystem(), priority=-10)
    entity = world.create_entity(UserInputComponent("?"))
    await world.process()
    assert world.require_component(entity, TerminalComponent).reason == "user_input_timeout"
    error = world.require_component(entity, ErrorComponent).error
    assert isinstance(error, UsageError)
    assert "subscribes to UserInputRequestedEvent" in str(error)


async def test_a_cancelled_question_ends_the_entity(
    world: World, questions: list[UserInputRequestedEvent]
) -> None:
    """A person declining (the future cancelled) ends the entity with user_input_cancelled."""
    entity = world.create_entity(UserInputComponent("?"))
    await world.process()
    questions[0].future.cancel()
    await world.process()
    assert world.require_component(entity, TerminalComponent).reason == "user_input_cancelled"
    assert not world.has_component(entity, ErrorComponent)


async def test_a_failed_answer_is_an_error(
    world: World, questions: list[UserInputRequestedEvent]
) -> None:
    """A future resolved with an exception gives that ErrorComponent and user_input_failed."""
    entity = world.create_entity(UserInputComponent("?"))
    await world.process()
    questions[0].future.set_exception(OSError("terminal closed"))
    await world.process()
    assert world.require_component(entity, TerminalComponent).reason == "user_input_failed"
    assert str(world.require_component(entity, ErrorComponent).error) == "terminal closed"


async def test_no_question_in_the_middle_of_a_tool_round(
    world: World, questions: list[UserInputRequestedEvent]
) -> None:
    """While tool calls are pending the person is not asked, so no user message splits them."""
    entity = world.create_entity(
        UserInputComponent("?"), PendingToolCallsComponent([ToolCall("c", "add")])
    )
    await world.process()
    assert questions == []
    world.remove_component(entity, PendingToolCallsComponent)
    await world.process()
    assert len(questions) == 1


async def test_a_finished_entity_is_not_asked(
    world: World, questions: list[UserInputRequestedEvent]
) -> None:
    """An entity carrying a TerminalComponent gets no question."""
    world.create_entity(UserInputComponent("?"), TerminalComponent("done"))
    await world.process()
    assert questions == []

"""UserInputSystem [-10]: asks a person through an event and waits across ticks for the answer."""

from __future__ import annotations

import asyncio
import time

from ecs_core import EntityId, ErrorComponent, TerminalComponent, World
from pes_agent.ecs.components import (
    ConversationComponent,
    PendingToolCallsComponent,
    UserInputComponent,
)
from pes_agent.ecs.events import UserInputRequestedEvent
from pes_agent.ecs.messages import ChatMessage
from pes_agent.errors import UsageError
from pes_agent.observing.logs import get_logger

__all__ = ["UserInputSystem"]

_log = get_logger("pes_agent.ecs.user_input")


class UserInputSystem:
    """Puts each `UserInputComponent.prompt` to a person and turns the answer into a user message.

    The question is published once as `UserInputRequestedEvent(entity_id, prompt, future)`;
    whoever answers calls `future.set_result(text)` — later, from a task or a UI: the bus awaits
    handlers inside the tick, so a handler must not wait for the person itself. Every tick the
    system only looks at the future (never awaits it), so other entities go on meanwhile, and
    `ReasoningSystem` leaves the entity alone while the component is on it.

    - answered: `ChatMessage("user", text)` is appended and the component removed;
    - no answer within `timeout_s`, or nobody subscribed to the event (nobody could answer):
      `ErrorComponent` + `TerminalComponent("user_input_timeout")`, the component removed;
    - the future cancelled (the person declined): `TerminalComponent("user_input_cancelled")`;
      the future failed with an exception: `ErrorComponent` +
      `TerminalComponent("user_input_failed")`.

    An entity in the middle of a tool round (`PendingToolCallsComponent`) is asked once the
    round is over, so a user message never splits tool calls from their results. A finished
    entity (`TerminalComponent`) is not asked.
    """

    async def process(self, world: World) -> None:
        """Ask, check for answers, and expire questions, for every entity that wants input."""
        for entity, (request,) in world.query(
            UserInputComponent, exclude=(TerminalComponent, PendingToolCallsComponent)
        ):
            try:
                await self._step(world, entity, request)
            except Exception as error:
                _log.warning("user_input_failed", entity=entity, error=str(error))
                world.add_component(entity, ErrorComponent(error, type(self).__name__))

    async def _step(self, world: World, entity: EntityId, request: UserInputComponent) -> None:
        future = request.future
        if future is None:
            if not world.events.handler_count(UserInputRequestedEvent):
                _end(
                    world,
                    entity,
                    "user_input_timeout",
                    UsageError(
                        f"no one can answer {request.prompt!r}: nothing subscribes to "
                        "UserInputRequestedEvent; subscribe a handler that resolves its future"
                    ),
                )
                return
            future = asyncio.get_running_loop().create_future()
            request.future = future
            request.asked_at = time.monotonic()
            await world.events.publish(UserInputRequestedEvent(entity, request.prompt, future))
        if future.done():
            if future.cancelled():
                _end(world, entity, "user_input_cancelled", None)
                return
            error = future.exception()
            if error is not None:
                _end(world, entity, "user_input_failed", error)
                return
            _append_user_message(world, entity, str(future.result()))
            world.remove_component(entity, UserInputComponent)
            return
        asked = request.asked_at if request.asked_at is not None else time.monotonic()
        if request.timeout_s is not None and time.monotonic() - asked >= request.timeout_s:
            future.cancel()
            _end(
                world,
                entity,
                "user_input_timeout",
                TimeoutError(f"no answer to {request.prompt!r} within {request.timeout_s:g}s"),
            )


def _append_user_message(world: World, entity: EntityId, text: str) -> None:
    conversation = world.get_component(entity, ConversationComponent)
    if conversation is None:
        world.add_component(entity, ConversationComponent([ChatMessage("user", text)]))
    else:
        conversation.messages.append(ChatMessage("user", text))


def _end(world: World, entity: EntityId, reason: str, error: BaseException | None) -> None:
    world.remove_component(entity, UserInputComponent)
    if error is not None:
        world.add_component(entity, ErrorComponent(error, UserInputSystem.__name__))
    world.add_component(entity, TerminalComponent(reason))

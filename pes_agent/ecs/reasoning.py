"""ReasoningSystem [0]: one streamed model call per ready entity per tick — the ReAct step."""

from __future__ import annotations

import asyncio

from ecs_core import EntityId, TerminalComponent, World
from pes_agent.ecs._model import call_model, system_prompt_of
from pes_agent.ecs._tools import tool_schemas
from pes_agent.ecs._turns import record_answer, take_turn
from pes_agent.ecs.components import (
    ConversationComponent,
    LLMComponent,
    PendingToolCallsComponent,
    PlanComponent,
    PlanSearchComponent,
    ReasoningFailuresComponent,
    StreamingComponent,
    ToolRegistryComponent,
    UserInputComponent,
)
from pes_agent.errors import UsageError
from pes_agent.observing.logs import get_logger

__all__ = ["ReasoningSystem"]

_log = get_logger("pes_agent.ecs.reasoning")


class ReasoningSystem:
    """Asks each ready entity's model for its next move, with the entity's tools offered natively.

    An entity is ready when it has an `LLMComponent` and a `ConversationComponent` whose last
    message still needs an answer (a user or tool message, not a final assistant answer), and
    it is not finished (`TerminalComponent`), waiting for tools or approval
    (`PendingToolCallsComponent`) or for a person (`UserInputComponent`), nor driven by another
    system (an uncompleted `PlanComponent`, a `PlanSearchComponent` still searching).

    For each ready entity, concurrently (a slow model holds up no other entity):

    - the system prompt (`SystemPromptComponent`, else `LLMComponent.system_prompt`) is sent
      first and never stored; the `ToolRegistryComponent`'s schemas are offered as tools;
    - the answer is appended as an assistant `ChatMessage` with its `tool_calls`; the calls go
      to a `PendingToolCallsComponent` (for the gates and `ToolExecutionSystem`) and a fresh
      `ToolResultsComponent` collects their results; a call whose arguments were not valid
      JSON is answered at once with an error tool message and never runs;
    - no tool calls: the answer is final, `TerminalComponent("reasoning_complete")` on that
      entity only;
    - a scripted model that ran out: `TerminalComponent("provider_exhausted")`; any other
      failure: an `ErrorComponent`, and after `max_failures` failures in a row (counted in a
      `ReasoningFailuresComponent`, reset by a success) `TerminalComponent("reasoning_failed")`;
    - over its `UsageLimitsComponent` (no room for the call, or an answer whose tokens cross a
      limit): `TerminalComponent("usage_limit")` and an `ErrorComponent` naming the limit and
      the figures; an answer that crossed a limit is not appended.

    With `StreamingComponent(enabled=True)` the entity's stream events are published (see
    `pes_agent.ecs._model`); with observations attached to the world, the calls are recorded
    as PES records them (phase ``"reasoning"``).
    """

    def __init__(self, *, max_failures: int = 3) -> None:
        if max_failures < 1:
            raise UsageError(f"max_failures must be at least 1, got {max_failures}")
        self.max_failures = max_failures

    async def process(self, world: World) -> None:
        """Take one model turn for every ready entity, concurrently."""
        ready = [
            entity
            for entity, (conversation,) in world.query(
                ConversationComponent,
                exclude=(TerminalComponent, PendingToolCallsComponent, UserInputComponent),
            )
            if _needs_turn(world, entity, conversation)
        ]
        if not ready:
            return
        if len(ready) == 1:
            await self._turn(world, ready[0])
            return
        async with asyncio.TaskGroup() as group:
            for entity in ready:
                group.create_task(self._turn(world, entity))

    async def _turn(self, world: World, entity: EntityId) -> None:
        await take_turn(
            world,
            entity,
            self._call(world, entity),
            counter=ReasoningFailuresComponent,
            max_failures=self.max_failures,
            terminal_reason="reasoning_failed",
            source=type(self).__name__,
            log=_log,
            event="reasoning_failed",
        )

    async def _call(self, world: World, entity: EntityId) -> None:
        llm = world.require_component(entity, LLMComponent)
        conversation = world.require_component(entity, ConversationComponent)
        streaming = world.get_component(entity, StreamingComponent)
        response = await call_model(
            world,
            entity,
            conversation.messages,
            phase="reasoning",
            system_prompt=system_prompt_of(world, entity),
            llm=llm,
            tools=tool_schemas(world.get_component(entity, ToolRegistryComponent)),
            stream_events=streaming is not None and streaming.enabled,
        )
        if not world.entity_exists(entity):
            return
        world.try_remove_component(entity, ReasoningFailuresComponent)
        if not record_answer(world, entity, conversation, response):
            world.add_component(entity, TerminalComponent("reasoning_complete"))


def _needs_turn(world: World, entity: EntityId, conversation: ConversationComponent) -> bool:
    """Whether the entity's conversation awaits the model and no other system drives it."""
    messages = conversation.messages
    if not messages:
        return False  # nothing to answer yet
    last = messages[-1]
    if last.role == "assistant" and not last.tool_calls:
        return False  # a final answer stands until someone adds a message
    if not world.has_component(entity, LLMComponent):
        return False
    plan = world.get_component(entity, PlanComponent)
    if plan is not None and plan.steps and not plan.completed:
        return False
    search = world.get_component(entity, PlanSearchComponent)
    return search is None or not search.search_active

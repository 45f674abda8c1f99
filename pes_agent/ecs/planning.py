"""`PlanningSystem` [0]: walks an entity's step plan, one step per model answer.

```python
world.register_system(PlanningSystem(), priority=0)
agent = world.create_entity(
    LLMComponent(model),
    ConversationComponent([ChatMessage("user", "Write a short report on solar power.")]),
    PlanComponent(["Collect three facts", "Draft the report", "Proofread it"]),
)
await Runner().run(world, until=agent, max_ticks=20)  # ends with "plan_completed"
```

How a step runs:

- The step's context is a **user** message ``"Step k/n: <step>"`` (k counts from 1). A user
  message keeps the conversation valid for every API: after the previous step's assistant
  answer it is the next turn (a trailing assistant message would be taken by Anthropic as a
  prefill to continue), and where the conversation already ends with a user message (the
  task) the APIs accept, or merge, consecutive user turns.
- One model call (phase ``"plan_step"``) with the entity's system prompt and tools. The step
  message and the answer are appended together, only once the call has succeeded, so a failed
  call leaves the conversation as it was and the retry sends the same request.
- An answer without tool calls finishes the step: `current_step` advances and
  `PlanStepCompletedEvent(entity_id, step_index, step_description)` is published (`step_index`
  counts from 0, as `current_step` does). An answer with tool calls goes to the gates and
  `ToolExecutionSystem` like a ReAct turn; once the calls are answered (the conversation ends
  with tool messages) the same step continues without a new step message.
- After the last step the plan is `completed` and the entity gets
  `TerminalComponent("plan_completed")` (pass `terminal_reason=None` to leave it running, or
  add ``"plan_completed"`` to `TerminalCleanupSystem`'s reasons for a chat loop), so a `Runner`
  waiting for it stops; `ReasoningSystem` answers nothing more, since the last message is the
  final step's answer. A plan whose `current_step` is already past its steps (a revision
  left nothing to do) completes without a call; a plan with no steps drives nothing.
- A failed call leaves an `ErrorComponent` and the step where it was; failures in a row are
  counted in a `PlanFailuresComponent` (reset by a success) and the `max_failures`-th ends the
  entity with ``"plan_failed"``, so retries are bounded. A scripted model that ran out ends it
  with ``"provider_exhausted"``.

Entities are served concurrently; entities that wait for tools, approval or a person
(`PendingToolCallsComponent`, `UserInputComponent`) or have finished are skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ecs_core import EntityId, TerminalComponent, World
from pes_agent.ecs._model import call_model, system_prompt_of
from pes_agent.ecs._tools import tool_schemas
from pes_agent.ecs._turns import record_answer, take_turn
from pes_agent.ecs.components import (
    ConversationComponent,
    LLMComponent,
    PendingToolCallsComponent,
    PlanComponent,
    PlanFailuresComponent,
    StreamingComponent,
    ToolRegistryComponent,
    UserInputComponent,
)
from pes_agent.ecs.events import PlanStepCompletedEvent
from pes_agent.ecs.messages import ChatMessage
from pes_agent.errors import UsageError
from pes_agent.observing.logs import get_logger

# PlanFailuresComponent lives in components; it stays importable from here as it was.
__all__ = ["PlanFailuresComponent", "PlanningSystem", "step_message"]

_log = get_logger("pes_agent.ecs.planning")


def step_message(plan: PlanComponent) -> ChatMessage:
    """The user message that opens the plan's current step: ``"Step k/n: <step>"``."""
    number = plan.current_step + 1
    # Concatenated, never formatted: a step may be model text holding braces.
    text = "Step " + str(number) + "/" + str(len(plan.steps)) + ": " + plan.steps[plan.current_step]
    return ChatMessage("user", text)


class PlanningSystem:
    """Runs the current step of each entity's active `PlanComponent` (see the module docstring).

    `terminal_reason` is put on an entity whose plan completed (None: none); `max_failures`
    failed calls in a row end the entity with ``"plan_failed"``.
    """

    def __init__(
        self, *, terminal_reason: str | None = "plan_completed", max_failures: int = 3
    ) -> None:
        if max_failures < 1:
            raise UsageError(f"max_failures must be at least 1, got {max_failures}")
        self.terminal_reason = terminal_reason
        self.max_failures = max_failures

    async def process(self, world: World) -> None:
        """Take one step (or one tool round of a step) for every entity with an active plan."""
        due: list[tuple[EntityId, PlanComponent]] = []
        for entity, (plan, _, _) in world.query(
            PlanComponent,
            LLMComponent,
            ConversationComponent,
            exclude=(TerminalComponent, PendingToolCallsComponent, UserInputComponent),
        ):
            if not plan.steps or plan.completed:
                continue
            if plan.current_step >= len(plan.steps):
                self._complete(world, entity, plan)
                continue
            due.append((entity, plan))
        if len(due) == 1:
            await self._step(world, *due[0])
        elif due:
            async with asyncio.TaskGroup() as group:
                for entity, plan in due:
                    group.create_task(self._step(world, entity, plan))

    async def _step(self, world: World, entity: EntityId, plan: PlanComponent) -> None:
        await take_turn(
            world,
            entity,
            self._call(world, entity, plan),
            counter=PlanFailuresComponent,
            max_failures=self.max_failures,
            terminal_reason="plan_failed",
            source=type(self).__name__,
            log=_log,
            event="plan_step_failed",
        )

    async def _call(self, world: World, entity: EntityId, plan: PlanComponent) -> None:
        conversation = world.require_component(entity, ConversationComponent)
        index = plan.current_step
        step = plan.steps[index]
        opening = None if _in_tool_round(conversation.messages) else step_message(plan)
        request = conversation.messages if opening is None else [*conversation.messages, opening]
        streaming = world.get_component(entity, StreamingComponent)
        response = await call_model(
            world,
            entity,
            request,
            phase="plan_step",
            system_prompt=system_prompt_of(world, entity),
            tools=tool_schemas(world.get_component(entity, ToolRegistryComponent)),
            stream_events=streaming is not None and streaming.enabled,
        )
        if (
            not world.entity_exists(entity)
            or world.get_component(entity, PlanComponent) is not plan
            or plan.current_step != index
        ):
            return  # the plan was replaced or restored during the call: the answer is stale
        world.try_remove_component(entity, PlanFailuresComponent)
        if opening is not None:
            conversation.messages.append(opening)
        if record_answer(world, entity, conversation, response):
            return  # tool round: the step goes on once the calls are answered
        plan.current_step = index + 1
        await world.events.publish(PlanStepCompletedEvent(entity, index, step))
        if plan.current_step >= len(plan.steps):
            self._complete(world, entity, plan)

    def _complete(self, world: World, entity: EntityId, plan: PlanComponent) -> None:
        plan.completed = True
        if self.terminal_reason is not None:
            world.add_component(entity, TerminalComponent(self.terminal_reason))


def _in_tool_round(messages: Sequence[ChatMessage]) -> bool:
    """Whether the conversation ends inside a tool round, i.e. the current step is under way."""
    if not messages:
        return False
    last = messages[-1]
    return last.role == "tool" or (last.role == "assistant" and bool(last.tool_calls))

"""What a model turn leaves on an entity: the answer and its tool calls, or a failure counted.

`ReasoningSystem` and `PlanningSystem` ask the model with the entity's tools and take what
comes back the same way:

- `take_turn` awaits one entity's turn and never raises (but for cancellation), so one entity's
  failure cancels no other: a scripted model that ran out ends the entity with
  ``"provider_exhausted"``; a usage limit reached (`UsageLimitExceeded`, the entity already
  ended with ``"usage_limit"`` by `call_model`) leaves an `ErrorComponent` and is not counted;
  any other failure is counted (below).
- `record_answer` appends the answer as an assistant message with its tool calls, queues the
  runnable calls in a `PendingToolCallsComponent` (for the gates and `ToolExecutionSystem`)
  with a fresh `ToolResultsComponent`, and answers each call whose arguments were not valid
  JSON at once with an error tool message: it never runs, but the APIs need every call
  answered.
- A failure is counted in the entity's failures component (the system removes
  it on a success), logs it, leaves an `ErrorComponent`, and ends the entity with the system's
  terminal reason at `max_failures` failures in a row, so retries are bounded.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

from ecs_core import EntityId, ErrorComponent, TerminalComponent, World
from pes_agent.ecs._pending import answer_calls, error_result
from pes_agent.ecs.components import (
    ConversationComponent,
    PendingToolCallsComponent,
    ToolResultsComponent,
)
from pes_agent.ecs.messages import ChatMessage
from pes_agent.errors import ScriptExhaustedError, UsageLimitExceeded
from pes_agent.protocols import LLMResponse

__all__ = ["FailureCounter", "record_answer", "take_turn"]


class FailureCounter(Protocol):
    """A component counting a system's failed calls in a row on one entity."""

    consecutive: int


_Counter = TypeVar("_Counter", bound=FailureCounter)


def record_answer(
    world: World, entity: EntityId, conversation: ConversationComponent, response: LLMResponse
) -> bool:
    """Append the answer and queue its tool calls; True when it made calls."""
    calls = [event.call for event in response.tool_calls]
    conversation.messages.append(ChatMessage("assistant", response.text, tool_calls=calls or None))
    if not calls:
        return False
    world.add_component(entity, ToolResultsComponent())
    runnable = [event.call for event in response.tool_calls if event.error is None]
    if runnable:
        world.add_component(entity, PendingToolCallsComponent(runnable))
    answer_calls(
        world,
        entity,
        [
            error_result(event.call, "Not run: " + event.error)
            for event in response.tool_calls
            if event.error is not None
        ],
    )
    return True


async def take_turn(
    world: World,
    entity: EntityId,
    turn: Awaitable[object],
    *,
    counter: type[_Counter],
    max_failures: int,
    terminal_reason: str,
    source: str,
    log: Any,
    event: str,
) -> None:
    """Await `turn`, the model turn of `source` (a system's name) for `entity`; never raises.

    A failure (unless the entity is gone) is one more in a row in `entity`'s `counter`
    component, logged as `event`; the `max_failures`-th ends the entity with `terminal_reason`.
    A usage limit is not a failure: it is reported, and the entity's ``"usage_limit"`` end stays.
    """
    try:
        await turn
    except ScriptExhaustedError:
        if world.entity_exists(entity):
            world.add_component(entity, TerminalComponent("provider_exhausted"))
    except UsageLimitExceeded as error:
        # Not a failure to retry: `call_model` has ended the entity with "usage_limit".
        if world.entity_exists(entity):
            log.warning("usage_limit_reached", entity=entity, source=source, error=str(error))
            world.add_component(entity, ErrorComponent(error, source))
    except Exception as error:
        if not world.entity_exists(entity):
            return
        failures = world.get_component(entity, counter)
        if failures is None:
            failures = counter()
            world.add_component(entity, failures)
        failures.consecutive += 1
        log.warning(
            event,
            entity=entity,
            consecutive=failures.consecutive,
            error_type=type(error).__name__,
            error=str(error),
        )
        world.add_component(entity, ErrorComponent(error, source))
        if failures.consecutive >= max_failures:
            world.add_component(entity, TerminalComponent(terminal_reason))

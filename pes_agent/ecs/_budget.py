"""An entity's usage limits at work: what it may still spend, what it spent, and its end.

`call_model` and `ToolExecutionSystem` hold an entity with a `UsageLimitsComponent` to its
limits through these helpers; entities without one are never counted nor stopped.

- `model_budget` is a PES `RunBudget` for one model call, built from the limits and what the
  entity spent so far (`UsageSpentComponent`, created at need), so the checks are the PES ones.
- `add_model_spend` adds what a call cost to the entity's spend, whether it answered or not.
- `take_tool_calls` splits the calls about to run into those with room (counted as started)
  and the breach that stops the rest.
- `end_over_budget` ends the entity with ``"usage_limit"``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ecs_core import EntityId, TerminalComponent, World
from pes_agent.ecs.components import UsageLimitsComponent, UsageSpentComponent
from pes_agent.errors import UsageLimitExceeded
from pes_agent.pes.budget import RunBudget
from pes_agent.tools.calls import ToolCall
from pes_agent.usage import Usage

__all__ = [
    "USAGE_LIMIT",
    "add_model_spend",
    "end_over_budget",
    "model_budget",
    "take_tool_calls",
]

USAGE_LIMIT = "usage_limit"
"""The `TerminalComponent` reason of an entity stopped by its `UsageLimitsComponent`."""


def spent_of(world: World, entity: EntityId) -> UsageSpentComponent:
    """The entity's spend so far; an empty one is added if it has none yet."""
    spent = world.get_component(entity, UsageSpentComponent)
    if spent is None:
        spent = UsageSpentComponent()
        world.add_component(entity, spent)
    return spent


def model_budget(world: World, entity: EntityId) -> RunBudget | None:
    """A budget for one model call of `entity`, counting on from what it spent; None when the
    entity has no `UsageLimitsComponent`."""
    component = world.get_component(entity, UsageLimitsComponent)
    if component is None or component.limits.unlimited:
        return None
    spent = spent_of(world, entity)
    # RunBudget reads the calls made so far from `spent.requests`.
    return RunBudget(
        component.limits, spent=spent.usage.model_copy(update={"requests": spent.requests})
    )


def add_model_spend(world: World, entity: EntityId, usage: Usage, requests: int) -> None:
    """Add `requests` model calls and their `usage` to the entity's spend (if it has limits)."""
    if not requests or not world.entity_exists(entity):
        return
    if not world.has_component(entity, UsageLimitsComponent):
        return
    spent = spent_of(world, entity)
    spent.usage = spent.usage + usage
    spent.requests += requests


def take_tool_calls(
    world: World, entity: EntityId, calls: Sequence[ToolCall]
) -> tuple[list[ToolCall], UsageLimitExceeded | None]:
    """The leading `calls` the entity has room for, counted as started, and the breach that
    stops the others (None when every call fits)."""
    component = world.get_component(entity, UsageLimitsComponent)
    if component is None or component.limits.tool_calls is None:
        return list(calls), None
    spent = spent_of(world, entity)
    room = max(component.limits.tool_calls - spent.tool_calls, 0)
    allowed = list(calls[:room])
    spent.tool_calls += len(allowed)
    breach = None
    if len(allowed) < len(calls):
        try:
            component.limits.check_before_tool_call(spent.tool_calls)
        except UsageLimitExceeded as error:
            breach = error
    return allowed, breach


def end_over_budget(world: World, entity: EntityId) -> None:
    """End the entity with ``"usage_limit"`` (unless it is gone)."""
    if world.entity_exists(entity):
        world.add_component(entity, TerminalComponent(USAGE_LIMIT))

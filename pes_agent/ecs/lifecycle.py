"""TerminalCleanupSystem [1] and ErrorHandlingSystem [99]: an entity's ends and failures."""

from __future__ import annotations

from collections.abc import Iterable

from ecs_core import ErrorComponent, TerminalComponent, World
from pes_agent.ecs._model import recorder_for
from pes_agent.ecs.events import ErrorOccurredEvent
from pes_agent.observing.logs import get_logger
from pes_agent.observing.types import ObservationType

__all__ = ["ErrorHandlingSystem", "TerminalCleanupSystem"]

_log = get_logger("pes_agent.ecs.errors")


class TerminalCleanupSystem:
    """Removes `TerminalComponent`s whose reason is in `reasons`, so an entity can go on.

    With the default `{"reasoning_complete"}` a chat entity answers, is marked finished, and
    is ready for the next user message a tick later (`ReasoningSystem` never calls the model
    again until one arrives). Other reasons (`reasoning_failed`, `user_input_timeout`,
    `usage_limit`, ...) stay. A `Runner` waiting for such an entity only stops on a reason not
    cleaned up. Lifting ``"usage_limit"`` gives no new budget: the entity's calls are still
    held to its `UsageLimitsComponent` and what it spent, so the next one without room ends it
    again.
    """

    def __init__(self, reasons: Iterable[str] = ("reasoning_complete",)) -> None:
        self.reasons = frozenset(reasons)

    async def process(self, world: World) -> None:
        """Remove the cleaned-up terminals of every entity."""
        for entity, (terminal,) in world.query(TerminalComponent):
            if terminal.reason in self.reasons:
                world.remove_component(entity, TerminalComponent)


class ErrorHandlingSystem:
    """Reports and clears each entity's `ErrorComponent`.

    For each one: logs it (with the entity's thread), records an ERROR observation (content
    ``{"phase": system_name, "error": message}``, as PES records errors) when the world has
    observations, removes the component, then publishes
    `pes_agent.ecs.ErrorOccurredEvent(entity_id, error, system_name)`. A handler that raises is
    reported by the bus as a `HandlerErrorEvent`, never swallowed.
    """

    async def process(self, world: World) -> None:
        """Report and remove every entity's error."""
        for entity, (failure,) in world.query(ErrorComponent):
            # Removed before anyone hears of it: a handler may attach a new error.
            world.remove_component(entity, ErrorComponent)
            error = failure.error
            message = str(error)
            recorder = recorder_for(world, entity)
            _log.error(
                "entity_error",
                entity=entity,
                thread_id=recorder.thread_id,
                system=failure.system_name,
                error_type=type(error).__name__,
                error=message,
            )
            try:
                await recorder.record(
                    ObservationType.ERROR,
                    f"{failure.system_name} failed",
                    {"phase": failure.system_name, "error": message or type(error).__name__},
                )
            except Exception:
                _log.exception("error_observation_failed", entity=entity)
            await world.events.publish(ErrorOccurredEvent(entity, error, failure.system_name))

"""RunErrorSystem [99]: a run that failed in any phase records an ERROR observation and ends."""

from __future__ import annotations

from typing import Any

from ecs_core import TerminalComponent, World
from pes_agent.errors import UsageLimitExceeded
from pes_agent.observing.types import ObservationType
from pes_agent.pes.components import RunFailed
from pes_agent.pes.resources import ResourceTable

__all__ = ["RunErrorSystem"]


class RunErrorSystem:
    """Records an ERROR observation for each failed run and ends it; nothing is saved."""

    name = "RunErrorSystem"

    def __init__(self, resources: ResourceTable) -> None:
        self._resources = resources

    async def process(self, world: World) -> None:
        for entity, resources in self._resources.runs_in(world):
            components = world.components_of(entity)
            failed = components.get(RunFailed)
            if failed is None or TerminalComponent in components:
                continue
            content: dict[str, Any] = {"phase": failed.phase, "error": failed.message}
            if failed.raw_output is not None:
                content["raw"] = failed.raw_output
            if failed.error is not None:
                content["errorType"] = type(failed.error).__name__
            title = f"{failed.phase.capitalize()} failed"
            if isinstance(failed.error, UsageLimitExceeded):
                title = "Usage limit reached"
                error = failed.error
                content.update(limit=error.limit, used=error.used, allowed=error.allowed)
            await resources.recorder.record(ObservationType.ERROR, title, content)
            world.add_component(entity, TerminalComponent(reason=f"error in {failed.phase}"))

"""The live services of the runs under way, kept beside the world rather than in components.

Components hold a run's data only, so they can be read, copied and inspected like any other
value. The objects a run works through — its model caller (which counts calls and usage), its
observation recorder, its approval gate and its tool invoker — are resources: `AgentCore`
attaches them to the run entity in a `ResourceTable` that every PES system shares, and
detaches them when the run ends. They are the run's only way out to the world (model, store,
people, tools), so an engine that runs them elsewhere swaps these and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from ecs_core import EntityId, World
from pes_agent.approvals.gate import ApprovalGate
from pes_agent.durable.effects import RunEffects
from pes_agent.pes.budget import RunBudget
from pes_agent.pes.llm_call import RunModelCaller
from pes_agent.pes.recorder import RunRecorder
from pes_agent.tools.invoker import IN_PROCESS, ToolInvoker

__all__ = ["ResourceTable", "RunResources"]


@dataclass(slots=True, frozen=True)
class RunResources:
    """The services one run works through: its model caller, its observation recorder, (when
    any call may need approval) its approval gate, how its tool calls reach their tools (the
    executor's `ExecutionContext.invoker`), (when it has usage limits) its budget, and (on a
    durable engine) the engine's `RunEffects`, through which its side effects are steps."""

    llm: RunModelCaller
    recorder: RunRecorder
    approvals: ApprovalGate | None = None
    invoker: ToolInvoker = IN_PROCESS
    budget: RunBudget | None = None
    effects: RunEffects | None = None


class ResourceTable:
    """The `RunResources` of each run under way, by world and run entity.

    Keyed by the world too: entity ids are only unique within one world, and runs on
    separate worlds share the systems and this table.
    """

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: dict[World, dict[EntityId, RunResources]] = {}

    def attach(self, world: World, entity: EntityId, resources: RunResources) -> None:
        """Give the run `entity` of `world` its resources until `detach`."""
        self._runs.setdefault(world, {})[entity] = resources

    def detach(self, world: World, entity: EntityId) -> None:
        """Forget the run's resources (the run is over); nothing happens if there are none."""
        runs = self._runs.get(world)
        if runs is not None:
            runs.pop(entity, None)
            if not runs:
                del self._runs[world]

    def of(self, world: World, entity: EntityId) -> RunResources:
        """The resources of the run `entity` of `world`; a LookupError if none are attached."""
        try:
            return self._runs[world][entity]
        except KeyError:
            raise LookupError(
                f"no resources attached to run entity {entity} of {world!r}"
            ) from None

    def entities_in(self, world: World) -> tuple[EntityId, ...]:
        """The run entities of `world` that have resources (a snapshot: a tuple of ids, which
        the collector stops tracking, so a phase waiting inside its loop keeps no list)."""
        runs = self._runs.get(world)
        return tuple(runs) if runs else ()

    def get(self, world: World, entity: EntityId) -> RunResources | None:
        """The resources of the run `entity` of `world`; None if none are attached."""
        runs = self._runs.get(world)
        return runs.get(entity) if runs is not None else None

    def runs_in(self, world: World) -> list[tuple[EntityId, RunResources]]:
        """The run entities of `world` that have resources, with them (a snapshot)."""
        runs = self._runs.get(world)
        return list(runs.items()) if runs else []

    def __len__(self) -> int:
        return sum(len(runs) for runs in self._runs.values())

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
    separate worlds share the systems and this table. Kept in two flat dicts rather than a
    dict per world: a run's own entries are then a tuple of its world's entity ids and a key
    of two ints, which the garbage collector stops tracking, where a dict per world would be
    one more object per run in flight for every full collection to walk.
    """

    __slots__ = ("_entities", "_resources")

    def __init__(self) -> None:
        # The run entities of each world, in the order they were attached.
        self._entities: dict[World, tuple[EntityId, ...]] = {}
        # By `(id(world), entity)`: a world's id is its own while it is a key of `_entities`,
        # which holds it for as long as it has a run entity here.
        self._resources: dict[tuple[int, EntityId], RunResources] = {}

    def attach(self, world: World, entity: EntityId, resources: RunResources) -> None:
        """Give the run `entity` of `world` its resources until `detach`."""
        key = (id(world), entity)
        if key not in self._resources:
            self._entities[world] = (*self._entities.get(world, ()), entity)
        self._resources[key] = resources

    def detach(self, world: World, entity: EntityId) -> None:
        """Forget the run's resources (the run is over); nothing happens if there are none."""
        if self._resources.pop((id(world), entity), None) is None:
            return
        entities = self._entities[world]
        if len(entities) == 1:  # a PES world's only run entity, the usual case
            del self._entities[world]
        else:
            self._entities[world] = tuple(e for e in entities if e != entity)

    def of(self, world: World, entity: EntityId) -> RunResources:
        """The resources of the run `entity` of `world`; a LookupError if none are attached."""
        resources = self._resources.get((id(world), entity))
        if resources is None:
            raise LookupError(f"no resources attached to run entity {entity} of {world!r}")
        return resources

    def entities_in(self, world: World) -> tuple[EntityId, ...]:
        """The run entities of `world` that have resources (a snapshot: a tuple of ids, which
        the collector stops tracking, so a phase waiting inside its loop keeps no list)."""
        return self._entities.get(world, ())

    def get(self, world: World, entity: EntityId) -> RunResources | None:
        """The resources of the run `entity` of `world`; None if none are attached."""
        return self._resources.get((id(world), entity))

    def runs_in(self, world: World) -> list[tuple[EntityId, RunResources]]:
        """The run entities of `world` that have resources, with them (a snapshot)."""
        key, resources = id(world), self._resources
        runs = []
        for entity in self._entities.get(world, ()):  # no comprehension: one call fewer a tick
            runs.append((entity, resources[key, entity]))
        return runs

    def __len__(self) -> int:
        return len(self._resources)

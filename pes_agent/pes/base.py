"""What every PES phase system shares: per-entity failure isolation and phase timing."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, TypeVarTuple, get_args, get_origin

from ecs_core import EntityId, World
from pes_agent.errors import UsageError, UsageLimitExceeded
from pes_agent.observing.logs import get_logger
from pes_agent.pes.components import Phase, Retrieved, RunFailed, RunSpec, RunTimings
from pes_agent.pes.llm_call import RunModelCaller
from pes_agent.pes.recorder import RunRecorder
from pes_agent.pes.resources import ResourceTable, RunResources
from pes_agent.retrieval.base import ScoredDocument

__all__ = ["PhaseRun", "PhaseSystem", "passages_of", "returned"]

T = TypeVar("T")
Inputs = TypeVarTuple("Inputs")


def returned(value: object, kind: type[T], part: object, method: str) -> T:
    """`value` if a pluggable part's `method` returned a `kind`; else a UsageError saying so."""
    if not isinstance(value, kind):
        raise UsageError(
            f"{type(part).__name__}.{method}() returned {type(value).__name__}; "
            f"it must return a {kind.__name__}"
        )
    return value


_log = get_logger("pes_agent.pes")


@dataclass(slots=True, frozen=True)
class PhaseRun:
    """One run entity as a phase system sees it: its spec, its resources, where to put output.

    Built for the duration of one phase; not a component.
    """

    world: World
    entity: EntityId
    spec: RunSpec
    resources: RunResources
    timings: RunTimings

    # The phases here read `resources.llm` and `resources.recorder` directly (a property is a
    # Python call, and they are read several times a run); these are for systems elsewhere.

    @property
    def llm(self) -> RunModelCaller:
        """The run's model caller (what planners and synthesizers call)."""
        return self.resources.llm

    @property
    def recorder(self) -> RunRecorder:
        """Where the phase records the run's observations."""
        return self.resources.recorder

    def add(self, component: object) -> None:
        """Leave `component` on the run entity (the phase's output)."""
        self.world.add_component(self.entity, component)


def passages_of(run: PhaseRun) -> Sequence[ScoredDocument]:
    """The passages retrieved for the run (none without a retriever, or when it failed)."""
    retrieved = run.world.get_component(run.entity, Retrieved)
    # An empty tuple is shared: no list alive per run while its planner waits.
    return retrieved.documents if retrieved is not None else ()


def _over_budget(phase: Phase, spec: RunSpec, breach: UsageLimitExceeded) -> RunFailed:
    """The failure of a run that would have crossed a usage limit during `phase`."""
    _log.warning(
        "run_over_budget",
        phase=phase,
        thread_id=spec.thread_id,
        trace_id=spec.trace_id,
        limit=breach.limit,
        used=breach.used,
        allowed=breach.allowed,
    )
    return RunFailed(phase="budget", message=f"usage limit reached: {breach.message}", error=breach)


class PhaseSystem(ABC, Generic[*Inputs]):
    """A system that runs one phase for every run entity that is ready for it.

    A subclass names the components its phase reads as type arguments —
    `class SynthesisSystem(PhaseSystem[Planned, Executed])`, `PhaseSystem[()]` for none — and
    its `run` receives them typed, in that order: `run(self, run, planned, executed)`.
    `requires` (what the world is queried for) is read from those arguments, so the query and
    the signature cannot disagree. `done_when` names the component types whose presence means
    the phase is done or moot. A failure in one entity's phase becomes a `RunFailed` component
    on that entity — it never escapes to other runs.
    """

    phase: ClassVar[Phase]
    requires: ClassVar[tuple[type[Any], ...]] = ()
    done_when: ClassVar[tuple[type[Any], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if get_origin(base) is PhaseSystem:
                cls.requires = get_args(base)

    def __init__(self, resources: ResourceTable) -> None:
        self._resources = resources
        self._timing_field = self.phase + "_ms"  # where `process` writes the phase's time

    @property
    def name(self) -> str:
        return type(self).__name__

    async def process(self, world: World) -> None:
        # A PES world holds the run entities of the runs ticking it (one, in AgentCore), all
        # with resources attached: a phase looks at those entities directly. A cached query
        # would cost each run's world some eighty objects and 7 KB for a single entity, which
        # at 10,000 runs in flight is most of their memory and of the collector's work.
        # Nothing built here outlives the loop's checks: a run waiting inside its phase keeps
        # no list, mapping or closure cell of this frame alive, only the entity ids (a tuple
        # of ints, which the collector stops tracking) and its `PhaseRun`. Walked by index:
        # a tuple's iterator is an object the collector tracks, a range's is not.
        entities = self._resources.entities_in(world)
        for index in range(len(entities)):
            entity = entities[index]
            components = world.components_of(entity)
            run = self._ready_run(world, entity, components)
            if run is None:
                continue
            started = time.perf_counter()
            try:
                # The phase's inputs, the components it `requires` in order, are read before
                # it starts, and the entity's mapping is let go: its wait does not keep it.
                phase = self.run(run, *map(components.__getitem__, self.requires))
                del components
                await phase
            except Exception as error:
                spec, budget = run.spec, run.resources.budget
                if budget is not None and budget.breach is not None:
                    # Whatever the phase raised on its way out, the run stopped at a limit.
                    world.add_component(entity, _over_budget(self.phase, spec, budget.breach))
                    continue
                message = str(error)
                _log.warning(
                    "phase_failed",
                    phase=self.phase,
                    thread_id=spec.thread_id,
                    trace_id=spec.trace_id,
                    error_type=type(error).__name__,
                    error=message,
                )
                world.add_component(
                    entity,
                    RunFailed(
                        phase=self.phase,
                        message=f"{self.phase} failed: {message}",
                        error=error,
                        raw_output=getattr(error, "raw_output", None),
                    ),
                )
            else:
                budget = run.resources.budget
                if budget is not None and budget.breach is not None:
                    # Crossed inside the phase and swallowed there (a custom executor that
                    # turns every exception into a result): the run stops all the same.
                    world.add_component(entity, _over_budget(self.phase, run.spec, budget.breach))
            finally:
                timings, field = run.timings, self._timing_field
                if not getattr(timings, field):  # a phase that timed itself keeps it
                    setattr(timings, field, (time.perf_counter() - started) * 1000)

    def _ready_run(
        self, world: World, entity: EntityId, components: Mapping[type[Any], Any]
    ) -> PhaseRun | None:
        """The run `entity` (whose components are `components`) as this phase sees it, if it
        is ready for the phase: not failed, its phase not done or moot, holding the spec
        and what the phase `requires`, and still with its resources; else None."""
        if RunFailed in components or RunSpec not in components:
            return None
        # Loops rather than any()/all() over generators: every system asks this of every run
        # entity at each tick, and a generator costs a Python call per step.
        for kind in self.done_when:
            if kind in components:
                return None
        for kind in self.requires:
            if kind not in components:
                return None
        resources = self._resources.get(world, entity)
        if resources is None:
            return None
        spec = components[RunSpec]
        return PhaseRun(world, entity, spec, resources, spec.timings)

    @abstractmethod
    async def run(self, run: PhaseRun, *inputs: *Inputs) -> None:
        """Do this phase for one run entity, adding the phase's output component.

        `inputs` are the entity's components of the types the class is parameterized with.
        """

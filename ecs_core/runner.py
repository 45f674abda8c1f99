"""Tick a world until the entities you care about are finished, or a tick budget runs out.

Termination is per entity: `Runner.run(world, until=[a, b])` stops when *a and b* each carry a
`TerminalComponent` — a `TerminalComponent` on any other entity does not stop it. A watched
entity that is deleted before it carries one can never finish, so it counts as done and the
result says so (`StopReason.ENTITY_DELETED`, `RunResult.deleted`). `until` may instead be a
predicate over the world, checked before every tick.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from ecs_core.components import TerminalComponent
from ecs_core.entity import EntityId
from ecs_core.exceptions import EntityNotFoundError

if TYPE_CHECKING:
    from ecs_core.world import World

__all__ = ["RunResult", "Runner", "StopReason", "Until"]

Until = EntityId | Iterable[EntityId] | Callable[["World"], bool] | None
"""What `Runner.run` waits for: one entity, several entities, a predicate, or nothing."""


class StopReason(StrEnum):
    """Why a run ended."""

    TERMINATED = "terminated"
    """Every watched entity carries a `TerminalComponent`."""
    ENTITY_DELETED = "entity_deleted"
    """Every watched entity is finished, but at least one was deleted without terminating."""
    CONDITION_MET = "condition_met"
    """The `until` predicate returned True."""
    MAX_TICKS = "max_ticks"
    """The tick budget ran out first; `RunResult.pending` lists who had not finished."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """The outcome of `Runner.run`."""

    reason: StopReason
    ticks: int
    """Ticks run by this call."""
    terminals: Mapping[EntityId, TerminalComponent] = field(default_factory=dict)
    """The `TerminalComponent` of each watched entity that carries one."""
    deleted: tuple[EntityId, ...] = ()
    """Watched entities deleted before they carried a `TerminalComponent`."""
    pending: tuple[EntityId, ...] = ()
    """Watched entities still unfinished (only when the run hit `max_ticks`)."""

    @property
    def finished(self) -> bool:
        """Whether the run ended because its goal was reached rather than by the tick budget."""
        return self.reason is not StopReason.MAX_TICKS


class Runner:
    """Drive `world.process()` tick after tick until a stop condition holds.

    `max_ticks` given here is the default budget of every `run`; a run may override it.
    Between ticks the runner yields to the event loop once, so a world whose systems never
    await cannot starve other tasks.
    """

    __slots__ = ("max_ticks",)

    def __init__(self, *, max_ticks: int | None = None) -> None:
        self.max_ticks = _check_max_ticks(max_ticks)

    async def run(
        self, world: World, *, until: Until = None, max_ticks: int | None = None
    ) -> RunResult:
        """Tick `world` until `until` is satisfied or `max_ticks` ticks have run.

        `until`: an entity id or ids (wait for each to carry a `TerminalComponent`), or a
        `Callable[[World], bool]`, or None (just run `max_ticks` ticks). Conditions are
        checked before every tick, so a goal already met runs zero ticks.
        """
        budget = _check_max_ticks(max_ticks) if max_ticks is not None else self.max_ticks
        if callable(until):
            predicate = until
            watched: tuple[EntityId, ...] = ()
        else:
            predicate = None
            watched = _watched(world, until)
        if predicate is None and not watched and budget is None:
            raise ValueError(
                "Runner.run() would never stop: pass until=<entity ids or predicate> "
                "and/or max_ticks=<int>."
            )
        ticks = 0
        while True:
            if predicate is not None:
                if predicate(world):
                    return RunResult(StopReason.CONDITION_MET, ticks)
            elif watched:
                result = _check_entities(world, watched, ticks)
                if result is not None:
                    return result
            if budget is not None and ticks >= budget:
                return RunResult(
                    StopReason.MAX_TICKS,
                    ticks,
                    terminals=_terminals(world, watched),
                    deleted=tuple(e for e in watched if not world.entity_exists(e)),
                    pending=tuple(
                        e
                        for e in watched
                        if world.entity_exists(e) and not world.has_component(e, TerminalComponent)
                    ),
                )
            await world.process()
            ticks += 1
            await asyncio.sleep(0)


def _check_max_ticks(max_ticks: int | None) -> int | None:
    if max_ticks is None:
        return None
    if isinstance(max_ticks, bool) or not isinstance(max_ticks, int) or max_ticks < 0:
        raise ValueError(
            f"max_ticks must be a non-negative int or None, got {max_ticks!r}; e.g. max_ticks=100."
        )
    return max_ticks


def _watched(world: World, until: EntityId | Iterable[EntityId] | None) -> tuple[EntityId, ...]:
    if until is None:
        return ()
    watched = (until,) if isinstance(until, int) else tuple(dict.fromkeys(until))
    missing = [e for e in watched if not world.entity_exists(e)]
    if missing:
        raise EntityNotFoundError(
            f"Runner.run(until=...) watches entities that are not alive: {missing}; "
            "pass ids returned by world.create_entity() that have not been deleted."
        )
    return watched


def _terminals(world: World, watched: tuple[EntityId, ...]) -> dict[EntityId, TerminalComponent]:
    terminals: dict[EntityId, TerminalComponent] = {}
    for entity in watched:
        terminal = world.get_component(entity, TerminalComponent)
        if terminal is not None:
            terminals[entity] = terminal
    return terminals


def _check_entities(world: World, watched: tuple[EntityId, ...], ticks: int) -> RunResult | None:
    deleted: list[EntityId] = []
    for entity in watched:
        if not world.entity_exists(entity):
            deleted.append(entity)
        elif not world.has_component(entity, TerminalComponent):
            return None
    return RunResult(
        StopReason.ENTITY_DELETED if deleted else StopReason.TERMINATED,
        ticks,
        terminals=_terminals(world, watched),
        deleted=tuple(deleted),
    )

"""Systems and the executor that runs them by priority, isolating each one's failures.

`SystemExecutor.run(world)` runs systems in ascending priority. Systems sharing a priority run
concurrently in one `asyncio.TaskGroup`; the next priority starts when all of them are done.
A system that raises an `Exception` is logged on the `ecs_core.system` logger and reported on
the event bus as an `ErrorOccurredEvent(system_name, exception)`; it never cancels its siblings
and the tick goes on. `asyncio.CancelledError` (and other `BaseException`s) still propagate:
cancelling `world.process()` cancels the running systems. Registering or removing a system
while a tick runs takes effect from the next tick.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ecs_core.events import ErrorOccurredEvent, EventBus
from ecs_core.exceptions import DuplicateSystemError, InvalidSystemError, SystemNotFoundError

if TYPE_CHECKING:
    from ecs_core.world import World

__all__ = ["System", "SystemExecutor", "system_name"]

_log = logging.getLogger(__name__)


@runtime_checkable
class System(Protocol):
    """Logic that runs once per tick over the entities whose components it queries.

    A system may also have a `name` attribute (a `str`, possibly a property) used in logs and
    in `ErrorOccurredEvent`; without one its class name is used.
    """

    async def process(self, world: World) -> None:
        """Do this system's work for one tick."""


def system_name(system: object) -> str:
    """The name a system is reported under: its non-empty `name` str, else its class name."""
    name = getattr(system, "name", None)
    return name if isinstance(name, str) and name else type(system).__name__


class _Registered:
    __slots__ = ("name", "order", "priority", "system")

    def __init__(self, system: System, priority: int, order: int) -> None:
        self.system = system
        self.priority = priority
        self.order = order
        self.name = system_name(system)


class SystemExecutor:
    """Run registered systems tick by tick: ascending priority, equal priorities concurrently."""

    __slots__ = ("_events", "_order", "_plan", "_registered")

    def __init__(self, events: EventBus) -> None:
        self._events = events
        self._registered: dict[int, _Registered] = {}  # by id(system): instances need not hash
        self._order = 0
        # Groups of (system, name) in run order; replaced, never mutated, so a tick in
        # progress keeps the plan it started with.
        self._plan: tuple[tuple[tuple[System, str], ...], ...] = ()

    def __len__(self) -> int:
        return len(self._registered)

    def __contains__(self, system: object) -> bool:
        entry = self._registered.get(id(system))
        return entry is not None and entry.system is system

    @property
    def systems(self) -> tuple[System, ...]:
        """The registered systems in the order a tick runs them."""
        return tuple(system for group in self._plan for system, _ in group)

    def priority_of(self, system: System) -> int:
        """The priority the system was registered with; raise if it is not registered."""
        return self._entry(system).priority

    def add(self, system: System, priority: int = 0) -> None:
        """Register a system instance to run every tick at `priority` (lower runs earlier)."""
        _check_system(system)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidSystemError(
                f"Priority for {system_name(system)} must be an int (lower runs earlier), "
                f"got {priority!r} of type {type(priority).__name__}."
            )
        if system in self:
            raise DuplicateSystemError(
                f"{system_name(system)} is already registered (priority "
                f"{self._registered[id(system)].priority}); register a system instance once, "
                "or remove_system() it first to change its priority."
            )
        self._registered[id(system)] = _Registered(system, priority, self._order)
        self._order += 1
        self._replan()

    def remove(self, system: System) -> None:
        """Unregister a system; raise `SystemNotFoundError` if it is not registered."""
        self._entry(system)
        del self._registered[id(system)]
        self._replan()

    async def run(self, world: World) -> None:
        """Run one tick: every priority group in turn, each group's systems concurrently."""
        run_one = self._run_one
        for group in self._plan:
            if len(group) == 1:
                system, name = group[0]
                await run_one(system, name, world)
            else:
                async with asyncio.TaskGroup() as tasks:
                    for system, name in group:
                        tasks.create_task(run_one(system, name, world), name=name)

    async def _run_one(self, system: System, name: str, world: World) -> None:
        try:
            await system.process(world)
        except Exception as exc:
            _log.error("system %s failed; the tick goes on without it", name, exc_info=exc)
            await self._events.publish(ErrorOccurredEvent(name, exc))

    def _entry(self, system: System) -> _Registered:
        entry = self._registered.get(id(system))
        if entry is None or entry.system is not system:
            raise SystemNotFoundError(
                f"{system_name(system)} is not registered with this world; "
                "only an instance passed to register_system() can be removed."
            )
        return entry

    def _replan(self) -> None:
        entries = sorted(self._registered.values(), key=lambda e: (e.priority, e.order))
        plan: list[tuple[tuple[System, str], ...]] = []
        group: list[tuple[System, str]] = []
        priority: int | None = None
        for entry in entries:
            if group and entry.priority != priority:
                plan.append(tuple(group))
                group = []
            group.append((entry.system, entry.name))
            priority = entry.priority
        if group:
            plan.append(tuple(group))
        self._plan = tuple(plan)


def _check_system(system: object) -> None:
    if isinstance(system, type):
        raise InvalidSystemError(
            f"register_system() got the class {system.__name__}; pass an instance, "
            f"e.g. register_system({system.__name__}(), priority)."
        )
    process = getattr(system, "process", None)
    if process is None or not callable(process):
        raise InvalidSystemError(
            f"{system!r} is not a System: it needs a method `async def process(self, world)`."
        )
    if not inspect.iscoroutinefunction(process):
        raise InvalidSystemError(
            f"{system_name(system)}.process must be declared `async def process(self, world)`; "
            "a plain def cannot be awaited by the executor."
        )

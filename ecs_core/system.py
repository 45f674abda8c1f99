"""Systems and the executor that runs them by priority, isolating each one's failures.

`SystemExecutor.run(world)` runs systems in ascending priority. Systems sharing a priority run
concurrently, started in registration order; the next priority starts when all of them are
done. A system that raises an `Exception` (before or after it first awaits) is logged on the
`ecs_core.system` logger and reported on the event bus as an
`ErrorOccurredEvent(system_name, exception)`; it never cancels its siblings and the tick goes
on. `asyncio.CancelledError` (and other `BaseException`s) still propagate: cancelling
`world.process()` cancels the running systems. Registering or removing a system while a tick
runs takes effect from the next tick.

Where the systems of a group run, for code that cares about `asyncio.current_task()` or
contextvars: a system runs in the task that called `world.process()` until a system of its
group first suspends (awaits something not yet done); that one goes on in the calling task,
as a system alone at its priority always does, and the systems after it each start in a task
of their own, named after the system. A group's systems never change the caller's
contextvars: they run in a copy of them, which a system started after another may share (as
systems at successive priorities share the caller's).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import types
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

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


class _Suspended:
    """A group's system (or its failure report) that suspended while being started."""

    __slots__ = ("coro", "index", "name", "waiting_on")

    def __init__(
        self, index: int, name: str, coro: Coroutine[Any, Any, None], waiting_on: object
    ) -> None:
        self.index = index
        self.name = name
        self.coro = coro
        self.waiting_on = waiting_on


_Group = tuple[tuple[System, str], ...]


class SystemExecutor:
    """Run registered systems tick by tick: ascending priority, equal priorities concurrently."""

    __slots__ = ("_events", "_order", "_plan", "_registered")

    def __init__(self, events: EventBus) -> None:
        self._events = events
        self._registered: dict[int, _Registered] = {}  # by id(system): instances need not hash
        self._order = 0
        # Groups of (system, name) in run order; replaced, never mutated, so a tick in
        # progress keeps the plan it started with.
        self._plan: tuple[_Group, ...] = ()

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

    def copy_from(self, other: SystemExecutor) -> None:
        """Register `other`'s systems here, at their priorities and in their order; this
        executor must have none. The two share the registrations (never changed once made)
        and the run order (replaced, never mutated), so a copy costs one dict."""
        if self._registered:
            raise InvalidSystemError(
                f"copy_systems_from() needs a world with no systems; this one has "
                f"{len(self._registered)}: remove them first or copy into a new World()"
            )
        self._registered = dict(other._registered)
        self._order = other._order
        self._plan = other._plan

    def remove(self, system: System) -> None:
        """Unregister a system; raise `SystemNotFoundError` if it is not registered."""
        self._entry(system)
        del self._registered[id(system)]
        self._replan()

    async def run(self, world: World) -> None:
        """Run one tick: every priority group in turn, each group's systems concurrently."""
        # A lone system is awaited right here (`_run_one`'s body), and no bound method is
        # kept in a local: a tick suspended in a system then holds no coroutine or method of
        # this executor's beyond this one (thousands of worlds ticking at once cost the
        # collector less).
        for group in self._plan:
            if len(group) == 1:
                system, name = group[0]
                try:
                    await system.process(world)
                except Exception as exc:
                    await self._report(name, exc)
                continue
            # Most ticks most systems find nothing to do and return without suspending; a
            # task each (a TaskGroup) cost them ~4 µs apiece in task setup and event-loop
            # round trips, over ten times a no-op's own cost. So a group's systems are started
            # right here, one after another, and one that returns without suspending has
            # simply run. The first that suspends goes on in this task, as a lone system does,
            # and only the systems after it get tasks: each system runs in the one task it
            # started in, so what it bound to `asyncio.current_task()` before suspending
            # (`asyncio.timeout()`, a TaskGroup) still refers to the task running it. Moving
            # it to a new task would break exactly that; 3.12's eager tasks keep it right but
            # still cost ~0.8 µs a system.
            context = contextvars.copy_context()  # so the group never changes the caller's
            suspended = context.run(self._start, group, world)
            if suspended is not None:
                await self._run_rest(group, suspended, context, world)

    async def _run_rest(
        self, group: _Group, suspended: _Suspended, context: contextvars.Context, world: World
    ) -> None:
        """Finish the suspended system in this task, the group's later ones in tasks."""
        rest = group[suspended.index + 1 :]
        if not rest:
            await self._finish(suspended, context)
            return
        async with asyncio.TaskGroup() as tasks:
            for system, name in rest:
                tasks.create_task(self._run_one(system, name, world), name=name)
            await self._finish(suspended, context)

    def _start(self, group: _Group, world: World) -> _Suspended | None:
        """Step the group's systems in turn until one suspends; return it, or None."""
        for index, (system, name) in enumerate(group):
            try:
                coro = system.process(world)
                waiting_on = coro.send(None)
            except StopIteration:
                continue
            except Exception as exc:
                # An async error handler may suspend the report: it then goes on like a
                # suspended system, so it does not hold back the siblings' start either.
                coro = self._report(name, exc)
                try:
                    waiting_on = coro.send(None)
                except StopIteration:
                    continue
            return _Suspended(index, name, coro, waiting_on)
        return None

    async def _finish(self, suspended: _Suspended, context: contextvars.Context) -> None:
        """Drive a system `_start` left suspended to its end, reporting its failure."""
        try:
            await _resume(suspended.coro, suspended.waiting_on, context)
        except Exception as exc:
            await self._report(suspended.name, exc)

    async def _run_one(self, system: System, name: str, world: World) -> None:
        try:
            await system.process(world)
        except Exception as exc:
            await self._report(name, exc)

    async def _report(self, name: str, exc: Exception) -> None:
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
        plan: list[_Group] = []
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


@types.coroutine
def _resume(
    coro: Coroutine[Any, Any, None], waiting_on: object, context: contextvars.Context
) -> Generator[object, object, None]:
    """Await `coro`, stepped once already and now waiting on `waiting_on`, to its end.

    This does what `await coro` would from that point on: each thing the coroutine waits on
    goes to the running task untouched (a future still carries the `_asyncio_future_blocking`
    flag the task reads), what the task sends or throws back (a wake-up, a cancellation) goes
    to the coroutine, closing this closes it, and every step runs in `context`, as the first
    one did, so a contextvar set before the suspension can be reset after it.
    """
    while True:
        try:
            sent = yield waiting_on
        except GeneratorExit:
            context.run(coro.close)
            raise
        except BaseException as exc:
            step: Callable[[Any], object] = coro.throw
            arg: object = exc
        else:
            step, arg = coro.send, sent
        try:
            waiting_on = context.run(step, arg)
        except StopIteration:
            return


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

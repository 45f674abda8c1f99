"""SystemExecutor: ascending priorities, equal priorities concurrent, failures isolated."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from ecs_core import (
    DuplicateSystemError,
    ErrorOccurredEvent,
    InvalidSystemError,
    SystemNotFoundError,
    World,
)


class Recorder:
    """A system that appends ("start", name) and ("end", name) around an optional sleep."""

    def __init__(self, name: str, log: list[tuple[str, str]], sleep: float = 0.0) -> None:
        self.name = name
        self.log = log
        self.sleep = sleep
        self.started = asyncio.Event()

    async def process(self, world: World) -> None:
        self.log.append(("start", self.name))
        self.started.set()
        if self.sleep:
            await asyncio.sleep(self.sleep)
        self.log.append(("end", self.name))


class Failing:
    """A system that raises `error`, optionally after yielding to the loop first."""

    def __init__(self, error: Exception, *, after_await: bool = True, name: str = "failing"):
        self.error = error
        self.after_await = after_await
        self.name = name

    async def process(self, world: World) -> None:
        if self.after_await:
            await asyncio.sleep(0)
        raise self.error


def collect_errors(world: World) -> list[ErrorOccurredEvent]:
    errors: list[ErrorOccurredEvent] = []
    world.events.subscribe(ErrorOccurredEvent, errors.append)
    return errors


# -- ordering and concurrency ---------------------------------------------------------------


async def test_systems_run_in_ascending_priority_regardless_of_registration_order() -> None:
    """Priority 0 runs before 5 before 10, whatever order they were registered in."""
    world = World()
    log: list[tuple[str, str]] = []
    world.register_system(Recorder("ten", log), 10)
    world.register_system(Recorder("zero", log), 0)
    world.register_system(Recorder("five", log), 5)
    await world.process()
    assert [name for kind, name in log if kind == "start"] == ["zero", "five", "ten"]
    assert [s.name for s in world.systems] == ["zero", "five", "ten"]  # type: ignore[attr-defined]


async def test_equal_priority_systems_overlap() -> None:
    """Two systems at one priority that each sleep 50 ms both start before either finishes."""
    world = World()
    log: list[tuple[str, str]] = []
    world.register_system(Recorder("a", log, sleep=0.05), 1)
    world.register_system(Recorder("b", log, sleep=0.05), 1)
    await world.process()
    assert log == [("start", "a"), ("start", "b"), ("end", "a"), ("end", "b")]


async def test_different_priorities_do_not_overlap() -> None:
    """A later priority starts only after every system of the earlier one has finished."""
    world = World()
    log: list[tuple[str, str]] = []
    world.register_system(Recorder("a", log, sleep=0.05), 1)
    world.register_system(Recorder("b", log, sleep=0.01), 1)
    world.register_system(Recorder("c", log), 2)
    await world.process()
    assert log.index(("start", "c")) > max(log.index(("end", "a")), log.index(("end", "b")))


# -- failure isolation ---------------------------------------------------------------------


async def test_a_failing_system_does_not_cancel_its_sibling_or_the_next_priority(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The sibling at the same priority and the next priority both finish; the tick completes."""
    world = World()
    log: list[tuple[str, str]] = []
    errors = collect_errors(world)
    boom = RuntimeError("boom")
    world.register_system(Failing(boom), 0)
    world.register_system(Recorder("sibling", log, sleep=0.02), 0)
    world.register_system(Recorder("next", log), 1)
    with caplog.at_level(logging.ERROR, logger="ecs_core.system"):
        await world.process()
    assert log == [("start", "sibling"), ("end", "sibling"), ("start", "next"), ("end", "next")]
    assert world.ticks == 1
    assert len(errors) == 1
    assert errors[0].system_name == "failing"
    assert errors[0].exception is boom


async def test_a_system_failing_before_its_first_await_is_isolated_too() -> None:
    """Raising synchronously at the start of process() is reported like any other failure."""
    world = World()
    log: list[tuple[str, str]] = []
    errors = collect_errors(world)
    world.register_system(Failing(ValueError("early"), after_await=False), 0)
    world.register_system(Recorder("sibling", log, sleep=0.01), 0)
    await world.process()
    assert ("end", "sibling") in log
    assert [type(e.exception) for e in errors] == [ValueError]


async def test_a_lone_failing_system_is_reported_and_the_tick_continues() -> None:
    """A failing system alone at its priority is reported and later priorities still run."""
    world = World()
    log: list[tuple[str, str]] = []
    errors = collect_errors(world)
    world.register_system(Failing(KeyError("k"), name="lonely"), 0)
    world.register_system(Recorder("after", log), 1)
    await world.process()
    assert log == [("start", "after"), ("end", "after")]
    assert [e.system_name for e in errors] == ["lonely"]


async def test_system_failure_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The executor logs the failing system's name and exception at ERROR level."""
    world = World()
    boom = RuntimeError("boom")
    world.register_system(Failing(boom, name="noisy"), 0)
    with caplog.at_level(logging.ERROR, logger="ecs_core.system"):
        await world.process()
    [record] = [r for r in caplog.records if r.name == "ecs_core.system"]
    assert "noisy" in record.getMessage()
    assert record.exc_info is not None
    assert record.exc_info[1] is boom


async def test_several_failures_in_one_group_are_each_reported() -> None:
    """Two failing siblings produce two ErrorOccurredEvents, none lost to the TaskGroup."""
    world = World()
    errors = collect_errors(world)
    world.register_system(Failing(RuntimeError("one"), name="one"), 0)
    world.register_system(Failing(RuntimeError("two"), name="two"), 0)
    await world.process()
    assert sorted(e.system_name for e in errors) == ["one", "two"]


async def test_cancelling_process_propagates_and_cancels_running_systems() -> None:
    """Cancellation is not a system failure: it reaches the caller and stops the siblings."""
    world = World()
    log: list[tuple[str, str]] = []
    errors = collect_errors(world)
    slow = [Recorder("slow-1", log, sleep=10), Recorder("slow-2", log, sleep=10)]
    for system in slow:
        world.register_system(system, 0)
    world.register_system(Recorder("never", log), 1)
    task = asyncio.create_task(world.process())
    await asyncio.gather(*(system.started.wait() for system in slow))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log == [("start", "slow-1"), ("start", "slow-2")]
    assert errors == []
    assert world.ticks == 0


async def test_cancelling_a_lone_system_propagates() -> None:
    """A single system at its priority is awaited directly, and cancellation still escapes."""
    world = World()
    log: list[tuple[str, str]] = []
    slow = Recorder("slow", log, sleep=10)
    world.register_system(slow, 0)
    task = asyncio.create_task(world.process())
    await slow.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# -- names ------------------------------------------------------------------------------------


class NamedByProperty:
    @property
    def name(self) -> str:
        return "from-property"

    async def process(self, world: World) -> None:
        raise RuntimeError


class Anonymous:
    async def process(self, world: World) -> None:
        raise RuntimeError


@pytest.mark.parametrize(
    ("system", "expected"),
    [(NamedByProperty(), "from-property"), (Anonymous(), "Anonymous")],
)
async def test_error_reports_use_the_system_name_or_else_its_class(
    system: Any, expected: str
) -> None:
    """A `name` attribute (even a property) names the system; otherwise its class name does."""
    world = World()
    errors = collect_errors(world)
    world.register_system(system)
    await world.process()
    assert [e.system_name for e in errors] == [expected]


# -- registration -----------------------------------------------------------------------------


class SyncProcess:
    def process(self, world: World) -> None:
        pass


@pytest.mark.parametrize(
    ("system", "message"),
    [
        (Anonymous, r"got the class Anonymous; pass an instance.*Anonymous\(\)"),
        (object(), r"is not a System.*async def process"),
        (SyncProcess(), r"SyncProcess.process must be declared `async def"),
    ],
)
def test_registering_a_non_system_raises_with_the_fix(system: Any, message: str) -> None:
    """Classes, objects without process() and sync process() are rejected with advice."""
    with pytest.raises(InvalidSystemError, match=message):
        World().register_system(system, 0)


@pytest.mark.parametrize("priority", [True, 1.5, "1", None])
def test_registering_with_a_non_int_priority_raises(priority: Any) -> None:
    """Priorities are ints; bools, floats, strings and None are rejected."""
    with pytest.raises(InvalidSystemError, match=r"Priority for Anonymous must be an int"):
        World().register_system(Anonymous(), priority)


def test_registering_the_same_instance_twice_raises() -> None:
    """A system instance is registered once; the message says how to change its priority."""
    world = World()
    system = Anonymous()
    world.register_system(system, 1)
    with pytest.raises(DuplicateSystemError, match=r"already registered \(priority 1\)"):
        world.register_system(system, 2)


def test_removing_an_unregistered_system_raises() -> None:
    """remove_system of a system never registered raises SystemNotFoundError."""
    with pytest.raises(SystemNotFoundError, match="not registered"):
        World().remove_system(Anonymous())


async def test_removed_system_no_longer_runs() -> None:
    """After remove_system the system is skipped on the next tick."""
    world = World()
    log: list[tuple[str, str]] = []
    system = Recorder("gone", log)
    world.register_system(system)
    world.remove_system(system)
    await world.process()
    assert log == []
    assert world.systems == ()


async def test_registration_during_a_tick_takes_effect_next_tick() -> None:
    """A system registered by another system mid-tick first runs on the following tick."""
    world = World()
    log: list[tuple[str, str]] = []
    late = Recorder("late", log)

    class Registrar:
        async def process(self, world: World) -> None:
            if late not in world.systems:
                world.register_system(late, 5)

    world.register_system(Registrar(), 0)
    await world.process()
    assert log == []
    await world.process()
    assert log == [("start", "late"), ("end", "late")]
    assert world.ticks == 2

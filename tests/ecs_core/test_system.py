"""SystemExecutor: ascending priorities, equal priorities concurrent, failures isolated."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ecs_core import (
    DuplicateSystemError,
    ErrorOccurredEvent,
    InvalidSystemError,
    System,
    SystemNotFoundError,
    World,
)


class Recorder:
    """A system that appends ("start", name) and ("end", name) around an optional sleep.

    If cancelled during the sleep it appends ("cancelled", name) instead of ("end", name).
    """

    def __init__(self, name: str, log: list[tuple[str, str]], sleep: float = 0.0) -> None:
        self.name = name
        self.log = log
        self.sleep = sleep
        self.started = asyncio.Event()
        self.ended = asyncio.Event()

    async def process(self, world: World) -> None:
        self.log.append(("start", self.name))
        self.started.set()
        if self.sleep:
            try:
                await asyncio.sleep(self.sleep)
            except asyncio.CancelledError:
                self.log.append(("cancelled", self.name))
                raise
        self.log.append(("end", self.name))
        self.ended.set()


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


class Doing:
    """A system named `name` whose process() awaits `body(world)`."""

    def __init__(self, name: str, body: Callable[[World], Awaitable[object]]) -> None:
        self.name = name
        self.body = body

    async def process(self, world: World) -> None:
        await self.body(world)


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
    async with asyncio.timeout(1):
        await asyncio.gather(*(system.started.wait() for system in slow))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log[:2] == [("start", "slow-1"), ("start", "slow-2")]
    assert sorted(log[2:]) == [("cancelled", "slow-1"), ("cancelled", "slow-2")]
    assert errors == []
    assert world.ticks == 0


async def test_cancelling_a_lone_system_propagates() -> None:
    """A single system at its priority is awaited directly, and cancellation still escapes."""
    world = World()
    log: list[tuple[str, str]] = []
    slow = Recorder("slow", log, sleep=10)
    world.register_system(slow, 0)
    task = asyncio.create_task(world.process())
    async with asyncio.timeout(1):
        await slow.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# -- a group: started in the calling task, tasks only once a system suspends ------------------


async def test_systems_at_one_priority_waiting_on_each_other_both_finish() -> None:
    """Two systems at one priority that each wait for the other to have started both finish."""
    world = World()
    a_started, b_started = asyncio.Event(), asyncio.Event()

    async def a(world: World) -> None:
        a_started.set()
        await b_started.wait()

    async def b(world: World) -> None:
        b_started.set()
        await a_started.wait()

    world.register_system(Doing("a", a), 0)
    world.register_system(Doing("b", b), 0)
    async with asyncio.timeout(1):  # run one after the other, they would wait forever
        await world.process()
    assert world.ticks == 1


async def test_a_group_that_never_suspends_runs_in_the_calling_task() -> None:
    """Systems of a group that return without suspending run in the caller's task, no others."""
    world = World()
    seen: list[tuple[asyncio.Task[Any] | None, int]] = []

    async def quick(world: World) -> None:
        seen.append((asyncio.current_task(), len(asyncio.all_tasks())))

    for name in ("a", "b", "c"):
        world.register_system(Doing(name, quick), 0)
    tasks_before = len(asyncio.all_tasks())
    await world.process()
    assert seen == [(asyncio.current_task(), tasks_before)] * 3


async def test_awaiting_a_future_already_done_does_not_suspend_the_group() -> None:
    """A system awaiting a done future gets its result in place; its sibling still runs in place."""
    world = World()
    done = asyncio.get_running_loop().create_future()
    done.set_result(7)
    got: list[object] = []

    async def awaits_done(world: World) -> None:
        got.append(await done)

    async def where(world: World) -> None:
        got.append(asyncio.current_task())

    world.register_system(Doing("awaits-done", awaits_done), 0)
    world.register_system(Doing("where", where), 0)
    await world.process()
    assert got == [7, asyncio.current_task()]


async def test_the_first_to_suspend_stays_in_the_calling_task_later_ones_get_tasks() -> None:
    """Starts follow registration; the first to suspend goes on in the caller's task, later ones
    run in tasks named after them."""
    world = World()
    log: list[tuple[str, str, str]] = []
    caller = asyncio.current_task()

    def task_name() -> str:
        task = asyncio.current_task()
        return "caller" if task is caller else task.get_name() if task else "none"

    def system(name: str, *, suspends: bool) -> Doing:
        async def body(world: World) -> None:
            log.append(("start", name, task_name()))
            if suspends:
                await asyncio.sleep(0)
            log.append(("end", name, task_name()))

        return Doing(name, body)

    world.register_system(system("quick-1", suspends=False), 0)
    world.register_system(system("slow-1", suspends=True), 0)
    world.register_system(system("quick-2", suspends=False), 0)
    world.register_system(system("slow-2", suspends=True), 0)
    await world.process()
    assert [(name, task) for kind, name, task in log if kind == "start"] == [
        ("quick-1", "caller"),
        ("slow-1", "caller"),
        ("quick-2", "quick-2"),
        ("slow-2", "slow-2"),
    ]
    ends = {name: task for kind, name, task in log if kind == "end"}
    assert ends == {
        "quick-1": "caller",
        "slow-1": "caller",
        "quick-2": "quick-2",
        "slow-2": "slow-2",
    }


async def test_systems_that_suspend_several_times_take_turns_until_both_finish() -> None:
    """Two systems at one priority yielding three times each alternate and both finish."""
    world = World()
    log: list[str] = []

    def yields_thrice(name: str) -> Doing:
        async def body(world: World) -> None:
            for turn in range(3):
                log.append(f"{name}{turn}")
                await asyncio.sleep(0)

        return Doing(name, body)

    world.register_system(yields_thrice("a"), 0)
    world.register_system(yields_thrice("b"), 0)
    await world.process()
    assert log == ["a0", "b0", "a1", "b1", "a2", "b2"]


@pytest.mark.parametrize("after_await", [False, True], ids=["before-suspending", "after"])
@pytest.mark.parametrize(
    "layout", list(itertools.permutations(["failing", "waits", "quick"])), ids="-".join
)
async def test_a_failure_anywhere_in_a_group_is_reported_and_spares_its_siblings(
    layout: tuple[str, ...], after_await: bool
) -> None:
    """Wherever a failing system sits among a suspending and a quick sibling, and whether it
    fails before or after suspending, it is reported once and both siblings finish."""
    world = World()
    log: list[tuple[str, str]] = []
    errors = collect_errors(world)
    boom = RuntimeError("boom")
    make: dict[str, Callable[[], System]] = {
        "failing": lambda: Failing(boom, after_await=after_await),
        "waits": lambda: Recorder("waits", log, sleep=0.01),
        "quick": lambda: Recorder("quick", log),
    }
    for name in layout:
        world.register_system(make[name](), 0)
    await world.process()
    assert [(e.system_name, e.exception) for e in errors] == [("failing", boom)]
    assert sorted(log) == [
        ("end", "quick"),
        ("end", "waits"),
        ("start", "quick"),
        ("start", "waits"),
    ]
    assert world.ticks == 1


async def test_a_waiting_error_handler_does_not_hold_back_the_failed_systems_siblings() -> None:
    """An async ErrorOccurredEvent handler waiting on a later sibling of the failing system ends."""
    world = World()
    sibling_ran = asyncio.Event()
    handled: list[str] = []

    async def on_error(event: ErrorOccurredEvent) -> None:
        await sibling_ran.wait()
        handled.append(event.system_name)

    async def sibling(world: World) -> None:
        sibling_ran.set()

    world.events.subscribe(ErrorOccurredEvent, on_error)
    world.register_system(Failing(RuntimeError("early"), after_await=False), 0)
    world.register_system(Doing("sibling", sibling), 0)
    async with asyncio.timeout(1):
        await world.process()
    assert handled == ["failing"]


async def test_a_timeout_entered_before_suspending_expires_in_its_own_system() -> None:
    """asyncio.timeout() entered before a group's system first suspends times out that system
    alone: reported as its TimeoutError, its sibling finishes and the tick completes."""
    world = World()
    log: list[tuple[str, str]] = []
    errors = collect_errors(world)

    async def times_out(world: World) -> None:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(10)

    world.register_system(Recorder("quick", log), 0)
    world.register_system(Doing("times-out", times_out), 0)
    world.register_system(Recorder("sibling", log, sleep=0.05), 0)
    await world.process()
    assert [(e.system_name, type(e.exception)) for e in errors] == [("times-out", TimeoutError)]
    assert ("end", "sibling") in log
    assert world.ticks == 1


async def test_a_task_group_opened_before_suspending_fails_only_its_own_system() -> None:
    """A TaskGroup a group's system opens before suspending, whose child fails, fails only that
    system (reported as the ExceptionGroup); its sibling finishes."""
    world = World()
    log: list[tuple[str, str]] = []
    errors = collect_errors(world)

    async def child_fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("child")

    async def opens_group(world: World) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(child_fails())
            group.create_task(asyncio.sleep(10))

    world.register_system(Doing("opens-group", opens_group), 0)
    world.register_system(Recorder("sibling", log, sleep=0.05), 0)
    await world.process()
    [error] = errors
    assert error.system_name == "opens-group"
    assert isinstance(error.exception, ExceptionGroup)
    assert ("end", "sibling") in log
    assert world.ticks == 1


VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="caller's")


@pytest.mark.parametrize("suspends", [False, True])
async def test_a_contextvar_set_by_a_group_system_does_not_reach_the_caller(
    suspends: bool,
) -> None:
    """A contextvar a system of a group sets is unchanged in the task that called process()."""
    world = World()

    async def sets(world: World) -> None:
        VAR.set("system's")
        if suspends:
            await asyncio.sleep(0)

    world.register_system(Doing("sets", sets), 0)
    world.register_system(Recorder("sibling", [], sleep=0.01), 0)
    await world.process()
    assert VAR.get() == "caller's"


async def test_a_contextvar_set_before_suspending_is_seen_and_reset_after_it() -> None:
    """A group's system that sets a contextvar, suspends, then reads and resets it, succeeds."""
    world = World()
    errors = collect_errors(world)
    seen: list[str] = []

    async def set_then_reset(world: World) -> None:
        token = VAR.set("mine")
        await asyncio.sleep(0)
        seen.append(VAR.get())
        VAR.reset(token)
        seen.append(VAR.get())

    world.register_system(Doing("set-then-reset", set_then_reset), 0)
    world.register_system(Recorder("sibling", [], sleep=0.01), 0)
    await world.process()
    assert errors == []
    assert seen == ["mine", "caller's"]


@pytest.mark.parametrize(
    ("layout", "cancelled"),
    [
        (["slow-1", "slow-2"], ["slow-1", "slow-2"]),  # one in the caller's task, one in a task
        (["quick", "slow-1"], ["slow-1"]),  # the suspended one is the group's last
        (["brief", "slow-1"], ["slow-1"]),  # only the task is left when cancelled
    ],
    ids=["both-suspended", "suspended-one-last", "only-the-task-left"],
)
async def test_cancelling_process_cancels_whatever_of_the_group_still_runs(
    layout: list[str], cancelled: list[str]
) -> None:
    """Cancelling process() cancels each system of the group still running, wherever it runs,
    and the CancelledError reaches the caller."""
    world = World()
    log: list[tuple[str, str]] = []
    errors = collect_errors(world)
    sleeps = {"quick": 0.0, "brief": 0.001, "slow-1": 10.0, "slow-2": 10.0}
    systems = [Recorder(name, log, sleep=sleeps[name]) for name in layout]
    for system in systems:
        world.register_system(system, 0)
    task = asyncio.create_task(world.process())
    async with asyncio.timeout(1):  # until the slow ones have started and the others ended
        await asyncio.gather(
            *(s.started.wait() if s.name in cancelled else s.ended.wait() for s in systems)
        )
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(name for kind, name in log if kind == "cancelled") == cancelled
    assert errors == []
    assert world.ticks == 0


async def test_closing_an_unfinished_tick_closes_the_system_it_waits_on() -> None:
    """Closing a process() coroutine while a group's system waits runs that system's cleanup,
    which still sees the contextvars the system set."""
    world = World()
    never = asyncio.get_running_loop().create_future()
    cleaned: list[str] = []

    async def waits(world: World) -> None:
        VAR.set("waiting")
        try:
            await never
        finally:
            cleaned.append(VAR.get())

    world.register_system(Recorder("quick", []), 0)
    world.register_system(Doing("waits", waits), 0)
    tick = world.process()
    assert tick.send(None) is never  # the tick waits on what the system waits on
    tick.close()
    assert cleaned == ["waiting"]


class Halt(BaseException):
    """A BaseException that is not an Exception, as KeyboardInterrupt is."""


@pytest.mark.parametrize("halts_first", [True, False])
async def test_a_base_exception_from_a_group_system_escapes_process(halts_first: bool) -> None:
    """A system of a group raising a BaseException (not an Exception) ends the tick with it,
    bare or in a BaseExceptionGroup, and is not reported as a failure."""
    world = World()
    errors = collect_errors(world)

    async def halts(world: World) -> None:
        raise Halt

    systems: list[System] = [Doing("halts", halts), Recorder("waits", [], sleep=0.01)]
    for system in systems if halts_first else systems[::-1]:
        world.register_system(system, 0)
    with pytest.raises((Halt, BaseExceptionGroup)) as caught:
        await world.process()
    escaped = caught.value
    if isinstance(escaped, BaseExceptionGroup):
        [escaped] = escaped.exceptions
    assert isinstance(escaped, Halt)
    assert errors == []
    assert world.ticks == 0


@pytest.mark.parametrize("suspends", [False, True])
async def test_changes_to_a_group_during_its_tick_take_effect_next_tick(suspends: bool) -> None:
    """A system that removes its later sibling and registers a newcomer at its own priority
    mid-tick leaves this tick's group as it was; the next tick runs the changed group."""
    world = World()
    log: list[tuple[str, str]] = []
    sibling = Recorder("sibling", log)
    newcomer = Recorder("newcomer", log)

    async def reshuffle(world: World) -> None:
        if sibling in world.systems:
            world.remove_system(sibling)
            world.register_system(newcomer, 0)
        if suspends:
            await asyncio.sleep(0)

    world.register_system(Doing("reshuffles", reshuffle), 0)
    world.register_system(sibling, 0)
    await world.process()
    assert log == [("start", "sibling"), ("end", "sibling")]
    log.clear()
    await world.process()
    assert log == [("start", "newcomer"), ("end", "newcomer")]


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


# -- copying a world's systems ----------------------------------------------------------------


async def test_copied_systems_run_in_the_same_order_and_groups() -> None:
    """A world given another's systems runs them at the same priorities, equal ones together."""
    template = World()
    log: list[tuple[str, str]] = []
    template.register_system(Recorder("late", log), 10)
    template.register_system(Recorder("a", log, sleep=0.02), 1)
    template.register_system(Recorder("b", log, sleep=0.02), 1)
    copy = World()
    copy.copy_systems_from(template)
    assert copy.systems == template.systems
    await copy.process()
    assert log[:2] == [("start", "a"), ("start", "b")]  # together, before either ends
    assert log[-2:] == [("start", "late"), ("end", "late")]


def test_copied_systems_change_independently_of_the_original() -> None:
    """Registering or removing a system in either world leaves the other's as it was."""
    log: list[tuple[str, str]] = []
    first, second, third = Recorder("1", log), Recorder("2", log), Recorder("3", log)
    template = World()
    template.register_system(first, 0)
    template.register_system(second, 5)
    copy = World()
    copy.copy_systems_from(template)
    copy.remove_system(first)
    copy.register_system(third, 1)
    template.register_system(Recorder("4", log), 9)
    assert [s.name for s in template.systems] == ["1", "2", "4"]  # type: ignore[attr-defined]
    assert [s.name for s in copy.systems] == ["3", "2"]  # type: ignore[attr-defined]
    with pytest.raises(DuplicateSystemError):
        copy.register_system(second, 7)


def test_copying_systems_into_a_world_that_has_some_is_refused() -> None:
    """Copying would silently drop or double systems: the message says what to do instead."""
    template = World()
    template.register_system(Recorder("a", []), 0)
    busy = World()
    busy.register_system(Recorder("b", []), 0)
    with pytest.raises(InvalidSystemError, match="needs a world with no systems"):
        busy.copy_systems_from(template)
    with pytest.raises(TypeError, match="takes a World"):
        World().copy_systems_from(object())  # type: ignore[arg-type]

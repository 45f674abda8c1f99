"""Runner: ticks until each watched entity is terminal (per entity), a predicate, or max_ticks."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from ecs_core import (
    EntityId,
    EntityNotFoundError,
    Runner,
    StopReason,
    TerminalComponent,
    World,
)


@dataclass(slots=True)
class Countdown:
    ticks_left: int


class CountdownSystem:
    """Decrements every Countdown; at zero the entity gets TerminalComponent("done")."""

    async def process(self, world: World) -> None:
        for entity, (countdown,) in world.query(Countdown, exclude=(TerminalComponent,)):
            countdown.ticks_left -= 1
            if countdown.ticks_left <= 0:
                world.add_component(entity, TerminalComponent(reason="done"))


def world_with_countdowns(*ticks: int) -> tuple[World, list[EntityId]]:
    world = World()
    world.register_system(CountdownSystem())
    return world, [world.create_entity(Countdown(n)) for n in ticks]


async def test_runs_until_every_watched_entity_is_terminal() -> None:
    """Watching entities finishing after 1 and 3 ticks runs exactly 3 ticks."""
    world, (fast, slow) = world_with_countdowns(1, 3)
    result = await Runner().run(world, until=[fast, slow], max_ticks=100)
    assert result.reason is StopReason.TERMINATED
    assert result.ticks == 3
    assert result.terminals == {fast: TerminalComponent("done"), slow: TerminalComponent("done")}
    assert result.finished
    assert result.pending == ()


async def test_termination_is_per_entity_not_any_terminal_anywhere() -> None:
    """A terminal on an unwatched entity does not stop a run watching another one."""
    world, (fast, slow) = world_with_countdowns(1, 4)
    world.create_entity(TerminalComponent(reason="stray, from the start"))
    result = await Runner().run(world, until=slow, max_ticks=100)
    assert result.ticks == 4
    assert set(result.terminals) == {slow}
    assert world.has_component(fast, TerminalComponent)


async def test_watching_only_the_fast_entity_stops_while_others_still_run() -> None:
    """until=[fast] stops after fast finishes even though slow is not terminal yet."""
    world, (fast, slow) = world_with_countdowns(2, 50)
    result = await Runner().run(world, until=[fast], max_ticks=100)
    assert result.ticks == 2
    assert not world.has_component(slow, TerminalComponent)


async def test_max_ticks_ends_the_run_with_that_reason_and_lists_the_unfinished() -> None:
    """Hitting max_ticks reports MAX_TICKS, the ticks run, and which watched entities remain."""
    world, (fast, slow) = world_with_countdowns(1, 50)
    result = await Runner().run(world, until=[fast, slow], max_ticks=5)
    assert result.reason is StopReason.MAX_TICKS
    assert result.ticks == 5
    assert result.pending == (slow,)
    assert set(result.terminals) == {fast}
    assert not result.finished


async def test_a_goal_already_met_runs_zero_ticks() -> None:
    """If the watched entity is already terminal, no tick runs."""
    world = World()
    e = world.create_entity(TerminalComponent(reason="born finished"))
    result = await Runner().run(world, until=e, max_ticks=10)
    assert result.ticks == 0
    assert result.reason is StopReason.TERMINATED
    assert world.ticks == 0


async def test_a_predicate_until_stops_when_it_becomes_true() -> None:
    """until=callable is checked before each tick."""
    world, _ = world_with_countdowns(100)
    result = await Runner().run(world, until=lambda w: w.ticks >= 7, max_ticks=100)
    assert result.reason is StopReason.CONDITION_MET
    assert result.ticks == 7


async def test_a_watched_entity_deleted_before_terminating_is_reported() -> None:
    """Deletion ends the wait for that entity and the result names it as deleted."""
    world, (doomed, other) = world_with_countdowns(100, 2)

    class Reaper:
        async def process(self, world: World) -> None:
            if world.ticks == 0:
                world.delete_entity(doomed)

    world.register_system(Reaper(), 1)
    result = await Runner().run(world, until=[doomed, other], max_ticks=100)
    assert result.reason is StopReason.ENTITY_DELETED
    assert result.deleted == (doomed,)
    assert set(result.terminals) == {other}
    assert result.ticks == 2


async def test_max_ticks_alone_runs_that_many_ticks() -> None:
    """Without until, the runner simply runs max_ticks ticks."""
    world, _ = world_with_countdowns(100)
    result = await Runner().run(world, max_ticks=3)
    assert (result.reason, result.ticks, world.ticks) == (StopReason.MAX_TICKS, 3, 3)


async def test_the_runners_default_budget_applies_unless_overridden() -> None:
    """Runner(max_ticks=2) caps runs that do not pass their own max_ticks."""
    world, (slow,) = world_with_countdowns(100)
    runner = Runner(max_ticks=2)
    assert (await runner.run(world, until=slow)).ticks == 2
    assert (await runner.run(world, until=slow, max_ticks=4)).ticks == 4


async def test_the_runner_yields_to_the_event_loop_between_ticks() -> None:
    """Other tasks make progress during a run whose systems never await."""
    world = World()
    seen: list[bool] = []
    flag = asyncio.Event()

    class Watcher:
        async def process(self, world: World) -> None:
            seen.append(flag.is_set())

    world.register_system(Watcher())
    setter = asyncio.get_running_loop().call_soon(flag.set)
    await Runner().run(world, max_ticks=3)
    setter.cancel()
    assert seen == [False, True, True]


async def test_a_run_that_could_never_stop_is_refused() -> None:
    """No until and no max_ticks is a usage error with the fix in the message."""
    with pytest.raises(ValueError, match=r"never stop.*until=.*max_ticks="):
        await Runner().run(World())


@pytest.mark.parametrize("bad", [-1, True, 2.5])
def test_max_ticks_must_be_a_non_negative_int(bad: object) -> None:
    """Negative, bool and float budgets are rejected."""
    with pytest.raises(ValueError, match="non-negative int"):
        Runner(max_ticks=bad)  # type: ignore[arg-type]


async def test_watching_an_entity_that_is_not_alive_raises() -> None:
    """until=<deleted or unknown id> is a mistake reported before any tick runs."""
    world = World()
    e = world.create_entity()
    world.delete_entity(e)
    with pytest.raises(EntityNotFoundError, match=rf"not alive: \[{e}\]"):
        await Runner().run(world, until=[e], max_ticks=5)
    assert world.ticks == 0

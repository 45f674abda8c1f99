"""ecs_core vs esper 3.x: the same workloads, side by side in one process.

Run:  .venv/bin/python benchmarks/ecs_vs_esper.py [--quick]

Each workload does identical work in both libraries — the timed code is the same loop body,
only the library calls differ — and the two are measured alternately, repeat by repeat, so
drift on a shared machine hits both. Component instances are built outside the timed region
so the numbers measure the ECS, not dataclass construction. Reported: the median of many
repeats, and the ratio ecs_core/esper (below 1.0 means ecs_core is faster).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import esper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ecs_core import EntityId, World

N = 10_000
RARE = 50
CHANGES = 20


@dataclass(slots=True)
class Pos:
    x: float = 0.0
    y: float = 0.0


@dataclass(slots=True)
class Vel:
    x: float = 1.0
    y: float = 0.5


@dataclass(slots=True)
class Rare:
    n: float = 1.0


@dataclass(slots=True)
class Tag:
    pass


_world_names = itertools.count()


def fresh_esper() -> str:
    """Switch esper to a brand-new world context and return its name."""
    name = f"bench-{next(_world_names)}"
    esper.switch_world(name)
    return name


def drop_esper(name: str) -> None:
    esper.switch_world("default")
    esper.delete_world(name)


# -- workloads ------------------------------------------------------------------------------
#
# Each `setup_*` returns a `Pair`: for each library a `prepare` step (untimed; e.g. make esper's
# world current, or build a fresh empty world) and a `run` step (timed: one sample).

Step = Callable[[], None]


@dataclass
class Side:
    run: Step
    prepare: Step = lambda: None


@dataclass
class Pair:
    ecs: Side
    esper: Side
    teardown: Step = lambda: None


def setup_create() -> Pair:
    pairs = [(Pos(), Vel()) for _ in range(N)]
    worlds: list[World] = []
    esper_names: list[str] = []

    def ecs_prepare() -> None:
        worlds[:] = [World()]

    def ecs_run() -> None:
        create = worlds[0].create_entity
        for pos, vel in pairs:
            create(pos, vel)

    def esper_prepare() -> None:
        for name in esper_names:
            drop_esper(name)
        esper_names[:] = [fresh_esper()]

    def esper_run() -> None:
        create = esper.create_entity
        for pos, vel in pairs:
            create(pos, vel)

    def teardown() -> None:
        for name in esper_names:
            drop_esper(name)

    return Pair(Side(ecs_run, ecs_prepare), Side(esper_run, esper_prepare), teardown)


def populate(rare: int = 0) -> tuple[World, str, list[EntityId], list[int]]:
    """An ecs_core world and an esper world holding the same N entities (Pos, Vel [, Rare])."""
    world = World()
    name = fresh_esper()
    ecs_ids = []
    esp_ids = []
    every = N // rare if rare else 0
    for i in range(N):
        extra = (Rare(),) if every and i % every == 0 else ()
        ecs_ids.append(world.create_entity(Pos(), Vel(), *extra))
        esp_ids.append(esper.create_entity(Pos(), Vel(), *(Rare() for _ in extra)))
    return world, name, ecs_ids, esp_ids


def setup_warm() -> Pair:
    world, name, _, _ = populate()

    def ecs_run() -> None:
        for _, (p, v) in world.query(Pos, Vel):
            p.x += v.x
            p.y += v.y

    def esper_run() -> None:
        for _, (p, v) in esper.get_components(Pos, Vel):
            p.x += v.x
            p.y += v.y

    ecs_run()
    esper_run()
    return Pair(
        Side(ecs_run), Side(esper_run, lambda: esper.switch_world(name)), lambda: drop_esper(name)
    )


RARE_FRAMES = 20  # frames per sample, so the timer's own cost is negligible


def setup_rare() -> Pair:
    world, name, _, _ = populate(rare=RARE)
    assert len(world.query(Pos, Rare)) == RARE
    assert len(esper.get_components(Pos, Rare)) == RARE

    def ecs_run() -> None:
        for _ in range(RARE_FRAMES):
            for _, (p, r) in world.query(Pos, Rare):
                p.x += r.n

    def esper_run() -> None:
        for _ in range(RARE_FRAMES):
            for _, (p, r) in esper.get_components(Pos, Rare):
                p.x += r.n

    return Pair(
        Side(ecs_run), Side(esper_run, lambda: esper.switch_world(name)), lambda: drop_esper(name)
    )


def setup_dynamic(changed: type) -> Pair:
    """Each frame: remove `changed` from 10 entities, add it back (20 changes), then query."""
    world, name, ecs_ids, esp_ids = populate()
    half = CHANGES // 2
    if changed is Tag:  # give every other entity a Tag so there is one to remove
        for e in ecs_ids[::2]:
            world.add_component(e, Tag())
        for e in esp_ids[::2]:
            esper.add_component(e, Tag())
    ecs_cursor = itertools.cycle(range(0, N, 2))
    esp_cursor = itertools.cycle(range(0, N, 2))
    spare = [changed() for _ in range(half)]
    ecs_picks: list[EntityId] = []
    esp_picks: list[int] = []

    def ecs_prepare() -> None:
        ecs_picks[:] = [ecs_ids[next(ecs_cursor)] for _ in range(half)]

    def ecs_run() -> None:
        for e in ecs_picks:
            world.remove_component(e, changed)
        for e, c in zip(ecs_picks, spare, strict=True):
            world.add_component(e, c)
        for _, (p, v) in world.query(Pos, Vel):
            p.x += v.x
            p.y += v.y

    def esper_prepare() -> None:
        esper.switch_world(name)
        esp_picks[:] = [esp_ids[next(esp_cursor)] for _ in range(half)]

    def esper_run() -> None:
        for e in esp_picks:
            esper.remove_component(e, changed)
        for e, c in zip(esp_picks, spare, strict=True):
            esper.add_component(e, c)
        for _, (p, v) in esper.get_components(Pos, Vel):
            p.x += v.x
            p.y += v.y

    for prepare, run in ((ecs_prepare, ecs_run), (esper_prepare, esper_run)):
        prepare()
        run()
    return Pair(
        Side(ecs_run, ecs_prepare), Side(esper_run, esper_prepare), lambda: drop_esper(name)
    )


def measure(setup: Callable[[], Pair], repeats: int) -> tuple[float, float]:
    """Median µs per sample for (ecs_core, esper), sampling the two alternately.

    The garbage collector is off while a sample runs and a full collection precedes every
    sample, so neither library pays for the other's garbage; which library goes first
    alternates, because the one right after a collection starts with colder CPU caches.
    """
    pair = setup()
    samples: tuple[list[int], list[int]] = ([], [])
    sides = ((pair.ecs, samples[0]), (pair.esper, samples[1]))
    clock = time.perf_counter_ns
    gc.collect()
    gc.freeze()  # the setup's objects: per-sample collections then only walk what samples made
    gc.disable()
    try:
        for i in range(repeats):
            for side, out in sides if i % 2 == 0 else sides[::-1]:
                side.prepare()
                gc.collect()
                run = side.run
                start = clock()
                run()
                out.append(clock() - start)
    finally:
        gc.enable()
        gc.unfreeze()
        pair.teardown()
    return statistics.median(samples[0]) / 1000, statistics.median(samples[1]) / 1000


# -- ticks of 10 no-op systems --------------------------------------------------------------


class NoOp:
    async def process(self, world: World) -> None:
        return None


class EsperNoOp(esper.Processor):
    def process(self) -> None:
        return None


def tick_us(same_priority: bool, ticks: int) -> float:
    world = World()
    for i in range(10):
        world.register_system(NoOp(), 0 if same_priority else i)

    async def go() -> float:
        for _ in range(50):
            await world.process()
        samples = []
        for _ in range(5):
            start = time.perf_counter_ns()
            for _ in range(ticks):
                await world.process()
            samples.append((time.perf_counter_ns() - start) / ticks / 1000)
        return statistics.median(samples)

    return asyncio.run(go())


def esper_tick_us(ticks: int) -> float:
    name = fresh_esper()
    for i in range(10):
        esper.add_processor(EsperNoOp(), i)
    samples = []
    for _ in range(5):
        start = time.perf_counter_ns()
        for _ in range(ticks):
            esper.process()
        samples.append((time.perf_counter_ns() - start) / ticks / 1000)
    drop_esper(name)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repeats: a smoke run")
    args = parser.parse_args()
    scale = 0.1 if args.quick else 1.0

    def reps(n: int) -> int:
        return max(3, int(n * scale))

    workloads: list[tuple[str, Callable[[], tuple[float, float]], float]] = [
        (f"create {N:,} entities (Pos, Vel)", lambda: measure(setup_create, reps(40)), 1.0),
        (f"warm query + update (Pos, Vel) @ {N:,}", lambda: measure(setup_warm, reps(300)), 1.0),
        (
            f"rare query (Pos, Rare): {RARE} of {N:,}, x{RARE_FRAMES}",
            lambda: measure(setup_rare, reps(300)),
            1.0,
        ),
        (
            f"dynamic frame: {CHANGES} changes to Vel + query",
            lambda: measure(lambda: setup_dynamic(Vel), reps(150)),
            0.5,
        ),
        (
            f"dynamic frame: {CHANGES} changes to Tag + query",
            lambda: measure(lambda: setup_dynamic(Tag), reps(150)),
            0.5,
        ),
    ]
    print(f"ecs_core vs esper {esper.__version__} — Python {sys.version.split()[0]}, medians")
    header = f"{'workload':<46} {'ecs_core µs':>12} {'esper µs':>12} {'ratio':>7}  target"
    print(header)
    print("-" * len(header))
    missed = 0
    for label, run, target in workloads:
        ours, theirs = run()
        ratio = ours / theirs
        ok = ratio <= target
        missed += not ok
        flag = "ok" if ok else "MISSED"
        print(f"{label:<46} {ours:>12.1f} {theirs:>12.1f} {ratio:>7.2f}  ≤{target} {flag}")
    ticks = 500 if args.quick else 5000
    print()
    print("10 no-op systems, µs per tick:")
    print(f"  ecs_core, 10 distinct priorities (awaited in turn):  {tick_us(False, ticks):8.2f}")
    print(f"  ecs_core, one priority (one asyncio.TaskGroup):      {tick_us(True, ticks):8.2f}")
    print(f"  esper (synchronous processors, for reference):       {esper_tick_us(ticks):8.2f}")
    if missed:
        print(f"\n{missed} workload(s) missed their target.")


if __name__ == "__main__":
    main()

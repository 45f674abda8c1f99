"""ecs_core vs esper 3.x: the same workloads, side by side, medians and ratios.

Run:  .venv/bin/python benchmarks/ecs_vs_esper.py [--quick] [--ticks]

Fairness rules:
* The timed code is the same loop body for both libraries; only the library calls differ.
  esper's `get_components` returns a list, ecs_core's `query` a tuple: both loops iterate it
  and update a field, so both do the same work per entity.
* Component instances are built outside the timed region, so the numbers measure the ECS,
  not dataclass construction. The garbage collector is off while a sample runs.
* The two libraries are sampled alternately (ABBA) in one process, so drift on a shared
  machine hits both.
* Each workload runs in four fresh interpreters — two building ecs_core's data first, two
  building esper's first — and their samples are pooled. Memory left behind by
  earlier work otherwise hands whichever library allocates first the scattered free blocks,
  which shows up as a few percent on cache-bound loops.

Reported: the median of the pooled samples per library, and the ratio ecs_core/esper
(below 1.0 means ecs_core is faster). Then the fixed cost of a tick of 10 no-op systems: at one
shared priority, at distinct priorities, with the first of a shared group suspending once, and
esper's, sampled in rotation in one event loop; the shared case's target is ≤ 3× esper.
`--ticks` prints only that table.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import esper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ecs_core import EntityId, World

N = 10_000
RARE = 50
CHANGES = 20
RARE_FRAMES = 20  # frames per rare-query sample, so the timer's own cost is negligible


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


ESPER_FIRST = False  # set per child process: which library builds its data first

_world_names = itertools.count()


def fresh_esper() -> str:
    """Switch esper to a brand-new world context and return its name."""
    name = f"bench-{next(_world_names)}"
    esper.switch_world(name)
    return name


def drop_esper(name: str) -> None:
    esper.switch_world("default")
    esper.delete_world(name)


def in_order(ecs_step: Callable[[], object], esper_step: Callable[[], object]) -> None:
    """Run the two libraries' setup steps in this process's build order."""
    for step in (esper_step, ecs_step) if ESPER_FIRST else (ecs_step, esper_step):
        step()


# -- workloads --------------------------------------------------------------------------------
#
# Each `setup_*` returns a `Pair`: per library a `prepare` step (untimed: e.g. make esper's
# world current, or build a fresh empty world) and a `run` step (timed: one sample).

Step = Callable[[], None]


def _nothing() -> None:
    return None


@dataclass
class Side:
    run: Step
    prepare: Step = _nothing


@dataclass
class Pair:
    ecs: Side
    esper: Side
    teardown: Step = _nothing
    esper_names: list[str] = field(default_factory=list)


def setup_create(live_query: bool = False) -> Pair:
    """Create N (Pos, Vel) entities in an empty world.

    With `live_query`, a (Pos, Vel) query is cached beforehand and run once afterwards: in a
    running world systems query every tick, so creation pays ecs_core's incremental upkeep
    and esper's next query pays its full rebuild; this counts both.
    """
    pairs = [(Pos(), Vel()) for _ in range(N)]
    worlds: list[World] = []
    pair = Pair(Side(_nothing), Side(_nothing))

    def ecs_prepare() -> None:
        worlds[:] = [World()]
        if live_query:
            worlds[0].query(Pos, Vel)

    def ecs_run() -> None:
        world = worlds[0]
        create = world.create_entity
        for pos, vel in pairs:
            create(pos, vel)
        if live_query:
            for _, (p, v) in world.query(Pos, Vel):
                p.x += v.x
                p.y += v.y

    def esper_prepare() -> None:
        for name in pair.esper_names:
            drop_esper(name)
        pair.esper_names[:] = [fresh_esper()]
        if live_query:
            esper.get_components(Pos, Vel)

    def esper_run() -> None:
        create = esper.create_entity
        for pos, vel in pairs:
            create(pos, vel)
        if live_query:
            for _, (p, v) in esper.get_components(Pos, Vel):
                p.x += v.x
                p.y += v.y

    def teardown() -> None:
        for name in pair.esper_names:
            drop_esper(name)

    pair.ecs = Side(ecs_run, ecs_prepare)
    pair.esper = Side(esper_run, esper_prepare)
    pair.teardown = teardown
    return pair


def populate(rare: int = 0) -> tuple[World, str, list[EntityId], list[int]]:
    """An ecs_core world and an esper world holding the same N entities (Pos, Vel [, Rare])."""
    world = World()
    name = fresh_esper()
    ecs_ids: list[EntityId] = []
    esp_ids: list[int] = []
    every = N // rare if rare else 0
    for i in range(N):
        extra = every and i % every == 0
        in_order(
            lambda extra=extra: ecs_ids.append(
                world.create_entity(Pos(), Vel(), *((Rare(),) if extra else ()))
            ),
            lambda extra=extra: esp_ids.append(
                esper.create_entity(Pos(), Vel(), *((Rare(),) if extra else ()))
            ),
        )
    return world, name, ecs_ids, esp_ids


def setup_warm() -> Pair:
    """Query (Pos, Vel) over N entities and update Pos; nothing changed since the last frame."""
    world, name, _, _ = populate()

    def ecs_run() -> None:
        for _, (p, v) in world.query(Pos, Vel):
            p.x += v.x
            p.y += v.y

    def esper_run() -> None:
        for _, (p, v) in esper.get_components(Pos, Vel):
            p.x += v.x
            p.y += v.y

    in_order(ecs_run, esper_run)  # builds both caches
    return Pair(
        Side(ecs_run),
        Side(esper_run, lambda: esper.switch_world(name)),
        lambda: drop_esper(name),
    )


def setup_rare() -> Pair:
    """Query (Pos, Rare) — RARE of N entities have Rare — and update; RARE_FRAMES frames."""
    world, name, _, _ = populate(rare=RARE)

    def ecs_run() -> None:
        for _ in range(RARE_FRAMES):
            for _, (p, r) in world.query(Pos, Rare):
                p.x += r.n

    def esper_run() -> None:
        for _ in range(RARE_FRAMES):
            for _, (p, r) in esper.get_components(Pos, Rare):
                p.x += r.n

    in_order(ecs_run, esper_run)
    assert len(world.query(Pos, Rare)) == len(esper.get_components(Pos, Rare)) == RARE
    return Pair(
        Side(ecs_run),
        Side(esper_run, lambda: esper.switch_world(name)),
        lambda: drop_esper(name),
    )


def setup_dynamic(changed: type) -> Pair:
    """Each frame: remove `changed` from 10 entities and add it back (20 changes), then query."""
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

    in_order(lambda: (ecs_prepare(), ecs_run()), lambda: (esper_prepare(), esper_run()))
    return Pair(
        Side(ecs_run, ecs_prepare), Side(esper_run, esper_prepare), lambda: drop_esper(name)
    )


def measure(pair: Pair, repeats: int) -> tuple[list[int], list[int]]:
    """ns per sample for (ecs_core, esper), sampled alternately, ABBA."""
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
    return samples


# label, setup, repeats (full run), target ratio
WORKLOADS: dict[str, tuple[str, Callable[[], Pair], int, float]] = {
    "create": (f"create {N:,} entities (Pos, Vel)", setup_create, 160, 1.0),
    "create-live": (
        f"create {N:,} with (Pos, Vel) query live + query",
        lambda: setup_create(live_query=True),
        100,
        1.0,
    ),
    "warm": (f"warm query + update (Pos, Vel) @ {N:,}", setup_warm, 1000, 1.0),
    "rare": (f"rare query (Pos, Rare): {RARE} of {N:,}, x{RARE_FRAMES}", setup_rare, 1000, 1.0),
    "dynamic": (
        f"dynamic frame: {CHANGES} changes to Vel + query",
        lambda: setup_dynamic(Vel),
        200,
        0.5,
    ),
    "dynamic-tag": (
        f"dynamic frame: {CHANGES} changes to Tag + query",
        lambda: setup_dynamic(Tag),
        200,
        0.5,
    ),
}


# -- ticks of 10 no-op systems --------------------------------------------------------------
#
# A tick's fixed cost: 10 systems that do nothing. ecs_core runs systems sharing a priority
# concurrently, so "one priority" is the case to watch; esper's processors are plain calls.
# The cases are sampled in rotation in one event loop, so drift on a shared machine hits all.

SYSTEMS = 10
SHARED_TARGET = 3.0  # one shared priority: at most this many times esper's tick


class NoOp:
    async def process(self, world: World) -> None:
        return None


class YieldsOnce:
    """Suspends once per tick, as a system waiting on I/O would (the slow path)."""

    async def process(self, world: World) -> None:
        await asyncio.sleep(0)


class EsperNoOp(esper.Processor):
    def process(self) -> None:
        return None


def tick_world(priorities: list[int], first: type = NoOp) -> World:
    world = World()
    for i, priority in enumerate(priorities):
        world.register_system(first() if i == 0 else NoOp(), priority)
    return world


TICK_CASES: dict[str, tuple[str, Callable[[], World]]] = {
    "shared": (
        "ecs_core, one priority (concurrent)",
        lambda: tick_world([0] * SYSTEMS),
    ),
    "distinct": (
        f"ecs_core, {SYSTEMS} distinct priorities",
        lambda: tick_world(list(range(SYSTEMS))),
    ),
    "shared-suspends": (
        "ecs_core, one priority, 1st awaits sleep(0)",
        lambda: tick_world([0] * SYSTEMS, first=YieldsOnce),
    ),
}


def measure_ticks(ticks: int, rounds: int) -> dict[str, list[float]]:
    """µs per tick, one sample of `ticks` ticks per case per round, cases in rotation."""
    name = fresh_esper()
    for i in range(SYSTEMS):
        esper.add_processor(EsperNoOp(), i)
    worlds = {key: make() for key, (_, make) in TICK_CASES.items()}
    samples: dict[str, list[float]] = {key: [] for key in [*worlds, "esper"]}
    clock = time.perf_counter_ns

    async def one(key: str) -> float:
        if key == "esper":
            process = esper.process
            start = clock()
            for _ in range(ticks):
                process()
            return (clock() - start) / ticks / 1000
        tick = worlds[key].process
        start = clock()
        for _ in range(ticks):
            await tick()
        return (clock() - start) / ticks / 1000

    async def go() -> None:
        keys = list(samples)
        for key in keys:  # warm up
            await one(key)
        gc.collect()
        gc.disable()
        try:
            for round_ in range(rounds):
                shift = round_ % len(keys)
                for key in keys[shift:] + keys[:shift]:
                    gc.collect()
                    samples[key].append(await one(key))
        finally:
            gc.enable()

    try:
        asyncio.run(go())
    finally:
        drop_esper(name)
    return samples


def print_ticks(samples: dict[str, list[float]]) -> bool:
    """Print the tick table; return whether the shared-priority target was met."""
    esper_us = statistics.median(samples["esper"])
    rounds = len(samples["esper"])
    print(f"\n{SYSTEMS} no-op systems, µs per tick (median of {rounds} interleaved samples):")
    print(f"  {'case':<46} {'µs/tick':>8} {'× esper':>8}")
    for key, (label, _) in TICK_CASES.items():
        us = statistics.median(samples[key])
        print(f"  {label:<46} {us:>8.2f} {us / esper_us:>8.2f}")
    print(f"  {f'esper {esper.__version__} (synchronous processors)':<46} {esper_us:>8.2f}")
    ratio = statistics.median(samples["shared"]) / esper_us
    met = ratio <= SHARED_TARGET
    verdict = "met" if met else "NOT met"
    print(f"  one priority / esper = {ratio:.2f}: target ≤ {SHARED_TARGET:g}× esper {verdict}")
    return met


# -- driver -----------------------------------------------------------------------------------


def child(workload: str, repeats: int, esper_first: bool) -> None:
    """Measure one workload in this (fresh) process and print the samples as JSON."""
    global ESPER_FIRST
    ESPER_FIRST = esper_first
    _, setup, _, _ = WORKLOADS[workload]
    ecs_ns, esper_ns = measure(setup(), repeats)
    print(json.dumps({"ecs": ecs_ns, "esper": esper_ns}))


def run_child(workload: str, repeats: int, esper_first: bool) -> tuple[list[int], list[int]]:
    command = [sys.executable, __file__, "--child", workload, "--repeats", str(repeats)]
    if esper_first:
        command.append("--esper-first")
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    return result["ecs"], result["esper"]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repeats: a smoke run")
    parser.add_argument("--ticks", action="store_true", help="only the 10-system tick table")
    parser.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--esper-first", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeats, args.esper_first)
        return

    scale = 0.1 if args.quick else 1.0
    print(f"ecs_core vs esper {esper.__version__} — Python {sys.version.split()[0]}")
    if args.ticks:
        rounds = 10 if args.quick else 60
        sys.exit(0 if print_ticks(measure_ticks(ticks=500, rounds=rounds)) else 1)
    header = (
        f"{'workload (median per sample)':<48} {'ecs_core µs':>11} {'esper µs':>10} "
        f"{'ratio':>6}  target"
    )
    print(header)
    print("-" * len(header))
    missed = 0
    for name, (label, _, repeats, target) in WORKLOADS.items():
        per_process = max(4, int(repeats * scale) // 4)
        ecs_ns: list[int] = []
        esper_ns: list[int] = []
        for esper_first in (False, True, False, True):
            ours, theirs = run_child(name, per_process, esper_first)
            ecs_ns += ours
            esper_ns += theirs
        ecs_us = statistics.median(ecs_ns) / 1000
        esper_us = statistics.median(esper_ns) / 1000
        ratio = ecs_us / esper_us
        ok = ratio <= target
        missed += not ok
        verdict = "ok" if ok else "MISSED"
        print(f"{label:<48} {ecs_us:>11.1f} {esper_us:>10.1f} {ratio:>6.2f}  ≤{target} {verdict}")
    missed += not print_ticks(measure_ticks(ticks=500, rounds=10 if args.quick else 60))
    if missed:
        print(f"\n{missed} target(s) missed.")


if __name__ == "__main__":
    main()

"""How close the tool DAG gets to its critical path, beside running the calls one by one.

Every tool call sleeps 100 ms, so the best possible execution-phase wall time is the critical
path (the longest chain of dependent calls). The table shows the median wall time of
`ConcurrentExecutor` and `SequentialExecutor`, the critical path, and their ratio. "same DAG by
hand" runs the plan's graph written directly in asyncio (an Event per call, no validation, no
results), interleaved with each measured run: the floor the event loop's timer and the machine's
load allow, so wall minus that floor is what the executor itself costs.
Target: ConcurrentExecutor wall / critical path <= 1.03.

A large plan follows: 1,000 calls, 100 independent chains of 10 (`--dag-chains`,
`--dag-layers`), each call after the first of its chain taking the previous one's result as a
`{step_N_result}` argument, every call sleeping 20 ms (critical path 200 ms), with
`max_concurrency` as wide as the chains. `ConcurrentExecutor` and the same DAG by hand run
interleaved; for both the table gives the median wall time over the critical path and the
median process CPU time per call. The executor's own CPU per call is the difference of the two
divided by the calls. Targets: wall / critical path <= 1.03 and <= 8 µs CPU per call.

Last, many whole agent runs at once (`--runs`, 0 to skip).

    python benchmarks/critical_path.py [--repeats N] [--dag-chains 100] [--dag-layers 10]
                                       [--dag-repeats 21] [--runs 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from _table import median_ms, print_table

from pes_agent import AgentProps, configure_logging, create_agent
from pes_agent.execution.dag import CallGraph
from pes_agent.execution.executors import ConcurrentExecutor, SequentialExecutor
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext, Executor
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines
from pes_agent.tools import ToolRegistry, tool

CALL_S = 0.1
CHAIN_CALL_S = 0.02
TARGET_RATIO = 1.03
TARGET_CPU_US = 8.0


@tool
async def fetch(key: str) -> dict[str, Any]:
    """Fetch a value after 100 ms."""
    await asyncio.sleep(CALL_S)
    return {"key": key}


@tool
async def combine(left: Any, right: Any = None) -> dict[str, Any]:
    """Combine one or two earlier results after 100 ms."""
    await asyncio.sleep(CALL_S)
    return {"left": left, "right": right}


@tool
async def step(chain: int, previous: Any = None) -> int:
    """Take one 20 ms step of a chain, after the previous one."""
    await asyncio.sleep(CHAIN_CALL_S)
    return chain


@dataclass(frozen=True, slots=True)
class Scenario:
    """A plan to execute and the best wall time any executor could reach on it."""

    name: str
    calls: tuple[ParsedToolCall, ...]
    critical_path_ms: float
    call_s: float = CALL_S

    @property
    def sequential_ms(self) -> float:
        return len(self.calls) * self.call_s * 1000


def _call(call_id: str, tool_name: str, **arguments: Any) -> ParsedToolCall:
    depends_on = arguments.pop("depends_on", [])
    return ParsedToolCall(
        call_id=call_id, tool_name=tool_name, arguments=arguments, depends_on=depends_on
    )


SCENARIOS = (
    # 1, 2 and 5 independent; 3 needs 1; 4 needs 2 and 3 -> critical path 1 -> 3 -> 4.
    Scenario(
        name="DAG of 5 (1,2 | 3<-1 | 4<-2,3 | 5)",
        calls=(
            _call("call_1", "fetch", key="a"),
            _call("call_2", "fetch", key="b"),
            _call("call_3", "combine", left="{step_1_result.key}"),
            _call("call_4", "combine", left="{step_2_result}", right="<step_3_result>"),
            _call("call_5", "fetch", key="e"),
        ),
        critical_path_ms=3 * CALL_S * 1000,
    ),
    Scenario(
        name="8 independent",
        calls=tuple(_call(f"call_{i}", "fetch", key=str(i)) for i in range(1, 9)),
        critical_path_ms=CALL_S * 1000,
    ),
)


def chains_scenario(chains: int, layers: int) -> Scenario:
    """`chains` independent chains of `layers` calls, written layer by layer: call k of a chain
    takes call k-1 of the same chain as its `previous` argument."""
    calls = []
    for layer in range(layers):
        for chain in range(chains):
            arguments: dict[str, Any] = {"chain": chain}
            if layer:
                arguments["previous"] = f"{{step_{(layer - 1) * chains + chain + 1}_result}}"
            calls.append(_call(f"call_{layer * chains + chain + 1}", "step", **arguments))
    return Scenario(
        name=f"{len(calls):,} calls: {layers} layers x {chains} chains of "
        f"{CHAIN_CALL_S * 1000:.0f} ms",
        calls=tuple(calls),
        critical_path_ms=layers * CHAIN_CALL_S * 1000,
        call_s=CHAIN_CALL_S,
    )


def _context(max_concurrency: int = 8, max_tool_calls: int = 32) -> ExecutionContext:
    registry = ToolRegistry([fetch, combine, step])
    return ExecutionContext(
        thread_id="bench",
        trace_id="bench",
        tools=registry.as_mapping(),
        enabled_tools=frozenset(registry.names),
        max_concurrency=max_concurrency,
        max_tool_calls=max_tool_calls,
    )


async def _by_hand(dependencies: Sequence[Sequence[int]], call_s: float) -> None:
    """The same DAG written directly in asyncio (an Event per call): the floor to compare with.

    `dependencies[i]` lists the indices call i waits for, known when the DAG is written, so
    none of the executor's work (parsing placeholders, building the graph) is in the floor."""
    done = [asyncio.Event() for _ in dependencies]

    async def node(index: int) -> None:
        for dependency in dependencies[index]:
            await done[dependency].wait()
        await asyncio.sleep(call_s)
        done[index].set()

    await asyncio.gather(*(node(index) for index in range(len(dependencies))))


async def _sleeps_alone(chains: int, layers: int, repeats: int) -> Samples:
    """`chains` tasks each sleeping `layers` times CHAIN_CALL_S: the timers and nothing else."""

    async def chain() -> None:
        for _ in range(layers):
            await asyncio.sleep(CHAIN_CALL_S)

    async def run() -> None:
        await asyncio.gather(*(chain() for _ in range(chains)))

    samples = Samples([], [])
    await run()
    for _ in range(repeats):
        await _timed(run, samples)
    return samples


@dataclass(slots=True)
class Samples:
    """Wall and process CPU times (ns) of repeated runs of one contender."""

    wall: list[int]
    cpu: list[int]


async def _timed(run: Callable[[], Awaitable[object]], samples: Samples) -> None:
    gc.collect()
    cpu_started = time.process_time_ns()
    started = time.perf_counter_ns()
    await run()
    samples.wall.append(time.perf_counter_ns() - started)
    samples.cpu.append(time.process_time_ns() - cpu_started)


async def _measure(
    executor: Executor, scenario: Scenario, ctx: ExecutionContext, repeats: int
) -> tuple[Samples, Samples]:
    """Wall and CPU times of the executor and of the hand-written DAG, interleaved so machine
    noise hits both alike; one warm-up run of each first."""
    calls = scenario.calls

    async def execute() -> None:
        results = await executor.execute(calls, ctx)
        failed = [r for r in results if r.status != "success"]
        if failed or len(results) != len(calls):
            reason = failed[0].error if failed else f"{len(results)} results"
            raise RuntimeError(f"benchmark plan failed: {reason}")

    dependencies = CallGraph.build(calls).dependencies

    async def by_hand() -> None:
        await _by_hand(dependencies, scenario.call_s)

    await execute()
    await by_hand()
    ours, bare = Samples([], []), Samples([], [])
    for _ in range(repeats):
        await _timed(execute, ours)
        await _timed(by_hand, bare)
    return ours, bare


# --- section: tool DAG vs critical path --------------------------------------------------


async def critical_path_section(repeats: int, sequential_repeats: int) -> None:
    """Print median execution wall time of both executors against each scenario's critical path."""
    ctx = _context()
    rows: list[list[object]] = []
    for scenario in SCENARIOS:
        for executor, runs in (
            (ConcurrentExecutor(), repeats),
            (SequentialExecutor(), sequential_repeats),
        ):
            ours, bare = await _measure(executor, scenario, ctx, runs)
            wall = median_ms(ours.wall)
            ratio = wall / scenario.critical_path_ms
            is_dag = isinstance(executor, ConcurrentExecutor)
            rows.append(
                [
                    scenario.name,
                    type(executor).__name__,
                    runs,
                    wall,
                    scenario.critical_path_ms,
                    median_ms(bare.wall),
                    scenario.sequential_ms,
                    ratio,
                    ("ok" if ratio <= TARGET_RATIO else "MISSED") if is_dag else "-",
                ]
            )
    print_table(
        f"Tool DAG: execution wall time vs critical path ({CALL_S * 1000:.0f} ms per call; "
        f"target wall/critical path <= {TARGET_RATIO})",
        [
            "scenario",
            "executor",
            "runs",
            "median wall ms",
            "critical path ms",
            "same DAG by hand ms",
            "sequential sum ms",
            "wall/critical path",
            "target",
        ],
        rows,
    )


# --- section: a large DAG: many chains side by side ------------------------------------


@dataclass(frozen=True, slots=True)
class LargeDagResult:
    """Medians of the large scenario: wall over critical path and CPU µs per call, each."""

    calls: int
    ratio: float
    by_hand_ratio: float
    cpu_us_per_call: float
    by_hand_cpu_us_per_call: float

    @property
    def executor_cpu_us_per_call(self) -> float:
        return self.cpu_us_per_call - self.by_hand_cpu_us_per_call


async def large_dag_section(chains: int, layers: int, repeats: int) -> LargeDagResult:
    """Print ConcurrentExecutor beside the hand-written DAG on `chains` x `layers` calls."""
    scenario = chains_scenario(chains, layers)
    count = len(scenario.calls)
    ctx = _context(max_concurrency=chains, max_tool_calls=count)
    ours, bare = await _measure(ConcurrentExecutor(), scenario, ctx, repeats)
    sleeps = await _sleeps_alone(chains, layers, repeats)
    critical = scenario.critical_path_ms
    result = LargeDagResult(
        calls=count,
        ratio=median_ms(ours.wall) / critical,
        by_hand_ratio=median_ms(bare.wall) / critical,
        cpu_us_per_call=median_ms(ours.cpu) * 1000 / count,
        by_hand_cpu_us_per_call=median_ms(bare.cpu) * 1000 / count,
    )
    ratio_met = "met" if result.ratio <= TARGET_RATIO else "NOT met"
    print_table(
        f"{scenario.name} (critical path {critical:.0f} ms, max_concurrency {chains}; "
        f"{repeats} runs each, interleaved)",
        ["executor", "median wall ms", "wall/critical path", "CPU µs/call", "target", "met?"],
        [
            [
                "ConcurrentExecutor",
                median_ms(ours.wall),
                result.ratio,
                f"{result.cpu_us_per_call:.1f}",
                f"wall/critical path <= {TARGET_RATIO}",
                ratio_met,
            ],
            [
                "same DAG by hand",
                median_ms(bare.wall),
                result.by_hand_ratio,
                f"{result.by_hand_cpu_us_per_call:.1f}",
                "-",
                "-",
            ],
            [
                "the sleeps alone",
                median_ms(sleeps.wall),
                median_ms(sleeps.wall) / critical,
                f"{median_ms(sleeps.cpu) * 1000 / count:.1f}",
                "-",
                "-",
            ],
        ],
    )
    print(
        "(the sleeps alone: each chain's calls as plain asyncio.sleep() in one task, no DAG, "
        "no Event: the floor the event loop's timers allow on this machine)"
    )
    extra = result.executor_cpu_us_per_call
    print(
        f"executor CPU per call (ConcurrentExecutor - by hand): {extra:.1f} µs; "
        f"target <= {TARGET_CPU_US:g} µs -> {'met' if extra <= TARGET_CPU_US else 'NOT met'}"
    )
    return result


# --- section: many agent runs at once ------------------------------------------------------

RUNS_TARGET_S = 1.5


def _agent_plan(request: LLMRequest) -> str:
    if request.phase == "planning":
        return plan_lines(plan_call(1, "noop", key=request.thread_id), intent="look up one key")
    return "Fetched."


@tool
async def noop(key: str) -> str:
    """Return the key."""
    return key


async def _agent_wave(runs: int, latency_s: float) -> tuple[float, list[str]]:
    model = ScriptedProvider([_agent_plan], repeat=True, latency_s=latency_s)
    agent = create_agent(provider=model, tools=[noop])
    started = time.perf_counter()
    results = await asyncio.gather(
        *(agent.process(AgentProps("fetch", f"thread-{i}")) for i in range(runs))
    )
    wall = time.perf_counter() - started
    await agent.aclose()
    return wall, [r.metadata.status for r in results]


async def agent_runs_section(runs: int, latency_s: float) -> None:
    """Print wall time and peak memory of `runs` concurrent agent runs on distinct threads."""
    await _agent_wave(50, latency_s)  # warm-up: imports, pydantic schema caches
    gc.collect()
    wall, statuses = await _agent_wave(runs, latency_s)
    failed = [s for s in statuses if s != "success"]
    if failed:
        raise RuntimeError(f"{len(failed)} of {runs} runs did not succeed: {failed[:3]}")
    gc.collect()
    tracemalloc.start()
    traced_wall, _ = await _agent_wave(runs, latency_s)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    floor_s = 2 * latency_s
    print_table(
        f"{runs} concurrent agent runs on distinct threads, model latency {latency_s * 1000:.0f} ms"
        f" per call (2 calls + 1 tool call a run; target wall < {RUNS_TARGET_S} s)",
        ["runs", "wall s", "model-latency floor s", "peak traced MiB", "max RSS MiB", "target"],
        [
            [
                runs,
                wall,
                floor_s,
                peak / 2**20,
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "ok" if wall < RUNS_TARGET_S else "MISSED",
            ]
        ],
    )
    print(f"(with tracemalloc on, the same wave took {traced_wall:.3f} s)")


def main(argv: Sequence[str] | None = None) -> None:
    """Run every section and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=9, help="timed runs per DAG measurement")
    parser.add_argument(
        "--sequential-repeats", type=int, default=3, help="timed runs per sequential measurement"
    )
    parser.add_argument("--dag-chains", type=int, default=100, help="chains of the large DAG")
    parser.add_argument("--dag-layers", type=int, default=10, help="calls in each chain")
    parser.add_argument(
        "--dag-repeats", type=int, default=21, help="timed runs of the large DAG, each"
    )
    parser.add_argument(
        "--runs", type=int, default=1000, help="concurrent agent runs (0 skips them)"
    )
    parser.add_argument("--latency", type=float, default=0.05, help="model latency, seconds")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    asyncio.run(critical_path_section(args.repeats, args.sequential_repeats))
    large = asyncio.run(large_dag_section(args.dag_chains, args.dag_layers, args.dag_repeats))
    if args.runs:
        asyncio.run(agent_runs_section(args.runs, args.latency))
    print(
        f"critical_path: {large.calls} calls wall/critical path {large.ratio:.3f} "
        f"(by hand {large.by_hand_ratio:.3f}), executor CPU {large.executor_cpu_us_per_call:.1f} "
        f"µs/call (ConcurrentExecutor {large.cpu_us_per_call:.1f}, "
        f"by hand {large.by_hand_cpu_us_per_call:.1f})"
    )


if __name__ == "__main__":
    main()

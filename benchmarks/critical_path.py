"""How close the tool DAG gets to its critical path, beside running the calls one by one.

Every tool call sleeps 100 ms, so the best possible execution-phase wall time is the critical
path (the longest chain of dependent calls). The table shows the median wall time of
`ConcurrentExecutor` and `SequentialExecutor`, the critical path, and their ratio. "same DAG by
hand" runs the plan's graph written directly in asyncio (an Event per call, no validation, no
results), interleaved with each measured run: the floor the event loop's timer and the machine's
load allow, so wall minus that floor is what the executor itself costs.
Target: ConcurrentExecutor wall / critical path <= 1.03.

    python benchmarks/critical_path.py [--repeats N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
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
from pes_agent.testing import ScriptedProvider
from pes_agent.tools import ToolRegistry, tool

CALL_S = 0.1
TARGET_RATIO = 1.03


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


@dataclass(frozen=True, slots=True)
class Scenario:
    """A plan to execute and the best wall time any executor could reach on it."""

    name: str
    calls: tuple[ParsedToolCall, ...]
    critical_path_ms: float

    @property
    def sequential_ms(self) -> float:
        return len(self.calls) * CALL_S * 1000


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


def _context() -> ExecutionContext:
    registry = ToolRegistry([fetch, combine])
    return ExecutionContext(
        thread_id="bench",
        trace_id="bench",
        tools=registry.as_mapping(),
        enabled_tools=frozenset(registry.names),
        max_concurrency=8,
    )


async def _by_hand(calls: Sequence[ParsedToolCall]) -> None:
    """The same DAG written directly in asyncio (an Event per call): the floor to compare with."""
    graph = CallGraph.build(calls)
    done = [asyncio.Event() for _ in calls]

    async def node(index: int) -> None:
        for dependency in graph.dependencies[index]:
            await done[dependency].wait()
        await asyncio.sleep(CALL_S)
        done[index].set()

    await asyncio.gather(*(node(index) for index in range(len(calls))))


async def _timed(run: Callable[[], Awaitable[object]]) -> int:
    gc.collect()
    started = time.perf_counter_ns()
    await run()
    return time.perf_counter_ns() - started


async def _measure(
    executor: Executor, calls: Sequence[ParsedToolCall], ctx: ExecutionContext, repeats: int
) -> tuple[list[int], list[int]]:
    """Wall times (ns) of the executor and of the hand-written DAG, interleaved so machine
    noise hits both alike; one warm-up run first."""

    async def execute() -> None:
        results = await executor.execute(calls, ctx)
        failed = [r for r in results if r.status != "success"]
        if failed:
            raise RuntimeError(f"benchmark plan failed: {failed[0].error}")

    await execute()
    ours: list[int] = []
    bare: list[int] = []
    for _ in range(repeats):
        ours.append(await _timed(execute))
        bare.append(await _timed(lambda: _by_hand(calls)))
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
            ours, bare = await _measure(executor, scenario.calls, ctx, runs)
            wall = median_ms(ours)
            ratio = wall / scenario.critical_path_ms
            is_dag = isinstance(executor, ConcurrentExecutor)
            rows.append(
                [
                    scenario.name,
                    type(executor).__name__,
                    runs,
                    wall,
                    scenario.critical_path_ms,
                    median_ms(bare),
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


# --- section: many agent runs at once ------------------------------------------------------

RUNS_TARGET_S = 1.5


def _agent_plan(request: LLMRequest) -> str:
    if request.phase == "planning":
        return json.dumps(
            {
                "intent": "look up one key",
                "plan": "1. fetch it",
                "toolCalls": [
                    {"callId": "c1", "toolName": "noop", "arguments": {"key": request.thread_id}}
                ],
            }
        )
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
    parser.add_argument("--runs", type=int, default=1000, help="concurrent agent runs")
    parser.add_argument("--latency", type=float, default=0.05, help="model latency, seconds")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    asyncio.run(critical_path_section(args.repeats, args.sequential_repeats))
    asyncio.run(agent_runs_section(args.runs, args.latency))


if __name__ == "__main__":
    main()

"""How close the tool DAG gets to its critical path, beside running the calls one by one.

Every tool call sleeps 100 ms, so the best possible execution-phase wall time is the critical
path (the longest chain of dependent calls). The table shows the median wall time of
`ConcurrentExecutor` and `SequentialExecutor`, the critical path, and their ratio.
Target: ConcurrentExecutor wall / critical path <= 1.03.

    python benchmarks/critical_path.py [--repeats N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from _table import median_ms, print_table

from pes_agent.execution import ConcurrentExecutor, SequentialExecutor
from pes_agent.plans import ParsedToolCall
from pes_agent.tools import ToolRegistry, tool
from pes_agent.typing import ExecutionContext, Executor

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


async def _measure(
    executor: Executor, calls: Sequence[ParsedToolCall], ctx: ExecutionContext, repeats: int
) -> list[int]:
    """Execution-phase wall times in nanoseconds, one per repeat (after one warm-up run)."""
    await executor.execute(calls, ctx)
    samples: list[int] = []
    for _ in range(repeats):
        gc.collect()
        started = time.perf_counter_ns()
        results = await executor.execute(calls, ctx)
        samples.append(time.perf_counter_ns() - started)
        failed = [r for r in results if r.status != "success"]
        if failed:
            raise RuntimeError(f"benchmark plan failed: {failed[0].error}")
    return samples


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
            wall = median_ms(await _measure(executor, scenario.calls, ctx, runs))
            ratio = wall / scenario.critical_path_ms
            is_dag = isinstance(executor, ConcurrentExecutor)
            rows.append(
                [
                    scenario.name,
                    type(executor).__name__,
                    runs,
                    wall,
                    scenario.critical_path_ms,
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
            "sequential sum ms",
            "wall/critical path",
            "target",
        ],
        rows,
    )


# lead: agent-run section goes here


def main(argv: Sequence[str] | None = None) -> None:
    """Run every section and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=9, help="timed runs per DAG measurement")
    parser.add_argument(
        "--sequential-repeats", type=int, default=3, help="timed runs per sequential measurement"
    )
    args = parser.parse_args(argv)
    asyncio.run(critical_path_section(args.repeats, args.sequential_repeats))


if __name__ == "__main__":
    main()

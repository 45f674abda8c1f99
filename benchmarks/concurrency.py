"""Many agent runs at once: wall time, CPU, peak memory and garbage collection.

N runs start together (`asyncio.gather` of `agent.process`), each on a thread of its own, on a
scripted model that waits `--latency-ms` before each answer: a plan with one tool call, then
the answer, so 2 model calls and 1 tool call a run, and the model-latency floor is twice the
latency whatever N. Storage is `memory` or SQLite (a temporary file).

Each configuration runs in a fresh child process, since peak RSS (`ru_maxrss`) is a process's
high-water mark: the child warms its agent up (imports, pydantic's caches) on a wave of 100
runs, then measures one wave of N runs on the same agent and reports to the parent, which
prints the table. Per configuration: wall time and CPU time (`time.process_time`) of the wave;
RSS before the wave (the high-water mark after the warm-up) and the peak; the time spent in
garbage collection during the wave, in all generations and in generation 2 alone (timed by a
`gc.callbacks` hook), and how many generation-2 collections ran. With `--repeats R` the
configurations take turns R times and each figure is the median. Every run must succeed with
its tool called, else the script stops with the reason and exits 1.
Targets at 10,000 runs: memory wall < 5 s and peak RSS < 300 MiB; SQLite wall < 12 s.

    python benchmarks/concurrency.py [--runs 1000,10000] [--storage memory,sqlite]
                                     [--latency-ms 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from _table import print_table

from pes_agent import AgentCore, AgentProps, configure_logging, create_agent, tool
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines

StorageName = Literal["memory", "sqlite"]
ANSWER = "Looked it up."
WARMUP_RUNS = 100
# (storage, runs) -> (wall s below, peak RSS MiB below or None); absent means no target.
TARGETS: dict[tuple[str, int], tuple[float, float | None]] = {
    ("memory", 10_000): (5.0, 300.0),
    ("sqlite", 10_000): (12.0, None),
}


@dataclass(frozen=True, slots=True)
class WaveResult:
    """What one child measured on its wave of concurrent runs."""

    storage: str
    runs: int
    succeeded: int
    wall_s: float
    cpu_s: float
    rss_start_mib: float
    rss_peak_mib: float
    gc_s: float
    gc_gen2_s: float
    gen2_collections: int
    collections: int


class GCTimer:
    """Time every garbage collection while installed, in total and for generation 2."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self.gen2_s = 0.0
        self.collections = 0
        self.gen2_collections = 0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        elapsed = time.perf_counter() - self._started
        self.total_s += elapsed
        self.collections += 1
        if info["generation"] == 2:
            self.gen2_s += elapsed
            self.gen2_collections += 1

    def __enter__(self) -> GCTimer:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


tool_calls_made = 0


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    global tool_calls_made
    tool_calls_made += 1
    return key


def _respond(request: LLMRequest) -> str:
    if request.phase == "planning":
        return plan_lines(plan_call(1, "lookup", key=request.thread_id), intent="look it up")
    return ANSWER


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


async def _wave(agent: AgentCore, runs: int, prefix: str) -> list[str]:
    """Run `runs` agent runs at once, each on a thread of its own; return the failures."""
    results = await asyncio.gather(
        *(agent.process(AgentProps("look it up", f"{prefix}-{i}")) for i in range(runs))
    )
    return [
        f"{r.metadata.thread_id}: status {r.metadata.status}, {r.metadata.tool_calls} tool "
        f"call(s), {r.metadata.llm_calls} model call(s), error {r.metadata.error!r}, "
        f"answer {r.response.content[:40]!r}"
        for r in results
        if r.metadata.status != "success"
        or r.metadata.tool_calls != 1
        or r.metadata.llm_calls != 2
        or r.response.content != ANSWER
    ]


async def measure_wave(storage: StorageName, runs: int, latency_s: float) -> WaveResult:
    """Warm the agent up, then time one wave of `runs` concurrent runs in this process."""
    global tool_calls_made
    model = ScriptedProvider([_respond], repeat=True, latency_s=latency_s)
    with tempfile.TemporaryDirectory(prefix="pes-concurrency-") as folder:
        spec = "memory" if storage == "memory" else f"sqlite:///{Path(folder) / 'bench.db'}"
        async with create_agent(provider=model, tools=[lookup], storage=spec) as agent:
            failures = await _wave(agent, WARMUP_RUNS, "warm")
            gc.collect()
            tool_calls_made = 0
            rss_start = _peak_rss_mib()
            with GCTimer() as timer:
                cpu_started, started = time.process_time(), time.perf_counter()
                failures += await _wave(agent, runs, "run")
                wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if failures or tool_calls_made != runs:
        raise SystemExit(
            f"{storage}, {runs} runs (after {WARMUP_RUNS} to warm up): {len(failures)} failed, "
            f"the tool ran {tool_calls_made} time(s) for {runs} runs; first failures: "
            f"{failures[:3]}"
        )
    return WaveResult(
        storage=storage,
        runs=runs,
        succeeded=runs,
        wall_s=wall,
        cpu_s=cpu,
        rss_start_mib=rss_start,
        rss_peak_mib=_peak_rss_mib(),
        gc_s=timer.total_s,
        gc_gen2_s=timer.gen2_s,
        gen2_collections=timer.gen2_collections,
        collections=timer.collections,
    )


def run_child(storage: str, runs: int, latency_ms: float) -> WaveResult:
    """Measure one configuration in a fresh interpreter; its last stdout line is the result."""
    command = [sys.executable, __file__, "--child", storage, "--runs", str(runs)]
    command += ["--latency-ms", str(latency_ms)]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        sys.stderr.write(completed.stdout + completed.stderr)
        raise SystemExit(
            f"the {storage} child with {runs} runs failed (exit {completed.returncode})"
        )
    return WaveResult(**json.loads(lines[-1]))


def median_result(results: Sequence[WaveResult]) -> WaveResult:
    """One configuration's repeats in one: each figure's median (the lower of the middle two)."""
    numbers = {
        f.name: statistics.median_low([getattr(r, f.name) for r in results])
        for f in fields(WaveResult)
        if f.name not in ("storage", "runs", "succeeded")
    }
    first = results[0]
    succeeded = min(r.succeeded for r in results)
    return WaveResult(storage=first.storage, runs=first.runs, succeeded=succeeded, **numbers)


def verdict(result: WaveResult) -> str:
    """'met', 'NOT met' or '-' (no target) for one configuration."""
    target = TARGETS.get((result.storage, result.runs))
    if target is None:
        return "-"
    wall_limit, rss_limit = target
    met = result.wall_s < wall_limit and (rss_limit is None or result.rss_peak_mib < rss_limit)
    return "met" if met else "NOT met"


def target_text(storage: str, runs: int) -> str:
    target = TARGETS.get((storage, runs))
    if target is None:
        return "-"
    wall_limit, rss_limit = target
    return f"wall < {wall_limit:g} s" + ("" if rss_limit is None else f", RSS < {rss_limit:g} MiB")


def main(argv: Sequence[str] | None = None) -> None:
    """Measure every configuration in a child process each and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", default="1000,10000", help="comma-separated run counts")
    parser.add_argument("--storage", default="memory,sqlite", help="memory, sqlite or both")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="model latency per call")
    parser.add_argument("--repeats", type=int, default=3, help="turns of every configuration")
    parser.add_argument("--child", choices=["memory", "sqlite"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    if args.child:
        runs = int(args.runs)
        result = asyncio.run(measure_wave(args.child, runs, args.latency_ms / 1000))
        print(json.dumps(asdict(result)))
        return
    counts = [int(n) for n in args.runs.split(",")]
    storages = args.storage.split(",")
    unknown = set(storages) - {"memory", "sqlite"}
    if unknown:
        parser.error(f"unknown storage {sorted(unknown)}; use memory, sqlite or memory,sqlite")
    configurations = [(storage, runs) for runs in counts for storage in storages]
    samples: dict[tuple[str, int], list[WaveResult]] = {c: [] for c in configurations}
    started = time.perf_counter()
    for _ in range(args.repeats):
        for storage, runs in configurations:  # in turns, so machine noise hits all alike
            samples[storage, runs].append(run_child(storage, runs, args.latency_ms))
    results = [median_result(samples[c]) for c in configurations]
    floor_s = 2 * args.latency_ms / 1000
    print_table(
        f"Concurrent agent runs, one thread each, model latency {args.latency_ms:g} ms a call "
        f"(2 model calls + 1 tool call a run; floor {floor_s:.2f} s); a fresh process each, "
        f"median of {args.repeats}",
        [
            "storage",
            "runs",
            "wall s",
            "CPU s",
            "RSS before MiB",
            "peak RSS MiB",
            "GC s",
            "GC gen-2 s",
            "gen-2 collections",
            "all collections",
            "target",
            "met?",
        ],
        [
            [
                r.storage,
                r.runs,
                r.wall_s,
                r.cpu_s,
                round(r.rss_start_mib),
                round(r.rss_peak_mib),
                r.gc_s,
                r.gc_gen2_s,
                r.gen2_collections,
                r.collections,
                target_text(r.storage, r.runs),
                verdict(r),
            ]
            for r in results
        ],
    )
    print(f"({time.perf_counter() - started:.0f} s in all)")
    print(
        "concurrency: "
        + "; ".join(
            f"{r.storage} {r.runs} runs ok {r.succeeded} wall {r.wall_s:.2f} s "
            f"cpu {r.cpu_s:.2f} s rss {r.rss_peak_mib:.0f} MiB gc {r.gc_s:.2f} s "
            f"gen2 {r.gc_gen2_s:.2f} s"
            for r in results
        )
    )


if __name__ == "__main__":
    main()

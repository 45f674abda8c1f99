"""Framework overhead of one agent run: pes-agent beside pydantic-ai, in one process.

Both agents make the same no-op tool calls (3, 30 or 300 of them, all independent: one plan
for pes-agent, one model response for pydantic-ai, cycling over three tools) and give the same
final answer on a zero-latency scripted model, so what is measured is the framework itself.
Each size is measured with async tools and with sync tools (which both frameworks hand to a
thread). pes-agent runs with its defaults (`max_concurrency=8`) but for `max_tool_calls`,
raised to 300; its scripted plan streams in 64-character chunks, pydantic-ai's `FunctionModel`
answers in one piece. Runs of one size are interleaved, in an order shuffled afresh for each
round (seeded), so machine noise, and the garbage and cold caches one run leaves the next, hit
all alike; the table shows medians and the ratio pes-agent / pydantic-ai.
Targets: ratio <= 0.12 at 3 calls, <= 0.4 at 300.

Two more agents at 3 calls, the same as ours (async tools) but traced with
`pes_agent.otel.instrument` into an in-memory OpenTelemetry exporter (one through the SDK's
SimpleSpanProcessor, which exports each span as it ends, one through the BatchSpanProcessor
production setups use), run in the same rounds: their rows show what tracing costs.

Diagnostics of pes-agent's per-run cost follow: the observations one run records, by type; the
microseconds each extra tool call adds (the slope of the medians between 30 and 300 calls);
and the memory a run holds while in flight: `--in-flight K` runs (3 calls each) wait on a
model call that blocks until all K have arrived, and tracemalloc's current size before and
after, divided by K, is the KiB per run (once waiting on the planning call, once on the
synthesis call, after the tools ran), then what each finished run leaves behind in the
in-memory storage.

    python benchmarks/overhead.py [--runs N] [--runs-30 N] [--runs-300 N] [--in-flight K]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import random
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal

from _table import median_ms, print_table
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pes_agent import AgentCore, AgentProps, configure_logging, create_agent, tool
from pes_agent.otel import instrument
from pes_agent.providers.base import LLMRequest, ProviderEvent
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines
from pes_agent.tools.base import Tool

Mode = Literal["async", "sync"]
ANSWER = "All the tools ran."
TOOL_NAMES = ("noop_a", "noop_b", "noop_c")
SIZES = (3, 30, 300)
MODES: tuple[Mode, ...] = ("async", "sync")
TARGETS = {3: 0.12, 300: 0.4}  # calls -> highest ratio pes-agent / pydantic-ai
OTEL_TARGET = 0.30  # tracing adds at most 30% to a run
SEED = 23


def calls(count: int) -> list[tuple[str, str, int]]:
    """The plan's calls: (call id, tool name, argument), cycling over the three tools."""
    return [(f"call_{i}", TOOL_NAMES[i % 3], i) for i in range(1, count + 1)]


def pes_plan(count: int) -> str:
    """The plan as the planning prompt asks a model to write it (the compact protocol)."""
    return plan_lines(*(plan_call(x, name, x=x) for _, name, x in calls(count)), intent="tools")


def _noop(mode: Mode) -> Callable[[int], Any]:
    if mode == "sync":

        def noop(x: int) -> int:
            """Return x."""
            return x

        return noop

    async def anoop(x: int) -> int:
        """Return x."""
        return x

    return anoop


def pes_tools(mode: Mode) -> list[Tool]:
    return [tool(name=name)(_noop(mode)) for name in TOOL_NAMES]


def make_pes_agent(count: int, mode: Mode) -> AgentCore:
    model = ScriptedProvider([pes_plan(count), ANSWER], repeat=True, chunk_size=64)
    return create_agent(provider=model, tools=pes_tools(mode), max_tool_calls=max(SIZES))


def make_pydantic_ai_agent(count: int, mode: Mode) -> Agent[None, str]:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart(name, {"x": x}, tool_call_id=call_id)
                    for call_id, name, x in calls(count)
                ]
            )
        return ModelResponse(parts=[TextPart(ANSWER)])

    agent: Agent[None, str] = Agent(FunctionModel(respond))
    for name in TOOL_NAMES:
        agent.tool_plain(_noop(mode), name=name)
    return agent


def make_traced_agent(processor: type[SpanProcessor]) -> tuple[AgentCore, InMemorySpanExporter]:
    agent = make_pes_agent(3, "async")
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(processor(exporter))  # type: ignore[call-arg]
    instrument(agent, tracer_provider)
    return agent, exporter


Run = Callable[[int], Awaitable[None]]


def pes_run(agent: AgentCore, count: int) -> Run:
    async def run(i: int) -> None:
        result = await agent.process(AgentProps("go", f"t{i}"))
        if result.response.content != ANSWER or result.metadata.tool_calls != count:
            raise RuntimeError(f"pes-agent run failed: {result.metadata}")

    return run


def pydantic_ai_run(agent: Agent[None, str], count: int) -> Run:
    async def run(i: int) -> None:
        result = await agent.run("go")
        if result.output != ANSWER or result.usage.tool_calls != count:
            raise RuntimeError(f"pydantic-ai run failed: {result.output!r} {result.usage}")

    return run


async def measure(
    runs: dict[str, Run], repeats: int, warmups: int, every_100: Callable[[], None] | None = None
) -> dict[str, list[int]]:
    """Wall time (ns) of each run, `repeats` times each, interleaved in shuffled rounds."""
    for warmup in range(warmups):
        for run in runs.values():
            await run(-1 - warmup)
    gc.collect()
    samples: dict[str, list[int]] = {name: [] for name in runs}
    order = list(runs.items())
    shuffle = random.Random(SEED).shuffle
    for i in range(repeats):
        # Whichever agent runs right after pydantic-ai pays for the garbage and cold caches it
        # left (about 0.8 ms on a 3-call pes-agent run), so each round has a fresh order and
        # every agent follows every other as often. A rotation would not do: it keeps each
        # agent's predecessor. The check after each run is not timed.
        shuffle(order)
        for name, run in order:
            started = time.perf_counter_ns()
            await run(i)
            samples[name].append(time.perf_counter_ns() - started)
        if every_100 is not None and i % 100 == 99:
            every_100()
    return samples


# --- section: pes-agent vs pydantic-ai at 3, 30 and 300 calls ----------------------------


def _clearing(exporters: Sequence[InMemorySpanExporter]) -> Callable[[], None]:
    def clear() -> None:
        # A real exporter sends its spans away rather than piling them up.
        for exporter in exporters:
            exporter.clear()

    return clear


async def framework_section(
    runs_by_size: dict[int, int],
) -> tuple[dict[tuple[int, Mode], tuple[float, float]], dict[str, float]]:
    """Print the side-by-side table; return medians (pes, pydantic-ai) by size and mode, and
    the 3-call medians of the traced agents."""
    medians: dict[tuple[int, Mode], tuple[float, float]] = {}
    traced: dict[str, float] = {}
    rows: list[list[object]] = []
    for count, repeats in runs_by_size.items():
        contenders: dict[str, Run] = {}
        for mode in MODES:
            contenders[f"pes {mode}"] = pes_run(make_pes_agent(count, mode), count)
            contenders[f"pai {mode}"] = pydantic_ai_run(make_pydantic_ai_agent(count, mode), count)
        exporters: list[InMemorySpanExporter] = []
        if count == 3:
            for label, processor in (
                ("simple", SimpleSpanProcessor),
                ("batch", BatchSpanProcessor),
            ):
                agent, exporter = make_traced_agent(processor)
                contenders[f"otel {label}"] = pes_run(agent, count)
                exporters.append(exporter)

        warmups = 20 if count < 300 else 3
        samples = await measure(contenders, repeats, warmups, _clearing(exporters))
        by_name = {name: median_ms(ns) for name, ns in samples.items()}
        for mode in MODES:
            ours, theirs = by_name[f"pes {mode}"], by_name[f"pai {mode}"]
            medians[count, mode] = (ours, theirs)
            limit = TARGETS.get(count)
            rows.append(
                [
                    count,
                    mode,
                    repeats,
                    ours,
                    theirs,
                    ours / theirs,
                    "-" if limit is None else f"<= {limit}",
                    "-" if limit is None else ("met" if ours / theirs <= limit else "NOT met"),
                ]
            )
        traced.update({n[5:]: m for n, m in by_name.items() if n.startswith("otel ")})
    print_table(
        "One run, N no-op tool calls, zero-latency model: pes-agent vs pydantic-ai "
        "(medians, runs interleaved)",
        [
            "calls",
            "tools",
            "runs",
            "pes-agent ms",
            "pydantic-ai ms",
            "ratio pes/pydantic-ai",
            "target",
            "met?",
        ],
        rows,
    )
    return medians, traced


def otel_section(
    medians: dict[tuple[int, Mode], tuple[float, float]], traced: dict[str, float]
) -> None:
    """Print what tracing adds to a 3-call run (async tools)."""
    ours, theirs = medians[3, "async"]
    rows: list[list[object]] = [["pes-agent", ours, ours / theirs, 1.0]]
    rows += [[f"+ OTel, {n}", m, m / theirs, m / ours] for n, m in traced.items()]
    rows.append(["pydantic-ai", theirs, 1.0, theirs / ours])
    print_table(
        "Tracing a 3-call run (async tools), in the same rounds as above",
        ["framework", "median ms/run", "ratio vs pydantic-ai", "ratio vs pes-agent"],
        rows,
    )
    for name, median in traced.items():
        extra = median / ours - 1
        print(
            f"OTel tracing ({name} processor, in-memory exporter): {extra:+.0%} over "
            f"pes-agent untraced; target <= +{OTEL_TARGET:.0%} -> "
            f"{'met' if extra <= OTEL_TARGET else 'NOT met'}"
        )


# --- section: what one pes-agent run costs ----------------------------------------------


async def observations_per_run(count: int) -> collections.Counter[str]:
    """The observations one run of `count` calls records, counted by type."""
    async with make_pes_agent(count, "async") as agent:
        await agent.process(AgentProps("go", "counted"))
        observations = await agent.observations.get_observations("counted")
    return collections.Counter(str(o.type) for o in observations)


class GatedModel:
    """A scripted model whose calls of one phase wait until `gate` is set, so runs pile up."""

    name = "gated"
    model = "gated-model"

    def __init__(self, phase: str, expected: int) -> None:
        # keep_requests=0: only the runs' own memory should count, not the script's record.
        self._inner = ScriptedProvider(
            [pes_plan(3), ANSWER], repeat=True, chunk_size=64, keep_requests=0
        )
        self._phase = phase
        self._expected = expected
        self._arrived = 0
        self.gate = asyncio.Event()
        self.all_arrived = asyncio.Event()

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        if request.phase == self._phase and not self.gate.is_set():
            self._arrived += 1
            if self._arrived == self._expected:
                self.all_arrived.set()
            await self.gate.wait()
        async for event in self._inner.stream(request):
            yield event

    async def aclose(self) -> None:
        await self._inner.aclose()


async def live_per_run(phase: str, runs: int) -> tuple[float, float]:
    """KiB a run holds while waiting on its `phase` model call, and KiB a finished run leaves."""
    model = GatedModel(phase, runs)
    async with create_agent(provider=model, tools=pes_tools("async")) as agent:
        model.gate.set()
        for i in range(20):
            await agent.process(AgentProps("go", f"warm{i}"))
        model.gate.clear()
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            tasks = [
                asyncio.create_task(agent.process(AgentProps("go", f"live{i}")))
                for i in range(runs)
            ]
            await model.all_arrived.wait()
            gc.collect()
            in_flight = tracemalloc.get_traced_memory()[0] - before
            model.gate.set()
            failed = [t for t in await asyncio.gather(*tasks) if t.metadata.status != "success"]
            if failed:
                raise RuntimeError(f"{len(failed)} gated runs failed: {failed[0].metadata}")
            del tasks
            gc.collect()
            retained = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    return in_flight / runs / 1024, retained / runs / 1024


async def cost_section(
    medians: dict[tuple[int, Mode], tuple[float, float]], in_flight: int
) -> tuple[int, dict[Mode, float], dict[str, float]]:
    """Print the per-run diagnostics; return observations at 3 calls, µs per extra call by
    mode, and KiB per run in flight by the phase it waits on."""
    kinds = {count: await observations_per_run(count) for count in SIZES}
    names = sorted(set().union(*kinds.values()))
    rows: list[list[object]] = [[name, *(kinds[c][name] for c in SIZES)] for name in names]
    rows.append(["total", *(kinds[c].total() for c in SIZES)])
    print_table(
        "Observations one pes-agent run records, by type",
        ["type", *(f"{count} calls" for count in SIZES)],
        rows,
    )
    observed_at_3 = kinds[3].total()

    slope: dict[Mode, float] = {}
    rows = []
    span = 300 - 30
    for mode in MODES:
        if (30, mode) not in medians or (300, mode) not in medians:
            continue
        ours = (medians[300, mode][0] - medians[30, mode][0]) / span * 1000
        theirs = (medians[300, mode][1] - medians[30, mode][1]) / span * 1000
        slope[mode] = ours
        rows.append([mode, f"{ours:.0f}", f"{theirs:.0f}", ours / theirs])
    print_table(
        "Microseconds each extra tool call adds (slope of the medians, 30 -> 300 calls)",
        ["tools", "pes-agent µs/call", "pydantic-ai µs/call", "ratio"],
        rows,
    )

    rows = []
    in_flight_kib: dict[str, float] = {}
    for phase in ("planning", "synthesis"):
        live, retained = await live_per_run(phase, in_flight)
        in_flight_kib[phase] = live
        rows.append([f"waiting on its {phase} call", f"{live:.1f}", f"{retained:.1f}"])
    print_table(
        f"Memory per pes-agent run, {in_flight} runs of 3 calls at once (tracemalloc, in-memory "
        "storage)",
        ["run", "KiB live per run in flight", "KiB left per finished run"],
        rows,
    )
    return observed_at_3, slope, in_flight_kib


def main(argv: Sequence[str] | None = None) -> None:
    """Run every section and print its table; the last line sums them up."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=500, help="timed runs each at 3 calls")
    parser.add_argument("--runs-30", type=int, default=150, help="timed runs each at 30 calls")
    parser.add_argument("--runs-300", type=int, default=60, help="timed runs each at 300 calls")
    parser.add_argument("--in-flight", type=int, default=500, help="runs held in flight")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    runs_by_size = {3: args.runs, 30: args.runs_30, 300: args.runs_300}

    async def sections() -> None:
        medians, traced = await framework_section(runs_by_size)
        otel_section(medians, traced)
        observed, slope, live = await cost_section(medians, args.in_flight)
        ratios = ", ".join(
            f"{count} calls "
            + " ".join(f"{medians[count, m][0] / medians[count, m][1]:.2f} ({m})" for m in MODES)
            for count in SIZES
        )
        per_call = " ".join(f"{slope[m]:.0f} ({m})" for m in MODES)
        print(
            f"overhead: ratio {ratios}; µs per extra call {per_call}; "
            f"observations {observed}; KiB in flight {live['planning']:.0f} (planning) "
            f"{live['synthesis']:.0f} (synthesis)"
        )

    asyncio.run(sections())


if __name__ == "__main__":
    main()

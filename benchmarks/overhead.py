"""Framework overhead of one agent run: pes-agent beside pydantic-ai, in one process.

Both agents make the same 3 no-op tool calls and give the same final answer on a zero-latency
scripted model, so what is measured is the framework itself. Runs are interleaved in a
rotating order (so machine noise, and the garbage one run leaves the next, hit all alike); the
table shows medians and their ratios. Two more agents, the same as ours but traced with
`pes_agent.otel.instrument` into an in-memory OpenTelemetry exporter (one through the SDK's
SimpleSpanProcessor, which exports each span as it ends, one through the BatchSpanProcessor
production setups use), run in the same rotation: their rows show what tracing costs.

    python benchmarks/overhead.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time

from _table import median_ms, print_table
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pes_agent import AgentProps, configure_logging, create_agent, tool
from pes_agent.otel import instrument
from pes_agent.testing import ScriptedProvider

ANSWER = "All three tools ran."


@tool
async def noop_a(x: int) -> int:
    """Return x."""
    return x


@tool
async def noop_b(x: int) -> int:
    """Return x."""
    return x


@tool
async def noop_c(x: int) -> int:
    """Return x."""
    return x


PLAN = json.dumps(
    {
        "intent": "run three tools",
        "plan": "1. call each tool",
        "toolCalls": [
            {"callId": f"call_{i}", "toolName": name, "arguments": {"x": i}}
            for i, name in enumerate(("noop_a", "noop_b", "noop_c"), start=1)
        ],
    }
)


def make_pes_agent() -> tuple[object, ScriptedProvider]:
    model = ScriptedProvider([PLAN, ANSWER], repeat=True, chunk_size=64)
    return create_agent(provider=model, tools=[noop_a, noop_b, noop_c]), model


def make_pydantic_ai_agent() -> Agent[None, str]:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart(name, {"x": i}, tool_call_id=f"call_{i}")
                    for i, name in enumerate(("noop_a", "noop_b", "noop_c"), start=1)
                ]
            )
        return ModelResponse(parts=[TextPart(ANSWER)])

    agent: Agent[None, str] = Agent(FunctionModel(respond))

    @agent.tool_plain
    async def noop_a(x: int) -> int:
        """Return x."""
        return x

    @agent.tool_plain
    async def noop_b(x: int) -> int:
        """Return x."""
        return x

    @agent.tool_plain
    async def noop_c(x: int) -> int:
        """Return x."""
        return x

    return agent


def make_traced_agent(processor: type[SpanProcessor]) -> tuple[object, InMemorySpanExporter]:
    agent, _ = make_pes_agent()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(processor(exporter))  # type: ignore[call-arg]
    instrument(agent, tracer_provider)  # type: ignore[arg-type]
    return agent, exporter


async def measure(runs: int) -> dict[str, list[int]]:
    ours, _ = make_pes_agent()
    theirs = make_pydantic_ai_agent()
    simple, simple_spans = make_traced_agent(SimpleSpanProcessor)
    batch, batch_spans = make_traced_agent(BatchSpanProcessor)
    pes_agents = {"pes-agent": ours, "+ OTel, simple": simple, "+ OTel, batch": batch}
    samples: dict[str, list[int]] = {name: [] for name in [*pes_agents, "pydantic-ai"]}
    for warmup in range(20):
        for agent in pes_agents.values():
            result = await agent.process(AgentProps("go", f"w{warmup}"))  # type: ignore[attr-defined]
            assert result.response.content == ANSWER
            assert result.metadata.tool_calls == 3
        assert (await theirs.run("go")).output == ANSWER
    # a run span, two chat spans and three tool spans per traced run
    assert len(simple_spans.get_finished_spans()) == 20 * 6
    gc.collect()

    async def run_pes(name: str, i: int) -> None:
        await pes_agents[name].process(AgentProps("go", f"t{i}"))  # type: ignore[attr-defined]

    async def run_theirs(name: str, i: int) -> None:
        await theirs.run("go")

    rotation = [*((name, run_pes) for name in pes_agents), ("pydantic-ai", run_theirs)]
    for i in range(runs):
        # The order rotates: whichever agent runs right after pydantic-ai pays for the garbage
        # it left, so each takes every place in turn.
        shift = i % len(rotation)
        for name, run in rotation[shift:] + rotation[:shift]:
            start = time.perf_counter_ns()
            await run(name, i)
            samples[name].append(time.perf_counter_ns() - start)
        if i % 100 == 99:
            # A real exporter sends its spans away rather than piling them up.
            simple_spans.clear()
            batch_spans.clear()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    configure_logging("WARNING")
    samples = asyncio.run(measure(args.runs))
    medians = {name: median_ms(ns) for name, ns in samples.items()}
    ours, theirs = medians["pes-agent"], medians["pydantic-ai"]
    print_table(
        f"One run, 3 no-op tool calls, zero-latency model ({args.runs} runs each, interleaved)",
        ["framework", "median ms/run", "ratio vs pydantic-ai", "ratio vs pes-agent"],
        [[name, median, median / theirs, median / ours] for name, median in medians.items()],
    )
    print(f"target: ratio <= 0.5 -> {'met' if ours / theirs <= 0.5 else 'NOT met'}")
    for name in ("+ OTel, simple", "+ OTel, batch"):
        extra = medians[name] / ours - 1
        print(
            f"OTel tracing ({name[8:]} processor, in-memory exporter): {extra:+.0%} over "
            f"pes-agent untraced; target <= +30% -> {'met' if extra <= 0.30 else 'NOT met'}"
        )


if __name__ == "__main__":
    main()

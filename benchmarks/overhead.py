"""Framework overhead of one agent run: pes-agent beside pydantic-ai, in one process.

Both agents make the same 3 no-op tool calls and give the same final answer on a zero-latency
scripted model, so what is measured is the framework itself. Runs are interleaved (ours, theirs,
ours, ...) so machine noise hits both alike; the table shows medians and their ratio.

    python benchmarks/overhead.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time

from _table import median_ms, print_table
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pes_agent import AgentProps, configure_logging, create_agent, tool
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


async def measure(runs: int) -> tuple[list[int], list[int]]:
    ours, _ = make_pes_agent()
    theirs = make_pydantic_ai_agent()
    ours_ns: list[int] = []
    theirs_ns: list[int] = []
    for warmup in range(20):
        result = await ours.process(AgentProps("go", f"w{warmup}"))  # type: ignore[attr-defined]
        assert result.response.content == ANSWER
        assert result.metadata.tool_calls == 3
        assert (await theirs.run("go")).output == ANSWER
    gc.collect()
    for i in range(runs):
        start = time.perf_counter_ns()
        await ours.process(AgentProps("go", f"t{i}"))  # type: ignore[attr-defined]
        ours_ns.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        await theirs.run("go")
        theirs_ns.append(time.perf_counter_ns() - start)
    return ours_ns, theirs_ns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    configure_logging("WARNING")
    ours_ns, theirs_ns = asyncio.run(measure(args.runs))
    ours, theirs = median_ms(ours_ns), median_ms(theirs_ns)
    print_table(
        f"One run, 3 no-op tool calls, zero-latency model ({args.runs} runs each, interleaved)",
        ["framework", "median ms/run", "ratio vs pydantic-ai"],
        [["pes-agent", ours, ours / theirs], ["pydantic-ai", theirs, 1.0]],
    )
    print(f"target: ratio <= 0.5 -> {'met' if ours / theirs <= 0.5 else 'NOT met'}")


if __name__ == "__main__":
    main()

"""A custom planner and a custom executor, swapped in with `create_agent(planner=, executor=)`.

`KeywordPlanner` plans with regular expressions instead of a model call; `CachingExecutor`
wraps the default `ConcurrentExecutor` and answers repeated calls from a cache. Neither
subclasses anything: an object with the right `async` method is a Planner or an Executor.
The answer is still written by the model.

    python examples/custom_planner_executor.py [PROVIDER]   # e.g. openai:gpt-4o-mini

Without the provider's API key it says so and the answers come from a scripted model.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, Literal

from pes_agent import (
    AgentProps,
    ConcurrentExecutor,
    ExecutionContext,
    Executor,
    LLMProvider,
    LLMRequest,
    ParsedToolCall,
    Planner,
    PlanningContext,
    PlanningOutput,
    Tool,
    ToolContext,
    ToolResult,
    configure_logging,
    create_agent,
    tool,
)
from pes_agent.testing import ScriptedProvider


@tool
async def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city."""
    await asyncio.sleep(0.2)  # a slow API: worth caching
    return {"city": city, "celsius": 21}


@tool
def calculate(a: float, op: Literal["+", "-", "*", "/"], b: float) -> float:
    """Apply + - * or / to two numbers."""
    return {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[op]


class KeywordPlanner:
    """Plans without a model: a regular expression per tool, only for the enabled tools."""

    async def plan(self, ctx: PlanningContext) -> PlanningOutput:
        enabled = {schema.name for schema in ctx.tools}
        query = ctx.props.query
        calls: list[ParsedToolCall] = []
        if "get_weather" in enabled:
            for city in re.findall(r"weather in ([A-Z]\w+)", query):
                calls.append(
                    ParsedToolCall(call_id=city, tool_name="get_weather", arguments={"city": city})
                )
        if "calculate" in enabled:
            for a, op, b in re.findall(r"(\d+) *([-+*/]) *(\d+)", query):
                arguments = {"a": float(a), "op": op, "b": float(b)}
                calls.append(
                    ParsedToolCall(
                        call_id=f"{a}{op}{b}", tool_name="calculate", arguments=arguments
                    )
                )
        plan = "\n".join(f"{n}. {c.tool_name}({c.arguments})" for n, c in enumerate(calls, 1))
        return PlanningOutput(intent=f"Answer: {query}", plan=plan, tool_calls=calls)


class CachingExecutor:
    """Wraps another executor; a call seen before (same tool, same arguments) is not re-run."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.cache: dict[str, Any] = {}

    async def execute(
        self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext
    ) -> list[ToolResult]:
        tools = {name: _Cached(t, self.cache) for name, t in ctx.tools.items()}
        return await self.inner.execute(calls, dataclasses.replace(ctx, tools=tools))


class _Cached:
    """A tool that answers from the cache when it can (placeholders are already resolved)."""

    def __init__(self, tool: Tool, cache: dict[str, Any]) -> None:
        self.schema, self.timeout_s = tool.schema, getattr(tool, "timeout_s", None)
        self._tool, self._cache = tool, cache

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        key = self.schema.name + json.dumps(arguments, sort_keys=True)
        if key not in self._cache:
            self._cache[key] = await self._tool.execute(arguments, context)
        return self._cache[key]


def scripted_answer(request: LLMRequest) -> str:
    """The offline model's answer: the tool results it was given, in one line."""
    results = re.findall(r"— success\n(.*)", request.messages[-1].content)
    return "From the tools: " + "; ".join(results) if results else "Hello! No tools needed."


async def main(provider: str) -> None:
    configure_logging("WARNING")
    planner, executor = KeywordPlanner(), CachingExecutor(ConcurrentExecutor())
    # Protocols, not base classes: having the right method is all it takes.
    print(f"{isinstance(planner, Planner)=}, {isinstance(executor, Executor)=}")
    model: str | LLMProvider = provider
    key = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}.get(provider.split(":")[0])
    if key and not os.environ.get(key):
        print(f"[offline] {key} is not set: using a scripted model instead of {provider}")
        model = ScriptedProvider([scripted_answer], repeat=True)
    tools: list[Tool] = [get_weather, calculate]
    agent = create_agent(provider=model, tools=tools, planner=planner, executor=executor)
    async with agent:
        for query in ["What's the weather in Paris?", "12 * 7, and the weather in Paris?", "Hi!"]:
            result = await agent.process(AgentProps(query, "custom"))
            meta = result.metadata
            print(f"\n> {query}\n{result.response.content}")
            print(f"  {meta.status}, tools took {meta.phases.execution_ms:.0f} ms")
            print(f"  {meta.llm_calls} model call: the answer (the planner needs none)")
    print(f"\ncache: {sorted(executor.cache)}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "openai:gpt-4o-mini"))

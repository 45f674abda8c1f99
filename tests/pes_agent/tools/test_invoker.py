"""How a tool call reaches its tool: `IN_PROCESS` awaits it here, and the executors send every
call through the invoker their context names, so an engine can run calls elsewhere."""

from __future__ import annotations

from typing import Any

import pytest

from pes_agent import tool
from pes_agent.errors import ToolExecutionError
from pes_agent.execution.executors import ConcurrentExecutor, SequentialExecutor
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext, Executor
from pes_agent.tools import Tool, ToolContext
from pes_agent.tools.invoker import IN_PROCESS
from pes_agent.tools.registry import ToolRegistry


@tool
async def double(x: int) -> int:
    """Double x.

    Args:
        x: The number to double.
    """
    return 2 * x


class Elsewhere:
    """An invoker that answers in the tools' place, as a remote worker would, and keeps what
    it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any], str]] = []

    async def invoke(self, tool: Tool, arguments: dict[str, Any], context: ToolContext) -> Any:
        self.asked.append((tool.schema.name, arguments, context.call_id))
        if arguments["x"] < 0:
            raise ToolExecutionError("no negative numbers elsewhere")
        return f"ran {tool.schema.name} elsewhere"


async def test_the_in_process_invoker_awaits_the_tools_execute() -> None:
    """IN_PROCESS returns what the tool's execute returns."""
    context = ToolContext(thread_id="t", trace_id="tr", call_id="c1")
    assert await IN_PROCESS.invoke(double, {"x": 21}, context) == 42


@pytest.mark.parametrize("executor", [ConcurrentExecutor(), SequentialExecutor()])
async def test_an_executor_runs_every_tool_call_through_its_contexts_invoker(
    executor: Executor,
) -> None:
    """Each call goes to ExecutionContext.invoker, whose answer (or error) is the call's result."""
    registry = ToolRegistry([double])
    invoker = Elsewhere()
    calls = [
        ParsedToolCall(call_id="c1", tool_name="double", arguments={"x": 1}),
        ParsedToolCall(call_id="c2", tool_name="double", arguments={"x": -1}),
    ]
    context = ExecutionContext(
        thread_id="t",
        trace_id="tr",
        tools=registry.as_mapping(),
        enabled_tools=frozenset(registry.names),
        invoker=invoker,
    )
    results = await executor.execute(calls, context)
    by_call = sorted(invoker.asked, key=lambda asked: asked[2])
    assert by_call == [("double", {"x": 1}, "c1"), ("double", {"x": -1}, "c2")]
    assert [(r.status, r.output, r.error) for r in results] == [
        ("success", "ran double elsewhere", None),
        ("error", None, "no negative numbers elsewhere"),
    ]

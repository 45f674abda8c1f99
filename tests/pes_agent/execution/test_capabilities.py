"""Optional capabilities a tool or a tools mapping declares with an attribute (docs/execution.md):
any object with the attribute has it, whatever its class."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from pes_agent.execution.executors import ConcurrentExecutor, SequentialExecutor
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext, Executor
from pes_agent.tools import Tool, ToolContext, ToolSchema
from pes_agent.tools.threads import ToolThreadPool


class Stalled:
    """A class-based tool (not `@tool`) that never finishes on its own."""

    def __init__(self, name: str = "stall", **attributes: Any) -> None:
        self.schema = ToolSchema(name=name, description="Wait forever.")
        for key, value in attributes.items():
            setattr(self, key, value)

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        await asyncio.Event().wait()


class Peeker:
    """A class-based tool that keeps the `ToolContext` it was given."""

    schema = ToolSchema(name="peek", description="Keep the context.")

    def __init__(self) -> None:
        self.contexts: list[ToolContext] = []

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        self.contexts.append(context)
        return "seen"


class ToolsWithPool(Mapping[str, Tool]):
    """A tools mapping of our own that names a thread pool, as `ToolRegistry.as_mapping()` does."""

    def __init__(self, tools: dict[str, Tool], thread_pool: Any) -> None:
        self._tools = tools
        self.thread_pool = thread_pool

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)


def run_context(tools: Mapping[str, Tool], **options: Any) -> ExecutionContext:
    return ExecutionContext(
        thread_id="t1",
        trace_id="tr1",
        tools=tools,
        enabled_tools=frozenset(tools),
        **options,
    )


def call(tool_name: str) -> ParsedToolCall:
    return ParsedToolCall(call_id="c1", tool_name=tool_name, arguments={})


@pytest.fixture(params=[ConcurrentExecutor, SequentialExecutor])
def executor(request: pytest.FixtureRequest) -> Executor:
    """Each test runs against both executors."""
    factory: type[Executor] = request.param
    return factory()


async def test_class_tool_timeout_s_overrides_the_agents_timeout(executor: Executor) -> None:
    """A tool of any class with `timeout_s` is stopped after its own timeout."""
    tool = Stalled(timeout_s=0.01)
    [result] = await executor.execute([call("stall")], run_context({"stall": tool}))
    assert result.error == 'Tool "stall" timed out after 0.01s.'


async def test_class_tool_timeout_s_none_uses_the_agents_timeout(executor: Executor) -> None:
    """`timeout_s = None` on a tool means the context's `tool_timeout_s`."""
    tool = Stalled(timeout_s=None)
    context = run_context({"stall": tool}, tool_timeout_s=0.01)
    [result] = await executor.execute([call("stall")], context)
    assert result.error == 'Tool "stall" timed out after 0.01s.'


async def test_tools_mapping_naming_a_thread_pool_hands_it_to_tools(executor: Executor) -> None:
    """A mapping of our own with a `thread_pool` gives that pool to every call's context."""
    peeker = Peeker()
    pool = ToolThreadPool(1)
    await executor.execute([call("peek")], run_context(ToolsWithPool({"peek": peeker}, pool)))
    assert peeker.contexts[0].thread_pool is pool
    await pool.aclose()


@pytest.mark.parametrize("tools", ["plain dict", "not a pool"])
async def test_tools_mapping_without_a_real_pool_gives_none(executor: Executor, tools: str) -> None:
    """A plain dict, or a `thread_pool` that is no `ToolThreadPool`, gives tools no pool."""
    peeker = Peeker()
    mapping: Mapping[str, Tool] = (
        {"peek": peeker} if tools == "plain dict" else ToolsWithPool({"peek": peeker}, "pool")
    )
    [result] = await executor.execute([call("peek")], run_context(mapping))
    assert result.output == "seen"
    assert peeker.contexts[0].thread_pool is None

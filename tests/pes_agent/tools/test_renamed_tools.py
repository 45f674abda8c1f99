"""A source's tool renamed on a name clash (`<source>__<name>`) keeps its capabilities: its own
timeout and its need for approval."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pes_agent import AgentProps, create_agent, tool
from pes_agent.execution.executors import ConcurrentExecutor
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext
from pes_agent.storage import InMemoryStorage
from pes_agent.testing import ScriptedProvider, plan_call, plan_json
from pes_agent.tools import Tool, ToolContext, ToolRegistry, ToolSchema


class Opened:
    """What `Source` opened: its tools, nothing to close."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools = tools

    async def aclose(self) -> None:
        return None


class Source:
    """A tool source named `bank` offering the tools it is given."""

    source_name = "bank"

    def __init__(self, *tools: Tool) -> None:
        self._tools = tools

    async def open_tools(self) -> Opened:
        return Opened(self._tools)


class Wire:
    """A class-based `wire` tool; it never finishes on its own."""

    schema = ToolSchema(name="wire", description="Wire money.")

    def __init__(self, **attributes: Any) -> None:
        for key, value in attributes.items():
            setattr(self, key, value)
        self.calls = 0

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        self.calls += 1
        await asyncio.Event().wait()


@tool
async def wire() -> str:
    """The local wire tool, whose name the source's tool clashes with."""
    return "local"


async def test_renamed_tool_keeps_its_own_timeout() -> None:
    """`bank__wire` stops after the source tool's own `timeout_s`, not the context's."""
    registry = ToolRegistry([wire, Source(Wire(timeout_s=0.01))])
    await registry.open_sources()
    context = ExecutionContext(
        thread_id="t1",
        trace_id="tr1",
        tools=registry.as_mapping(),
        enabled_tools=frozenset(registry.names),
    )
    call = ParsedToolCall(call_id="c1", tool_name="bank__wire", arguments={})
    [result] = await ConcurrentExecutor().execute([call], context)
    assert result.error == 'Tool "bank__wire" timed out after 0.01s.'
    await registry.aclose()


async def test_renamed_tool_needing_approval_waits_for_it() -> None:
    """A source's tool with `requires_approval = True`, renamed, still waits for approval."""
    gated = Wire(requires_approval=True)
    provider = ScriptedProvider([plan_json(plan_call("c1", "bank__wire"))])
    async with create_agent(
        provider=provider, tools=[wire, Source(gated)], storage=InMemoryStorage()
    ) as agent:
        result = await agent.process(AgentProps("wire", "t1"))
    assert result.metadata.status == "awaiting_approval"
    assert gated.calls == 0

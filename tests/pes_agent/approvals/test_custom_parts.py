"""Approvals with parts of one's own: an executor declares `supports_approvals`, a tool of any
class `requires_approval` (docs/execution.md, "Optional capabilities")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from pes_agent import AgentProps, create_agent
from pes_agent.execution.executors import ConcurrentExecutor
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext
from pes_agent.storage import InMemoryStorage
from pes_agent.testing import ScriptedProvider, plan_json
from pes_agent.tools import ToolContext, ToolResult, ToolSchema

from .conftest import Ledger, call

PAY = plan_json(call("c1", "pay", amount=5))


class OwnExecutor:
    """An executor of our own (it delegates to the default), saying what `supports_approvals`
    is when `supports` is given, and saying nothing otherwise."""

    def __init__(self, **supports: Any) -> None:
        for key, value in supports.items():
            setattr(self, key, value)
        self.executed = 0

    async def execute(
        self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext
    ) -> list[ToolResult]:
        self.executed += 1
        return await ConcurrentExecutor().execute(calls, ctx)


class Wire:
    """A class-based `wire` tool (not `@tool`) with whatever `requires_approval` it is given."""

    schema = ToolSchema(name="wire", description="Wire money.")

    def __init__(self, ledger: Ledger, **attributes: Any) -> None:
        self._ledger = ledger
        for key, value in attributes.items():
            setattr(self, key, value)

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        self._ledger.log.append("wire")
        return "wired"


async def test_own_executor_with_supports_approvals_true_runs_a_gated_plan(
    tools: list[Any], ledger: Ledger
) -> None:
    """An executor of any class with `supports_approvals = True` gets the gate: the call waits."""
    executor = OwnExecutor(supports_approvals=True)
    provider = ScriptedProvider([PAY])
    async with create_agent(
        provider=provider, tools=tools, executor=executor, storage=InMemoryStorage()
    ) as agent:
        result = await agent.process(AgentProps("pay", "t1"))
    assert result.metadata.status == "awaiting_approval"
    assert executor.executed == 1
    assert ledger.log == []


@pytest.mark.parametrize("supports", [{"supports_approvals": False}, {}], ids=["false", "absent"])
async def test_own_executor_not_saying_supports_approvals_is_refused_a_gated_plan(
    tools: list[Any], ledger: Ledger, supports: dict[str, Any]
) -> None:
    """An executor whose `supports_approvals` is False or absent never runs calls that may
    need approval: the run ends in an error naming the fix."""
    executor = OwnExecutor(**supports)
    provider = ScriptedProvider([PAY])
    async with create_agent(
        provider=provider, tools=tools, executor=executor, storage=InMemoryStorage()
    ) as agent:
        result = await agent.process(AgentProps("pay", "t1"))
    assert result.metadata.status == "error"
    assert "OwnExecutor does not support approvals" in (result.metadata.error or "")
    assert executor.executed == 0
    assert ledger.log == []


async def test_class_tool_with_requires_approval_true_waits_for_approval(ledger: Ledger) -> None:
    """A tool of any class with `requires_approval = True` is gated like `@tool(...=True)`."""
    provider = ScriptedProvider([plan_json(call("c1", "wire"))])
    async with create_agent(
        provider=provider,
        tools=[Wire(ledger, requires_approval=True)],
        storage=InMemoryStorage(),
    ) as agent:
        result = await agent.process(AgentProps("wire", "t1"))
    assert result.metadata.status == "awaiting_approval"
    assert ledger.log == []


async def test_class_tool_with_requires_approval_not_exactly_true_runs_ungated(
    tools: list[Any], ledger: Ledger
) -> None:
    """Only `requires_approval = True` gates a tool; a truthy string does not, even beside a
    gated tool."""
    provider = ScriptedProvider([plan_json(call("c1", "wire")), "Wired."])
    async with create_agent(
        provider=provider,
        tools=[*tools, Wire(ledger, requires_approval="yes")],
        storage=InMemoryStorage(),
    ) as agent:
        result = await agent.process(AgentProps("wire", "t1"))
    assert result.metadata.status != "awaiting_approval"
    assert ledger.log == ["wire"]


class Proxy:
    """A wrapper forwarding every attribute but `execute` to the tool it wraps, through
    `__getattr__` (as logging or metrics wrappers often do)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        return await self._inner.execute(arguments, context)


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "beside-ungated-tools"])
async def test_a_proxy_forwarding_requires_approval_is_gated(
    tools: list[Any], ledger: Ledger, alone: bool
) -> None:
    """A tool whose `requires_approval = True` comes through `__getattr__` still waits for
    approval: the gate fails closed."""
    wire = Proxy(Wire(ledger, requires_approval=True))
    provider = ScriptedProvider([plan_json(call("c1", "wire")), "Wired."])
    async with create_agent(
        provider=provider,
        tools=[wire] if alone else [tools[0], wire],
        storage=InMemoryStorage(),
    ) as agent:
        result = await agent.process(AgentProps("wire", "t1"))
    assert result.metadata.status == "awaiting_approval"
    assert ledger.log == []

"""How a tool call reaches its tool: awaited in process here; an engine may run it elsewhere.

The executor decides which call runs when (the DAG, placeholders, gates, timeouts); the
`ToolInvoker` a run is given (`RunResources.invoker`, handed to the executor as
`ExecutionContext.invoker`) is the one place a call leaves that decision-making for the tool.
`IN_PROCESS`, the default, awaits the `Tool`'s `execute` in this process; a durable engine
swaps in an invoker that runs the call as an activity on a worker (DESIGN §14).
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from pes_agent.tools.base import Tool, ToolContext

__all__ = ["IN_PROCESS", "InProcessInvoker", "ToolInvoker"]


class ToolInvoker(Protocol):
    """Runs one tool call with arguments already resolved, validated and approved.

    Returns the tool's output or raises what the tool raised: the executor turns both into a
    `ToolResult`, and bounds the call with its timeout.
    """

    async def invoke(self, tool: Tool, arguments: dict[str, Any], context: ToolContext) -> Any: ...


class InProcessInvoker:
    """Awaits `tool.execute(arguments, context)` in this process: the default invoker."""

    __slots__ = ()

    async def invoke(self, tool: Tool, arguments: dict[str, Any], context: ToolContext) -> Any:
        """The tool's output for `arguments`; raises what the tool raises."""
        return await tool.execute(arguments, context)


IN_PROCESS: Final = InProcessInvoker()

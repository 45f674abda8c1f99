"""Tools: what the agent can call, how they are described to the model and validated.

Write a tool with `@tool` on a typed, documented function, or as any object with a
`schema: ToolSchema` and an `async execute(arguments, context)`; collect tools in a
`ToolRegistry`.
"""

from pes_agent.tools.base import Tool, ToolContext, ToolResult, ToolSchema, ToolStatus
from pes_agent.tools.decorator import FunctionTool, tool
from pes_agent.tools.registry import ToolRegistry
from pes_agent.tools.threads import DEFAULT_SYNC_TOOL_THREADS, ToolThreadPool, ToolThreadsExhausted
from pes_agent.tools.validation import validate_arguments

__all__ = [
    "DEFAULT_SYNC_TOOL_THREADS",
    "FunctionTool",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "ToolSchema",
    "ToolStatus",
    "ToolThreadPool",
    "ToolThreadsExhausted",
    "tool",
    "validate_arguments",
]

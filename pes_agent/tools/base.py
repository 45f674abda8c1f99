"""What a tool is: a schema the model sees and an `execute` the agent awaits."""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

import typing_extensions
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from pes_agent.config import AgentState
from pes_agent.tools.threads import ToolThreadPool

__all__ = [
    "GatedTool",
    "PooledTools",
    "TimedTool",
    "Tool",
    "ToolContext",
    "ToolResult",
    "ToolSchema",
    "ToolStatus",
    "needs_approval",
]

ToolStatus = Literal["success", "error"]


class ToolSchema(BaseModel):
    """The tool as the model sees it: a name, a description and a JSON Schema of its arguments."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    input_schema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


class ToolContext(BaseModel):
    """Who is calling a tool; passed to `execute` so a tool can scope its work.

    `state` is the run's copy of the thread's `AgentState`: with `state_saving="implicit"` a
    tool may change `state.data` and the run saves it when it finishes. `thread_pool` is the
    agent's pool for blocking work (`await context.thread_pool.run(func, *args)`); sync `@tool`
    functions run on it, or on asyncio's default executor when it is None.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    thread_id: str
    trace_id: str
    call_id: str
    user_id: str | None = None
    session_id: str | None = None
    state: AgentState | None = None
    # A live resource, not data: left out of dumps, JSON Schema and repr.
    thread_pool: SkipJsonSchema[ToolThreadPool | None] = Field(
        default=None, exclude=True, repr=False
    )


class ToolResult(BaseModel):
    """The outcome of one tool call; failures are results too, never exceptions."""

    call_id: str
    tool_name: str
    status: ToolStatus
    output: Any = None
    error: str | None = None
    duration_ms: float = 0.0


@runtime_checkable
class Tool(Protocol):
    """Anything with a `schema` and an `async execute(arguments, context)` is a tool.

    Optional attributes add capabilities: `timeout_s` (`TimedTool`) overrides the agent's
    per-call timeout; `requires_approval = True` (`GatedTool`) has each call wait for a
    person's approval.
    """

    @property
    def schema(self) -> ToolSchema: ...

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        """Run one call of the tool with the model's arguments.

        Args:
            arguments: The arguments the model gave, as JSON values by name; validate them.
            context: Who calls: thread, trace and call ids, the run's state, a thread pool.

        Returns:
            The result, JSON-serialisable (it is shown to the model and recorded).

        Raises:
            ToolExecutionError: The call failed in a way the model should hear about; any
                other exception fails the call the same way, with its message.
        """
        ...


# The capabilities below are checked with isinstance on every call, so they are
# typing_extensions' runtime protocols: the same lookup on Python 3.11 as on 3.12+ (an attribute
# of the class or the instance, never one `__getattr__` makes up), and ~1 µs a check where
# typing's costs ~20 µs on 3.11.


@typing_extensions.runtime_checkable
class GatedTool(typing_extensions.Protocol):
    """A tool that says whether its calls wait for a person's approval (`requires_approval`).

    `@tool(requires_approval=True)` makes one; the agent gates its calls whatever the
    `require_approval` rules say. The agent asks `needs_approval(tool)`, not `isinstance`.
    """

    @property
    def requires_approval(self) -> bool: ...


def needs_approval(tool: object) -> bool:
    """Whether `tool` says its calls wait for approval (`GatedTool`: `requires_approval` is
    exactly True).

    Unlike the other capabilities this is read as an attribute, wherever it comes from: a
    wrapper that forwards attributes through `__getattr__` (a proxy around a gated tool) is
    gated too. A security check fails closed; `isinstance` against a runtime protocol would
    miss such an attribute and let the call run unasked.
    """
    return getattr(tool, "requires_approval", False) is True


@typing_extensions.runtime_checkable
class TimedTool(typing_extensions.Protocol):
    """A tool with its own per-call timeout: `timeout_s` seconds, or `None` for the agent's
    `tool_timeout_s`."""

    @property
    def timeout_s(self) -> float | None: ...


@typing_extensions.runtime_checkable
class PooledTools(typing_extensions.Protocol):
    """A mapping of tools that also names the pool its sync tools run on, as
    `ToolRegistry.as_mapping()` does; executors hand it to tools as `ToolContext.thread_pool`."""

    @property
    def thread_pool(self) -> ToolThreadPool: ...

"""The agent's tools by name: register them once, look them up at every call."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from pes_agent.errors import UsageError
from pes_agent.tools.base import Tool, ToolSchema
from pes_agent.tools.decorator import check_tool_name, tool
from pes_agent.tools.threads import DEFAULT_SYNC_TOOL_THREADS, ToolThreadPool

__all__ = ["ToolRegistry"]


class ToolRegistry:
    """Tools by unique name, in registration order: `ToolRegistry([get_weather, Calculator()])`.

    Accepts anything `register` accepts. Iterating yields the tools; `name in registry`
    checks a name. The registry owns the `thread_pool` its sync tools run on (at most
    `sync_threads` threads, default `DEFAULT_SYNC_TOOL_THREADS`); `await registry.aclose()`
    shuts it down (the agent does so in its `aclose()`).
    """

    __slots__ = ("_pool", "_tools", "_view")

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        *,
        sync_threads: int = DEFAULT_SYNC_TOOL_THREADS,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self._pool = ToolThreadPool(sync_threads)
        self._view = _ToolsView(self._tools, self._pool)
        for item in tools:
            self.register(item)

    @property
    def thread_pool(self) -> ToolThreadPool:
        """The bounded threads this registry's sync tools run on."""
        return self._pool

    async def aclose(self) -> None:
        """Shut the thread pool down, without waiting for sync tools that still run."""
        await self._pool.aclose()

    def register(self, item: Tool | Callable[..., Any]) -> Tool:
        """Add a tool and return it; a plain function is wrapped with `@tool` first.

        A tool is any object with a `schema: ToolSchema` and an `async execute(arguments,
        context)`. Raises `UsageError` for a duplicate name or something that is not a tool, so
        `@registry.register` also works as a decorator.
        """
        registered = _as_tool(item)
        name = registered.schema.name
        if name in self._tools:
            raise UsageError(
                f'A tool named "{name}" is already registered; give one of them another name, '
                f"e.g. @tool(name='{name}_2')."
            )
        self._tools[name] = registered
        return registered

    def get(self, name: str) -> Tool | None:
        """Return the tool called `name`, or None when there is none."""
        return self._tools.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        """The registered tool names, in registration order."""
        return tuple(self._tools)

    def schemas(self, enabled: Iterable[str] | None = None) -> list[ToolSchema]:
        """The schemas to show the model: all tools, or only those named in `enabled`.

        Names in `enabled` that are not registered are ignored; order is registration order.
        """
        if enabled is None:
            return [t.schema for t in self._tools.values()]
        wanted = set(enabled)
        return [t.schema for name, t in self._tools.items() if name in wanted]

    def as_mapping(self) -> Mapping[str, Tool]:
        """A read-only, live name → tool view, e.g. for `ExecutionContext.tools`.

        The view also carries the registry's `thread_pool`, so an executor given only the
        view runs sync tools on the registry's threads.
        """
        return self._view

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(tuple(self._tools.values()))

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._tools)!r})"


class _ToolsView(Mapping[str, Tool]):
    """A read-only, live view of a registry's tools that also names its thread pool."""

    __slots__ = ("_tools", "thread_pool")

    def __init__(self, tools: dict[str, Tool], thread_pool: ToolThreadPool) -> None:
        self._tools = tools
        self.thread_pool = thread_pool

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolsView({list(self._tools)!r})"


def _as_tool(item: Any) -> Tool:
    """Accept a tool object as is and wrap a plain function with `@tool`."""
    if inspect.isclass(item):
        raise UsageError(
            f"Register an instance, not the class {item.__name__}: registry.register("
            f"{item.__name__}())."
        )
    if isinstance(item, Tool):
        schema = item.schema
        if not isinstance(schema, ToolSchema):
            raise UsageError(
                f"{item!r}.schema must be a ToolSchema(name, description, input_schema), "
                f"got {type(schema).__name__}."
            )
        if not inspect.iscoroutinefunction(item.execute):
            raise UsageError(
                f"{item!r}.execute must be `async def execute(self, arguments, context)`."
            )
        check_tool_name(schema.name)
        return item
    if callable(item):
        return tool(item)
    raise UsageError(
        f"Cannot register {item!r} as a tool: pass a function with type hints and a docstring, "
        "or an object with `schema` and `async execute(arguments, context)`."
    )

"""The agent's tools by name: register them once, look them up at every call."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from pes_agent._closing import close_all
from pes_agent.errors import RunError, ToolSourceError, UsageError
from pes_agent.tools.base import TimedTool, Tool, ToolContext, ToolSchema, needs_approval
from pes_agent.tools.decorator import check_tool_name, tool
from pes_agent.tools.sources import OpenedTools, ToolSource
from pes_agent.tools.threads import DEFAULT_SYNC_TOOL_THREADS, ToolThreadPool

__all__ = ["ToolRegistry"]


class ToolRegistry:
    """Tools by unique name, in registration order: `ToolRegistry([get_weather, Calculator()])`.

    Accepts anything `register` accepts, and tool sources (`add_source`). Iterating yields
    the tools; `name in registry` checks a name. The registry owns the `thread_pool` its sync
    tools run on (at most `sync_threads` threads, default `DEFAULT_SYNC_TOOL_THREADS`) and what
    `open_sources()` opened; `await registry.aclose()` closes both (the agent does so in its
    `aclose()`).
    """

    __slots__ = (
        "_closed",
        "_lock",
        "_opened",
        "_owns_pool",
        "_pending",
        "_pool",
        "_source_names",
        "_tools",
        "_view",
    )

    def __init__(
        self,
        tools: Iterable[Tool | ToolSource | Callable[..., Any]] = (),
        *,
        sync_threads: int = DEFAULT_SYNC_TOOL_THREADS,
        thread_pool: ToolThreadPool | None = None,
    ) -> None:
        """Register `tools` in order.

        Args:
            tools: Tools, plain typed functions or tool sources, as `add` takes them.
            sync_threads: The most threads the registry's sync tools run on at once.
            thread_pool: Another registry's pool to share (`sync_threads` is then unused);
                its owner closes it, this registry's `aclose()` leaves it open.

        Raises:
            UsageError: Two tools share a name, or an item is not a tool.
        """
        self._tools: dict[str, Tool] = {}
        self._owns_pool = thread_pool is None
        self._pool = ToolThreadPool(sync_threads) if thread_pool is None else thread_pool
        self._view = ToolsView(self._tools, self._pool)
        self._pending: list[ToolSource] = []
        self._opened: list[OpenedTools] = []
        self._source_names: set[str] = set()
        self._lock = asyncio.Lock()
        self._closed = False
        for item in tools:
            self.add(item)

    @property
    def thread_pool(self) -> ToolThreadPool:
        """The bounded threads this registry's sync tools run on."""
        return self._pool

    async def aclose(self) -> None:
        """Close what the tool sources opened (MCP connections and their server processes)
        and shut the thread pool down, without waiting for sync tools that still run."""
        self._closed = True
        async with self._lock:  # an open_sources() under way finishes first
            opened, self._opened = self._opened, []
        await close_all([*opened, self._pool] if self._owns_pool else opened)

    def add(self, item: Tool | ToolSource | Callable[..., Any]) -> None:
        """Add a tool (see `register`) or a tool source (see `add_source`).

        Args:
            item: A tool object, a typed function with a docstring, or a tool source.

        Raises:
            UsageError: The name is taken, or `item` is not a tool.
        """
        if isinstance(item, ToolSource) and not isinstance(item, Tool):
            self.add_source(item)
        else:
            self.register(item)

    def add_source(self, source: ToolSource) -> None:
        """Add a tool source (an MCP server); its tools are registered by `open_sources()`.

        Args:
            source: The source, such as `pes_agent.mcp.MCPServer.stdio(...)`.

        Raises:
            UsageError: Another source has the same `source_name` (it prefixes clashing tool
                names, so it must tell the sources apart).
        """
        name = source.source_name
        if name in self._source_names:
            raise UsageError(
                f"Two tool sources are named {name!r}; name one differently, e.g. "
                f"MCPServer.stdio(..., name='{name}_2')."
            )
        self._source_names.add(name)
        self._pending.append(source)

    async def open_sources(self) -> None:
        """Open the tool sources not opened yet and register their tools; cheap once done.

        The sources open concurrently; if one fails the others are closed again and
        `ToolSourceError` (a `RunError`) is raised, so the next call tries all of them anew
        and tool names never depend on which source happened to answer. Safe to call from
        concurrent runs: one opens, the others wait for it.

        Raises:
            ToolSourceError: A source could not be opened or listed its tools.
            UsageError: The registry was closed, or two tools would get the same name.
        """
        if not self._pending:
            return
        async with self._lock:
            if self._closed:
                raise UsageError("this tool registry was closed with aclose(); create a new one")
            if not self._pending:
                return
            sources = list(self._pending)
            opened = await _open_all(sources)
            try:
                self._install(sources, opened)
            except BaseException:
                await close_all(opened)
                raise
            self._pending.clear()
            self._opened.extend(opened)

    def _install(self, sources: list[ToolSource], opened: list[OpenedTools]) -> None:
        """Register the opened tools, prefixing each name that is taken more than once."""
        found = [
            (s, t, _tool_name(t.schema.name))
            for s, o in zip(sources, opened, strict=True)
            for t in o.tools
        ]
        counts = Counter(name for _, _, name in found)
        for source, item, name in found:
            if counts[name] > 1 or name in self._tools:
                name = _tool_name(f"{source.source_name}__{name}")
            if name in self._tools:
                raise UsageError(
                    f'The tool "{item.schema.name}" of {source.source_name!r} would be '
                    f'registered as "{name}", which is taken; rename the local tool or the source.'
                )
            self._tools[name] = item if name == item.schema.name else _RenamedTool(item, name)

    def register(self, item: Tool | Callable[..., Any]) -> Tool:
        """Add a tool and return it; a plain function is wrapped with `@tool` first.

        A tool is any object with a `schema: ToolSchema` and an `async execute(arguments,
        context)`. `@registry.register` also works as a decorator.

        Args:
            item: A tool object or a typed function with a docstring.

        Returns:
            The tool as registered (the `FunctionTool` for a function).

        Raises:
            UsageError: The name is taken, or `item` is not a tool.
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
        """Look a tool up by name.

        Args:
            name: The tool's registered name.

        Returns:
            The tool, or None when there is none of that name.
        """
        return self._tools.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        """The registered tool names, in registration order."""
        return tuple(self._tools)

    def schemas(self, enabled: Iterable[str] | None = None) -> list[ToolSchema]:
        """The schemas to show the model: all tools, or only those named in `enabled`.

        Args:
            enabled: The tool names to keep; None keeps all. Names that are not registered
                are ignored.

        Returns:
            The schemas, in registration order.
        """
        if enabled is None:
            return [t.schema for t in self._tools.values()]
        wanted = set(enabled)
        return [t.schema for name, t in self._tools.items() if name in wanted]

    def as_mapping(self) -> Mapping[str, Tool]:
        """A read-only, live name → tool view, e.g. for `ExecutionContext.tools`.

        The view also carries the registry's `thread_pool`, so an executor given only the
        view runs sync tools on the registry's threads.

        Returns:
            The view, which follows later registrations.
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


class ToolsView(Mapping[str, Tool]):
    """A read-only, live view of a registry's tools that also names its thread pool.

    `by_name` is the registry's own dict, for the executor to read without a Python call per
    lookup (it never writes to it).
    """

    __slots__ = ("by_name", "thread_pool")

    def __init__(self, tools: dict[str, Tool], thread_pool: ToolThreadPool) -> None:
        self.by_name = tools
        self.thread_pool = thread_pool

    def __getitem__(self, name: str) -> Tool:
        return self.by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def __iter__(self) -> Iterator[str]:
        return iter(self.by_name)

    def __len__(self) -> int:
        return len(self.by_name)

    def __repr__(self) -> str:
        return f"ToolsView({list(self.by_name)!r})"


async def _open_all(sources: list[ToolSource]) -> list[OpenedTools]:
    """Open every source concurrently; on any failure close those that opened, then raise."""
    tasks = [asyncio.ensure_future(_open_one(source)) for source in sources]
    try:
        await asyncio.wait(tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        # Each source cleans up when cancelled; wait until it has, whatever happens.
        await asyncio.shield(asyncio.wait(tasks))
        for task in tasks:
            if not task.cancelled() and task.exception() is None:
                await asyncio.shield(task.result().aclose())
        raise
    failures = [t.exception() for t in tasks if t.exception() is not None]
    if failures:
        await close_all(t.result() for t in tasks if t.exception() is None)
        error = failures[0]
        assert error is not None
        raise error
    return [task.result() for task in tasks]


async def _open_one(source: ToolSource) -> OpenedTools:
    try:
        opened = await source.open_tools()
    except (RunError, UsageError):
        raise
    except Exception as error:
        raise ToolSourceError(
            f"tool source {source.source_name!r} could not be opened: "
            f"{type(error).__name__}: {error}",
            source_name=source.source_name,
        ) from error
    return opened


_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]")


def _tool_name(name: str) -> str:
    """A name every provider accepts: other characters become `_`, at most 64 of them."""
    return _NOT_IN_NAME.sub("_", name)[:64] or "_"


class _RenamedTool:
    """A source's tool under the name it is registered as; everything else is the tool's."""

    __slots__ = ("_schema", "_tool")

    def __init__(self, tool: Tool, name: str) -> None:
        self._tool = tool
        self._schema = tool.schema.model_copy(update={"name": name})

    @property
    def schema(self) -> ToolSchema:
        return self._schema

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        return await self._tool.execute(arguments, context)

    # The capabilities are declared here, not left to __getattr__: runtime protocols look
    # attributes up statically, so a forwarded one would go unseen (an ungated gated tool).
    @property
    def timeout_s(self) -> float | None:
        """The tool's own timeout (`TimedTool`), else None."""
        return self._tool.timeout_s if isinstance(self._tool, TimedTool) else None

    @property
    def requires_approval(self) -> bool:
        """Whether the tool needs approval (`needs_approval`)."""
        return needs_approval(self._tool)

    def __getattr__(self, name: str) -> Any:
        # Whatever else a caller reads from the tool itself.
        return getattr(self._tool, name)

    def __repr__(self) -> str:
        return f"{self._tool!r} as {self._schema.name!r}"


def _as_tool(item: Any) -> Tool:
    """Accept a tool object as is and wrap a plain function with `@tool`."""
    if isinstance(item, ToolSource) and not isinstance(item, Tool):
        raise UsageError(
            f"{item!r} is a tool source: add it with registry.add(...) or add_source(...), or "
            "pass it in create_agent(tools=[...])."
        )
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

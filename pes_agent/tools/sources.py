"""Tool sources: tools that exist only once something is connected, such as an MCP server's.

A `ToolSource` goes into `create_agent(tools=[...])` next to ordinary tools. The agent opens
every source once — in `async with agent`, or else at the start of the first `process()`,
before anything is planned, so the planner sees the source's tool schemas — and registers the
tools it lists. `aclose()` closes what the sources opened; the source objects themselves stay
the caller's (they describe how to connect and hold nothing open).

A source tool whose name is already taken, by a local tool or by a tool of another source, is
registered as `<source_name>__<tool name>` (every such tool of every source, so the result
does not depend on which source answered first); the others keep their names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pes_agent.tools.base import Tool

__all__ = ["OpenedTools", "ToolSource"]


@runtime_checkable
class OpenedTools(Protocol):
    """What an open source offers: its `tools`, usable until `aclose()`."""

    @property
    def tools(self) -> Sequence[Tool]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class ToolSource(Protocol):
    """Connects on `open_tools()` and lists its tools; `source_name` prefixes clashing names.

    `open_tools()` raises a `RunError` when the source cannot be reached, and must leave
    nothing running when it fails or is cancelled.
    """

    @property
    def source_name(self) -> str: ...

    async def open_tools(self) -> OpenedTools: ...

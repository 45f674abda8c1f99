"""An entity's tools by name, whatever form its `ToolRegistryComponent` holds them in."""

from __future__ import annotations

from collections.abc import Mapping

from pes_agent.ecs.components import ToolRegistryComponent
from pes_agent.errors import UsageError
from pes_agent.tools.base import Tool, ToolSchema
from pes_agent.tools.registry import ToolRegistry

__all__ = ["tool_schemas", "tools_of"]


def tools_of(component: ToolRegistryComponent | None) -> Mapping[str, Tool]:
    """Name → tool for the component's tools (none without a component).

    A `ToolRegistry` gives its live view, whose bounded thread pool then runs sync tools; a
    plain sequence of tools runs them on asyncio's default executor.
    """
    if component is None:
        return {}
    tools = component.tools
    if isinstance(tools, ToolRegistry):
        return tools.as_mapping()
    by_name: dict[str, Tool] = {}
    for item in tools:
        if not isinstance(item, Tool):
            raise UsageError(
                f"ToolRegistryComponent holds {item!r}, which is not a tool; decorate the "
                "function with @tool, or pass ToolRegistry([...]) (which wraps plain functions)"
            )
        by_name[item.schema.name] = item
    return by_name


def tool_schemas(component: ToolRegistryComponent | None) -> list[ToolSchema]:
    """The schemas the entity's model is offered, in the component's order."""
    return [tool.schema for tool in tools_of(component).values()]

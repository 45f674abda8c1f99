"""`ToolRegistry`: registering functions and class-based tools, lookup and schemas."""

from __future__ import annotations

from typing import Any

import pytest

from pes_agent.errors import UsageError
from pes_agent.tools import FunctionTool, ToolContext, ToolRegistry, ToolSchema, tool


def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return f"sunny in {city}"


@tool
def calculator(expression: str) -> str:
    """Evaluate arithmetic."""
    return expression


class Echo:
    """A class-based tool: a schema and an async execute."""

    schema = ToolSchema(
        name="echo",
        description="Echo the text.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
    )

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        return arguments["text"]


def test_plain_function_is_wrapped_with_tool_on_register() -> None:
    """Registering a plain function wraps it as a FunctionTool named after it."""
    registry = ToolRegistry()
    registered = registry.register(get_weather)
    assert isinstance(registered, FunctionTool)
    assert registry.get("get_weather") is registered


def test_constructor_registers_functions_tools_and_class_instances_in_order() -> None:
    """ToolRegistry([...]) accepts a mix and keeps registration order."""
    echo = Echo()
    registry = ToolRegistry([get_weather, calculator, echo])
    assert registry.names == ("get_weather", "calculator", "echo")
    assert len(registry) == 3
    assert registry.get("calculator") is calculator
    assert registry.get("echo") is echo
    assert list(registry) == [registry.get("get_weather"), calculator, echo]


def test_contains_and_get_of_unknown_name() -> None:
    """`in` checks names; get() of an unknown name is None."""
    registry = ToolRegistry([calculator])
    assert "calculator" in registry
    assert "nope" not in registry
    assert registry.get("nope") is None


def test_duplicate_name_is_a_usage_error() -> None:
    """Two tools with one name are refused with a hint to rename one."""
    registry = ToolRegistry([calculator])
    with pytest.raises(UsageError, match='"calculator" is already registered'):
        registry.register(tool(name="calculator", description="Other.")(get_weather))


def test_schemas_filter_by_enabled_names_and_ignore_unknown_ones() -> None:
    """schemas(enabled) keeps registration order and skips names that are not registered."""
    registry = ToolRegistry([get_weather, calculator, Echo()])
    assert [s.name for s in registry.schemas()] == ["get_weather", "calculator", "echo"]
    assert [s.name for s in registry.schemas(["echo", "get_weather", "ghost"])] == [
        "get_weather",
        "echo",
    ]
    assert registry.schemas([]) == []


def test_as_mapping_is_a_read_only_view_by_name() -> None:
    """as_mapping() maps names to tools and cannot be modified through the view."""
    registry = ToolRegistry([calculator])
    mapping = registry.as_mapping()
    assert dict(mapping) == {"calculator": calculator}
    with pytest.raises(TypeError):
        mapping["x"] = calculator  # type: ignore[index]


def test_register_works_as_a_decorator() -> None:
    """@registry.register on a function registers it and returns the tool."""
    registry = ToolRegistry()

    @registry.register
    def ping() -> str:
        """Ping."""
        return "pong"

    assert registry.names == ("ping",)


def test_registering_a_class_instead_of_an_instance_is_a_usage_error() -> None:
    """Passing the class itself says to pass an instance."""
    with pytest.raises(UsageError, match=r"register\(Echo\(\)\)"):
        ToolRegistry([Echo])


def test_class_tool_with_a_sync_execute_is_a_usage_error() -> None:
    """A class-based tool must have an async execute."""

    class SyncTool:
        schema = ToolSchema(name="sync", description="Sync.")

        def execute(self, arguments: dict[str, Any], context: ToolContext) -> Any:
            return None

    with pytest.raises(UsageError, match="async def execute"):
        ToolRegistry([SyncTool()])


def test_something_that_is_not_a_tool_is_a_usage_error() -> None:
    """A non-callable without schema/execute is refused with what to pass instead."""
    with pytest.raises(UsageError, match="Cannot register 42"):
        ToolRegistry([42])  # type: ignore[list-item]

"""`@tool`: schemas from type hints and docstrings, validation, context injection, errors."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import BaseModel, Field

from pes_agent.errors import ToolExecutionError, UsageError
from pes_agent.tools import FunctionTool, Tool, ToolContext, tool

CTX = ToolContext(thread_id="t1", trace_id="tr1", call_id="call_1", user_id="u1")


class Location(BaseModel):
    """A point on Earth."""

    lat: float
    lon: float


def test_sync_function_schema_lists_typed_parameters_and_required_ones() -> None:
    """A sync function's hints become properties; parameters without defaults are required."""

    @tool
    def add(a: int, b: float = 1.5) -> float:
        """Add two numbers."""
        return a + b

    assert isinstance(add, FunctionTool)
    assert add.schema.name == "add"
    assert add.schema.description == "Add two numbers."
    assert add.schema.input_schema == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "number", "default": 1.5}},
        "required": ["a"],
        "additionalProperties": False,
    }


async def test_async_function_is_a_tool_and_executes() -> None:
    """An async function becomes a Tool whose execute awaits it with validated arguments."""

    @tool
    async def greet(name: str) -> str:
        """Greet someone."""
        await asyncio.sleep(0)
        return f"hello {name}"

    assert isinstance(greet, Tool)
    assert await greet.execute({"name": "Ada"}, CTX) == "hello Ada"


def test_pydantic_model_parameter_is_referenced_in_defs() -> None:
    """A pydantic-model-typed parameter appears as a $ref into $defs with its fields."""

    @tool
    def where(location: Location) -> str:
        """Describe a location."""
        return str(location)

    schema = where.schema.input_schema
    assert schema["properties"]["location"] == {"$ref": "#/$defs/Location"}
    assert schema["$defs"]["Location"]["properties"] == {
        "lat": {"type": "number"},
        "lon": {"type": "number"},
    }
    assert schema["$defs"]["Location"]["required"] == ["lat", "lon"]


async def test_pydantic_model_parameter_receives_a_model_instance() -> None:
    """A dict argument for a model-typed parameter reaches the function as that model."""
    seen: list[Any] = []

    @tool
    def where(location: Location) -> float:
        """Describe a location."""
        seen.append(location)
        return location.lat

    assert await where.execute({"location": {"lat": 48.8, "lon": 2.3}}, CTX) == 48.8
    assert seen == [Location(lat=48.8, lon=2.3)]


def test_optional_list_dict_and_literal_parameters_map_to_json_schema() -> None:
    """Optional becomes anyOf with null, list/dict get items/additionalProperties, Literal enum."""

    @tool
    def search(
        units: Literal["c", "f"],
        limit: Optional[int] = None,  # noqa: UP045 - the spelling under test
        tags: list[str] | None = None,
        weights: dict[str, float] | None = None,
    ) -> None:
        """Search things."""

    props = search.schema.input_schema["properties"]
    assert props["units"] == {"type": "string", "enum": ["c", "f"]}
    assert props["limit"] == {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}
    assert props["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert props["weights"]["anyOf"][0] == {
        "type": "object",
        "additionalProperties": {"type": "number"},
    }
    assert search.schema.input_schema["required"] == ["units"]


def test_annotated_field_description_and_constraints_reach_the_schema() -> None:
    """Annotated[..., Field(description=..., ge=...)] sets description and minimum."""

    @tool
    def repeat(times: Annotated[int, Field(description="How often.", ge=1)] = 2) -> None:
        """Repeat."""

    assert repeat.schema.input_schema["properties"]["times"] == {
        "type": "integer",
        "description": "How often.",
        "minimum": 1,
        "default": 2,
    }


def test_google_style_args_section_describes_parameters_and_leaves_the_description() -> None:
    """The Args: section becomes parameter descriptions and is cut from the tool description."""

    @tool
    def weather(city: str, days: int = 1) -> None:
        """Get the weather forecast.

        Args:
            city: The city name,
                e.g. "Paris".
            days (int): How many days.

        Returns:
            The forecast per day.
        """

    assert weather.schema.description == (
        "Get the weather forecast.\n\nReturns:\n    The forecast per day."
    )
    props = weather.schema.input_schema["properties"]
    assert props["city"]["description"] == 'The city name, e.g. "Paris".'
    assert props["days"]["description"] == "How many days."


def test_annotated_description_wins_over_the_docstring() -> None:
    """An explicit Field description is kept even when the Args: section also documents it."""

    @tool
    def f(x: Annotated[str, Field(description="explicit")]) -> None:
        """Do it.

        Args:
            x: from the docstring
        """

    assert f.schema.input_schema["properties"]["x"]["description"] == "explicit"


def test_no_titles_from_pydantic_but_a_property_named_title_survives() -> None:
    """Generated titles are dropped; a parameter called `title` keeps its property."""

    @tool
    def note(title: str, location: Location) -> None:
        """Save a note."""

    schema = note.schema.input_schema
    assert "title" not in schema
    assert "title" in schema["properties"]
    assert "title" not in schema["properties"]["title"]
    assert "title" not in schema["$defs"]["Location"]


def test_parameters_named_like_basemodel_attributes_are_allowed() -> None:
    """Parameters such as `json`, `schema` or `model_name` work without pydantic clashes."""

    @tool
    def odd(json: str, schema: int, model_name: str = "m") -> str:
        """Odd names."""
        return f"{json}{schema}{model_name}"

    assert set(odd.schema.input_schema["properties"]) == {"json", "schema", "model_name"}


async def test_parameters_named_like_basemodel_attributes_receive_their_values() -> None:
    """Aliased internal field names still deliver each argument to its parameter."""

    @tool
    def odd(json: str, schema: int, model_name: str = "m") -> str:
        """Odd names."""
        return f"{json}{schema}{model_name}"

    assert await odd.execute({"json": "a", "schema": 1}, CTX) == "a1m"


def test_decorator_options_override_name_description_and_timeout() -> None:
    """@tool(name=..., description=..., timeout_s=...) sets those on the tool."""

    @tool(name="lookup", description="Look something up.", timeout_s=2.5)
    def f(q: str) -> str:
        return q

    assert f.schema.name == "lookup"
    assert f.schema.description == "Look something up."
    assert f.timeout_s == 2.5


def test_bare_parentheses_work_like_the_plain_decorator() -> None:
    """@tool() behaves like @tool."""

    @tool()
    def f(q: str) -> str:
        """Echo."""
        return q

    assert f.schema.name == "f"
    assert f.timeout_s is None


def test_decorated_function_stays_directly_callable() -> None:
    """Calling the tool calls the function, with its name and docstring kept."""

    @tool
    def double(x: int) -> int:
        """Double x."""
        return 2 * x

    assert double(21) == 42
    assert double.__name__ == "double"
    assert double.__doc__ == "Double x."


async def test_async_tool_direct_call_returns_the_coroutine_result() -> None:
    """Calling an async tool directly gives an awaitable of the function's result."""

    @tool
    async def double(x: int) -> int:
        """Double x."""
        return 2 * x

    assert await double(4) == 8


async def test_sync_function_runs_in_a_worker_thread() -> None:
    """A sync tool runs off the event loop's thread, so it never blocks the loop."""
    loop_thread = threading.get_ident()

    @tool
    def where_am_i() -> int:
        """Report the thread."""
        return threading.get_ident()

    assert await where_am_i.execute({}, CTX) != loop_thread


async def test_arguments_are_coerced_by_the_pydantic_model() -> None:
    """Pydantic coerces compatible values, e.g. a list to a tuple and a dict to a model."""

    @tool
    def f(pair: tuple[int, int], location: Location) -> Any:
        """Coerce."""
        return pair, location

    assert await f.execute({"pair": [1, 2], "location": {"lat": 1, "lon": 2}}, CTX) == (
        (1, 2),
        Location(lat=1.0, lon=2.0),
    )


async def test_invalid_arguments_raise_tool_execution_error_naming_the_path() -> None:
    """Invalid arguments raise ToolExecutionError listing each problem with its path."""

    @tool
    def f(location: Location) -> None:
        """Take a location."""

    with pytest.raises(ToolExecutionError) as caught:
        await f.execute({"location": {"lat": "north"}}, CTX)
    message = caught.value.message
    assert message.startswith('Invalid arguments for tool "f": ')
    assert "arguments.location.lat:" in message
    assert "arguments.location.lon: Field required" in message
    assert caught.value.call_id == "call_1"


async def test_unexpected_arguments_are_rejected() -> None:
    """An argument the function does not take is an error, not silently dropped."""

    @tool
    def f(a: int) -> int:
        """One arg."""
        return a

    with pytest.raises(ToolExecutionError, match=r"arguments\.b: Extra inputs"):
        await f.execute({"a": 1, "b": 2}, CTX)


async def test_context_parameter_receives_the_context_and_is_hidden_from_the_schema() -> None:
    """A ToolContext-typed parameter gets the call's context and is not in the schema."""

    @tool
    async def whoami(greeting: str, context: ToolContext) -> str:
        """Say who calls."""
        return f"{greeting} {context.user_id} {context.call_id}"

    assert set(whoami.schema.input_schema["properties"]) == {"greeting"}
    assert whoami.schema.input_schema["required"] == ["greeting"]
    assert await whoami.execute({"greeting": "hi"}, CTX) == "hi u1 call_1"


async def test_optional_context_parameter_is_injected_too() -> None:
    """`ctx: ToolContext | None = None` also receives the context."""

    @tool
    def thread(ctx: ToolContext | None = None) -> str | None:
        """Which thread."""
        return ctx.thread_id if ctx else None

    assert thread.schema.input_schema["properties"] == {}
    assert await thread.execute({}, CTX) == "t1"


async def test_positional_only_parameters_are_passed_positionally() -> None:
    """Positional-only parameters still receive their arguments."""

    @tool
    def sub(a: int, b: int, /) -> int:
        """Subtract."""
        return a - b

    assert await sub.execute({"a": 5, "b": 3}, CTX) == 2


def test_missing_docstring_is_a_usage_error_saying_to_add_one() -> None:
    """A function with no docstring and no description= is refused with the fix."""

    def nodoc(x: int) -> int:
        return x

    with pytest.raises(UsageError, match="add a docstring"):
        tool(nodoc)


def test_untyped_parameter_is_a_usage_error_naming_it() -> None:
    """A parameter without a type hint is refused, naming the parameter and the fix."""

    def untyped(x, y: int) -> int:  # type: ignore[no-untyped-def]
        """Untyped."""
        return int(y)

    with pytest.raises(UsageError, match=r"parameter 'x' has no type hint; annotate it"):
        tool(untyped)


def test_var_args_are_a_usage_error() -> None:
    """*args cannot be described to the model and is refused."""

    def varargs(*items: int) -> int:
        """Sum."""
        return sum(items)

    with pytest.raises(UsageError, match=r"\*items cannot be described"):
        tool(varargs)


def test_invalid_tool_name_is_a_usage_error() -> None:
    """A name providers would reject is refused when the tool is made."""
    with pytest.raises(UsageError, match="not allowed"):

        @tool(name="get weather!")
        def f() -> None:
            """Nothing."""


def test_lambda_needs_an_explicit_name() -> None:
    """A lambda has no usable name, so the error asks for name=."""
    with pytest.raises(UsageError, match="pass a name"):
        tool(description="Echo.")(lambda x: x)


def test_decorating_a_class_is_a_usage_error_pointing_at_class_based_tools() -> None:
    """@tool on a class explains how to write a class-based tool instead."""

    class Thing:
        """A class."""

    with pytest.raises(UsageError, match="async execute"):
        tool(Thing)


def test_non_positive_timeout_is_a_usage_error() -> None:
    """timeout_s must be a positive number of seconds."""
    with pytest.raises(UsageError, match="timeout_s"):

        @tool(timeout_s=0)
        def f() -> None:
            """Nothing."""


def test_method_in_class_body_is_a_usage_error_suggesting_the_bound_method() -> None:
    """@tool on an unbound method explains to wrap the bound method instead."""

    def method(self, city: str) -> str:  # type: ignore[no-untyped-def]
        """Look up a city."""
        return city

    with pytest.raises(UsageError, match=r"tool\(my_object\.method\)"):
        tool(method)


async def test_bound_method_becomes_a_tool_without_self() -> None:
    """tool(obj.method) describes only the real parameters and calls the method."""

    class Service:
        def __init__(self) -> None:
            self.prefix = "svc"

        def lookup(self, key: str) -> str:
            """Look a key up."""
            return f"{self.prefix}:{key}"

    lookup = tool(Service().lookup)
    assert list(lookup.schema.input_schema["properties"]) == ["key"]
    assert await lookup.execute({"key": "k"}, CTX) == "svc:k"

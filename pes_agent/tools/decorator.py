"""Turn a typed, documented Python function into a tool with `@tool`.

```python
@tool
async def get_weather(city: str, units: Literal["c", "f"] = "c") -> dict[str, Any]:
    '''Get the current weather for a city.

    Args:
        city: The city name, e.g. "Paris".
        units: Celsius or Fahrenheit.
    '''
    ...
```

The docstring (without its ``Args:`` section) is the description the model reads; the type
hints become the JSON Schema of the arguments, built by pydantic. Parameter descriptions come
from ``Annotated[str, Field(description=...)]`` or from the ``Args:`` section. A parameter
annotated ``ToolContext`` receives the call's context and is not shown to the model.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.errors import PydanticUserError
from pydantic.fields import FieldInfo

from pes_agent.errors import ToolExecutionError, UsageError
from pes_agent.tools.base import ToolContext, ToolSchema
from pes_agent.tools.threads import ToolThreadsExhausted
from pes_agent.tools.validation import format_path

__all__ = ["FunctionTool", "check_tool_name", "tool"]

P = ParamSpec("P")
R = TypeVar("R")

# The name rule OpenAI and Anthropic both enforce for function/tool names.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ARGS_HEADER = re.compile(
    r"^(?P<indent>\s*)(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments)\s*:\s*$"
)
_ARG_ENTRY = re.compile(r"^\s*\**(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")
_SPHINX_PARAM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(?P<name>\w+)\s*:\s*(?P<text>.*)$")
# Schema keywords whose values are schemas / maps of schemas (where a "title" key is a property
# name, not pydantic's generated title).
_SUBSCHEMA_KEYS = ("items", "additionalProperties", "not", "contains", "propertyNames")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")


def check_tool_name(name: str) -> None:
    """Raise `UsageError` unless `name` is a valid tool name for every provider."""
    if not _TOOL_NAME.match(name):
        raise UsageError(
            f"Tool name {name!r} is not allowed: use 1-64 letters, digits, '_' or '-', "
            "e.g. @tool(name='get_weather')."
        )


class FunctionTool(Generic[P, R]):
    """A Python function the agent can call as a tool; still callable directly as before.

    `execute(arguments, context)` validates and coerces `arguments` with a pydantic model built
    from the signature, then awaits the function (a sync function runs in a worker thread, so it
    never blocks the event loop: on the agent's own bounded `ToolThreadPool`, given as
    `context.thread_pool`, else asyncio's default executor). Build one with `@tool` rather than
    directly.
    """

    def __init__(
        self,
        func: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
        requires_approval: bool = False,
    ) -> None:
        """Wrap `func` as a tool; `@tool` calls this, with the same arguments.

        Args:
            func: A typed function with a docstring, sync or async.
            name: The tool's name as the model sees it; the function's name when None.
            description: What the tool does, for the model; the docstring when None.
            timeout_s: This tool's own per-call timeout in seconds; the agent's when None.
            requires_approval: Whether every call waits for a person's approval.

        Raises:
            UsageError: `func` is not a function, a parameter has no type hint, it has no
                description, or a name or timeout is invalid.
        """
        if inspect.isclass(func) or not callable(func):
            raise UsageError(
                f"@tool decorates functions, not {func!r}. For a class-based tool, give the "
                "class a `schema` and an `async execute(arguments, context)` and register an "
                "instance of it."
            )
        tool_name = name if name is not None else getattr(func, "__name__", "")
        if name is None and not _TOOL_NAME.match(tool_name):
            raise UsageError(
                f"Cannot name a tool after {func!r}: pass a name, e.g. @tool(name='my_tool')."
            )
        check_tool_name(tool_name)
        if timeout_s is not None and not timeout_s > 0:
            raise UsageError(f"timeout_s must be a number of seconds > 0, got {timeout_s!r}.")
        if not isinstance(requires_approval, bool):
            raise UsageError(f"requires_approval must be True or False, got {requires_approval!r}.")

        docstring = inspect.getdoc(func)
        summary, arg_docs = _split_docstring(docstring or "")
        if description is None:
            if not summary:
                raise UsageError(
                    f"Tool {tool_name!r} has no description: add a docstring saying what it "
                    "does (the model reads it), or pass @tool(description=...)."
                )
            description = summary

        self._func = func
        self._name = tool_name
        self._timeout_s = timeout_s
        self._requires_approval = requires_approval
        self._is_async = _is_async_callable(func)
        self._model, self._bindings = _arguments_model(func, tool_name, arg_docs)
        # The model's validator itself (model_validate is a Python wrapper around it).
        self._validate = self._model.__pydantic_validator__.validate_python
        # (parameter, field) pairs when every parameter is passed by keyword from a field
        # (no ToolContext, no positional-only one): the usual tool, bound by one dict lookup
        # a parameter.
        self._keywords: tuple[tuple[str, str], ...] | None = (
            tuple((b.name, b.field) for b in self._bindings if b.field is not None)
            if all(b.field is not None and not b.positional_only for b in self._bindings)
            else None
        )
        self._takes_context = any(b.field is None for b in self._bindings)
        try:
            input_schema = _strip_titles(self._model.model_json_schema())
        except PydanticUserError as exc:
            raise UsageError(
                f"Tool {tool_name!r}: its parameters cannot be described as JSON Schema "
                f"({exc}); use basic types, pydantic models, dataclasses or TypedDicts."
            ) from exc
        self._schema = ToolSchema(
            name=tool_name, description=description, input_schema=input_schema
        )
        functools.update_wrapper(self, func)

    @property
    def schema(self) -> ToolSchema:
        """The name, description and argument JSON Schema shown to the model."""
        return self._schema

    @property
    def timeout_s(self) -> float | None:
        """This tool's own per-call timeout; `None` uses the agent's `tool_timeout_s`."""
        return self._timeout_s

    @property
    def requires_approval(self) -> bool:
        """Whether every call of this tool waits for a person's approval (see
        `pes_agent.approvals`)."""
        return self._requires_approval

    @property
    def takes_context(self) -> bool:
        """Whether the function has a `ToolContext` parameter, which gets each call's context.

        Without one, `execute` reads from its context only what every call of a run shares
        (the thread pool for sync tools; ids for its error's attributes, not its message)."""
        return self._takes_context

    @property
    def func(self) -> Callable[P, R]:
        """The decorated function, unchanged."""
        return self._func

    @property
    def arguments_model(self) -> type[BaseModel]:
        """The pydantic model that validates and coerces the arguments."""
        return self._model

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function directly, exactly as if it were not decorated."""
        return self._func(*args, **kwargs)

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> Any:
        """Validate `arguments`, run the function and return what it returns.

        Args:
            arguments: The arguments the model gave, by parameter name.
            context: The call's context; passed to a parameter annotated `ToolContext`.

        Returns:
            What the function returned.

        Raises:
            ToolExecutionError: An argument is invalid (every one is listed), or the agent's
                threads for sync tools are all held. Anything the function raises
                propagates unchanged.
        """
        try:
            parsed = self._validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{format_path(error['loc'])}: {error['msg']}"
                for error in exc.errors(include_url=False)
            )
            raise ToolExecutionError(
                f'Invalid arguments for tool "{self._name}": {problems}',
                call_id=context.call_id,
                tool_name=self._name,
                thread_id=context.thread_id,
                trace_id=context.trace_id,
            ) from None
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        if self._keywords is not None:
            values = parsed.__dict__
            for name, field in self._keywords:
                keywords[name] = values[field]
        else:
            for binding in self._bindings:
                value = context if binding.field is None else getattr(parsed, binding.field)
                if binding.positional_only:
                    positional.append(value)
                else:
                    keywords[binding.name] = value
        # Typed Any rather than cast(Callable[..., Any], ...): a subscripted Callable is built
        # anew on every call (a collections.abc __new__ per tool call).
        func: Any = self._func
        if self._is_async:
            return await func(*positional, **keywords)
        pool = context.thread_pool
        if pool is None:  # called outside an agent: asyncio's default executor
            return await asyncio.to_thread(_no_exit, func, *positional, **keywords)
        try:
            return await pool.run(_no_exit, func, *positional, **keywords)
        except ToolThreadsExhausted as exc:
            raise ToolExecutionError(
                f'Tool "{self._name}" was not run: {exc}',
                call_id=context.call_id,
                tool_name=self._name,
                thread_id=context.thread_id,
                trace_id=context.trace_id,
            ) from None

    def __repr__(self) -> str:
        return f"FunctionTool(name={self._name!r}, func={self._func!r})"


def _no_exit(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call `func`, turning a SystemExit (argparse, sys.exit) into an ordinary error."""
    try:
        return func(*args, **kwargs)
    except SystemExit as exc:
        raise RuntimeError(f"the tool tried to exit the process (SystemExit: {exc.code})") from None


@overload
def tool(func: Callable[P, R], /) -> FunctionTool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    requires_approval: bool = False,
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    requires_approval: bool = False,
) -> FunctionTool[P, R] | Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Make a typed, documented function a tool: `@tool` or `@tool(name=..., timeout_s=...)`.

    `name` defaults to the function's name, `description` to its docstring (minus the
    ``Args:`` section), and `timeout_s` to the agent's per-call timeout. With
    `requires_approval=True` no call of the tool runs before a person approves it (the run
    pauses; see `AgentCore.resume`).

    Args:
        func: The function, when used bare as `@tool`; its parameters need type hints, and its
            docstring's ``Args:`` section describes each one to the model.
        name: The tool's name as the model sees it; the function's name when None.
        description: What the tool does, for the model; the docstring when None.
        timeout_s: This tool's own per-call timeout in seconds; the agent's when None.
        requires_approval: Whether every call waits for a person's approval.

    Returns:
        The `FunctionTool` (still callable as the plain function), or, with keywords only, a
        decorator that makes one.

    Raises:
        UsageError: A parameter has no type hint, the function has neither docstring nor
            description, or a name or timeout is invalid (the message says the fix).
    """
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "timeout_s": timeout_s,
        "requires_approval": requires_approval,
    }
    if func is not None:
        return FunctionTool(func, **options)

    def decorate(inner: Callable[P, R]) -> FunctionTool[P, R]:
        return FunctionTool(inner, **options)

    return decorate


class _Binding(typing.NamedTuple):
    """How one function parameter is filled: from a model field, or with the context."""

    name: str
    field: str | None
    positional_only: bool


def _is_async_callable(func: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(func, "__call__", None)  # noqa: B004 - a callable object's own method
    return call is not None and inspect.iscoroutinefunction(call)


def _is_context_type(annotation: Any) -> bool:
    if annotation is ToolContext:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return members == [ToolContext]
    return False


def _has_description(annotation: Any) -> bool:
    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    return any(isinstance(meta, FieldInfo) and meta.description for meta in annotation.__metadata__)


def _arguments_model(
    func: Callable[..., Any], tool_name: str, arg_docs: Mapping[str, str]
) -> tuple[type[BaseModel], tuple[_Binding, ...]]:
    """Build the pydantic model of `func`'s parameters and how to pass each one back."""
    try:
        signature = inspect.signature(func, eval_str=True)
    except (NameError, SyntaxError, TypeError) as exc:
        raise UsageError(
            f"Tool {tool_name!r}: cannot read the type hints of {func!r} ({exc}). Define the "
            "types it names at module level so they can be resolved."
        ) from exc
    fields: dict[str, Any] = {}
    bindings: list[_Binding] = []
    for position, param in enumerate(signature.parameters.values()):
        positional_only = param.kind is inspect.Parameter.POSITIONAL_ONLY
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            stars = "*" if param.kind is inspect.Parameter.VAR_POSITIONAL else "**"
            raise UsageError(
                f"Tool {tool_name!r}: {stars}{param.name} cannot be described to the model; "
                "list each parameter with its type instead."
            )
        if (
            param.annotation is inspect.Parameter.empty
            and position == 0
            and param.name
            in (
                "self",
                "cls",
            )
        ):
            raise UsageError(
                f"Tool {tool_name!r}: @tool cannot wrap a method in its class body; make the "
                "tool from the bound method instead, e.g. tool(my_object.method)."
            )
        if param.annotation is inspect.Parameter.empty:
            raise UsageError(
                f"Tool {tool_name!r}: parameter {param.name!r} has no type hint; annotate it, "
                f"e.g. `{param.name}: str`, so the model knows what to pass."
            )
        if _is_context_type(param.annotation):
            bindings.append(_Binding(param.name, None, positional_only))
            continue
        # Fields get neutral internal names with the parameter name as alias, so parameters
        # like `json`, `schema`, `model_name` or `_private` never clash with BaseModel.
        field_name = f"p{position}"
        extra: dict[str, Any] = {}
        if param.name in arg_docs and not _has_description(param.annotation):
            extra["description"] = arg_docs[param.name]
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[field_name] = (param.annotation, Field(default, alias=param.name, **extra))
        bindings.append(_Binding(param.name, field_name, positional_only))
    try:
        model: type[BaseModel] = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid", protected_namespaces=()),
            **fields,
        )
    except (PydanticUserError, TypeError) as exc:
        raise UsageError(
            f"Tool {tool_name!r}: pydantic cannot validate its parameters ({exc}); use basic "
            "types, pydantic models, dataclasses or TypedDicts."
        ) from exc
    return model, tuple(bindings)


def _split_docstring(docstring: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and the per-parameter texts of ``Args:``."""
    lines = docstring.splitlines()
    descriptions: dict[str, str] = {}
    kept: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        header = _ARGS_HEADER.match(line)
        sphinx = _SPHINX_PARAM.match(line)
        if sphinx:
            descriptions[sphinx.group("name")] = sphinx.group("text").strip()
            index += 1
            continue
        if not header:
            kept.append(line)
            index += 1
            continue
        header_indent = len(header.group("indent"))
        entry_indent: int | None = None
        current: str | None = None
        index += 1
        while index < len(lines):
            line = lines[index]
            if not line.strip():
                index += 1
                continue
            indent = len(line) - len(line.lstrip())
            if indent <= header_indent:
                break
            if entry_indent is None:
                entry_indent = indent
            entry = _ARG_ENTRY.match(line) if indent == entry_indent else None
            if entry:
                current = entry.group("name")
                descriptions[current] = entry.group("text").strip()
            elif current is not None:
                descriptions[current] = f"{descriptions[current]} {line.strip()}".strip()
            index += 1
    summary = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
    return summary, descriptions


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's generated ``title`` keywords: noise in the prompt, never a constraint."""
    if not isinstance(schema, dict):
        return schema
    cleaned = {key: value for key, value in schema.items() if key != "title"}
    for key in _SUBSCHEMA_KEYS:
        if key in cleaned:
            cleaned[key] = _strip_titles(cleaned[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(cleaned.get(key), list):
            cleaned[key] = [_strip_titles(item) for item in cleaned[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(cleaned.get(key), dict):
            cleaned[key] = {name: _strip_titles(sub) for name, sub in cleaned[key].items()}
    return cleaned

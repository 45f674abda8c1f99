"""Build the executor's own pydantic models from values already known to be valid.

Every tool call makes a `ToolContext` and a `ToolResult` from values the executor itself
holds (the context's fields were validated once per execution; a result's are a call id, a
tool name, a status literal, the tool's output and a float). Validating them again costs
about 0.9 µs a model; setting the instance's fields directly, which is what pydantic's
`model_construct` does at the end (its per-field loop makes it slower than validation),
costs about 0.5 µs. At import the two are compared on a sample; if this pydantic lays a
model out differently, `TRUSTED` is False and the plain constructors are used.
"""

from __future__ import annotations

from typing import Any

from pes_agent.tools.base import ToolContext, ToolResult

__all__ = ["TRUSTED", "context_of", "success"]

_set = object.__setattr__
_RESULT_FIELDS = frozenset({"call_id", "tool_name", "status", "output", "duration_ms"})


def _success_fast(call_id: str, tool_name: str, output: Any, duration_ms: float) -> ToolResult:
    result = ToolResult.__new__(ToolResult)
    _set(
        result,
        "__dict__",
        {
            "call_id": call_id,
            "tool_name": tool_name,
            "status": "success",
            "output": output,
            "error": None,
            "duration_ms": duration_ms,
        },
    )
    _set(result, "__pydantic_fields_set__", set(_RESULT_FIELDS))
    _set(result, "__pydantic_extra__", None)
    _set(result, "__pydantic_private__", None)
    return result


def _context_fast(template: ToolContext, call_id: str) -> ToolContext:
    context = ToolContext.__new__(ToolContext)
    values = dict(template.__dict__)
    values["call_id"] = call_id
    _set(context, "__dict__", values)
    # The template's own set: a ToolContext is frozen, so pydantic never adds to it (a copy
    # gets a set of its own), and each call no longer allocates one (a GC-tracked object).
    _set(context, "__pydantic_fields_set__", template.__pydantic_fields_set__)
    _set(context, "__pydantic_extra__", None)
    _set(context, "__pydantic_private__", None)
    return context


def _same(made: Any, validated: Any) -> bool:
    return (
        type(made) is type(validated)
        and made.__dict__ == validated.__dict__
        and made.__pydantic_fields_set__ == validated.__pydantic_fields_set__
        and made.__pydantic_extra__ == validated.__pydantic_extra__
        and made.__pydantic_private__ == validated.__pydantic_private__
        and made == validated
    )


def _agrees() -> bool:
    """Whether the direct builds equal validated models on this pydantic."""
    try:
        template = ToolContext(thread_id="t", trace_id="r", call_id="", user_id=None)
        return _same(
            _success_fast("c", "n", {"k": 1}, 1.5),
            ToolResult(
                call_id="c", tool_name="n", status="success", output={"k": 1}, duration_ms=1.5
            ),
        ) and _same(
            _context_fast(template, "c"),
            ToolContext(thread_id="t", trace_id="r", call_id="c", user_id=None),
        )
    except Exception:  # pragma: no cover - a pydantic without these attributes
        return False


TRUSTED = _agrees()


def _success_checked(call_id: str, tool_name: str, output: Any, duration_ms: float) -> ToolResult:
    return ToolResult(
        call_id=call_id,
        tool_name=tool_name,
        status="success",
        output=output,
        duration_ms=duration_ms,
    )


def _context_checked(template: ToolContext, call_id: str) -> ToolContext:
    return template.model_copy(update={"call_id": call_id})


#: A success `ToolResult`: success(call_id, tool_name, output, duration_ms).
success = _success_fast if TRUSTED else _success_checked
#: `template` (validated once per execution) for one call: context_of(template, call_id).
context_of = _context_fast if TRUSTED else _context_checked

"""A parsed plan: what the planning model asked for, as data."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["ParsedToolCall", "PlanningOutput"]


class ParsedToolCall(BaseModel):
    """One tool call of a plan; `arguments` may hold `{step_N_result}` placeholders.

    `arguments` is normally an object of named parameters. A model may write a JSON array
    instead; the parser keeps it as written (as ART's does) and the executor turns the call into
    an error result, since tools take named parameters.
    """

    call_id: str
    tool_name: str
    arguments: dict[str, Any] | list[Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)


class PlanningOutput(BaseModel):
    """What the planning phase produced.

    A field is `None` when the model left its section out; `tool_calls == []` with an entry in
    `errors` means the section was there but unusable (this drives the repair round-trip).
    """

    title: str | None = None
    intent: str | None = None
    plan: str | None = None
    tool_calls: list[ParsedToolCall] | None = None
    thoughts: list[str] | None = None
    errors: list[str] = Field(default_factory=list)

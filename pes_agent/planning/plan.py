"""A parsed plan: what the planning model asked for, as data."""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, Field, model_validator

__all__ = ["LANGUAGE_STEP", "CallKind", "ParsedToolCall", "PlanningOutput", "same_call"]

#: The `tool_name` of a language step: a call done by one model call instead of a tool.
LANGUAGE_STEP: Final = "language_step"

#: What a planned call is: a tool call, or a language step done by the model.
CallKind = Literal["tool", "language"]


class ParsedToolCall(BaseModel):
    """One call of a plan: a tool call, or a language step done by one model call.

    A tool call names its tool: `ParsedToolCall(call_id="call_1", tool_name="search",
    arguments={"query": "..."})`; `arguments` may hold `{step_N_result}` placeholders.
    `arguments` is normally an object of named parameters. A model may write a JSON array
    instead; the parser keeps it as written (as ART's does) and the executor turns the call into
    an error result, since tools take named parameters.

    A language step gives an `instruction` instead of a tool: `ParsedToolCall(call_id="call_2",
    instruction="Summarise {step_1_result} in one sentence.")`. Its `tool_name` is then always
    `LANGUAGE_STEP` (``"language_step"``, the default), so code that reads `tool_name` keeps
    working; tell the two kinds apart with `kind` (or `instruction is not None`). The name is
    reserved: a call with it and no instruction is refused, so no tool can be called that.
    Placeholders in the instruction are filled in as text; a language step takes no arguments.

    `why` is the model's short reason for the call, when it gave one (shown with the plan).
    """

    call_id: str
    tool_name: str = LANGUAGE_STEP
    arguments: dict[str, Any] | list[Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    instruction: str | None = None
    why: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _language_step_name(cls, data: Any) -> Any:
        # A language step need not name a tool: fill in the marker so `tool_name` stays a str.
        if (
            isinstance(data, dict)
            and data.get("instruction") is not None
            and data.get("tool_name") is None
        ):
            data = {**data, "tool_name": LANGUAGE_STEP}
        return data

    @model_validator(mode="after")
    def _language_step_shape(self) -> ParsedToolCall:
        if self.instruction is None:
            if self.tool_name == LANGUAGE_STEP:
                raise ValueError(
                    "a call needs a tool_name, or an instruction to be a language step "
                    f"({LANGUAGE_STEP!r} is reserved for language steps)"
                )
            return self
        if not self.instruction.strip():
            raise ValueError("a language step needs a non-empty instruction")
        if self.tool_name != LANGUAGE_STEP:
            raise ValueError(
                f"a call has either a tool_name or an instruction, not both (got tool_name="
                f"{self.tool_name!r}); leave tool_name out for a language step"
            )
        if self.arguments:
            raise ValueError(
                "a language step takes no arguments; write what it needs into the instruction "
                "(placeholders such as {step_1_result} are filled in there)"
            )
        return self

    @property
    def kind(self) -> CallKind:
        """`"language"` for a language step (it has an `instruction`), else `"tool"`."""
        return "tool" if self.instruction is None else "language"


def same_call(first: ParsedToolCall, second: ParsedToolCall) -> bool:
    """Whether two calls do the same thing: equal but for `why`, which only explains a call.

    A call that starts while its plan streams is submitted at its `)`, before any `# why`
    after it; the final plan's call is the same call with its reason.

    Args:
        first: One call.
        second: The other.

    Returns:
        True when id, tool, arguments, dependencies and instruction are all equal.
    """
    return (
        first.call_id == second.call_id
        and first.tool_name == second.tool_name
        and first.arguments == second.arguments
        and first.depends_on == second.depends_on
        and first.instruction == second.instruction
    )


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

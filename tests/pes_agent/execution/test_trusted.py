"""The executor's directly built models are the models validation would give."""

from __future__ import annotations

import pydantic
import pytest

from pes_agent.execution import _trusted
from pes_agent.tools.base import ToolContext, ToolResult


def test_the_direct_builds_are_used_on_this_pydantic() -> None:
    assert _trusted.TRUSTED


def test_a_success_equals_the_validated_result() -> None:
    made = _trusted.success("c", "tool", {"k": [1]}, 2.5)
    validated = ToolResult(
        call_id="c", tool_name="tool", status="success", output={"k": [1]}, duration_ms=2.5
    )
    assert made == validated
    assert made.model_dump() == validated.model_dump()
    assert made.model_fields_set == validated.model_fields_set
    assert made.model_copy(update={"error": "x"}).error == "x"
    assert made.model_copy().model_fields_set is not made.model_fields_set


def test_a_context_copies_its_template_with_the_call_id() -> None:
    template = ToolContext(thread_id="t", trace_id="r", call_id="", user_id="u")
    made = _trusted.context_of(template, "call_1")
    assert made == ToolContext(thread_id="t", trace_id="r", call_id="call_1", user_id="u")
    assert template.call_id == ""
    with pytest.raises(pydantic.ValidationError):
        made.call_id = "other"  # type: ignore[misc]


def test_contexts_sharing_their_templates_fields_set_stay_frozen_and_copy_apart() -> None:
    """A call's context, made from the execution's template, cannot change it: setting a
    field is refused, and a copy with an update gets fields of its own."""
    template = ToolContext(thread_id="t", trace_id="r", call_id="", user_id="u")
    made = _trusted.context_of(template, "call_1")
    with pytest.raises(pydantic.ValidationError):
        made.user_id = "other"  # type: ignore[misc]
    copied = made.model_copy(update={"session_id": "s"})
    assert copied.session_id == "s"
    assert "session_id" in copied.model_fields_set
    assert "session_id" not in made.model_fields_set
    assert template.model_fields_set == {"thread_id", "trace_id", "call_id", "user_id"}
    assert made.model_dump(exclude_unset=True) == {
        "thread_id": "t",
        "trace_id": "r",
        "call_id": "call_1",
        "user_id": "u",
    }

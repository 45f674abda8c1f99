"""The exception tree: what every pes-agent error carries."""

from __future__ import annotations

import pytest

from pes_agent import (
    ConfigurationError,
    DimensionMismatchError,
    NotAwaitingApprovalError,
    PESAgentError,
    PlanParseError,
    ProviderError,
    RunError,
    ScriptExhaustedError,
    StateConflictError,
    StorageError,
    ThreadAwaitingApprovalError,
    ToolExecutionError,
    ToolSourceError,
    UsageError,
)

_ERRORS: list[PESAgentError] = [
    PESAgentError("the text"),
    UsageError("the text"),
    ConfigurationError("the text"),
    DimensionMismatchError("the text", expected=3, actual=4),
    NotAwaitingApprovalError("the text", thread_id="t", trace_id="r"),
    ThreadAwaitingApprovalError("the text", thread_id="t", trace_id="r"),
    RunError("the text"),
    ProviderError("the text", status_code=500, retryable=True),
    ScriptExhaustedError("the text"),
    PlanParseError("the text", raw_output="{"),
    ToolExecutionError("the text", call_id="c", tool_name="add"),
    ToolSourceError("the text", source_name="files"),
    StorageError("the text", transient=True),
    StateConflictError("the text", expected_version=2),
]


@pytest.mark.parametrize("error", _ERRORS, ids=lambda error: type(error).__name__)
def test_every_error_has_the_message_it_was_raised_with(error: PESAgentError) -> None:
    """Any pes-agent error, usage or run error, carries its text as `message`, as `str` shows it."""
    assert error.message == "the text"
    assert str(error) == "the text"

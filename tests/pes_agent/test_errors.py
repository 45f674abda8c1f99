"""The exception tree: what every pes-agent error carries."""

from __future__ import annotations

import pickle

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
    errors,
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


def _every_error_class() -> list[type[errors.PESAgentError]]:
    found: list[type[errors.PESAgentError]] = []
    pending: list[type[errors.PESAgentError]] = [errors.PESAgentError]
    while pending:
        kind = pending.pop()
        found.append(kind)
        pending.extend(kind.__subclasses__())
    return found


@pytest.mark.parametrize("kind", _every_error_class(), ids=lambda kind: kind.__name__)
def test_every_error_pickles_with_its_attributes(kind: type[errors.PESAgentError]) -> None:
    """A durable engine keeps a failed step's error and raises it again on replay, maybe in
    another process: the error comes back as the same class with the same attributes, even
    when its __init__ requires keywords."""
    error = kind.__new__(kind)
    Exception.__init__(error, "it failed: do this instead")
    error.message = "it failed: do this instead"
    error.status_code = 429  # type: ignore[attr-defined]
    error.limit = "total_tokens"  # type: ignore[attr-defined]
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is kind
    assert str(copy) == copy.message == "it failed: do this instead"
    assert copy.__dict__ == error.__dict__


def test_a_usage_limit_error_round_trips_through_pickle() -> None:
    error = errors.UsageLimitExceeded(
        "total_tokens: 4,120 used, limit 4,000",
        limit="total_tokens",
        used=4120,
        allowed=4000,
        thread_id="t1",
        trace_id="tr",
    )
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.limit, copy.used, copy.allowed, copy.thread_id) == (
        "total_tokens",
        4120,
        4000,
        "t1",
    )
    assert isinstance(copy, errors.RunError)

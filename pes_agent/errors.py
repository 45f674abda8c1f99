"""Every error pes-agent raises or reports.

```
PESAgentError
├── UsageError                the developer's mistake; the message says the fix (also a ValueError)
│   ├── ConfigurationError    a provider, storage or tool was configured wrongly
│   ├── NotAwaitingApprovalError  resume() found no such paused run (already resumed or
│   │                             cancelled, maybe by another process)
│   └── ThreadAwaitingApprovalError  process() was asked for a new turn on a thread whose
│                                    last run waits for approval
└── RunError                  something failed while a run was under way; carries thread/trace ids
    ├── ProviderError         the model API failed (status code, whether it was retryable)
    │   ├── ScriptExhaustedError   a ScriptedProvider ran out of responses
    │   └── CassetteMissError      a ReplayProvider's cassette holds no such request
    ├── PlanParseError        the model's plan could not be used, even after the repair round-trip
    ├── ToolExecutionError    a tool raised, timed out or was refused (carries call_id, tool_name)
    ├── ToolSourceError       a tool source (an MCP server) could not be opened: its tools are
    │                         unknown, so nothing is planned (carries source_name)
    ├── UsageLimitExceeded    a run would cross one of its `UsageLimits` (carries the limit's
    │                         name, what was used and what is allowed)
    └── StorageError          the store could not be read or written; `transient` says whether
        │                     the same call may succeed if tried again
        └── StateConflictError    a compare-and-set save found another version than expected
```

Every one of them has `message`, the text it was raised with (the same as `str(error)`), so a
caller that reports an error reads `error.message` whatever its type; the subclasses add their
context as attributes.

`AgentCore.process` raises only `UsageError`s. Every `RunError` becomes an `error` or `partial`
result with an ERROR observation instead.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CassetteMissError",
    "ConfigurationError",
    "NotAwaitingApprovalError",
    "PESAgentError",
    "PlanParseError",
    "ProviderError",
    "RunError",
    "ScriptExhaustedError",
    "StateConflictError",
    "StorageError",
    "ThreadAwaitingApprovalError",
    "ToolExecutionError",
    "ToolSourceError",
    "UsageError",
    "UsageLimitExceeded",
]


class PESAgentError(Exception):
    """Root of every exception pes-agent raises; `message` says what went wrong and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled whole, attributes and all, whatever the subclass's __init__ requires: a
        # durable engine keeps a failed step's error and raises it again on replay.
        return (_restored, (type(self), self.message, dict(self.__dict__)))


def _restored(kind: type[PESAgentError], message: str, state: dict[str, Any]) -> PESAgentError:
    """An error of `kind` with `message` and attributes `state`, its __init__ not called."""
    error = kind.__new__(kind)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class UsageError(PESAgentError, ValueError):
    """The library was called wrongly; the message says how to call it instead."""


class ConfigurationError(UsageError):
    """A provider, storage, tool or thread was configured wrongly."""


class NotAwaitingApprovalError(UsageError):
    """`resume` found no run waiting for approval under that thread and trace id: it was
    resumed or cancelled already (perhaps by another process), or it never paused."""

    def __init__(self, message: str, *, thread_id: str, trace_id: str) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.trace_id = trace_id


class ThreadAwaitingApprovalError(UsageError):
    """`process` was asked for a new turn on a thread whose run `trace_id` waits for approval:
    resume that run (or cancel it) first, since a thread runs one turn at a time."""

    def __init__(self, message: str, *, thread_id: str, trace_id: str) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.trace_id = trace_id


class RunError(PESAgentError):
    """A failure during a run, with the thread and trace it happened in."""

    def __init__(
        self, message: str, *, thread_id: str | None = None, trace_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.trace_id = trace_id


class ProviderError(RunError):
    """The model provider failed; `retryable` says whether trying again could help.

    `provider` names the provider that failed and `status_code` the HTTP status, if any.
    `code` is the error code the API's answer gave (OpenAI's ``"context_length_exceeded"``);
    `refusal` says when the server refused the request itself rather than failed:
    ``"context_length"`` (the prompt is too long for the model) or ``"content_filter"`` (the
    provider's content policy). A `FallbackProvider` reads them to decide whether the next
    provider should try.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        status_code: int | None = None,
        retryable: bool = False,
        code: str | None = None,
        refusal: str | None = None,
        thread_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        super().__init__(message, thread_id=thread_id, trace_id=trace_id)
        self.provider = provider
        self.status_code = status_code
        self.retryable = retryable
        self.code = code
        self.refusal = refusal


class ScriptExhaustedError(ProviderError):
    """A `ScriptedProvider` was asked for more responses than it was given."""


class CassetteMissError(ProviderError):
    """A `ReplayProvider` was asked for a request its cassette does not hold; the message shows
    the closest recorded request and how the two differ."""


class PlanParseError(RunError):
    """The planning output was unusable even after one repair round-trip."""

    def __init__(
        self,
        message: str,
        *,
        raw_output: str = "",
        errors: list[str] | None = None,
        thread_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        super().__init__(message, thread_id=thread_id, trace_id=trace_id)
        self.raw_output = raw_output
        self.errors = list(errors or [])


class ToolExecutionError(RunError):
    """A tool call failed: it raised, timed out, was not enabled or got invalid arguments."""

    def __init__(
        self,
        message: str,
        *,
        call_id: str | None = None,
        tool_name: str | None = None,
        thread_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        super().__init__(message, thread_id=thread_id, trace_id=trace_id)
        self.call_id = call_id
        self.tool_name = tool_name


class ToolSourceError(RunError):
    """A tool source (such as an MCP server) did not start, answer or list its tools."""

    def __init__(self, message: str, *, source_name: str) -> None:
        super().__init__(message)
        self.source_name = source_name


class UsageLimitExceeded(RunError):
    """A run would cross one of its `UsageLimits`; it stops with `status="error"`.

    `limit` names the limit (`"total_tokens"`, `"requests"`, ...), `used` is what the run had
    used when it was stopped and `allowed` the limit. The message reads
    `"total_tokens: 4,120 used, limit 4,000"`.
    """

    def __init__(
        self,
        message: str,
        *,
        limit: str,
        used: int,
        allowed: int,
        thread_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        super().__init__(message, thread_id=thread_id, trace_id=trace_id)
        self.limit = limit
        self.used = used
        self.allowed = allowed


class StorageError(RunError):
    """The storage backend could not be read or written.

    `transient` is True when the same call may succeed if made again (a connection lost or
    refused, a database busy or locked for too long, a serialisation failure); False when it
    would fail the same way (a damaged row, data that cannot be stored, a duplicate message
    id, a thread lock lost mid-run, a version conflict). A commit that failed transiently may
    still have landed: repeat it with the same `trace_id` (`Storage.commit_turn`), which is
    never written twice.
    """

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        thread_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        super().__init__(message, thread_id=thread_id, trace_id=trace_id)
        self.transient = transient


class StateConflictError(StorageError):
    """A save with `expected_version` found the thread's state at another version: someone
    saved it meanwhile. Read it again, apply the change and save with the version read."""

    def __init__(
        self,
        message: str,
        *,
        expected_version: int,
        thread_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        super().__init__(message, transient=False, thread_id=thread_id, trace_id=trace_id)
        self.expected_version = expected_version

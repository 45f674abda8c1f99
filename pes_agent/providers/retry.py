"""The one retry layer of the SDK-backed providers: what to retry, how long to wait, when to stop.

A provider streams one *attempt* at a time; an attempt fails by raising `AttemptFailure`, or an
SDK exception the provider's `classify` turns into one (scrubbed of secrets, the SDK exception
itself dropped). `retrying_stream` runs the attempts under tenacity:

- retried: HTTP 408, 409, 429 and every 5xx (Anthropic's 529 "overloaded" included), in-stream
  overload/server errors, connection errors, timeouts, and *incomplete* streams (the body ended
  without its terminal event — such a stream is never returned as a finished answer);
- not retried: every other status (400, 401, 403, 404, 422, ...), and a request that could not
  be sent at all (a header httpx refuses, an unsupported URL): raised at once;
- the wait is the server's `retry-after-ms` / `Retry-After` (seconds or an HTTP date), capped at
  `RetryPolicy.max_retry_after_s`; otherwise exponential backoff with jitter;
- bounded twice: at most `ProviderConfig.max_retries + 1` attempts, and no retry whose wait would
  end past `RetryPolicy.max_elapsed_s` after the first attempt started.

When an attempt fails after it had already yielded tokens, the next attempt starts by yielding
`StreamRestart(reason, attempt)` so the consumer can discard the partial answer (text, thinking
and any `ToolCallEvent`s: the next attempt yields its own calls afresh), and the tokens
that attempt cost are added to the final usage as `retried_input_tokens` /
`retried_output_tokens` (see `pes_agent.usage.Usage`).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, aclosing, nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal, TypedDict, TypeVar, Unpack

import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
)
from tenacity.wait import wait_base

from pes_agent.errors import ConfigurationError
from pes_agent.providers.base import (
    ProviderEvent,
    StreamMetadata,
    StreamRestart,
    TokenDelta,
    ToolCallEvent,
)

__all__ = [
    "AttemptFailure",
    "FailureKind",
    "RetryLoop",
    "RetryPolicy",
    "is_retryable_status",
    "parse_retry_after",
    "retrying_call",
    "retrying_stream",
]

_T = TypeVar("_T")

FailureKind = Literal["status", "stream_error", "timeout", "connection", "incomplete", "request"]


def _default_sleep(seconds: float) -> Awaitable[None]:
    return asyncio.sleep(seconds)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to wait between attempts and how long to keep trying.

    The number of attempts is `ProviderConfig.max_retries + 1`; this policy sets the timing.
    Backoff without a `Retry-After` header waits `initial_backoff_s * 2**(n-1)` plus up to
    `jitter_s` of random jitter, at most `max_backoff_s`. `sleep` is injectable so tests can
    record the waits instead of spending them.
    """

    initial_backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    jitter_s: float = 0.5
    max_retry_after_s: float = 30.0
    max_elapsed_s: float = 120.0
    sleep: Callable[[float], Awaitable[None]] = _default_sleep

    def __post_init__(self) -> None:
        for name in (
            "initial_backoff_s",
            "max_backoff_s",
            "jitter_s",
            "max_retry_after_s",
            "max_elapsed_s",
        ):
            if getattr(self, name) < 0:
                raise ConfigurationError(f"RetryPolicy.{name} must be >= 0 seconds")


class AttemptFailure(Exception):
    """One attempt failed; `reason` is safe to show (no secrets) and says what happened.

    `code` is the error code the API's answer gave, if any (OpenAI's
    ``"context_length_exceeded"``, an in-stream error's type).
    """

    def __init__(
        self,
        reason: str,
        *,
        kind: FailureKind,
        retryable: bool,
        status_code: int | None = None,
        retry_after_s: float | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.retryable = retryable
        self.status_code = status_code
        self.retry_after_s = retry_after_s
        self.code = code


def is_retryable_status(status_code: int) -> bool:
    """Whether an HTTP status is worth retrying: 408, 409, 429 and every 5xx (529 included)."""
    return status_code in (408, 409, 429) or status_code >= 500


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the server asked to wait: `retry-after-ms`, else `Retry-After` (seconds or date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = datetime.now(UTC).timestamp() if now is None else now
    return max(0.0, when.timestamp() - current)


class _RetryAfterOrBackoff(wait_base):
    """Wait what the server asked (capped), or back off exponentially with jitter."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy

    def __call__(self, retry_state: RetryCallState) -> float:
        policy = self._policy
        outcome = retry_state.outcome
        failure = outcome.exception() if outcome is not None else None
        if isinstance(failure, AttemptFailure) and failure.retry_after_s is not None:
            return min(failure.retry_after_s, policy.max_retry_after_s)
        exponent = min(retry_state.attempt_number - 1, 32)
        backoff = policy.initial_backoff_s * 2.0**exponent + random.uniform(0, policy.jitter_s)
        return min(backoff, policy.max_backoff_s)


def _should_retry(exc: BaseException) -> bool:
    return isinstance(exc, AttemptFailure) and exc.retryable


class RetryLoop(TypedDict):
    """What `retrying_stream` and `retrying_call` take besides the attempt (keywords)."""

    classify: Callable[[Exception], AttemptFailure | None]
    """Turns an SDK or transport exception into an `AttemptFailure`; `None` lets it propagate."""
    max_retries: int
    """How many retries after the first attempt (`ProviderConfig.max_retries`)."""
    policy: RetryPolicy
    on_give_up: Callable[[AttemptFailure, int], Exception]
    """What to raise for a failure not retried, or the last one, and the attempts made."""
    log: structlog.typing.FilteringBoundLogger
    slot: asyncio.Semaphore
    """The provider's concurrency limit: each attempt holds it while it runs."""


async def retrying_stream(
    attempt: Callable[[], AsyncGenerator[ProviderEvent, None]],
    *,
    in_flight: AbstractAsyncContextManager[object] | None = None,
    **loop: Unpack[RetryLoop],
) -> AsyncIterator[ProviderEvent]:
    """Stream `attempt()` until one attempt finishes, retrying as the module docstring says.

    An attempt fails by raising `AttemptFailure`, or any exception `classify` turns into one
    (SDK and transport errors); other exceptions propagate untouched. The SDK exception is
    dropped, not chained: its text may quote the API key and its request carries it.
    Each attempt holds `slot` (the provider's concurrency limit) while it runs, not while it
    waits to retry; the whole call, waits included, is inside `in_flight` (entered when the
    first event is asked for). The final `StreamMetadata` gets timings measured over the whole call:
    from this generator's start to the first token of the successful attempt, and to its end.
    A failure that is not retried, or the last one, is raised as `on_give_up(failure, attempts)`.
    """

    classify, log, slot = loop["classify"], loop["log"], loop["slot"]
    retrying = _retrying(loop["max_retries"], loop["policy"], log)
    started = time.perf_counter()
    attempt_number = 0
    dirty = False  # tokens were yielded since the consumer last started afresh
    last_reason = ""
    wasted = _WastedAttempts()
    async with in_flight or nullcontext():
        try:
            async for attempt_manager in retrying:
                attempt_number = attempt_manager.retry_state.attempt_number
                if dirty:
                    yield StreamRestart(reason=last_reason, attempt=attempt_number)
                    dirty = False
                first_token: float | None = None
                pieces = chars = 0
                failure: AttemptFailure | None = None
                try:
                    async with slot, aclosing(attempt()) as events:
                        async for event in events:
                            if event.__class__ is StreamMetadata:
                                timed = wasted.charge(_timed(event, started, first_token))
                                _log_finished(log, timed, attempt_number)
                                yield timed
                            else:
                                if first_token is None:
                                    first_token = time.perf_counter()
                                    dirty = True
                                if event.__class__ is TokenDelta:
                                    pieces += 1
                                    chars += len(event.text)
                                elif event.__class__ is ToolCallEvent:
                                    # A finished call streamed its name and arguments too.
                                    pieces += 1
                                    chars += _call_chars(event)
                                yield event
                except Exception as exc:
                    # Created here but never raised here, so it does not chain the SDK exception.
                    failure = _as_failure(exc, classify)
                    if failure is None:
                        raise
                if failure is None:
                    attempt_manager.retry_state.set_result(None)
                else:
                    if first_token is not None:
                        wasted.add(pieces, chars)
                    last_reason = failure.reason
                    attempt_manager.retry_state.set_exception((type(failure), failure, None))
        except AttemptFailure as failure:
            raise _give_up(failure, attempt_number, started, log, loop["on_give_up"]) from None


def _as_failure(
    exc: Exception, classify: Callable[[Exception], AttemptFailure | None]
) -> AttemptFailure | None:
    """The attempt's exception as an `AttemptFailure`, or `None` when it is to propagate."""
    return exc if isinstance(exc, AttemptFailure) else classify(exc)


def _give_up(
    failure: AttemptFailure,
    attempts: int,
    started: float,
    log: structlog.typing.FilteringBoundLogger,
    on_give_up: Callable[[AttemptFailure, int], Exception],
) -> Exception:
    """Log `llm.call_failed` for a call begun at `started`; return what to raise for it."""
    log.error(
        "llm.call_failed",
        attempts=attempts,
        reason=failure.reason,
        status_code=failure.status_code,
        retryable=failure.retryable,
        latency_ms=round((time.perf_counter() - started) * 1000.0, 1),
    )
    return on_give_up(failure, attempts)


def _retrying(
    max_retries: int, policy: RetryPolicy, log: structlog.typing.FilteringBoundLogger
) -> AsyncRetrying:
    """The tenacity loop both `retrying_stream` and `retrying_call` run their attempts in."""

    def before_sleep(state: RetryCallState) -> None:
        outcome = state.outcome
        failure = outcome.exception() if outcome is not None else None
        log.warning(
            "llm.retry",
            attempt=state.attempt_number,
            wait_s=round(state.upcoming_sleep, 3),
            reason=failure.reason if isinstance(failure, AttemptFailure) else None,
            status_code=failure.status_code if isinstance(failure, AttemptFailure) else None,
        )

    return AsyncRetrying(
        stop=stop_after_attempt(max_retries + 1) | stop_before_delay(policy.max_elapsed_s),
        wait=_RetryAfterOrBackoff(policy),
        retry=retry_if_exception(_should_retry),
        sleep=policy.sleep,
        before_sleep=before_sleep,
        reraise=True,
    )


async def retrying_call(attempt: Callable[[], Awaitable[_T]], **loop: Unpack[RetryLoop]) -> _T:
    """`await attempt()` until one attempt succeeds, under the same rules as `retrying_stream`.

    For calls that answer at once rather than stream (embeddings). Each attempt holds `slot`
    while it runs, not while it waits; the SDK exception is dropped, not chained; a failure not
    retried, or the last one, is raised as `on_give_up(failure, attempts)`.
    """
    classify, log, slot = loop["classify"], loop["log"], loop["slot"]
    started = time.perf_counter()
    attempt_number = 0
    try:
        async for attempt_manager in _retrying(loop["max_retries"], loop["policy"], log):
            attempt_number = attempt_manager.retry_state.attempt_number
            failure: AttemptFailure | None = None
            try:
                async with slot:
                    result = await attempt()
            except Exception as exc:
                failure = _as_failure(exc, classify)
                if failure is None:
                    raise
            if failure is None:
                return result
            attempt_manager.retry_state.set_exception((type(failure), failure, None))
    except AttemptFailure as failure:
        raise _give_up(failure, attempt_number, started, log, loop["on_give_up"]) from None
    raise AssertionError("tenacity ended without a result or a failure")  # pragma: no cover


class _WastedAttempts:
    """The attempts of one call that streamed and then failed: what they cost, estimated.

    A cut stream reports no usage. The prompt was the same as the successful attempt's, so it
    cost as many input tokens; the output is estimated from what streamed: one token per
    piece, and at least one per four characters (a piece may hold several tokens).
    """

    __slots__ = ("attempts", "output_tokens")

    def __init__(self) -> None:
        self.attempts = 0
        self.output_tokens = 0

    def add(self, pieces: int, chars: int) -> None:
        self.attempts += 1
        self.output_tokens += max(pieces, math.ceil(chars / 4))

    def charge(self, meta: StreamMetadata) -> StreamMetadata:
        """`meta` with these attempts' tokens in its usage (as `retried_*` and in the total)."""
        if not self.attempts:
            return meta
        usage = meta.usage
        retried_input = self.attempts * usage.input_tokens
        retried_output = self.output_tokens
        return replace(
            meta,
            usage=usage.model_copy(
                update={
                    "retried_input_tokens": usage.retried_input_tokens + retried_input,
                    "retried_output_tokens": usage.retried_output_tokens + retried_output,
                    "total_tokens": usage.total_tokens + retried_input + retried_output,
                }
            ),
        )


def _call_chars(event: ToolCallEvent) -> int:
    call = event.call
    arguments = event.raw if event.raw is not None else json.dumps(call.arguments, default=str)
    return len(call.name) + len(arguments)


def _timed(meta: StreamMetadata, started: float, first_token: float | None) -> StreamMetadata:
    now = time.perf_counter()
    return replace(
        meta,
        time_to_first_token_ms=None if first_token is None else (first_token - started) * 1000.0,
        total_ms=(now - started) * 1000.0,
    )


def _log_finished(
    log: structlog.typing.FilteringBoundLogger, meta: StreamMetadata, attempt: int
) -> None:
    usage = meta.usage
    log.info(
        "llm.call_finished",
        attempt=attempt,
        latency_ms=None if meta.total_ms is None else round(meta.total_ms, 1),
        ttft_ms=(
            None if meta.time_to_first_token_ms is None else round(meta.time_to_first_token_ms, 1)
        ),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        retried_input_tokens=usage.retried_input_tokens,
        retried_output_tokens=usage.retried_output_tokens,
        stop_reason=meta.stop_reason,
    )

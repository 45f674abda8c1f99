"""The shared retry layer, exercised through both adapters and the real SDKs."""

from __future__ import annotations

import email.utils
import time

import pytest

from pes_agent.errors import ConfigurationError, ProviderError
from pes_agent.providers import RetryPolicy, StreamRestart
from pes_agent.providers.retry import parse_retry_after

from .conftest import ProviderMaker
from .helpers import RecordedSleeps, collect, content, metadata, restarts
from .model_server import (
    CutStream,
    Fault,
    Garbled,
    MidStreamError,
    ModelServer,
    Reply,
    Slow,
    unused_port,
)

PROVIDERS = ["openai", "anthropic"]


@pytest.fixture(params=PROVIDERS)
def provider_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_429_waits_exactly_the_retry_after_seconds(
    model_server: ModelServer,
    make_provider: ProviderMaker,
    sleeps: RecordedSleeps,
    provider_name: str,
) -> None:
    """A 429 with Retry-After: 7 is retried after a 7-second wait, then succeeds."""
    model_server.script(Fault(429, retry_after="7"), Reply("after the wait"))
    events = await collect(make_provider(provider_name))

    assert content(events) == "after the wait"
    assert len(model_server.requests) == 2
    assert sleeps.waits == [7.0]
    assert restarts(events) == [], "nothing had streamed, so there is nothing to reset"


async def test_retry_after_ms_wins_over_retry_after(
    model_server: ModelServer,
    make_provider: ProviderMaker,
    sleeps: RecordedSleeps,
    provider_name: str,
) -> None:
    """The finer `retry-after-ms` header is used when the server sends both."""
    model_server.script(Fault(429, retry_after="7", retry_after_ms="1250"), Reply("ok"))
    await collect(make_provider(provider_name))
    assert sleeps.waits == [1.25]


async def test_retry_after_as_http_date(
    model_server: ModelServer,
    make_provider: ProviderMaker,
    sleeps: RecordedSleeps,
    provider_name: str,
) -> None:
    """A Retry-After HTTP date is turned into the seconds left until then."""
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    model_server.script(Fault(503, retry_after=when), Reply("ok"))
    await collect(make_provider(provider_name))
    (wait,) = sleeps.waits
    assert 17.0 <= wait <= 20.0


async def test_retry_after_is_capped(
    model_server: ModelServer,
    make_provider: ProviderMaker,
    sleeps: RecordedSleeps,
    provider_name: str,
) -> None:
    """A Retry-After beyond the policy's cap waits only the cap."""
    model_server.script(Fault(429, retry_after="3600"), Reply("ok"))
    await collect(make_provider(provider_name))
    assert sleeps.waits == [RetryPolicy().max_retry_after_s]


@pytest.mark.parametrize("status", [408, 409, 500, 502, 503, 504, 529])
async def test_retryable_statuses_are_retried_until_success(
    model_server: ModelServer,
    make_provider: ProviderMaker,
    sleeps: RecordedSleeps,
    provider_name: str,
    status: int,
) -> None:
    """Each retryable status is retried with backoff and the call then succeeds."""
    model_server.script(Fault(status), Fault(status), Reply("recovered"))
    events = await collect(make_provider(provider_name))

    assert content(events) == "recovered"
    assert len(model_server.requests) == 3
    assert len(sleeps.waits) == 2
    policy = RetryPolicy()
    first, second = sleeps.waits
    assert policy.initial_backoff_s <= first <= policy.initial_backoff_s + policy.jitter_s
    assert 2 * policy.initial_backoff_s <= second <= 2 * policy.initial_backoff_s + policy.jitter_s


async def test_backoff_grows_exponentially_up_to_the_maximum(
    model_server: ModelServer, make_provider: ProviderMaker, sleeps: RecordedSleeps
) -> None:
    """Without Retry-After the waits double each time and stop growing at max_backoff_s."""
    model_server.script(*[Fault(500)] * 6, Reply("finally"))
    policy = RetryPolicy(initial_backoff_s=1.0, max_backoff_s=5.0, jitter_s=0.0, sleep=sleeps)
    await collect(make_provider("openai", max_retries=6, retry_policy=policy))
    assert sleeps.waits == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


async def test_timeout_is_retried(
    model_server: ModelServer, make_provider: ProviderMaker, provider_name: str
) -> None:
    """A response slower than timeout_s is abandoned and the next attempt succeeds."""
    model_server.script(Slow(5.0), Reply("on time"))
    started = time.perf_counter()
    events = await collect(make_provider(provider_name, timeout_s=0.3))
    assert content(events) == "on time"
    assert len(model_server.requests) == 2
    assert time.perf_counter() - started < 3.0, "the slow attempt must be cut at the timeout"


async def test_cut_stream_is_restarted_after_streamed_tokens(
    model_server: ModelServer, make_provider: ProviderMaker, provider_name: str
) -> None:
    """A dropped connection mid-stream yields StreamRestart, then the fresh attempt's tokens."""
    model_server.script(CutStream(Reply("the first try, cut"), after_chunks=3), Reply("second"))
    events = await collect(make_provider(provider_name))

    (restart,) = restarts(events)
    assert restart.attempt == 2
    assert "connection" in restart.reason
    at = events.index(restart)
    assert content(events[:at], after_last_restart=False) == "the first tr"
    assert content(events) == "second"
    assert metadata(events).usage.requests == 1


async def test_one_restart_per_reset_even_after_several_failures(
    model_server: ModelServer, make_provider: ProviderMaker, provider_name: str
) -> None:
    """A failure before any new token needs no second StreamRestart."""
    model_server.script(CutStream(after_chunks=2), Fault(500), Reply("third time"))
    events = await collect(make_provider(provider_name))
    assert [r.attempt for r in restarts(events)] == [2]
    assert content(events) == "third time"


async def test_restart_comes_before_every_token_of_the_fresh_attempt(
    model_server: ModelServer, make_provider: ProviderMaker, provider_name: str
) -> None:
    """Two cut streams in a row give two restarts, each right before its attempt's tokens."""
    model_server.script(
        CutStream(after_chunks=2), CutStream(after_chunks=2), Reply("done", chunk_chars=2)
    )
    events = await collect(make_provider(provider_name))
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "TokenDelta",
        "TokenDelta",
        "StreamRestart",
        "TokenDelta",
        "TokenDelta",
        "StreamRestart",
        "TokenDelta",
        "TokenDelta",
        "StreamMetadata",
    ]
    assert [e.attempt for e in events if isinstance(e, StreamRestart)] == [2, 3]


async def test_persistent_failure_stops_after_max_retries_plus_one(
    model_server: ModelServer,
    make_provider: ProviderMaker,
    sleeps: RecordedSleeps,
    provider_name: str,
) -> None:
    """With max_retries=2 a server that always fails sees 3 attempts, then a ProviderError."""
    model_server.default = Fault(503)
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider(provider_name, max_retries=2))

    assert len(model_server.requests) == 3
    assert len(sleeps.waits) == 2
    error = caught.value
    assert error.status_code == 503
    assert error.retryable is True
    assert error.provider == provider_name
    assert error.thread_id == "thread-1"
    assert error.trace_id == "trace-1"
    assert "after 3 attempts" in str(error)
    assert "503" in str(error)
    assert error.__cause__ is None
    assert error.__suppress_context__ is True


async def test_max_retries_zero_makes_one_attempt(
    model_server: ModelServer, make_provider: ProviderMaker, provider_name: str
) -> None:
    """max_retries=0 disables retries: one request, then the error."""
    model_server.default = Fault(429, retry_after="1")
    with pytest.raises(ProviderError, match="after 1 attempt:"):
        await collect(make_provider(provider_name, max_retries=0))
    assert len(model_server.requests) == 1


async def test_real_waits_are_bounded_in_wall_time(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """A persistent failure stops at max_elapsed_s even when max_retries would allow more."""
    model_server.default = Fault(500)
    policy = RetryPolicy(initial_backoff_s=0.05, jitter_s=0.0, max_elapsed_s=0.3)
    started = time.perf_counter()
    with pytest.raises(ProviderError):
        await collect(make_provider("anthropic", max_retries=50, retry_policy=policy))
    assert time.perf_counter() - started < 2.0
    assert 2 <= len(model_server.requests) < 10


async def test_connection_refused_is_retried_then_reported(
    make_provider: ProviderMaker, sleeps: RecordedSleeps, provider_name: str
) -> None:
    """Nothing listening: every attempt fails to connect, and the error says so."""
    port = unused_port()
    suffix = "/v1" if provider_name == "openai" else ""
    provider = make_provider(
        provider_name, base_url=f"http://127.0.0.1:{port}{suffix}", max_retries=1
    )
    with pytest.raises(ProviderError, match="connection failed") as caught:
        await collect(provider)
    assert caught.value.retryable is True
    assert caught.value.status_code is None
    assert len(sleeps.waits) == 1


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, "rejected the request"),
        (403, "refused the request: HTTP 403"),
        (404, "no such model or endpoint: HTTP 404"),
        (422, "rejected the request"),
    ],
)
async def test_client_errors_are_not_retried(
    model_server: ModelServer,
    make_provider: ProviderMaker,
    sleeps: RecordedSleeps,
    provider_name: str,
    status: int,
    expected: str,
) -> None:
    """400, 403, 404 and 422 fail at once with a message saying what to check."""
    model_server.default = Fault(status)
    with pytest.raises(ProviderError, match=expected) as caught:
        await collect(make_provider(provider_name))
    assert len(model_server.requests) == 1
    assert sleeps.waits == []
    assert caught.value.status_code == status
    assert caught.value.retryable is False


async def test_401_names_the_environment_variable(
    model_server: ModelServer, make_provider: ProviderMaker, provider_name: str
) -> None:
    """A rejected key fails at once with the fix: which variable or field to set."""
    model_server.default = Fault(401)
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider(provider_name))
    variable = "OPENAI_API_KEY" if provider_name == "openai" else "ANTHROPIC_API_KEY"
    label = "OpenAI" if provider_name == "openai" else "Anthropic"
    assert str(caught.value) == (
        f"the {label} API key was rejected (401); set {variable} or ProviderConfig.api_key"
    )
    assert len(model_server.requests) == 1


def test_parse_retry_after_forms() -> None:
    """Seconds, fractional seconds, milliseconds, HTTP dates in the past, and junk."""
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after-ms": "x", "retry-after": "2"}) == 2.0
    assert parse_retry_after({}) is None


async def test_malformed_stream_data_is_retried(
    model_server: ModelServer, make_provider: ProviderMaker, provider_name: str
) -> None:
    """A garbled event line fails the attempt; the next attempt's clean answer is used."""
    model_server.script(Garbled(after_chunks=2), Reply("clean"))
    events = await collect(make_provider(provider_name))
    (restart,) = restarts(events)
    assert "malformed" in restart.reason
    assert content(events) == "clean"


@pytest.mark.parametrize("field", ["initial_backoff_s", "max_elapsed_s", "max_retry_after_s"])
def test_retry_policy_refuses_negative_times(field: str) -> None:
    """A negative duration in a RetryPolicy is a configuration error."""
    with pytest.raises(ConfigurationError, match=field):
        RetryPolicy(**{field: -1.0})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "cut",
    [
        CutStream(Reply("abcdefghijklmnop", input_tokens=25), after_chunks=3),
        CutStream(Reply("abcdefghijklmnop", input_tokens=25), after_chunks=3, abort=False),
        MidStreamError(Reply("abcdefghijklmnop", input_tokens=25), after_chunks=3),
    ],
    ids=["dropped", "ended", "error-event"],
)
async def test_tokens_of_an_attempt_that_streamed_then_failed_are_counted_apart(
    model_server: ModelServer,
    make_provider: ProviderMaker,
    provider_name: str,
    cut: CutStream | MidStreamError,
) -> None:
    """A retried attempt cut after three pieces adds its prompt and three tokens as retried."""
    model_server.script(cut, Reply("whole", input_tokens=25, output_tokens=2))
    events = await collect(make_provider(provider_name))

    assert len(restarts(events)) == 1
    usage = metadata(events).usage
    assert (usage.input_tokens, usage.output_tokens) == (25, 2), "the answer's own counts"
    assert (usage.retried_input_tokens, usage.retried_output_tokens) == (25, 3)
    assert usage.total_tokens == 25 + 2 + 25 + 3


async def test_an_attempt_refused_before_streaming_counts_no_tokens(
    model_server: ModelServer, make_provider: ProviderMaker, provider_name: str
) -> None:
    """A 429 or 500 answered before any token costs nothing and adds nothing to the usage."""
    model_server.script(
        Fault(429, retry_after="0"), Fault(500), Reply("ok", input_tokens=9, output_tokens=1)
    )
    usage = metadata(await collect(make_provider(provider_name))).usage
    assert (usage.retried_input_tokens, usage.retried_output_tokens) == (0, 0)
    assert usage.total_tokens == 10

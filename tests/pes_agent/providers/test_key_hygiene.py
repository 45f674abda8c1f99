"""No API key in errors or logs, on every failure path of both adapters.

The test server repeats the credential it received in its error bodies (as a careless gateway
might), so these tests fail if any text from the wire reaches an error unscrubbed.
"""

from __future__ import annotations

import json
import logging
import traceback

import pytest
import structlog

from pes_agent import AgentProps, ObservationType, create_agent
from pes_agent.config import ProviderConfig, RunOptions
from pes_agent.errors import ConfigurationError, ProviderError
from pes_agent.providers import ProviderPool, create_provider

from .conftest import ProviderMaker
from .helpers import API_KEY, RecordedSleeps, collect, content
from .model_server import (
    CutStream,
    Fault,
    MidStreamError,
    ModelServer,
    Reply,
    Slow,
    Step,
    unused_port,
)

PROVIDERS = ["openai", "anthropic"]

# Each failure path: what the server does on every attempt, and extra provider config.
FAILURES: dict[str, tuple[Step | None, dict[str, object]]] = {
    "401": (Fault(401), {}),
    "403": (Fault(403), {}),
    "400": (Fault(400), {}),
    "429-exhausted": (Fault(429, retry_after="0"), {}),
    "500-exhausted": (Fault(500), {}),
    "529-exhausted": (Fault(529), {}),
    "timeout": (Slow(5.0), {"timeout_s": 0.2}),
    "cut-stream": (CutStream(after_chunks=2), {}),
    "incomplete-stream": (CutStream(after_chunks=2, abort=False), {}),
    "mid-stream-error": (MidStreamError(after_chunks=1), {}),
    "connection-refused": (None, {}),
}


def _texts(error: BaseException) -> list[str]:
    """Every text reachable from the error: itself, its args, its whole cause/context chain."""
    texts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts += [str(current), repr(current), *map(repr, current.args)]
        texts += [repr(v) for v in vars(current).values()]
        current = current.__cause__ or current.__context__
    texts.append("".join(traceback.format_exception(error)))
    return texts


@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("provider_name", PROVIDERS)
async def test_no_key_in_error_or_logs(
    model_server: ModelServer,
    make_provider: ProviderMaker,
    caplog: pytest.LogCaptureFixture,
    provider_name: str,
    failure: str,
) -> None:
    """The ProviderError, its chain, its traceback and every log line are free of the key."""
    step, extra = FAILURES[failure]
    config: dict[str, object] = {"max_retries": 1, **extra}
    if step is None:
        suffix = "/v1" if provider_name == "openai" else ""
        config["base_url"] = f"http://127.0.0.1:{unused_port()}{suffix}"
    else:
        model_server.default = step
    provider = make_provider(provider_name, **config)

    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as logs, pytest.raises(ProviderError) as caught:
        await collect(provider)

    assert logs, "the failure should be logged"
    assert API_KEY not in repr(logs)
    assert API_KEY not in caplog.text
    for text in _texts(caught.value):
        assert API_KEY not in text
    if step is not None and failure not in ("timeout", "cut-stream", "incomplete-stream"):
        assert any(r.credential == API_KEY for r in model_server.requests), "key was sent"


@pytest.mark.parametrize("provider_name", PROVIDERS)
async def test_logs_carry_call_context(
    model_server: ModelServer, make_provider: ProviderMaker, provider_name: str
) -> None:
    """Retry and finish events name the provider, model, attempt, thread and trace."""
    model_server.script(Fault(500), CutStream(after_chunks=1), Reply("ok"))
    with structlog.testing.capture_logs() as logs:
        await collect(make_provider(provider_name, model="m-1"))

    names = [entry["event"] for entry in logs]
    assert names == ["llm.retry", "llm.retry", "llm.call_finished"]
    for entry in logs:
        assert entry["provider"] == provider_name
        assert entry["model"] == "m-1"
        assert entry["thread_id"] == "thread-1"
        assert entry["trace_id"] == "trace-1"
        assert "attempt" in entry
    finished = logs[-1]
    assert finished["attempt"] == 3
    assert finished["input_tokens"] == 10
    assert finished["latency_ms"] >= finished["ttft_ms"] > 0


@pytest.mark.parametrize("provider_name", PROVIDERS)
async def test_no_key_in_config_provider_or_pool_reprs(provider_name: str) -> None:
    """Reprs of the config, the provider and the pool never show the key."""
    config = ProviderConfig(provider_name, "m", api_key=API_KEY, base_url="http://127.0.0.1:9")
    async with ProviderPool() as pool:
        provider = pool.get(config)
        for text in (repr(config), str(config), repr(provider), repr(pool), repr(vars(pool))):
            assert API_KEY not in text
    direct = create_provider(config)
    try:
        assert API_KEY not in repr(direct)
    finally:
        await direct.aclose()


# Keys from other vendors, none shaped like "sk-": only knowing the configured value scrubs them.
# The last one holds a quote and a backslash, so its JSON and repr forms differ from the raw one.
NON_SK_KEYS = {
    "azure-hex": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
    "groq": "gsk_Q9w8E7r6T5y4U3i2O1p0AsDfGhJkLz",
    "escapable": 'xai-Zq7"Wv3\\Nt5Rb8Yc1Md4Kp6Hs9',
}


def _secret_forms(key: str) -> list[str]:
    """The key as it may appear in text: raw, JSON-escaped, repr-escaped, bytes-repr-escaped."""
    return [key, json.dumps(key)[1:-1], repr(key)[1:-1], repr(key.encode())[2:-1]]


def _pieces_of(key: str, size: int = 6) -> list[str]:
    """Every run of `size` characters of the key: a partial leak shows up as one of them."""
    return [key[i : i + size] for i in range(len(key) - size + 1)]


@pytest.mark.parametrize("provider_name", PROVIDERS)
@pytest.mark.parametrize("source", ["config", "env"])
async def test_a_key_pasted_with_a_trailing_newline_is_stripped_and_works(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch, provider_name: str, source: str
) -> None:
    """A key read with surrounding whitespace is sent without it, and the call succeeds."""
    model_server.script(Reply("fine"))
    pasted = f"  {API_KEY}\n"
    if source == "env":
        variable = "OPENAI_API_KEY" if provider_name == "openai" else "ANTHROPIC_API_KEY"
        monkeypatch.setenv(variable, pasted)
        config = ProviderConfig(
            provider_name, "m", base_url=model_server.base_url_for(provider_name)
        )
    else:
        config = ProviderConfig(
            provider_name, "m", api_key=pasted, base_url=model_server.base_url_for(provider_name)
        )
    provider = create_provider(config)
    try:
        events = await collect(provider)
    finally:
        await provider.aclose()
    assert content(events) == "fine"
    assert [r.credential for r in model_server.requests] == [API_KEY]


@pytest.mark.parametrize(
    "key",
    ["gsk_AbCd\x00EfGh0123456789", "0f1e2d3c4b5a\t69788796a5b4c3d2", "xai-Zq7Wv3\x7fNt5Rb8Yc1Md4"],
)
async def test_a_key_with_a_control_character_is_a_configuration_error_without_the_key(
    key: str,
) -> None:
    """ProviderConfig refuses a key with a control character inside, never quoting any of it."""
    with pytest.raises(ConfigurationError, match="control character") as caught:
        ProviderConfig("openai", "m", api_key=key)
    texts = _texts(caught.value)
    for piece in _pieces_of(key, 4):
        assert all(piece not in text for text in texts), piece

    # Nested in a run's options it is refused too, and pydantic does not quote the input.
    with pytest.raises(ValueError, match="control character") as nested:
        RunOptions.model_validate(
            {"provider_config": {"provider": "openai", "model": "m", "api_key": key}}
        )
    for piece in _pieces_of(key, 4):
        assert all(piece not in text for text in _texts(nested.value)), piece


@pytest.mark.parametrize("provider_name", PROVIDERS)
async def test_an_environment_key_with_a_control_character_is_refused_before_any_request(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch, provider_name: str
) -> None:
    """A key variable with a line break inside gives a ConfigurationError naming the variable."""
    variable = "OPENAI_API_KEY" if provider_name == "openai" else "ANTHROPIC_API_KEY"
    key = "gsk_AbCdEfGh\r\n0123456789"
    monkeypatch.setenv(variable, key)
    config = ProviderConfig(provider_name, "m", base_url=model_server.base_url_for(provider_name))
    with pytest.raises(ConfigurationError, match=variable) as caught:
        create_provider(config)
    for piece in _pieces_of(key, 4):
        assert all(piece not in text for text in _texts(caught.value)), piece
    assert model_server.requests == []


@pytest.mark.parametrize("provider_name", PROVIDERS)
async def test_a_request_that_cannot_be_built_is_not_retried(
    model_server: ModelServer,
    make_provider: ProviderMaker,
    sleeps: RecordedSleeps,
    provider_name: str,
) -> None:
    """A header httpx refuses to send fails at once as a final ProviderError, with no retries."""
    model_server.default = Reply("never sent")
    provider = make_provider(
        provider_name, options={"extra_headers": {"X-Trace": "line one\nline two"}}
    )
    with structlog.testing.capture_logs() as logs, pytest.raises(ProviderError) as caught:
        await collect(provider)
    assert caught.value.retryable is False
    assert "could not be sent" in caught.value.message
    assert model_server.requests == []
    assert sleeps.waits == []
    assert [entry["event"] for entry in logs] == ["llm.call_failed"]
    assert logs[0]["attempts"] == 1


@pytest.mark.parametrize("provider_name", PROVIDERS)
@pytest.mark.parametrize("key", list(NON_SK_KEYS.values()), ids=list(NON_SK_KEYS))
async def test_a_configured_key_of_any_shape_is_scrubbed_in_every_form(
    model_server: ModelServer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    provider_name: str,
    key: str,
) -> None:
    """A key the server echoes raw, JSON- and repr-escaped reaches no error, observation or log."""
    forms = _secret_forms(key)
    model_server.default = Fault(400, message="rejected: " + " | ".join(forms))
    # Other tests may have made the library logger stop propagating (configure_logging).
    monkeypatch.setattr(logging.getLogger("pes_agent"), "propagate", True)
    caplog.set_level(logging.DEBUG)
    config = ProviderConfig(
        provider_name, "m", api_key=key, base_url=model_server.base_url_for(provider_name)
    )

    provider = create_provider(config)
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(provider)
    finally:
        await provider.aclose()

    agent = create_agent(provider=config)
    try:
        result = await agent.process(AgentProps("q", "t-scrub"))
        observations = await agent.observations.get_observations("t-scrub")
    finally:
        await agent.aclose()

    assert result.metadata.status == "error"
    assert "[REDACTED]" in (result.metadata.error or "")
    assert any(o.type == ObservationType.ERROR for o in observations)
    assert any(r.name.startswith("pes_agent") for r in caplog.records), "run logs were captured"
    everything = [
        *_texts(caught.value),
        result.model_dump_json(),
        *(o.model_dump_json() for o in observations),
        caplog.text,
    ]
    for form in forms:
        for text in everything:
            assert form not in text

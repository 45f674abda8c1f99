"""No API key in errors or logs, on every failure path of both adapters.

The test server repeats the credential it received in its error bodies (as a careless gateway
might), so these tests fail if any text from the wire reaches an error unscrubbed.
"""

from __future__ import annotations

import logging
import traceback

import pytest
import structlog

from pes_agent.config import ProviderConfig
from pes_agent.errors import ProviderError
from pes_agent.providers import ProviderPool, create_provider

from .conftest import ProviderMaker
from .helpers import API_KEY, collect
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

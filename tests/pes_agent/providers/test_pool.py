"""`ProviderPool`: one client per configuration, reused; distinct keys never share; limits queue."""

from __future__ import annotations

import asyncio
import os

import pytest

from pes_agent.config import ProviderConfig
from pes_agent.errors import ConfigurationError, UsageError
from pes_agent.providers import (
    AnthropicProvider,
    OpenAIProvider,
    ProviderPool,
    RetryPolicy,
    StreamMetadata,
)

from .helpers import API_KEY, RecordedSleeps, collect, content, request
from .model_server import Fault, ModelServer, Reply

PROVIDERS = ["openai", "anthropic"]


def _config(server: ModelServer, name: str, **kwargs: object) -> ProviderConfig:
    kwargs.setdefault("api_key", API_KEY)
    return ProviderConfig(name, "m", base_url=server.base_url_for(name), **kwargs)


@pytest.mark.parametrize("name", PROVIDERS)
async def test_equal_configurations_share_one_provider_and_connection(
    model_server: ModelServer, name: str
) -> None:
    """Equal configs get the same provider; its calls reuse one HTTP connection."""
    model_server.script(Reply("one"), Reply("two"))
    async with ProviderPool() as pool:
        first = pool.get(_config(model_server, name))
        second = pool.get(_config(model_server, name))
        assert first is second
        assert len(pool) == 1
        assert content(await collect(first)) == "one"
        assert content(await collect(second)) == "two"
    ports = {r.client_port for r in model_server.requests}
    assert len(ports) == 1, "the second call should reuse the pooled connection"


async def test_spec_strings_are_cached_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """'NAME:MODEL' specs resolve to the same pooled provider each time."""
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    async with ProviderPool() as pool:
        assert pool.get("openai:gpt-4o-mini") is pool.get("openai:gpt-4o-mini")
        assert pool.get("openai:gpt-4o-mini") is not pool.get("openai:gpt-4o")
        assert len(pool) == 2


@pytest.mark.parametrize("name", PROVIDERS)
async def test_configs_differing_only_in_key_never_share_a_client(
    model_server: ModelServer, name: str
) -> None:
    """Two keys, two providers, two SDK clients, and each request carries its own key."""
    model_server.script(Reply("a"), Reply("b"))
    key_a, key_b = "sk-tenant-a-0123456789abcdef", "sk-tenant-b-0123456789abcdef"
    async with ProviderPool() as pool:
        a = pool.get(_config(model_server, name, api_key=key_a))
        b = pool.get(_config(model_server, name, api_key=key_b))
        assert a is not b
        assert isinstance(a, OpenAIProvider | AnthropicProvider)
        assert isinstance(b, OpenAIProvider | AnthropicProvider)
        assert a.client is not b.client
        await collect(a)
        await collect(b)
        for key in (key_a, key_b):
            assert key not in repr(vars(pool))
    assert [r.credential for r in model_server.requests] == [key_a, key_b]


async def test_any_config_difference_makes_a_new_provider(model_server: ModelServer) -> None:
    """Model, options, timeout and limits are all part of a configuration's identity."""
    async with ProviderPool() as pool:
        base = _config(model_server, "openai")
        variants = [
            base,
            base.model_copy(update={"model": "other"}),
            base.model_copy(update={"options": {"seed": 1}}),
            base.model_copy(update={"timeout_s": 5.0}),
            base.model_copy(update={"max_concurrency": 2}),
            base.model_copy(update={"max_retries": 0}),
        ]
        providers = [pool.get(config) for config in variants]
        assert len({id(p) for p in providers}) == len(variants)
        assert pool.get(base.model_copy(update={"options": {"seed": 1}})) is providers[2]


async def test_concurrency_limit_queues_excess_calls(model_server: ModelServer) -> None:
    """With max_concurrency=2, six concurrent calls never put more than two on the wire."""
    model_server.default = Reply("slow answer", chunk_chars=2, chunk_delay_s=0.02)
    async with ProviderPool() as pool:
        provider = pool.get(_config(model_server, "openai", max_concurrency=2))
        results = await asyncio.gather(*(collect(provider) for _ in range(6)))
    assert all(content(events) == "slow answer" for events in results)
    assert len(model_server.requests) == 6
    assert model_server.max_in_flight == 2


async def test_without_a_tight_limit_calls_overlap(model_server: ModelServer) -> None:
    """The control: the default limit lets all six calls run at once."""
    model_server.default = Reply("slow answer", chunk_chars=2, chunk_delay_s=0.02)
    async with ProviderPool() as pool:
        provider = pool.get(_config(model_server, "anthropic"))
        await asyncio.gather(*(collect(provider) for _ in range(6)))
    assert model_server.max_in_flight == 6


async def test_an_abandoned_stream_gives_its_slot_back(model_server: ModelServer) -> None:
    """A consumer that stops reading early releases the concurrency slot."""
    model_server.default = Reply("many small pieces of text", chunk_chars=1)
    async with ProviderPool() as pool:
        provider = pool.get(_config(model_server, "openai", max_concurrency=1))
        stream = provider.stream(request())
        async for _event in stream:
            break
        await stream.aclose()  # type: ignore[attr-defined]
        events = await asyncio.wait_for(collect(provider), timeout=5)
    assert isinstance(events[-1], StreamMetadata)


async def test_pool_retry_policy_reaches_its_providers(model_server: ModelServer) -> None:
    """A pool's RetryPolicy is used by the providers it creates."""
    sleeps = RecordedSleeps()
    model_server.script(Fault(429, retry_after="3"), Reply("ok"))
    async with ProviderPool(retry_policy=RetryPolicy(sleep=sleeps)) as pool:
        await collect(pool.get(_config(model_server, "anthropic")))
    assert sleeps.waits == [3.0]


@pytest.mark.parametrize("name", PROVIDERS)
async def test_aclose_closes_every_client_and_the_pool(
    model_server: ModelServer, name: str
) -> None:
    """After aclose the SDK clients are closed and the pool refuses new work."""
    pool = ProviderPool()
    provider = pool.get(_config(model_server, name))
    assert isinstance(provider, OpenAIProvider | AnthropicProvider)
    await pool.aclose()
    assert provider.client.is_closed()
    with pytest.raises(UsageError, match="closed"):
        pool.get(_config(model_server, name))
    with pytest.raises(UsageError, match="closed"):
        provider.stream(request())
    await pool.aclose()  # idempotent


async def test_pool_does_not_close_provider_objects_it_was_given(model_server: ModelServer) -> None:
    """A provider object passed in is returned as is and left open by aclose."""
    own = OpenAIProvider(_config(model_server, "openai"))
    try:
        async with ProviderPool() as pool:
            assert pool.get(own) is own
            assert len(pool) == 0
        assert not own.client.is_closed()
    finally:
        await own.aclose()


@pytest.mark.parametrize("name", PROVIDERS)
async def test_an_abandoned_stream_closes_its_http_response(
    model_server: ModelServer, name: str
) -> None:
    """Closing a stream after one token hangs up on the server at once, mid-answer."""
    model_server.default = Reply("x" * 200, chunk_chars=1, chunk_delay_s=0.05)
    async with ProviderPool() as pool:
        stream = pool.get(_config(model_server, name)).stream(request())
        async for _event in stream:
            break
        assert model_server.in_flight == 1
        await stream.aclose()  # type: ignore[attr-defined]
        for _ in range(100):
            if model_server.in_flight == 0:
                break
            await asyncio.sleep(0.01)
        assert model_server.in_flight == 0, "the response should be closed, not left streaming"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _settle() -> None:
    """Let eviction tasks run and the server notice closed connections."""
    for _ in range(5):
        await asyncio.sleep(0.01)


def test_the_default_pool_keeps_32_providers() -> None:
    """A pool bounds its providers by default, and the bound is configurable."""
    assert ProviderPool().max_size == 32
    assert ProviderPool(max_size=4).max_size == 4
    with pytest.raises(ConfigurationError, match="max_size"):
        ProviderPool(max_size=0)


@pytest.mark.parametrize("name", PROVIDERS)
async def test_many_configurations_keep_at_most_max_size_providers(
    model_server: ModelServer, name: str
) -> None:
    """Past max_size the least recently used provider is evicted and its client closed."""
    async with ProviderPool(max_size=3) as pool:
        configs = [_config(model_server, name, options={"seed": i}) for i in range(10)]
        providers = [pool.get(config) for config in configs[:3]]
        assert pool.get(configs[0]) is providers[0], "a use makes it the most recent"
        pool.get(configs[3])  # evicts configs[1], the least recently used
        await _settle()
        assert len(pool) == 3
        assert isinstance(providers[1], OpenAIProvider | AnthropicProvider)
        assert providers[1].client.is_closed()
        assert pool.get(configs[0]) is providers[0]
        assert pool.get(configs[2]) is providers[2]
        for config in configs[4:]:
            pool.get(config)
        await _settle()
        assert len(pool) == 3
        assert all(
            isinstance(p, OpenAIProvider | AnthropicProvider) and p.client.is_closed()
            for p in providers
        )


@pytest.mark.parametrize("name", PROVIDERS)
async def test_an_evicted_provider_finishes_its_stream_and_then_closes(
    model_server: ModelServer, name: str
) -> None:
    """A provider evicted mid-answer streams the whole answer; its client closes after it."""
    answer = "a long answer that is still streaming while the pool moves on"
    model_server.script(Reply(answer, chunk_chars=2, chunk_delay_s=0.005), Reply("again"))
    async with ProviderPool(max_size=1) as pool:
        evicted = pool.get(_config(model_server, name))
        assert isinstance(evicted, OpenAIProvider | AnthropicProvider)
        stream = evicted.stream(request())
        events = [await anext(stream)]
        fresh = pool.get(_config(model_server, name, options={"seed": 1}))  # evicts it
        assert fresh is not evicted
        await _settle()
        assert not evicted.client.is_closed(), "closed under a request in flight"
        events += [event async for event in stream]
        assert content(events) == answer
        await _settle()
        assert evicted.client.is_closed(), "closed once its last request ended"

        # Whoever still holds it (a run between its planning and synthesis calls) can call it.
        assert content(await collect(evicted)) == "again"
        assert evicted.client.is_closed()


async def test_open_files_stay_bounded_over_60_distinct_configurations(
    model_server: ModelServer,
) -> None:
    """60 per-call configurations, each used once, leave at most max_size clients open."""
    model_server.default = Reply("ok")
    async with ProviderPool(max_size=8) as pool:
        await collect(pool.get(_config(model_server, "openai")))  # warm up: server, loop, SDK
        await _settle()
        before = _open_fds()
        for i in range(60):
            name = PROVIDERS[i % 2]
            await collect(pool.get(_config(model_server, name, options={"seed": i})))
        await _settle()
        grown = _open_fds() - before
        assert len(pool) == 8
    # Each client keeps one connection: a socket here and one in the server, 2 fds apiece.
    assert grown <= 2 * 8 + 4, f"{grown} more open files after 60 configurations"
    await _settle()
    assert _open_fds() <= before

"""OpenAIEmbeddings through the real openai SDK against a loopback /v1/embeddings server."""

from __future__ import annotations

import pytest

from pes_agent.errors import ConfigurationError, ProviderError
from pes_agent.providers.retry import RetryPolicy
from pes_agent.retrieval import DimensionMismatchError, EmbeddingProvider
from pes_agent.retrieval.openai import OpenAIEmbeddings
from tests.pes_agent.retrieval.embeddings_server import EmbeddingsServer, vector_for

KEY = "sk-test-0123456789abcdefghijklmnop"


class Waits:
    """A RetryPolicy sleep that records the waits instead of spending them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def embeddings(server: EmbeddingsServer, waits: Waits, **kwargs: object) -> OpenAIEmbeddings:
    options: dict[str, object] = {
        "api_key": f"  {KEY}\n",
        "base_url": server.base_url,
        "dimension": server.dimension,
        "retry_policy": RetryPolicy(sleep=waits, jitter_s=0.0),
        "model": "nomic-embed-text",
    }
    options.update(kwargs)
    return OpenAIEmbeddings(**options)  # type: ignore[arg-type]


async def test_vectors_come_back_in_input_order_across_batches() -> None:
    """Batches of batch_size, answered in reverse: each text still gets its own vector."""
    texts = [chr(ord("a") + i % 26) * (i + 1) for i in range(11)]
    async with EmbeddingsServer() as server:
        provider = embeddings(server, Waits(), batch_size=4)
        try:
            assert isinstance(provider, EmbeddingProvider)
            vectors = await provider.embed(texts)
        finally:
            await provider.aclose()
    assert vectors == [vector_for(text, 8) for text in texts]
    assert sorted(len(r.inputs) for r in server.requests) == [3, 4, 4]
    assert {r.authorization for r in server.requests} == {f"Bearer {KEY}"}
    assert {r.encoding_format for r in server.requests} == {"float"}
    assert {r.dimensions for r in server.requests} == {None}


async def test_429_and_500_are_retried_through_the_retry_layer() -> None:
    """A 429 (Retry-After: 0) and a 500 are retried; the third attempt's answer is returned."""
    async with EmbeddingsServer() as server:
        server.script.extend([429, 500])
        waits = Waits()
        provider = embeddings(server, waits)
        try:
            vectors = await provider.embed(["abc"])
        finally:
            await provider.aclose()
    assert vectors == [vector_for("abc", 8)]
    assert len(server.requests) == 3
    assert waits.waits[0] == 0.0  # the server's Retry-After
    assert len(waits.waits) == 2


async def test_retries_are_bounded_and_end_in_a_provider_error() -> None:
    """With max_retries=1, two 503s give a retryable ProviderError naming the attempts."""
    async with EmbeddingsServer() as server:
        server.script.extend([503, 503, 503])
        provider = embeddings(server, Waits(), max_retries=1)
        try:
            with pytest.raises(ProviderError, match="after 2 attempts") as info:
                await provider.embed(["abc"])
        finally:
            await provider.aclose()
    assert info.value.retryable
    assert info.value.status_code == 503
    assert len(server.requests) == 2


async def test_a_rejected_key_is_not_retried_and_never_quoted() -> None:
    """A 401 whose body quotes the key fails at once, with the key scrubbed from the error."""
    async with EmbeddingsServer() as server:
        server.script.append(401)
        provider = embeddings(server, Waits())
        try:
            with pytest.raises(ProviderError) as info:
                await provider.embed(["abc"])
        finally:
            await provider.aclose()
    assert len(server.requests) == 1
    assert info.value.status_code == 401
    assert KEY not in str(info.value)
    assert info.value.__cause__ is None
    assert "OPENAI_API_KEY" in str(info.value)


async def test_a_400_is_not_retried_and_its_key_shaped_text_is_redacted() -> None:
    """Other 4xx statuses fail at once; the key the server quoted is redacted from the error."""
    async with EmbeddingsServer() as server:
        server.script.append(400)
        provider = embeddings(server, Waits())
        try:
            with pytest.raises(ProviderError, match="refused") as info:
                await provider.embed(["abc"])
        finally:
            await provider.aclose()
    assert len(server.requests) == 1
    assert not info.value.retryable
    assert KEY not in str(info.value)
    assert "[REDACTED]" in str(info.value)
    assert info.value.__cause__ is None


async def test_shortened_text_embedding_3_vectors_ask_for_dimensions() -> None:
    """text-embedding-3-* with a smaller dimension sends `dimensions`; the native one does not."""
    async with EmbeddingsServer() as server:
        short = embeddings(server, Waits(), model="text-embedding-3-small", dimension=4)
        native = embeddings(server, Waits(), model="text-embedding-3-small", dimension=None)
        try:
            assert native.dimension == 1536
            assert await short.embed(["abc"]) == [vector_for("abc", 4)]
            with pytest.raises(DimensionMismatchError, match="not dimension=1536"):
                await native.embed(["abc"])  # this server answers 8 numbers by default
        finally:
            await short.aclose()
            await native.aclose()
    assert [r.dimensions for r in server.requests] == [4, None]


async def test_an_unknown_model_needs_a_dimension_and_empty_input_needs_no_call() -> None:
    """A model of unknown dimension is a ConfigurationError; embed([]) makes no request."""
    with pytest.raises(ConfigurationError, match="dimension=N"):
        OpenAIEmbeddings("nomic-embed-text", api_key=KEY)
    async with EmbeddingsServer() as server:
        provider = embeddings(server, Waits())
        try:
            assert await provider.embed([]) == []
        finally:
            await provider.aclose()
    assert server.requests == []


async def test_a_failing_batch_among_several_raises_its_own_provider_error() -> None:
    """With several batches in flight, the first failure is raised as itself, not a group."""
    async with EmbeddingsServer() as server:
        server.script.append(400)
        provider = embeddings(server, Waits(), batch_size=1)
        try:
            with pytest.raises(ProviderError, match="refused"):
                await provider.embed(["a", "b", "c"])
        finally:
            await provider.aclose()

"""The OpenAI adapter against the wire-compatible server, through the real `openai` SDK."""

from __future__ import annotations

import pytest

from pes_agent.config import ProviderConfig
from pes_agent.providers import (
    OllamaProvider,
    OpenAIProvider,
    PromptMessage,
    TokenDelta,
    create_provider,
)
from pes_agent.providers.base import ServerAddress
from pes_agent.providers.ollama import DEFAULT_OLLAMA_BASE_URL

from .conftest import ProviderMaker
from .helpers import (
    API_KEY,
    RecordedSleeps,
    collect,
    content,
    metadata,
    request,
    restarts,
    thinking,
)
from .model_server import CutStream, ModelServer, Reply


async def test_streams_text_then_metadata_with_usage(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """Content arrives as TokenDeltas in order, then one StreamMetadata with usage and timings."""
    model_server.script(
        Reply(
            "The answer is 42.",
            input_tokens=31,
            output_tokens=7,
            cache_read_tokens=11,
            cache_write_tokens=2,
            reasoning_tokens=3,
        )
    )
    events = await collect(make_provider("openai", model="gpt-test"))

    deltas = [e for e in events if isinstance(e, TokenDelta)]
    assert len(deltas) > 1, "the answer should stream in pieces"
    assert content(events) == "The answer is 42."
    meta = metadata(events)
    assert meta.usage.input_tokens == 31
    assert meta.usage.output_tokens == 7
    assert meta.usage.total_tokens == 38
    assert meta.usage.cache_read_tokens == 11
    assert meta.usage.cache_write_tokens == 2
    assert meta.usage.reasoning_tokens == 3
    assert meta.usage.requests == 1
    assert meta.stop_reason == "stop"
    assert meta.model == "gpt-test"
    assert meta.time_to_first_token_ms is not None
    assert meta.total_ms is not None
    assert 0 < meta.time_to_first_token_ms <= meta.total_ms


async def test_finish_reason_length_is_reported(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """A finish reason other than stop is passed on as the stop reason."""
    model_server.script(Reply("cut by the token limit", finish_reason="length"))
    events = await collect(make_provider("openai"))
    assert metadata(events).stop_reason == "length"


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_streams_as_thinking_and_one_block(
    model_server: ModelServer, make_provider: ProviderMaker, field: str
) -> None:
    """Reasoning deltas become thinking tokens and one ThinkingBlock, never content."""
    model_server.script(
        Reply("Paris.", thinking="The capital of France is Paris.", reasoning_field=field)  # type: ignore[arg-type]
    )
    events = await collect(make_provider("openai"))

    thinking_text = "".join(
        e.text for e in events if isinstance(e, TokenDelta) and e.kind == "thinking"
    )
    assert thinking_text == "The capital of France is Paris."
    assert thinking(events) == ["The capital of France is Paris."]
    assert content(events) == "Paris."
    block_at = next(i for i, e in enumerate(events) if not isinstance(e, TokenDelta))
    first_content = next(
        i for i, e in enumerate(events) if isinstance(e, TokenDelta) and e.kind == "content"
    )
    assert block_at < first_content, "the block closes when the answer starts"


async def test_reasoning_without_content_still_ends_as_a_block(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """A stream of only reasoning still yields its ThinkingBlock before the metadata."""
    model_server.script(Reply("", thinking="only thoughts"))
    events = await collect(make_provider("openai"))
    assert thinking(events) == ["only thoughts"]
    assert content(events) == ""


async def test_request_maps_roles_and_parameters(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """Roles, names, temperature, max_tokens, options and include_usage reach the wire."""
    model_server.script(Reply("ok"))
    provider = make_provider("openai", model="gpt-x", options={"seed": 7, "top_k": 40})
    req = request(
        PromptMessage("system", "You are terse."),
        PromptMessage("user", "Hi", name="alice"),
        PromptMessage("assistant", "Hello."),
        PromptMessage("tool", '{"temp": 21}', name="get_weather"),
        PromptMessage("user", "And now?"),
        temperature=0.2,
        max_tokens=64,
        options={"seed": 8},
    )
    await collect(provider, req)

    (sent,) = model_server.requests
    body = sent.body
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    assert body["model"] == "gpt-x"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi", "name": "alice"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": '[tool result: get_weather]\n{"temp": 21}'},
        {"role": "user", "content": "And now?"},
    ]
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 64, "compatible servers get max_tokens"
    assert body["seed"] == 8, "the request's options override the config's"
    assert body["top_k"] == 40, "unknown options go through extra_body"
    assert sent.headers["x-stainless-retry-count"] == "0"


REASONING_MODELS = ["o1", "o3-mini", "o4-mini-2025-04-16", "gpt-5", "gpt-5.1-mini", "openai/o3"]
OTHER_MODELS = ["gpt-4o-mini", "gpt-4.1", "llama3.1:8b", "gpt-oss-20b", "olmo2"]


@pytest.mark.parametrize("where", ["base_url", "openai"])
@pytest.mark.parametrize(
    ("model", "parameter"),
    [(m, "max_completion_tokens") for m in REASONING_MODELS]
    + [(m, "max_tokens") for m in OTHER_MODELS],
)
async def test_token_limit_parameter_follows_the_model_family(
    model_server: ModelServer, make_provider: ProviderMaker, where: str, model: str, parameter: str
) -> None:
    """Reasoning models get max_completion_tokens and others max_tokens, behind any URL."""
    model_server.script(Reply("ok"))
    if where == "openai":
        provider = make_provider("openai", model=model, base_url=None)
        assert isinstance(provider, OpenAIProvider)
        # Point the SDK's default URL at the test server after the provider was built for it.
        provider.client.base_url = model_server.openai_base_url
    else:
        provider = make_provider("openai", model=model)
    await collect(provider, request(max_tokens=99))
    body = model_server.requests[0].body
    assert body[parameter] == 99
    other = "max_tokens" if parameter == "max_completion_tokens" else "max_completion_tokens"
    assert other not in body


async def test_stream_without_finish_reason_is_retried_with_restart(
    model_server: ModelServer, make_provider: ProviderMaker, sleeps: RecordedSleeps
) -> None:
    """A body that ends cleanly without a finish_reason is incomplete: restarted, then finished."""
    model_server.script(
        CutStream(Reply("partial answer"), after_chunks=2, abort=False), Reply("whole")
    )
    events = await collect(make_provider("openai"))

    assert len(model_server.requests) == 2
    (restart,) = restarts(events)
    assert restart.attempt == 2
    assert "finish_reason" in restart.reason
    assert content(events) == "whole"
    assert metadata(events).stop_reason == "stop"
    assert len(sleeps.waits) == 1


async def test_stream_cut_between_finish_and_usage_is_retried_once_usage_is_known(
    model_server: ModelServer, make_provider: ProviderMaker, sleeps: RecordedSleeps
) -> None:
    """A server that sends usage and then a stream that stops after the finish chunk: retried."""
    model_server.script(
        Reply("first"),
        # "a", "b" and the finish chunk — then the body ends, before usage and [DONE]
        CutStream(Reply("ab", chunk_chars=1), after_chunks=3, abort=False),
        Reply("whole"),
    )
    provider = make_provider("openai")
    first = await collect(provider)
    assert metadata(first).usage.output_tokens > 0
    events = await collect(provider)
    (restart,) = restarts(events)
    assert "usage" in restart.reason
    assert content(events) == "whole"
    assert metadata(events).usage.output_tokens > 0


async def test_a_server_that_never_sends_usage_is_not_retried(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """An OpenAI-compatible server without usage chunks still gives answers (usage zero)."""
    model_server.script(CutStream(Reply("ab", chunk_chars=1), after_chunks=3, abort=False))
    events = await collect(make_provider("openai"))
    assert restarts(events) == []
    assert content(events) == "ab"
    assert metadata(events).usage.output_tokens == 0


async def test_ollama_defaults_to_the_local_url_without_a_key() -> None:
    """'ollama:MODEL' needs no key and points at Ollama's local OpenAI-compatible URL."""
    provider = create_provider("ollama:llama3.1:8b")
    try:
        assert isinstance(provider, OllamaProvider)
        assert provider.name == "ollama"
        assert provider.model == "llama3.1:8b"
        assert str(provider.client.base_url).rstrip("/") == DEFAULT_OLLAMA_BASE_URL
    finally:
        await provider.aclose()


async def test_ollama_streams_from_ollama_base_url(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OLLAMA_BASE_URL redirects 'ollama:MODEL'; the placeholder key is sent, nothing else."""
    monkeypatch.setenv("OLLAMA_BASE_URL", model_server.openai_base_url)
    model_server.script(
        Reply("local answer", thinking="thinking locally", reasoning_field="reasoning")
    )
    provider = create_provider("ollama:qwen3")
    try:
        events = await collect(provider)
    finally:
        await provider.aclose()
    assert content(events) == "local answer"
    assert thinking(events) == ["thinking locally"]
    assert model_server.requests[0].credential == "ollama"
    assert model_server.requests[0].body["model"] == "qwen3"


async def test_metadata_names_the_answers_model_and_id_and_the_provider_its_server(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """StreamMetadata carries the model and response id the answer names (a dated model for the
    one asked for); `server` is the base URL's host and port, 443 for the vendor's own API."""
    model_server.script(Reply("Hi.", model="gpt-4o-mini-2024-07-18"))
    provider = make_provider("openai", model="gpt-4o-mini")
    assert isinstance(provider, OpenAIProvider)
    meta = metadata(await collect(provider))
    assert meta.model == "gpt-4o-mini-2024-07-18"
    assert meta.response_id is not None
    assert meta.response_id.startswith("chatcmpl-")
    port = int(model_server.url.rsplit(":", 1)[1])
    assert provider.server == ServerAddress("127.0.0.1", port)
    vendor = OpenAIProvider(ProviderConfig("openai", "gpt-4o-mini", api_key=API_KEY))
    try:
        assert vendor.server == ServerAddress("api.openai.com", 443)
    finally:
        await vendor.aclose()

"""The Anthropic adapter against the wire-compatible server, through the real `anthropic` SDK."""

from __future__ import annotations

from pes_agent.config import ProviderConfig
from pes_agent.providers import PromptMessage, ThinkingBlock, TokenDelta
from pes_agent.providers.anthropic import DEFAULT_MAX_TOKENS, AnthropicProvider
from pes_agent.providers.base import ServerAddress

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
from .model_server import CutStream, MidStreamError, ModelServer, Reply


async def test_streams_text_then_metadata_with_usage(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """Text deltas stream in order, then one StreamMetadata with usage, stop reason and timings."""
    model_server.script(
        Reply(
            "Bonjour, le monde.",
            input_tokens=20,
            output_tokens=9,
            cache_read_tokens=100,
            cache_write_tokens=50,
            reasoning_tokens=4,
        )
    )
    events = await collect(make_provider("anthropic", model="claude-test"))

    assert sum(isinstance(e, TokenDelta) for e in events) > 1
    assert content(events) == "Bonjour, le monde."
    meta = metadata(events)
    # Anthropic's input_tokens leaves out the cache; ours counts it (broken out, not added).
    assert meta.usage.input_tokens == 170
    assert meta.usage.cache_read_tokens == 100
    assert meta.usage.cache_write_tokens == 50
    assert meta.usage.output_tokens == 9
    assert meta.usage.total_tokens == 179
    assert meta.usage.reasoning_tokens == 4
    assert meta.usage.requests == 1
    assert meta.stop_reason == "end_turn"
    assert meta.model == "claude-test"
    assert meta.time_to_first_token_ms is not None
    assert meta.total_ms is not None
    assert 0 < meta.time_to_first_token_ms <= meta.total_ms


async def test_each_thinking_block_becomes_one_thinking_block_never_content(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """Two thinking blocks give thinking tokens and two ThinkingBlocks; the content is only text."""
    model_server.script(
        Reply("Use the calculator.", thinking=("First, parse the query.", "Then pick a tool."))
    )
    events = await collect(make_provider("anthropic"))

    assert thinking(events) == ["First, parse the query.", "Then pick a tool."]
    thinking_tokens = "".join(
        e.text for e in events if isinstance(e, TokenDelta) and e.kind == "thinking"
    )
    assert thinking_tokens == "First, parse the query.Then pick a tool."
    assert content(events) == "Use the calculator."
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ThinkingBlock") < next(
        i for i, e in enumerate(events) if isinstance(e, TokenDelta) and e.kind == "content"
    )
    assert not any(isinstance(e, ThinkingBlock) and "calculator" in e.text for e in events)


async def test_system_goes_in_system_and_roles_alternate(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """System messages join into `system`; tool results and adjacent turns merge into user turns."""
    model_server.script(Reply("ok"))
    req = request(
        PromptMessage("system", "You are terse."),
        PromptMessage("user", "What is 12*7?"),
        PromptMessage("assistant", "Let me compute."),
        PromptMessage("tool", "84", name="calculator"),
        PromptMessage("system", "Answer in English."),
        PromptMessage("user", "Well?"),
    )
    await collect(make_provider("anthropic", model="claude-x"), req)

    (sent,) = model_server.requests
    assert sent.path == "/v1/messages"
    assert sent.credential == API_KEY
    assert sent.body["system"] == "You are terse.\n\nAnswer in English."
    assert sent.body["messages"] == [
        {"role": "user", "content": "What is 12*7?"},
        {"role": "assistant", "content": "Let me compute."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "[tool result: calculator]\n84"},
                {"type": "text", "text": "Well?"},
            ],
        },
    ]
    assert sent.body["model"] == "claude-x"
    assert sent.body["stream"] is True


async def test_max_tokens_default_and_overrides(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """max_tokens is always sent: the request's, else the options', else the default."""
    model_server.script(Reply("a"), Reply("b"), Reply("c"))
    await collect(make_provider("anthropic"))
    await collect(make_provider("anthropic", options={"max_tokens": 512}))
    await collect(make_provider("anthropic", options={"max_tokens": 512}), request(max_tokens=99))
    sent = [r.body["max_tokens"] for r in model_server.requests]
    assert sent == [DEFAULT_MAX_TOKENS, 512, 99]


async def test_thinking_options_and_temperature_pass_through(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """Extended-thinking options reach the wire; a default max_tokens grows past the budget."""
    model_server.script(Reply("ok", thinking="hmm"))
    thinking_option = {"type": "enabled", "budget_tokens": 8000}
    provider = make_provider("anthropic", options={"thinking": thinking_option, "top_k": 5})
    await collect(provider, request(temperature=1.0))

    body = model_server.requests[0].body
    assert body["thinking"] == thinking_option
    assert body["top_k"] == 5
    assert body["temperature"] == 1.0
    assert body["max_tokens"] > 8000


async def test_stream_without_message_stop_is_retried_with_restart(
    model_server: ModelServer, make_provider: ProviderMaker, sleeps: RecordedSleeps
) -> None:
    """A body that ends cleanly without message_stop is incomplete: restarted, then finished."""
    model_server.script(
        CutStream(Reply("partial answer"), after_chunks=2, abort=False), Reply("whole")
    )
    events = await collect(make_provider("anthropic"))

    assert len(model_server.requests) == 2
    (restart,) = restarts(events)
    assert restart.attempt == 2
    assert "message_stop" in restart.reason
    assert content(events) == "whole"
    assert metadata(events).stop_reason == "end_turn"
    assert len(sleeps.waits) == 1


async def test_overloaded_error_event_mid_stream_is_retried(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """An `overloaded_error` event inside a 200 stream counts as a 529 and is retried."""
    model_server.script(MidStreamError(Reply("doomed"), after_chunks=1), Reply("fine"))
    events = await collect(make_provider("anthropic"))

    (restart,) = restarts(events)
    assert "overloaded_error" in restart.reason
    assert content(events) == "fine"
    assert len(model_server.requests) == 2


async def test_thinking_block_with_omitted_text_is_no_thought(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """A thinking block carrying only a signature yields no (empty) ThinkingBlock."""
    model_server.script(Reply("answer", thinking=("", "the real thought")))
    events = await collect(make_provider("anthropic"))
    assert thinking(events) == ["the real thought"]
    assert content(events) == "answer"


async def test_metadata_names_the_answers_model_and_id_and_the_provider_its_server(
    model_server: ModelServer, make_provider: ProviderMaker
) -> None:
    """StreamMetadata carries the model and response id the answer names (a dated model for the
    one asked for); `server` is the base URL's host and port, 443 for the vendor's own API."""
    model_server.script(Reply("Hi.", model="claude-3-5-haiku-20241022"))
    provider = make_provider("anthropic", model="claude-3-5-haiku-latest")
    assert isinstance(provider, AnthropicProvider)
    meta = metadata(await collect(provider))
    assert meta.model == "claude-3-5-haiku-20241022"
    assert meta.response_id is not None
    assert meta.response_id.startswith("msg_")
    port = int(model_server.url.rsplit(":", 1)[1])
    assert provider.server == ServerAddress("127.0.0.1", port)
    vendor = AnthropicProvider(
        ProviderConfig("anthropic", "claude-3-5-haiku-latest", api_key=API_KEY)
    )
    try:
        assert vendor.server == ServerAddress("api.anthropic.com", 443)
    finally:
        await vendor.aclose()

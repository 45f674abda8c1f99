"""The test model server itself: wire-compatible JSON answers, scripting, recording, exhaustion."""

from __future__ import annotations

import asyncio

import anthropic
import openai
import pytest

from .helpers import API_KEY
from .model_server import Call, Fault, ModelServer, RecordedRequest, Reply, Step


async def test_openai_sdk_parses_a_json_completion(model_server: ModelServer) -> None:
    """A non-streaming chat completion parses in the SDK with text, reasoning and usage."""
    model_server.script(Reply("Hi there.", thinking="greet", input_tokens=3, output_tokens=2))
    async with openai.AsyncOpenAI(
        api_key=API_KEY, base_url=model_server.openai_base_url, max_retries=0
    ) as client:
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hello"}]
        )
    message = completion.choices[0].message
    assert message.content == "Hi there."
    assert (message.model_extra or {})["reasoning_content"] == "greet"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (3, 2)
    assert completion.choices[0].finish_reason == "stop"


async def test_anthropic_sdk_parses_a_json_message(model_server: ModelServer) -> None:
    """A non-streaming message parses in the SDK with its thinking and text blocks and usage."""
    model_server.script(Reply("Hi there.", thinking="greet", cache_read_tokens=4))
    async with anthropic.AsyncAnthropic(
        api_key=API_KEY, base_url=model_server.anthropic_base_url, max_retries=0
    ) as client:
        message = await client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "Hello"}]
        )
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[1].type == "text"
    assert message.content[1].text == "Hi there."
    assert message.usage.cache_read_input_tokens == 4
    assert message.stop_reason == "end_turn"


async def test_steps_can_be_functions_of_the_request(model_server: ModelServer) -> None:
    """A callable step answers from the recorded request (sync or async)."""

    def echo(request: RecordedRequest) -> Step:
        return Reply(f"you said {request.body['messages'][-1]['content']}")

    async def later(request: RecordedRequest) -> Step:
        await asyncio.sleep(0)
        return Reply("async step")

    model_server.script(echo, later)
    async with openai.AsyncOpenAI(
        api_key=API_KEY, base_url=model_server.openai_base_url, max_retries=0
    ) as client:
        first = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "ping"}]
        )
        second = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "pong"}]
        )
    assert first.choices[0].message.content == "you said ping"
    assert second.choices[0].message.content == "async step"
    assert model_server.remaining == 0


async def test_running_out_of_script_is_a_clear_400(model_server: ModelServer) -> None:
    """An unscripted request gets a non-retryable 400 that says the script ran out."""
    async with openai.AsyncOpenAI(
        api_key=API_KEY, base_url=model_server.openai_base_url, max_retries=0
    ) as client:
        with pytest.raises(openai.BadRequestError, match="no scripted response left"):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]
            )


async def test_faults_carry_status_headers_and_echoed_credential(
    model_server: ModelServer,
) -> None:
    """A Fault answers its status with Retry-After and an error body quoting the credential."""
    model_server.script(Fault(429, retry_after="3"))
    async with anthropic.AsyncAnthropic(
        api_key=API_KEY, base_url=model_server.anthropic_base_url, max_retries=0
    ) as client:
        with pytest.raises(anthropic.RateLimitError) as caught:
            await client.messages.create(
                model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
            )
    assert caught.value.response.headers["retry-after"] == "3"
    assert API_KEY in str(caught.value), "the server echoes keys, to test our scrubbing"
    (recorded,) = model_server.requests_for("anthropic")
    assert recorded.credential == API_KEY
    assert recorded.body["max_tokens"] == 10


async def test_openai_tool_call_fragments_interleave_by_index(model_server: ModelServer) -> None:
    """With interleave_calls the SDK sees the calls' fragments alternate, id and name first."""
    model_server.script(
        Reply(
            tool_calls=(Call("a", {"x": 1}, fragments=2), Call("b", {"y": 2}, fragments=2)),
            interleave_calls=True,
        )
    )
    async with openai.AsyncOpenAI(
        api_key=API_KEY, base_url=model_server.openai_base_url, max_retries=0
    ) as client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
        fragments = [
            fragment
            async for chunk in stream
            if chunk.choices
            for fragment in chunk.choices[0].delta.tool_calls or ()
        ]
    assert [f.index for f in fragments] == [0, 1, 0, 1, 0, 1]
    assert [(f.id, f.function.name if f.function else None) for f in fragments[:2]] == [
        ("call_1", "a"),
        ("call_2", "b"),
    ]
    assert all(f.id is None for f in fragments[2:])
    joined = [
        "".join(f.function.arguments or "" for f in fragments[i::2] if f.function) for i in (0, 1)
    ]
    assert joined == ['{"x":1}', '{"y":2}']


async def test_anthropic_sdk_parses_tool_use_in_a_json_message(model_server: ModelServer) -> None:
    """A non-streaming message carries the scripted calls as tool_use blocks, stop tool_use."""
    model_server.script(Reply("Calling.", tool_calls=(Call("add", {"a": 1, "b": 2}),)))
    async with anthropic.AsyncAnthropic(
        api_key=API_KEY, base_url=model_server.anthropic_base_url, max_retries=0
    ) as client:
        message = await client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "1+2"}]
        )
    assert [block.type for block in message.content] == ["text", "tool_use"]
    block = message.content[1]
    assert block.type == "tool_use"
    assert (block.id, block.name, block.input) == ("toolu_1", "add", {"a": 1, "b": 2})
    assert message.stop_reason == "tool_use"

"""OpenAI chat completions, streamed — OpenAI itself or any OpenAI-compatible server by `base_url`.

```python
provider = OpenAIProvider(ProviderConfig("openai", "gpt-4o-mini"))  # key from OPENAI_API_KEY
async for event in provider.stream(request):
    ...
```

Reasoning text that compatible servers send as `delta.reasoning_content` (vLLM, DeepSeek,
LM Studio) or `delta.reasoning` (OpenRouter, Ollama) streams as `TokenDelta(kind="thinking")`,
and each finished reasoning segment becomes one `ThinkingBlock`; it never reaches the content.
A stream that ends without a `finish_reason` is incomplete and retried.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncGenerator
from typing import Any, cast

import openai
from openai.resources.chat.completions import AsyncCompletions
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk

from pes_agent.config import ProviderConfig
from pes_agent.providers._sdk import (
    SdkErrorTypes,
    SdkProvider,
    env_value,
    labelled_tool_result,
    split_options,
)
from pes_agent.providers.base import (
    LLMRequest,
    PromptMessage,
    ProviderEvent,
    StreamMetadata,
    ThinkingBlock,
    TokenDelta,
)
from pes_agent.providers.retry import AttemptFailure, RetryPolicy
from pes_agent.usage import Usage

__all__ = ["OpenAIProvider", "max_tokens_parameter", "openai_messages", "openai_usage"]

_CREATE_PARAMS = frozenset(inspect.signature(AsyncCompletions.create).parameters) - {"self"}

# OpenAI's reasoning models (o1, o3-mini, o4-mini, gpt-5, gpt-5.1-mini, ...) refuse
# `max_tokens`; a vendor prefix ("openai/o3" on OpenRouter) may come first.
_REASONING_MODEL = re.compile(r"(?:^|/)(?:o\d+|gpt-(?:[5-9]|\d{2,}))(?:$|[-.:_])", re.IGNORECASE)


def max_tokens_parameter(model: str) -> str:
    """The parameter a model's token limit goes in: `max_completion_tokens` for OpenAI's
    reasoning models (o1, o3, o4-mini, gpt-5, ...), wherever they are served; `max_tokens` for
    every other model, which is what most OpenAI-compatible servers know."""
    return "max_completion_tokens" if _REASONING_MODEL.search(model) else "max_tokens"


def openai_messages(messages: tuple[PromptMessage, ...]) -> list[dict[str, Any]]:
    """Our prompt messages as chat-completions messages (a `tool` message becomes a user turn)."""
    result: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            result.append({"role": "user", "content": labelled_tool_result(message)})
            continue
        entry: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.name:
            entry["name"] = message.name
        result.append(entry)
    return result


def openai_usage(usage: CompletionUsage | None) -> Usage:
    """Our `Usage` from a chat-completions usage block (zeros when the server sent none)."""
    if usage is None:
        return Usage(requests=1)
    prompt = usage.prompt_tokens_details
    completion = usage.completion_tokens_details
    return Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens or usage.prompt_tokens + usage.completion_tokens,
        cache_read_tokens=(prompt.cached_tokens or 0) if prompt else 0,
        cache_write_tokens=(prompt.cache_write_tokens or 0) if prompt else 0,
        reasoning_tokens=(completion.reasoning_tokens or 0) if completion else 0,
        requests=1,
    )


class OpenAIProvider(SdkProvider[openai.AsyncOpenAI]):
    """Streams chat completions through `openai.AsyncOpenAI` (the SDK's own retries off).

    The key is `config.api_key` or `OPENAI_API_KEY`; the URL is `config.base_url`,
    `OPENAI_BASE_URL` or OpenAI's. `request.max_tokens` is sent as `max_completion_tokens` to
    OpenAI's reasoning models, behind any URL, and as `max_tokens` to every other model
    (`max_tokens_parameter`). Everything in `config.options` and `request.options` is passed
    on (unknown names in `extra_body`).
    """

    label = "OpenAI"
    key_env_var = "OPENAI_API_KEY"
    errors = SdkErrorTypes.of(openai)

    def __init__(self, config: ProviderConfig, *, retry_policy: RetryPolicy | None = None) -> None:
        self._base_url = self._resolve_base_url(config)
        self._server_sends_usage = False
        self._max_tokens_param = max_tokens_parameter(config.model)
        super().__init__(config, retry_policy=retry_policy)

    def _resolve_base_url(self, config: ProviderConfig) -> str | None:
        return config.base_url or env_value("OPENAI_BASE_URL")

    def _new_client(self) -> openai.AsyncOpenAI:
        # Organization and project go into headers: read them as the key is, without the
        # whitespace a paste leaves.
        return openai.AsyncOpenAI(
            api_key=self._api_key,
            organization=env_value("OPENAI_ORG_ID"),
            project=env_value("OPENAI_PROJECT_ID"),
            base_url=self._base_url,
            timeout=self._config.timeout_s,
            max_retries=0,
        )

    def _request_kwargs(self, request: LLMRequest) -> dict[str, Any]:
        kwargs = split_options({**self._config.options, **request.options}, _CREATE_PARAMS)
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.max_tokens is not None:
            kwargs[self._max_tokens_param] = request.max_tokens
        kwargs["stream_options"] = {**(kwargs.get("stream_options") or {}), "include_usage": True}
        kwargs["model"] = self._config.model
        kwargs["messages"] = openai_messages(request.messages)
        kwargs["stream"] = True
        return kwargs

    async def _events(self, kwargs: dict[str, Any]) -> AsyncGenerator[ProviderEvent, None]:
        stream = cast(
            "openai.AsyncStream[ChatCompletionChunk]",
            await self._client.chat.completions.create(**kwargs),
        )
        async with stream:
            thinking: list[str] = []
            finish_reason: str | None = None
            usage: CompletionUsage | None = None
            model: str | None = None
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                delta = choice.delta
                extra = delta.model_extra
                if extra:
                    reasoning = extra.get("reasoning_content") or extra.get("reasoning")
                    if reasoning and isinstance(reasoning, str):
                        thinking.append(reasoning)
                        yield TokenDelta(reasoning, "thinking")
                text = delta.content or delta.refusal
                if text:
                    if thinking:
                        yield ThinkingBlock("".join(thinking))
                        thinking = []
                    yield TokenDelta(text)
                if choice.finish_reason is not None:
                    finish_reason = choice.finish_reason
                    model = chunk.model
        if finish_reason is None:
            raise AttemptFailure(
                "the stream ended without a finish_reason (incomplete answer)",
                kind="incomplete",
                retryable=True,
            )
        if usage is None and (self._base_url is None or self._server_sends_usage):
            # We asked for usage (include_usage), and this server sends it: the stream was cut
            # between the finish chunk and the usage chunk. Some OpenAI-compatible servers
            # never send usage; those are not penalised until they have sent it once.
            raise AttemptFailure(
                "the stream ended before its usage chunk (cut after the answer)",
                kind="incomplete",
                retryable=True,
            )
        if usage is not None:
            self._server_sends_usage = True
        if thinking:
            yield ThinkingBlock("".join(thinking))
        yield StreamMetadata(
            usage=openai_usage(usage), model=model or self.model, stop_reason=finish_reason
        )

"""Anthropic messages, streamed, with extended thinking.

```python
config = ProviderConfig(
    "anthropic", "claude-sonnet-4-5",
    options={"thinking": {"type": "enabled", "budget_tokens": 1024}},
)
provider = AnthropicProvider(config)  # key from ANTHROPIC_API_KEY
```

System prompt messages go in the request's `system`; each `thinking` block streams as
`TokenDelta(kind="thinking")` and ends as one `ThinkingBlock`, never in the content. A stream
that ends without `message_stop` is incomplete and retried.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator
from typing import Any, cast

import anthropic
from anthropic.resources.messages import AsyncMessages
from anthropic.types import (
    MessageDeltaUsage,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RawMessageStreamEvent,
    TextBlock,
    TextDelta,
    ThinkingDelta,
)
from anthropic.types import ThinkingBlock as AnthropicThinkingBlock
from anthropic.types import Usage as AnthropicUsage

from pes_agent.config import ProviderConfig
from pes_agent.providers._sdk import SdkErrorTypes, SdkProvider, labelled_tool_result, split_options
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

__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicProvider", "anthropic_messages", "anthropic_usage"]

#: Anthropic requires `max_tokens`; this is sent when neither the request nor the options set it.
DEFAULT_MAX_TOKENS = 4096

_CREATE_PARAMS = frozenset(inspect.signature(AsyncMessages.create).parameters) - {"self"}


def anthropic_messages(
    messages: tuple[PromptMessage, ...],
) -> tuple[str | None, list[dict[str, Any]]]:
    """Our prompt messages as Anthropic's `(system, messages)`.

    System messages, wherever they are, join (in order) into `system`; a `tool` message becomes
    a user turn; consecutive turns of one role merge into one turn of text blocks, as the
    Messages API expects alternating roles.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            system.append(message.content)
            continue
        role = "assistant" if message.role == "assistant" else "user"
        text = labelled_tool_result(message) if message.role == "tool" else message.content
        if turns and turns[-1]["role"] == role:
            previous = turns[-1]
            if isinstance(previous["content"], str):
                previous["content"] = [{"type": "text", "text": previous["content"]}]
            previous["content"].append({"type": "text", "text": text})
        else:
            turns.append({"role": role, "content": text})
    return ("\n\n".join(system) if system else None), turns


def anthropic_usage(start: AnthropicUsage | None, final: MessageDeltaUsage | None) -> Usage:
    """Our `Usage` from `message_start`'s usage updated by `message_delta`'s.

    Anthropic's `input_tokens` leaves out cache reads and writes; ours includes them (they are
    broken out, not added), the way OpenAI counts `prompt_tokens`.
    """

    def pick(name: str) -> int:
        for source in (final, start):
            value = getattr(source, name, None) if source is not None else None
            if value is not None:
                return int(value)
        return 0

    fresh = pick("input_tokens")
    cache_read = pick("cache_read_input_tokens")
    cache_write = pick("cache_creation_input_tokens")
    output = pick("output_tokens")
    reasoning = 0
    for source in (final, start):
        details = getattr(source, "output_tokens_details", None) if source is not None else None
        if details is not None:
            reasoning = details.thinking_tokens
            break
    input_tokens = fresh + cache_read + cache_write
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output,
        total_tokens=input_tokens + output,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=reasoning,
        requests=1,
    )


class AnthropicProvider(SdkProvider[anthropic.AsyncAnthropic]):
    """Streams messages through `anthropic.AsyncAnthropic` (the SDK's own retries off).

    The key is `config.api_key` or `ANTHROPIC_API_KEY`. `max_tokens` is the request's, else
    `config.options["max_tokens"]`, else `default_max_tokens`; with extended thinking enabled
    and a defaulted `max_tokens` not above the thinking budget, the budget is added to it.
    Everything else in the options is passed on (`thinking`, `top_k`, `metadata`, ...), and the
    request's `temperature` too.
    """

    label = "Anthropic"
    key_env_var = "ANTHROPIC_API_KEY"
    errors = SdkErrorTypes.of(anthropic)

    def __init__(
        self,
        config: ProviderConfig,
        *,
        retry_policy: RetryPolicy | None = None,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        self._default_max_tokens = default_max_tokens
        super().__init__(config, retry_policy=retry_policy)

    def _new_client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=self._api_key,
            base_url=self._config.base_url,
            timeout=self._config.timeout_s,
            max_retries=0,
        )

    def _request_kwargs(self, request: LLMRequest) -> dict[str, Any]:
        options = {**self._config.options, **request.options}
        max_tokens = request.max_tokens or options.pop("max_tokens", None)
        if max_tokens is None:
            max_tokens = self._default_max_tokens
            thinking = options.get("thinking")
            budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
            if isinstance(budget, int) and budget >= max_tokens:
                max_tokens = budget + self._default_max_tokens
        options.pop("max_tokens", None)
        if request.temperature is not None:
            options["temperature"] = request.temperature
        kwargs = split_options(options, _CREATE_PARAMS)
        system, messages = anthropic_messages(request.messages)
        if system is not None:
            kwargs["system"] = system
        kwargs["model"] = self._config.model
        kwargs["max_tokens"] = max_tokens
        kwargs["messages"] = messages
        kwargs["stream"] = True
        return kwargs

    async def _events(self, kwargs: dict[str, Any]) -> AsyncGenerator[ProviderEvent, None]:
        stream = cast(
            "anthropic.AsyncStream[RawMessageStreamEvent]",
            await self._client.messages.create(**kwargs),
        )
        async with stream:
            thinking: list[str] | None = None  # the open thinking block's text
            start_usage: AnthropicUsage | None = None
            final_usage: MessageDeltaUsage | None = None
            stop_reason: str | None = None
            model: str | None = None
            finished = False
            async for event in stream:
                if isinstance(event, RawContentBlockDeltaEvent):
                    delta = event.delta
                    if isinstance(delta, TextDelta):
                        yield TokenDelta(delta.text)
                    elif isinstance(delta, ThinkingDelta):
                        if thinking is None:
                            thinking = []
                        thinking.append(delta.thinking)
                        yield TokenDelta(delta.thinking, "thinking")
                elif isinstance(event, RawContentBlockStartEvent):
                    block = event.content_block
                    if isinstance(block, AnthropicThinkingBlock):
                        thinking = [block.thinking] if block.thinking else []
                        if block.thinking:
                            yield TokenDelta(block.thinking, "thinking")
                    elif isinstance(block, TextBlock) and block.text:
                        yield TokenDelta(block.text)
                elif isinstance(event, RawContentBlockStopEvent):
                    if thinking is not None:
                        # A block whose thinking is omitted (signature only) is no thought.
                        if text := "".join(thinking):
                            yield ThinkingBlock(text)
                        thinking = None
                elif isinstance(event, RawMessageStartEvent):
                    start_usage = event.message.usage
                    model = event.message.model
                elif isinstance(event, RawMessageDeltaEvent):
                    stop_reason = event.delta.stop_reason
                    final_usage = event.usage
                elif isinstance(event, RawMessageStopEvent):
                    finished = True
        if not finished:
            raise AttemptFailure(
                "the stream ended without message_stop (incomplete answer)",
                kind="incomplete",
                retryable=True,
            )
        yield StreamMetadata(
            usage=anthropic_usage(start_usage, final_usage),
            model=model or self.model,
            stop_reason=stop_reason,
        )

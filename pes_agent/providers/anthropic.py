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

Native tools: `LLMRequest.tools` go out as `{"name", "description", "input_schema"}` and
`tool_choice` as `{"type": "auto" | "any" | "none"}` or `{"type": "tool", "name": ...}`; an
assistant message's `tool_calls` as `tool_use` blocks after its text, and `tool` messages with
a `tool_call_id` as `tool_result` blocks of one user turn (consecutive results merged, ahead of
any text, as the API requires). A streamed `tool_use` block's `input_json_delta` pieces are
joined and the call is yielded as one `ToolCallEvent` when its block stops.

`response_format` (a JSON Schema) is sent as Anthropic's structured output,
`output_config={"format": {"type": "json_schema", "schema": ...}}` (`anthropic_output_config`),
merged into any `output_config` of the options. Models without structured outputs refuse it
with a 400, which is not retried; to constrain the answer on every tool-capable model, offer
one tool whose `input_schema` is the schema and force it (`tool_choice=<its name>`): its call's
arguments are the answer (what structured PES planning does with `submit_plan`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import anthropic
from anthropic.resources.messages import AsyncMessages
from anthropic.types import (
    InputJSONDelta,
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
    ToolUseBlock,
)
from anthropic.types import ThinkingBlock as AnthropicThinkingBlock
from anthropic.types import Usage as AnthropicUsage

from pes_agent.config import ProviderConfig
from pes_agent.providers._sdk import (
    SdkErrorTypes,
    SdkProvider,
    labelled_tool_result,
    offered_tool_choice,
    split_options,
    tool_call_event,
)
from pes_agent.providers.base import (
    LLMRequest,
    PromptMessage,
    ProviderEvent,
    StreamMetadata,
    StructuredOutput,
    ThinkingBlock,
    TokenDelta,
    ToolCallDelta,
    ToolCallEvent,
    ToolChoice,
)
from pes_agent.providers.retry import AttemptFailure, RetryPolicy
from pes_agent.tools.base import ToolSchema
from pes_agent.usage import Usage

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "AnthropicProvider",
    "anthropic_messages",
    "anthropic_output_config",
    "anthropic_tool_choice",
    "anthropic_tools",
    "anthropic_usage",
]

#: Anthropic requires `max_tokens`; this is sent when neither the request nor the options set it.
DEFAULT_MAX_TOKENS = 4096

_CREATE_PARAMS = frozenset(inspect.signature(AsyncMessages.create).parameters) - {"self"}


def anthropic_messages(
    messages: tuple[PromptMessage, ...],
) -> tuple[str | None, list[dict[str, Any]]]:
    """Our prompt messages as Anthropic's `(system, messages)`.

    System messages, wherever they are, join (in order) into `system`. An assistant message's
    `tool_calls` become `tool_use` blocks after its text; a `tool` message with a
    `tool_call_id` becomes a `tool_result` block in a user turn, placed ahead of that turn's
    text; a `tool` message without one answers no call and becomes labelled user text
    (`labelled_tool_result`). Consecutive turns of one role merge into one turn of blocks, as
    the Messages API expects alternating roles; a turn of one text block is sent as a string.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            system.append(message.content)
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if turns and turns[-1]["role"] == role:
            content: list[dict[str, Any]] = turns[-1]["content"]
        else:
            content = []
            turns.append({"role": role, "content": content})
        for block in blocks:
            if block["type"] == "tool_result":
                # Tool results must open their user turn; text said beside them follows.
                at = next(
                    (i for i, b in enumerate(content) if b["type"] != "tool_result"), len(content)
                )
                content.insert(at, block)
            else:
                content.append(block)
    for turn in turns:
        blocks = turn["content"]
        if len(blocks) == 1 and blocks[0]["type"] == "text":
            turn["content"] = blocks[0]["text"]
    return ("\n\n".join(system) if system else None), turns


def _blocks(message: PromptMessage) -> list[dict[str, Any]]:
    if message.role == "tool":
        if message.tool_call_id is None:
            return [{"type": "text", "text": labelled_tool_result(message)}]
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
        ]
    if message.role != "assistant" or not message.tool_calls:
        return [{"type": "text", "text": message.content}]
    # The API refuses empty text blocks: a turn that only calls tools has none.
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": message.content}] if message.content else []
    )
    blocks += [
        {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
        for call in message.tool_calls
    ]
    return blocks


def anthropic_tools(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    """Our tool schemas as Messages API tools."""
    return [
        {
            "name": schema.name,
            "description": schema.description,
            "input_schema": schema.input_schema,
        }
        for schema in tools
    ]


def anthropic_tool_choice(choice: ToolChoice) -> dict[str, Any]:
    """Our `tool_choice` in the API's words: `"required"` is `any`, a name is `tool`."""
    if choice == "auto":
        return {"type": "auto"}
    if choice == "none":
        return {"type": "none"}
    if choice == "required":
        return {"type": "any"}
    return {"type": "tool", "name": choice}


def anthropic_output_config(
    schema: Mapping[str, Any], existing: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """`output_config` asking for JSON that follows `schema` (Anthropic's structured output),
    keeping the other settings of an `existing` one (`effort`, ...)."""
    return {**(existing or {}), "format": {"type": "json_schema", "schema": dict(schema)}}


@dataclass(slots=True)
class _PendingToolUse:
    """One streamed `tool_use` block being joined from its `input_json_delta` pieces."""

    id: str
    name: str
    start_input: object
    pieces: list[str] = field(default_factory=list)

    def finish(self) -> ToolCallEvent:
        raw = "".join(self.pieces)
        if not raw.strip() and self.start_input:
            # A server that sends the whole input in the block's start, with no deltas.
            raw = json.dumps(self.start_input)
        return tool_call_event(self.id, self.name, raw)


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
    #: Structured PES planning forces a `submit_plan` tool: every tool-capable model has it,
    #: while `output_config.format` is refused by models without structured outputs.
    structured_output: ClassVar[StructuredOutput] = "forced_tool"

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
        if request.tools:
            kwargs["tools"] = [*(kwargs.get("tools") or ()), *anthropic_tools(request.tools)]
        choice = offered_tool_choice(request)
        if choice is not None:
            kwargs["tool_choice"] = anthropic_tool_choice(choice)
        if request.response_format is not None:
            kwargs["output_config"] = anthropic_output_config(
                request.response_format, kwargs.get("output_config")
            )
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
            tool_uses: dict[int, _PendingToolUse] = {}  # open tool_use blocks by index
            start_usage: AnthropicUsage | None = None
            final_usage: MessageDeltaUsage | None = None
            stop_reason: str | None = None
            model: str | None = None
            response_id: str | None = None
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
                    elif isinstance(delta, InputJSONDelta):
                        pending = tool_uses.get(event.index)
                        if pending is not None:
                            pending.pieces.append(delta.partial_json)
                            if delta.partial_json:
                                yield ToolCallDelta(pending.id, pending.name, delta.partial_json)
                elif isinstance(event, RawContentBlockStartEvent):
                    block = event.content_block
                    if isinstance(block, AnthropicThinkingBlock):
                        thinking = [block.thinking] if block.thinking else []
                        if block.thinking:
                            yield TokenDelta(block.thinking, "thinking")
                    elif isinstance(block, TextBlock) and block.text:
                        yield TokenDelta(block.text)
                    elif isinstance(block, ToolUseBlock):
                        tool_uses[event.index] = _PendingToolUse(block.id, block.name, block.input)
                elif isinstance(event, RawContentBlockStopEvent):
                    finished_call = tool_uses.pop(event.index, None)
                    if finished_call is not None:
                        yield finished_call.finish()
                    elif thinking is not None:
                        # A block whose thinking is omitted (signature only) is no thought.
                        if text := "".join(thinking):
                            yield ThinkingBlock(text)
                        thinking = None
                elif isinstance(event, RawMessageStartEvent):
                    start_usage = event.message.usage
                    model = event.message.model
                    response_id = event.message.id
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
            response_id=response_id or None,
        )

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

Native tools: `LLMRequest.tools` go out as `function` tools and `tool_choice` as `"auto"`,
`"none"`, `"required"` or `{"type": "function", "function": {"name": ...}}`; an assistant
message's `tool_calls` and a `tool` message's `tool_call_id` as the API's own tool messages.
Streamed `delta.tool_calls` fragments are joined by `index` (the id and name come first, the
arguments in pieces) and each call is yielded as one `ToolCallEvent` once the stream has
finished, so an attempt that fails half-way yields none. `response_format` (a JSON Schema) is
sent as `{"type": "json_schema", ...}`, strict when the schema meets strict mode's rules
(`openai_response_format`). All of this holds for OpenAI-compatible servers too.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import openai
from openai.resources.chat.completions import AsyncCompletions
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall

from pes_agent.config import ProviderConfig
from pes_agent.providers._sdk import (
    SdkErrorTypes,
    SdkProvider,
    env_value,
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
    ToolCallEvent,
    ToolChoice,
)
from pes_agent.providers.retry import AttemptFailure, RetryPolicy
from pes_agent.tools.base import ToolSchema
from pes_agent.tools.calls import ToolCall
from pes_agent.usage import Usage

__all__ = [
    "OpenAIProvider",
    "max_tokens_parameter",
    "openai_messages",
    "openai_response_format",
    "openai_tool_choice",
    "openai_tools",
    "openai_usage",
]

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
    """Our prompt messages as chat-completions messages.

    An assistant message's `tool_calls` become the API's `tool_calls` (arguments as JSON text)
    and a `tool` message with a `tool_call_id` a `role: "tool"` message answering that call;
    a `tool` message without one answers no call and goes in as a labelled user turn
    (`labelled_tool_result`).
    """
    result: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            if message.tool_call_id is None:
                result.append({"role": "user", "content": labelled_tool_result(message)})
            else:
                result.append(
                    {
                        "role": "tool",
                        "tool_call_id": message.tool_call_id,
                        "content": message.content,
                    }
                )
            continue
        entry: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.name:
            entry["name"] = message.name
        if message.role == "assistant" and message.tool_calls:
            # The API's own form of a turn that only calls tools: no content at all.
            entry["content"] = message.content or None
            entry["tool_calls"] = [_wire_tool_call(call) for call in message.tool_calls]
        result.append(entry)
    return result


def _wire_tool_call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {
            "name": call.name,
            "arguments": json.dumps(call.arguments, ensure_ascii=False, default=str),
        },
    }


def openai_tools(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    """Our tool schemas as chat-completions `function` tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": schema.name,
                "description": schema.description,
                "parameters": schema.input_schema,
            },
        }
        for schema in tools
    ]


def openai_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """Our `tool_choice` in the API's words: the keywords as they are, a name as a function."""
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]+")
# Keys whose values are data or lists of names, not subschemas.
_NOT_SUBSCHEMAS = frozenset({"required", "enum", "const", "default", "examples", "description"})


def openai_response_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON Schema as a `json_schema` response format.

    The name is the schema's `title` (in the characters the API allows), else `"response"`.
    `strict` is on only when the schema meets strict mode's rules — every object lists all its
    properties as `required` and sets `additionalProperties: false` — because a strict request
    with any other schema is refused (400) rather than answered loosely.
    """
    title = schema.get("title")
    name = _SCHEMA_NAME.sub("_", title).strip("_")[:64] if isinstance(title, str) else ""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": name or "response",
            "schema": dict(schema),
            "strict": _strict_compatible(schema),
        },
    }


def _strict_compatible(node: Any) -> bool:
    if isinstance(node, list):
        return all(_strict_compatible(item) for item in node)
    if not isinstance(node, Mapping):
        return True
    if node.get("type") == "object" or "properties" in node:
        properties = node.get("properties") or {}
        if node.get("additionalProperties") is not False:
            return False
        if not isinstance(properties, Mapping) or set(node.get("required") or ()) != set(
            properties
        ):
            return False
    for key, value in node.items():
        if key in _NOT_SUBSCHEMAS:
            continue
        if key in ("properties", "$defs", "definitions") and isinstance(value, Mapping):
            # Maps of names to subschemas: a property may itself be called "type".
            if not all(_strict_compatible(sub) for sub in value.values()):
                return False
        elif not _strict_compatible(value):
            return False
    return True


@dataclass(slots=True)
class _PendingCall:
    """One streamed tool call being joined from its fragments."""

    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def add(self, fragment: ChoiceDeltaToolCall) -> None:
        # Some compatible servers repeat the id or name in later fragments: the first wins.
        self.id = self.id or fragment.id
        function = fragment.function
        if function is None:
            return
        self.name = self.name or function.name or ""
        arguments: object = function.arguments
        if isinstance(arguments, str):
            self.arguments.append(arguments)
        elif arguments is not None:
            # A server that sends the arguments as an object rather than JSON text.
            self.arguments.append(json.dumps(arguments))

    def finish(self, index: int) -> ToolCallEvent:
        return tool_call_event(self.id or f"call_{index}", self.name, "".join(self.arguments))


def _join_fragments(
    pending: dict[int, _PendingCall], fragments: Sequence[ChoiceDeltaToolCall]
) -> None:
    for fragment in fragments:
        index: object = fragment.index
        if not isinstance(index, int):
            # A server that leaves out the index: a new id starts a call, the rest continue
            # the latest.
            last = max(pending, default=-1)
            starts = fragment.id is not None and (last < 0 or pending[last].id != fragment.id)
            index = last + 1 if starts or last < 0 else last
        pending.setdefault(index, _PendingCall()).add(fragment)


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
    #: Structured PES planning sends the plan's schema as `response_format` (`json_schema`).
    structured_output: ClassVar[StructuredOutput] = "response_format"

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
        if request.tools:
            kwargs["tools"] = [*(kwargs.get("tools") or ()), *openai_tools(request.tools)]
        choice = offered_tool_choice(request)
        if choice is not None:
            kwargs["tool_choice"] = openai_tool_choice(choice)
        if request.response_format is not None:
            kwargs["response_format"] = openai_response_format(request.response_format)
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
            calls: dict[int, _PendingCall] = {}
            finish_reason: str | None = None
            usage: CompletionUsage | None = None
            model: str | None = None
            response_id: str | None = None
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
                if (text or delta.tool_calls) and thinking:
                    yield ThinkingBlock("".join(thinking))
                    thinking = []
                if text:
                    yield TokenDelta(text)
                if delta.tool_calls:
                    _join_fragments(calls, delta.tool_calls)
                if choice.finish_reason is not None:
                    finish_reason = choice.finish_reason
                    model = chunk.model
                    response_id = chunk.id
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
        # Only now that the attempt is known to be whole: a retried one yields no calls.
        for index, call in sorted(calls.items()):
            yield call.finish(index)
        yield StreamMetadata(
            usage=openai_usage(usage),
            model=model or self.model,
            stop_reason=finish_reason,
            response_id=response_id or None,
        )

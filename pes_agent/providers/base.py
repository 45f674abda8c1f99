"""The provider protocol: how the agent streams a completion from any model.

A provider turns an `LLMRequest` into an async stream of `ProviderEvent`s:

- `TokenDelta(text, kind)` — a piece of answer text (`kind="content"`) or of reasoning
  (`kind="thinking"`);
- `ThinkingBlock(text)` — one finished thinking block (a THOUGHTS observation each);
- `StreamRestart(reason, attempt)` — the provider is retrying after tokens were already sent:
  the consumer must discard what it has accumulated (the agent records LLM_STREAM_ERROR and a
  fresh LLM_STREAM_START so a UI can reset);
- `ToolCallDelta(call_id, name, text)` — a piece of a native tool call's arguments (JSON text)
  as the model writes it, before the call is complete (a planner reads a plan that comes as a
  tool call while it streams); a provider need not send them;
- `ToolCallEvent(call, error)` — one native tool call, once its fragments are joined; `error`
  says why its arguments could not be used (not valid JSON, not an object), never a crash;
- `StreamMetadata(...)` — exactly once, last: usage, timings, stop reason, and the model and
  response id the server's answer names.

A stream that raises is a failed call; providers raise `ProviderError` with a message that
never contains an API key.

A provider may also declare how it constrains an answer to a JSON Schema, in a
`structured_output` attribute (a `StructuredOutput`): `"response_format"` when it honours
`LLMRequest.response_format` (OpenAI and OpenAI-compatible servers), `"forced_tool"` when the
way is one tool whose input is the answer, forced by `tool_choice` (Anthropic). Structured PES
planning uses it (`pes_agent.planning.structured`); a provider without it is asked in text.
Likewise a `server` attribute (a `ServerAddress`) says which server its requests go to, for
traces (`server.address`, `server.port` on a model call's span).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pes_agent.tools.base import ToolSchema
from pes_agent.tools.calls import ToolCall
from pes_agent.usage import Usage

__all__ = [
    "LLMPhase",
    "LLMProvider",
    "LLMRequest",
    "PromptMessage",
    "PromptRole",
    "ProviderEvent",
    "ServerAddress",
    "StreamMetadata",
    "StreamRestart",
    "StructuredOutput",
    "ThinkingBlock",
    "TokenDelta",
    "TokenKind",
    "ToolCallDelta",
    "ToolCallEvent",
    "ToolChoice",
]

PromptRole = Literal["system", "user", "assistant", "tool"]
#: Which part of a run a model call serves: the PES phases, then the calls of ECS agents
#: (`reasoning` a ReAct turn, `compaction` a summary, `plan_step` / `replanning` /
#: `tree_search` the plan systems, `reevaluation` and `language_step` adaptive PES plans).
LLMPhase = Literal[
    "planning",
    "repair",
    "synthesis",
    "reasoning",
    "compaction",
    "plan_step",
    "replanning",
    "tree_search",
    "reevaluation",
    "language_step",
]
#: `"auto"` lets the model choose, `"none"` forbids tools, `"required"` demands one, and a
#: tool's name forces that tool.
ToolChoice = Literal["auto", "none", "required"] | str
TokenKind = Literal["content", "thinking"]
#: How a provider constrains an answer to a JSON Schema (its optional `structured_output`
#: attribute): `"response_format"` honours `LLMRequest.response_format`; `"forced_tool"` offers
#: one tool whose `input_schema` is the schema and forces it with `tool_choice`.
StructuredOutput = Literal["response_format", "forced_tool"]


@dataclass(frozen=True, slots=True)
class PromptMessage:
    """One message of a prompt, in provider-neutral form.

    An assistant message may carry the `tool_calls` it made; a `"tool"` message answers the
    call whose id is `tool_call_id`. Providers send both as their API's native tool messages.
    """

    role: PromptRole
    content: str
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One model call: the messages, the model's parameters and who is asking.

    `tools` are offered as native tools (`tool_choice` steers them); `response_format` is a
    JSON Schema the answer must follow, where the provider supports structured output.
    """

    messages: tuple[PromptMessage, ...]
    phase: LLMPhase
    thread_id: str
    trace_id: str
    temperature: float | None = None
    max_tokens: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    tools: tuple[ToolSchema, ...] = ()
    tool_choice: ToolChoice | None = None
    response_format: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class TokenDelta:
    text: str
    kind: TokenKind = "content"


@dataclass(frozen=True, slots=True)
class ThinkingBlock:
    text: str


@dataclass(frozen=True, slots=True)
class StreamRestart:
    reason: str
    attempt: int


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of the arguments of tool call `call_id` (of tool `name`) as the model writes
    them: JSON text, complete only once joined; its `ToolCallEvent` follows."""

    call_id: str
    name: str
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """One native tool call the model made; with `error`, its arguments were unusable (`raw`
    holds them as sent) and `call.arguments` is empty."""

    call: ToolCall
    error: str | None = None
    raw: str | None = None


@dataclass(frozen=True, slots=True)
class StreamMetadata:
    """What a finished call reports: `model` and `response_id` as the server's answer names them
    (a dated model such as ``gpt-4o-mini-2024-07-18`` for the requested ``gpt-4o-mini``).

    `provider` names the provider that answered when the provider asked is made of several
    (a `FallbackProvider`); `None` means the one asked.
    """

    usage: Usage
    model: str | None = None
    stop_reason: str | None = None
    time_to_first_token_ms: float | None = None
    total_ms: float | None = None
    response_id: str | None = None
    provider: str | None = None


@dataclass(frozen=True, slots=True)
class ServerAddress:
    """The host and port a provider sends its requests to (a provider's optional `server`)."""

    address: str
    port: int


ProviderEvent = (
    TokenDelta | ThinkingBlock | ToolCallDelta | ToolCallEvent | StreamRestart | StreamMetadata
)


@runtime_checkable
class LLMProvider(Protocol):
    """A model the agent can stream from; `name` and `model` label logs and observations."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        """Stream one model call's answer, as an async generator.

        Args:
            request: The messages, phase, tools and parameters of the call.

        Yields:
            `TokenDelta`s, `ThinkingBlock`s, `ToolCallDelta`s and `ToolCallEvent`s as they
            come (a `StreamRestart` when a retry starts the answer over), then one
            `StreamMetadata`.

        Raises:
            ProviderError: The model API failed; `retryable` says whether trying again could
                help.
        """
        ...

    async def aclose(self) -> None:
        """Release the provider's HTTP clients; the provider is not used after it."""
        ...

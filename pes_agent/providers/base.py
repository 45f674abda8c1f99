"""The provider protocol: how the agent streams a completion from any model.

A provider turns an `LLMRequest` into an async stream of `ProviderEvent`s:

- `TokenDelta(text, kind)` — a piece of answer text (`kind="content"`) or of reasoning
  (`kind="thinking"`);
- `ThinkingBlock(text)` — one finished thinking block (a THOUGHTS observation each);
- `StreamRestart(reason, attempt)` — the provider is retrying after tokens were already sent:
  the consumer must discard what it has accumulated (the agent records LLM_STREAM_ERROR and a
  fresh LLM_STREAM_START so a UI can reset);
- `StreamMetadata(...)` — exactly once, last: usage, timings, stop reason.

A stream that raises is a failed call; providers raise `ProviderError` with a message that
never contains an API key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pes_agent.usage import Usage

__all__ = [
    "LLMPhase",
    "LLMProvider",
    "LLMRequest",
    "PromptMessage",
    "PromptRole",
    "ProviderEvent",
    "StreamMetadata",
    "StreamRestart",
    "ThinkingBlock",
    "TokenDelta",
    "TokenKind",
]

PromptRole = Literal["system", "user", "assistant", "tool"]
LLMPhase = Literal["planning", "repair", "synthesis"]
TokenKind = Literal["content", "thinking"]


@dataclass(frozen=True, slots=True)
class PromptMessage:
    """One message of a prompt, in provider-neutral form."""

    role: PromptRole
    content: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One model call: the messages, the model's parameters and who is asking."""

    messages: tuple[PromptMessage, ...]
    phase: LLMPhase
    thread_id: str
    trace_id: str
    temperature: float | None = None
    max_tokens: int | None = None
    options: dict[str, Any] = field(default_factory=dict)


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
class StreamMetadata:
    usage: Usage
    model: str | None = None
    stop_reason: str | None = None
    time_to_first_token_ms: float | None = None
    total_ms: float | None = None


ProviderEvent = TokenDelta | ThinkingBlock | StreamRestart | StreamMetadata


@runtime_checkable
class LLMProvider(Protocol):
    """A model the agent can stream from; `name` and `model` label logs and observations."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]: ...

    async def aclose(self) -> None: ...

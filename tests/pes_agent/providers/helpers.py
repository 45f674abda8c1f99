"""Helpers shared by the provider tests: a key-shaped API key, requests, event collection."""

from __future__ import annotations

from typing import Any

from pes_agent.providers import LLMRequest, PromptMessage
from pes_agent.providers.base import (
    LLMProvider,
    ProviderEvent,
    StreamMetadata,
    StreamRestart,
    ThinkingBlock,
    TokenDelta,
    ToolCallEvent,
)

__all__ = [
    "API_KEY",
    "RecordedSleeps",
    "collect",
    "content",
    "metadata",
    "request",
    "restarts",
    "thinking",
    "tool_calls",
]

# Shaped like a real key, so a leak is also caught by anything that scans for "sk-".
API_KEY = "sk-proj-TESTKEY-9f8e7d6c5b4a39281706f5e4d3c2b1a0"


class RecordedSleeps:
    """A retry sleep that records each wait instead of spending it."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def request(*messages: PromptMessage, **kwargs: Any) -> LLMRequest:
    """An `LLMRequest` for thread-1 / trace-1 (a single user message unless given)."""
    kwargs.setdefault("phase", "synthesis")
    return LLMRequest(
        messages=messages or (PromptMessage("user", "Hello?"),),
        thread_id="thread-1",
        trace_id="trace-1",
        **kwargs,
    )


async def collect(provider: LLMProvider, req: LLMRequest | None = None) -> list[ProviderEvent]:
    """Every event of one streamed call."""
    return [event async for event in provider.stream(req or request())]


def content(events: list[ProviderEvent], *, after_last_restart: bool = True) -> str:
    """The answer text a consumer would keep (discarding what came before a restart)."""
    if after_last_restart:
        events = _after_last_restart(events)
    return "".join(e.text for e in events if isinstance(e, TokenDelta) and e.kind == "content")


def _after_last_restart(events: list[ProviderEvent]) -> list[ProviderEvent]:
    starts = [i for i, e in enumerate(events) if isinstance(e, StreamRestart)]
    return events[starts[-1] + 1 :] if starts else events


def tool_calls(
    events: list[ProviderEvent], *, after_last_restart: bool = True
) -> list[ToolCallEvent]:
    """The tool-call events a consumer would keep (discarding what came before a restart)."""
    kept = _after_last_restart(events) if after_last_restart else events
    return [e for e in kept if isinstance(e, ToolCallEvent)]


def thinking(events: list[ProviderEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, ThinkingBlock)]


def restarts(events: list[ProviderEvent]) -> list[StreamRestart]:
    return [e for e in events if isinstance(e, StreamRestart)]


def metadata(events: list[ProviderEvent]) -> StreamMetadata:
    """The final metadata event (asserting that it is exactly one, and last)."""
    found = [e for e in events if isinstance(e, StreamMetadata)]
    assert len(found) == 1, found
    assert events[-1] is found[0]
    return found[0]

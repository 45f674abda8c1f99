"""Helpers for testing agents and running them offline: a scripted model, plan builders, and
cassettes that record a real model's answers once and replay them (`RecordingProvider`,
`ReplayProvider`, in `pes_agent.testing.cassette`; the pytest plugin
`pes_agent.testing.pytest_plugin` gives tests a `cassette` fixture and `--pes-record`).

```python
model = ScriptedProvider([
    plan_json(plan_call(1, "add", a=3, b=4), intent="add"),   # the planning call
    lambda request: "The answer is 7.",                        # the synthesis call
])
agent = create_agent(provider=model, tools=[add])
```
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

from pes_agent.errors import ScriptExhaustedError, UsageError
from pes_agent.planning.call_lines import render_call
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.providers.base import (
    LLMRequest,
    ProviderEvent,
    StreamMetadata,
    ThinkingBlock,
    TokenDelta,
    ToolCallEvent,
)
from pes_agent.testing.cassette import RecordingProvider, ReplayProvider
from pes_agent.tools.calls import ToolCall
from pes_agent.usage import Usage

__all__ = [
    "REPEAT_KEEPS_REQUESTS",
    "RecordingProvider",
    "ReplayProvider",
    "ScriptedProvider",
    "ScriptedResponse",
    "plan_call",
    "plan_json",
    "plan_lines",
]

REPEAT_KEEPS_REQUESTS = 1000
"""How many of the latest requests a `ScriptedProvider(repeat=True)` keeps unless told."""


@dataclass(frozen=True, slots=True)
class ScriptedResponse:
    """A scripted answer: thinking blocks stream first, then the text, then native tool calls.

    `ScriptedResponse(tool_calls=[ToolCall("call_1", "add", {"a": 1, "b": 2})])` scripts a
    turn that only calls a tool; its stop reason is then `"tool_calls"` unless given.

    Args:
        text: The answer's text, streamed in chunks.
        thinking: Thinking blocks, streamed before the text.
        tool_calls: Native tool calls, sent after the text.
        stop_reason: The stop reason reported; `"tool_calls"` with tool calls, else `"stop"`,
            when None.
        usage: The usage reported; estimated from the text (about four characters a token)
            when None.
    """

    text: str = ""
    _: KW_ONLY
    thinking: Sequence[str] = ()
    tool_calls: Sequence[ToolCall] = ()
    stop_reason: str | None = None
    usage: Usage | None = None


def plan_call(call_id: int | str, tool_name: str, /, **arguments: Any) -> dict[str, Any]:
    """Build one tool call of a scripted plan, for `plan_json`.

    Args:
        call_id: The call's id; an int `n` names it `call_n`, as models number their calls.
        tool_name: The tool the plan calls.
        **arguments: The tool's arguments; a value may be a placeholder such as
            `"{step_1_result}"`, filled with an earlier call's result.

    Returns:
        The call as the JSON planning protocol writes it: `callId`, `toolName`, `arguments`.
    """
    name = f"call_{call_id}" if isinstance(call_id, int) else call_id
    return {"callId": name, "toolName": tool_name, "arguments": arguments}


def plan_json(
    *calls: Mapping[str, Any],
    intent: str = "help",
    plan: str = "1. do it",
    title: str | None = None,
) -> str:
    """Write a planning answer in the JSON protocol, to script a `ScriptedProvider`'s plan.

    Args:
        *calls: The plan's tool calls, in order, each as `plan_call` builds it; none for a
            plan that answers without tools.
        intent: What the plan says the user wants.
        plan: The plan's numbered steps, as text.
        title: The turn's title, recorded as a TITLE observation; left out when None.

    Returns:
        The JSON text a model would answer the planning call with.
    """
    answer: dict[str, Any] = {} if title is None else {"title": title}
    answer.update(intent=intent, plan=plan, toolCalls=[dict(call) for call in calls])
    return json.dumps(answer)


def plan_lines(*calls: Mapping[str, Any], intent: str = "help") -> str:
    """Write a planning answer in the compact protocol the planning prompt asks for — one
    numbered call per line, then the intent — to script a `ScriptedProvider`'s plan.

    Args:
        *calls: The plan's calls, in order, each as `plan_call` builds it (its id is its
            step, `call_<N>`, in this protocol); none for a plan that answers without tools.
        intent: The user's goal in a few words (also the turn's title).

    Returns:
        The text a model would answer the planning call with: lines such as
        `1. get_weather(city="Paris")`, then `Intent: weather`.
    """
    lines = [
        f"{step}. "
        + render_call(
            ParsedToolCall(
                call_id=f"call_{step}",
                tool_name=call["toolName"],
                arguments=dict(call.get("arguments", {})),
            )
        )
        for step, call in enumerate(calls, start=1)
    ]
    return "\n".join([*lines, "Intent: " + intent])


ScriptEntry = str | ScriptedResponse | Callable[[LLMRequest], "str | ScriptedResponse"]


def _wake(woken: asyncio.Future[None]) -> None:
    """End a scripted call's latency, unless the call was cancelled meanwhile."""
    if not woken.done():
        woken.set_result(None)


def _estimate_tokens(text: str) -> int:
    # Roughly four characters a token, as the common tokenizers average on English text
    # (rounded up: ceil(n / 4), 0 for no text; `stream` writes it out for the prompt).
    return -(-len(text) // 4)


@dataclass(slots=True)
class ScriptedProvider:
    """A real provider that streams pre-written responses, for tests and offline demos.

    Each model call takes the next entry of `responses`: a string, a `ScriptedResponse`, or a
    function of the `LLMRequest` returning either (so one entry can serve many calls only if
    you pass it repeatedly — or pass `repeat=True` to cycle the script). Text streams in chunks
    of `chunk_size` characters after `latency_s` seconds, with estimated usage. Running out of
    responses raises `ScriptExhaustedError`, which a run reports as status `error`.

    `requests` keeps the requests it was sent, oldest first, for assertions: every one for a
    finite script; with `repeat=True` only the latest 1,000 (`REPEAT_KEEPS_REQUESTS`), so a
    long benchmark or demo does not grow without end. `keep_requests` sets that window (`None`
    keeps every request, `0` none). `calls` counts every request made, kept or not.

    Args:
        responses: One entry for each model call, in order: a string, a `ScriptedResponse`,
            or a function of the `LLMRequest` returning either (`plan_json` writes a plan).
        latency_s: Seconds to wait before each response streams.
        chunk_size: The characters of text in each streamed token delta.
        chunk_latency_s: Seconds to wait between two chunks (thinking and text alike): a
            model that writes at a finite speed, so a planner's calls arrive over time.
        repeat: Start the script again once it is used up, instead of raising.
        keep_requests: How many of the latest requests `requests` keeps: `"auto"` keeps every
            one of a finite script and the latest `REPEAT_KEEPS_REQUESTS` with `repeat=True`;
            an int keeps that many; `None` keeps all.
        name: The provider's name, as observations and usage report it.
        model: The model's name, as observations and usage report it.

    Raises:
        UsageError: `responses` is one response rather than a list, or a number is out of
            range (`keep_requests` must be `"auto"`, `None` or an int >= 0).
    """

    responses: Sequence[ScriptEntry]
    _: KW_ONLY
    latency_s: float = 0.0
    chunk_size: int = 16
    chunk_latency_s: float = 0.0
    repeat: bool = False
    keep_requests: int | Literal["auto"] | None = "auto"
    name: str = "scripted"
    model: str = "scripted-model"
    requests: list[LLMRequest] = field(default_factory=list, repr=False)
    _position: int = field(default=0, repr=False)
    _kept: int | None = field(default=None, init=False, repr=False)
    _calls: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.responses, str | ScriptedResponse) or callable(self.responses):
            raise UsageError(
                "ScriptedProvider takes a list of responses, "
                "e.g. ScriptedProvider(['plan', 'answer'])"
            )
        self.responses = list(self.responses)
        if self.chunk_size < 1:
            raise UsageError("chunk_size must be >= 1 character")
        if self.latency_s < 0:
            raise UsageError("latency_s must be >= 0 seconds")
        if self.chunk_latency_s < 0:
            raise UsageError("chunk_latency_s must be >= 0 seconds")
        self._kept = self._resolve_keep_requests()

    def _resolve_keep_requests(self) -> int | None:
        keep = self.keep_requests
        if keep == "auto":
            return REPEAT_KEEPS_REQUESTS if self.repeat else None
        if keep is None or (type(keep) is int and keep >= 0):
            return keep
        raise UsageError(
            f"keep_requests must be an int >= 0, None (keep every request) or 'auto', "
            f"got {keep!r}; e.g. ScriptedProvider([...], repeat=True, keep_requests=100)"
        )

    @property
    def calls(self) -> int:
        """How many model calls were made so far, including those `requests` no longer keeps."""
        return self._calls

    def _next_entry(self) -> ScriptEntry:
        if self._position >= len(self.responses):
            if not self.repeat or not self.responses:
                raise ScriptExhaustedError(
                    f"ScriptedProvider ran out of responses after {len(self.responses)} call(s); "
                    "add more responses, pass a function, or set repeat=True",
                    provider=self.name,
                )
            self._position = 0
        entry = self.responses[self._position]
        self._position += 1
        return entry

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the next scripted response for `request`.

        Args:
            request: The model call; kept in `requests` (within its window), and passed to a
                function entry.

        Yields:
            Thinking deltas and blocks, text deltas, tool calls, then the stream metadata.

        Raises:
            ScriptExhaustedError: The script is used up and `repeat` is False.
            UsageError: A function entry returned something other than a str or
                `ScriptedResponse`.
        """
        started = time.perf_counter()
        self._calls += 1
        self.requests.append(request)
        if self._kept is not None and len(self.requests) > self._kept:
            # A list, as the attribute always was (users compare, slice and clear it):
            # dropping the front of a list of 1,000 moves 8 KB, well under a microsecond.
            del self.requests[: len(self.requests) - self._kept]
        entry = self._next_entry()
        response = entry(request) if callable(entry) else entry
        # A plain answer streams as it is, not wrapped in a `ScriptedResponse`: one object
        # fewer per call waiting out the latency (thousands of runs at once, in benchmarks).
        thinking: Sequence[str]
        tool_calls: Sequence[ToolCall]
        stop_reason: str | None
        usage: Usage | None
        if isinstance(response, str):
            text, thinking, tool_calls, stop_reason, usage = response, (), (), None, None
        elif isinstance(response, ScriptedResponse):
            text, thinking, tool_calls = response.text, response.thinking, response.tool_calls
            stop_reason, usage = response.stop_reason, response.usage
        else:
            raise UsageError(
                "a scripted response function must return a str or ScriptedResponse, "
                f"got {type(response).__name__}"
            )
        del response
        if self.latency_s:
            # asyncio.sleep's work without its coroutine, one object fewer per call waiting.
            loop = asyncio.get_running_loop()
            woken = loop.create_future()
            timer = loop.call_later(self.latency_s, _wake, woken)
            try:
                await woken
            finally:
                timer.cancel()
            del woken, timer
        first_token_ms: float | None = None
        size = self.chunk_size
        pause = self.chunk_latency_s
        for block in thinking:
            for start in range(0, len(block), size):
                if first_token_ms is None:
                    first_token_ms = (time.perf_counter() - started) * 1000
                elif pause:
                    await asyncio.sleep(pause)
                yield TokenDelta(block[start : start + size], "thinking")
            yield ThinkingBlock(block)
        for start in range(0, len(text), size):
            if first_token_ms is None:
                first_token_ms = (time.perf_counter() - started) * 1000
            elif pause:
                await asyncio.sleep(pause)
            yield TokenDelta(text[start : start + size])
        for call in tool_calls:
            # A copy: the consumer may keep or change the call it gets.
            yield ToolCallEvent(ToolCall(call.id, call.name, copy.deepcopy(call.arguments)))
        if usage is None:
            # A loop rather than a sum over a generator, with `_estimate_tokens` written out
            # (ceil(n / 4) as -(-n // 4), 0 for no text): no Python call per message.
            prompt_tokens = 0
            for message in request.messages:
                prompt_tokens -= -len(message.content) // 4
            reasoning = sum(map(_estimate_tokens, thinking)) if thinking else 0
            output_tokens = _estimate_tokens(text) + reasoning
            if tool_calls:
                output_tokens += _estimate_tokens(
                    "".join(
                        call.name + json.dumps(call.arguments, default=str) for call in tool_calls
                    )
                )
            usage = Usage(
                input_tokens=prompt_tokens,
                output_tokens=output_tokens,
                total_tokens=prompt_tokens + output_tokens,
                reasoning_tokens=reasoning,
                requests=1,
            )
        yield StreamMetadata(
            usage=usage,
            model=self.model,
            stop_reason=stop_reason or ("tool_calls" if tool_calls else "stop"),
            time_to_first_token_ms=first_token_ms,
            total_ms=(time.perf_counter() - started) * 1000,
        )

    async def aclose(self) -> None:
        """Nothing to release; present for the provider protocol."""

"""A wire-compatible model server on 127.0.0.1 for tests: OpenAI and Anthropic, scripted, faulty.

`ModelServer` speaks OpenAI's `POST /v1/chat/completions` and Anthropic's `POST /v1/messages`,
both as JSON and as server-sent events, so the real SDKs can run against it unchanged:

```python
async with ModelServer() as server:
    server.script(Fault(429, retry_after="2"), Reply("Hello!", thinking="Let me think."))
    config = ProviderConfig("openai", "m", api_key="sk-test", base_url=server.openai_base_url)
    ...
    assert len(server.requests) == 2
```

A `Reply` may also stream native tool calls (`Reply(tool_calls=(Call("add", {"a": 1}),))`):
OpenAI `delta.tool_calls` fragments by index (optionally interleaved between calls), Anthropic
`tool_use` blocks with `input_json_delta` pieces, the arguments split across several fragments
either way, and sent exactly as scripted (so invalid JSON can be tested).

Each request takes the next step of the script (`Reply`, `Fault`, `Slow`, `CutStream`,
`MidStreamError`, `Garbled`, or a function of the `RecordedRequest` returning one); when the
script is empty the `default` step answers, and without one the server answers 400 naming the
request, so a test that runs out fails at once instead of being retried. Every request is recorded
(headers and JSON body) and the server tracks the largest number of requests in flight at once.

Error bodies repeat the credential the client sent (as a careless gateway might), so tests prove
that no API key survives into pes-agent's errors or logs.

Reuse it from any test directory as `tests.pes_agent.providers.model_server`: import the
`model_server` fixture defined here into a `conftest.py`, or construct `ModelServer()` directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, TypeAlias

import pytest
from aiohttp import web

# A port nothing listens on, for connection-refused tests.
from tests.helpers import free_port as unused_port

__all__ = [
    "Call",
    "CutStream",
    "Fault",
    "Garbled",
    "MidStreamError",
    "ModelServer",
    "RecordedRequest",
    "Reply",
    "Slow",
    "Step",
    "StepSource",
    "model_server",
    "unused_port",
]

Api = Literal["openai", "anthropic"]


@dataclass(frozen=True, slots=True)
class Call:
    """A native tool call in a `Reply`, its arguments streamed in `fragments` pieces.

    `arguments` is a dict (sent as JSON) or text sent exactly as given (invalid JSON, say).
    `id` defaults to `call_<n>` (OpenAI) or `toolu_<n>` (Anthropic), `n` counting from 1 in
    the reply.
    """

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None
    fragments: int = 3

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"))

    def pieces(self) -> list[str]:
        """The argument text in `fragments` nearly equal pieces (fewer if it is shorter)."""
        text = self.arguments_text()
        size = max(1, -(-len(text) // max(1, self.fragments)))
        return _pieces(text, size)


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful answer: text (and optional thinking) streamed in `chunk_chars` pieces.

    `thinking` is sent as `reasoning_content` deltas (OpenAI; `reasoning_field` picks the
    field name) or as thinking blocks with a signature (Anthropic; a tuple gives several
    blocks). `tool_calls` follow the text (OpenAI: with `interleave_calls`, the fragments of
    the calls alternate, told apart only by their index); the finish reason is then
    `tool_calls` / `tool_use` unless given. `output_tokens` defaults to the number of streamed
    pieces.
    """

    text: str = ""
    thinking: str | tuple[str, ...] | None = None
    input_tokens: int = 10
    output_tokens: int | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    finish_reason: str | None = None
    chunk_chars: int = 4
    chunk_delay_s: float = 0.0
    first_byte_delay_s: float = 0.0
    reasoning_field: Literal["reasoning_content", "reasoning"] = "reasoning_content"
    model: str | None = None
    tool_calls: tuple[Call, ...] = ()
    interleave_calls: bool = False

    def call_id(self, api: Api, position: int) -> str:
        call = self.tool_calls[position]
        return call.id or (f"call_{position + 1}" if api == "openai" else f"toolu_{position + 1}")

    def stop_reason(self, api: Api) -> str:
        if self.finish_reason:
            return self.finish_reason
        if self.tool_calls:
            return "tool_calls" if api == "openai" else "tool_use"
        return "stop" if api == "openai" else "end_turn"


@dataclass(frozen=True, slots=True)
class Fault:
    """An HTTP error response: `Fault(429, retry_after="2")`, `Fault(529)`, `Fault(401)`.

    `code` is OpenAI's ``error.code`` (``"context_length_exceeded"``); Anthropic's body has none.
    """

    status: int
    message: str | None = None
    code: str | None = None
    retry_after: str | None = None
    retry_after_ms: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    echo_credentials: bool = True


@dataclass(frozen=True, slots=True)
class Slow:
    """Hold the response headers for `delay_s` (past the client's timeout), then answer."""

    delay_s: float
    then: Reply = field(default_factory=lambda: Reply("too late"))


@dataclass(frozen=True, slots=True)
class CutStream:
    """Stream `after_chunks` pieces of `reply`, then stop without the terminal event.

    `abort=True` drops the TCP connection mid-body; `abort=False` ends the HTTP body cleanly,
    as a proxy that times out might, so only the missing finish reason / `message_stop` tells.
    """

    reply: Reply = field(default_factory=lambda: Reply("this answer will be cut short"))
    after_chunks: int = 2
    abort: bool = True


@dataclass(frozen=True, slots=True)
class MidStreamError:
    """Stream `after_chunks` pieces, then an in-stream error event (e.g. `overloaded_error`)."""

    reply: Reply = field(default_factory=lambda: Reply("this answer hits an error"))
    after_chunks: int = 2
    error_type: str = "overloaded_error"
    message: str = "Overloaded"


@dataclass(frozen=True, slots=True)
class Garbled:
    """Stream `after_chunks` pieces, then a line of malformed JSON, then end the body."""

    reply: Reply = field(default_factory=lambda: Reply("this answer gets garbled"))
    after_chunks: int = 2


Step: TypeAlias = Reply | Fault | Slow | CutStream | MidStreamError | Garbled


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the server received: which API, its headers (lower-case) and JSON body.

    `client_port` is the client's TCP port: equal ports mean a reused connection.
    """

    api: Api
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float
    client_port: int | None = None

    @property
    def credential(self) -> str | None:
        """The API key the client sent (`Authorization: Bearer` or `x-api-key`)."""
        if "x-api-key" in self.headers:
            return self.headers["x-api-key"]
        auth = self.headers.get("authorization", "")
        return auth.removeprefix("Bearer ").strip() or None

    @property
    def streaming(self) -> bool:
        return bool(self.body.get("stream"))


StepSource: TypeAlias = Step | Callable[[RecordedRequest], Step | Awaitable[Step]]

_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_DEFAULT_MESSAGES = {
    400: "Invalid request",
    401: "Incorrect API key provided",
    403: "Permission denied",
    404: "Model not found",
    408: "Request timeout",
    409: "Conflict",
    422: "Unprocessable entity",
    429: "Rate limit reached",
    500: "The server had an error while processing your request",
    502: "Bad gateway",
    503: "Service unavailable",
    504: "Gateway timeout",
    529: "Overloaded",
}


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] if text else []


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class ModelServer:
    """An aiohttp server on a free port of 127.0.0.1; see the module docstring."""

    def __init__(self, *, default: StepSource | None = None) -> None:
        self.default = default
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._script: deque[StepSource] = deque()
        self._ids = itertools.count(1)
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # lifecycle ---------------------------------------------------------------------------
    async def start(self) -> ModelServer:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        self._runner = web.AppRunner(
            app, handler_cancellation=True, shutdown_timeout=0.5, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        address = self._runner.addresses[0]
        self._port = int(address[1])
        return self

    async def aclose(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ModelServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # addresses ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("ModelServer is not started; use `async with ModelServer()`")
        return f"http://127.0.0.1:{self._port}"

    @property
    def openai_base_url(self) -> str:
        """The `base_url` for `openai.AsyncOpenAI` / `ProviderConfig("openai", ...)`."""
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The `base_url` for `anthropic.AsyncAnthropic` / `ProviderConfig("anthropic", ...)`."""
        return self.url

    def base_url_for(self, provider: str) -> str:
        """The base URL a `ProviderConfig` for `provider` should use to reach this server."""
        return self.anthropic_base_url if provider == "anthropic" else self.openai_base_url

    # scripting ---------------------------------------------------------------------------
    def script(self, *steps: StepSource) -> None:
        """Queue steps; each request takes the next one."""
        self._script.extend(steps)

    def clear(self) -> None:
        """Drop the queued steps no request took (a cancelled run's answer, say)."""
        self._script.clear()

    @property
    def remaining(self) -> int:
        return len(self._script)

    def requests_for(self, api: Api) -> list[RecordedRequest]:
        return [r for r in self.requests if r.api == api]

    # handlers ----------------------------------------------------------------------------
    async def _openai(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "openai")

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "anthropic")

    async def _handle(self, request: web.Request, api: Api) -> web.StreamResponse:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            peer = request.transport.get_extra_info("peername") if request.transport else None
            recorded = RecordedRequest(
                api=api,
                path=request.path,
                headers={k.lower(): v for k, v in request.headers.items()},
                body=await request.json(),
                received_at=time.monotonic(),
                client_port=int(peer[1]) if peer else None,
            )
            self.requests.append(recorded)
            step = await self._next_step(recorded)
            if step is None:
                return self._error(
                    api,
                    400,
                    f"test model server: no scripted response left for POST {request.path} "
                    f"(request #{len(self.requests)})",
                )
            return await self._respond(request, recorded, step)
        finally:
            self.in_flight -= 1

    async def _next_step(self, recorded: RecordedRequest) -> Step | None:
        source = self._script.popleft() if self._script else self.default
        if source is None:
            return None
        if callable(source):
            result = source(recorded)
            if inspect.isawaitable(result):
                result = await result
            return result
        return source

    async def _respond(
        self, request: web.Request, recorded: RecordedRequest, step: Step
    ) -> web.StreamResponse:
        api = recorded.api
        if isinstance(step, Fault):
            message = step.message or _DEFAULT_MESSAGES.get(step.status, "Error")
            if step.echo_credentials and recorded.credential:
                message = f"{message} (credential: {recorded.credential})"
            headers = dict(step.headers)
            if step.retry_after is not None:
                headers["Retry-After"] = step.retry_after
            if step.retry_after_ms is not None:
                headers["retry-after-ms"] = step.retry_after_ms
            return self._error(api, step.status, message, headers, code=step.code)
        if isinstance(step, Slow):
            await self._pause(step.delay_s)
            return await self._respond(request, recorded, step.then)
        if isinstance(step, Reply):
            await self._pause(step.first_byte_delay_s)
            if not recorded.streaming:
                return web.json_response(self._json_body(api, recorded, step))
            return await self._stream(request, recorded, step, cut=None)
        return await self._stream(request, recorded, step.reply, cut=step)

    async def _pause(self, delay_s: float) -> None:
        if delay_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), delay_s)

    def _error(
        self,
        api: Api,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,
        *,
        code: str | None = None,
    ) -> web.Response:
        if api == "openai":
            error_type = _OPENAI_ERROR_TYPES.get(status, "server_error")
            body: dict[str, Any] = {
                "error": {"message": message, "type": error_type, "param": None, "code": code}
            }
        else:
            error_type = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
            body = {"type": "error", "error": {"type": error_type, "message": message}}
        return web.json_response(body, status=status, headers=headers)

    # bodies ------------------------------------------------------------------------------
    def _model(self, recorded: RecordedRequest, reply: Reply) -> str:
        return reply.model or str(recorded.body.get("model", "test-model"))

    @staticmethod
    def _thinking_blocks(reply: Reply) -> tuple[str, ...]:
        if reply.thinking is None:
            return ()
        return (reply.thinking,) if isinstance(reply.thinking, str) else reply.thinking

    def _output_tokens(self, reply: Reply) -> int:
        if reply.output_tokens is not None:
            return reply.output_tokens
        thinking = sum(len(_pieces(t, reply.chunk_chars)) for t in self._thinking_blocks(reply))
        calls = sum(1 + len(call.pieces()) for call in reply.tool_calls)
        return thinking + len(_pieces(reply.text, reply.chunk_chars)) + calls

    def _openai_usage(self, reply: Reply) -> dict[str, Any]:
        output = self._output_tokens(reply)
        return {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": output,
            "total_tokens": reply.input_tokens + output,
            "prompt_tokens_details": {
                "cached_tokens": reply.cache_read_tokens,
                "cache_write_tokens": reply.cache_write_tokens,
            },
            "completion_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
        }

    def _anthropic_usage(self, reply: Reply) -> dict[str, Any]:
        return {
            "input_tokens": reply.input_tokens,
            "output_tokens": self._output_tokens(reply),
            "cache_read_input_tokens": reply.cache_read_tokens,
            "cache_creation_input_tokens": reply.cache_write_tokens,
            "output_tokens_details": {"thinking_tokens": reply.reasoning_tokens},
        }

    def _json_body(self, api: Api, recorded: RecordedRequest, reply: Reply) -> dict[str, Any]:
        n = next(self._ids)
        model = self._model(recorded, reply)
        if api == "openai":
            message: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if reply.thinking is not None:
                message[reply.reasoning_field] = "".join(self._thinking_blocks(reply))
            if reply.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": reply.call_id(api, i),
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments_text()},
                    }
                    for i, call in enumerate(reply.tool_calls)
                ]
            return {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": reply.stop_reason(api),
                    }
                ],
                "usage": self._openai_usage(reply),
            }
        content: list[dict[str, Any]] = [
            {"type": "thinking", "thinking": t, "signature": f"sig-{i}"}
            for i, t in enumerate(self._thinking_blocks(reply))
        ]
        if reply.text or not reply.tool_calls:
            content.append({"type": "text", "text": reply.text})
        content += [
            {
                "type": "tool_use",
                "id": reply.call_id(api, i),
                "name": call.name,
                "input": call.arguments if isinstance(call.arguments, dict) else {},
            }
            for i, call in enumerate(reply.tool_calls)
        ]
        return {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": reply.stop_reason(api),
            "stop_sequence": None,
            "usage": self._anthropic_usage(reply),
        }

    def _openai_events(self, recorded: RecordedRequest, reply: Reply) -> tuple[list[bytes], int]:
        """The SSE events of a streamed chat completion, and the index of the first piece."""
        n = next(self._ids)
        model = self._model(recorded, reply)
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return _sse(
                {
                    "id": f"chatcmpl-{n}",
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
            )

        events = [chunk({"role": "assistant", "content": ""})]
        first_piece = len(events)
        for thinking in self._thinking_blocks(reply):
            for piece in _pieces(thinking, reply.chunk_chars):
                events.append(chunk({reply.reasoning_field: piece}))
        for piece in _pieces(reply.text, reply.chunk_chars):
            events.append(chunk({"content": piece}))
        per_call: list[list[dict[str, Any]]] = []
        for i, call in enumerate(reply.tool_calls):
            first = {
                "index": i,
                "id": reply.call_id("openai", i),
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            rest = [{"index": i, "function": {"arguments": piece}} for piece in call.pieces()]
            per_call.append([first, *rest])
        if reply.interleave_calls:
            fragments = [
                fragment
                for round_ in itertools.zip_longest(*per_call)
                for fragment in round_
                if fragment is not None
            ]
        else:
            fragments = [fragment for call_fragments in per_call for fragment in call_fragments]
        for fragment in fragments:
            events.append(chunk({"tool_calls": [fragment]}))
        events.append(chunk({}, reply.stop_reason("openai")))
        options = recorded.body.get("stream_options") or {}
        if options.get("include_usage"):
            events.append(
                _sse(
                    {
                        "id": f"chatcmpl-{n}",
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": self._openai_usage(reply),
                    }
                )
            )
        events.append(b"data: [DONE]\n\n")
        return events, first_piece

    def _anthropic_events(self, recorded: RecordedRequest, reply: Reply) -> tuple[list[bytes], int]:
        n = next(self._ids)
        usage = self._anthropic_usage(reply)
        start_usage = {**usage, "output_tokens": 1}
        events = [
            _sse(
                {
                    "type": "message_start",
                    "message": {
                        "id": f"msg_{n}",
                        "type": "message",
                        "role": "assistant",
                        "model": self._model(recorded, reply),
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": start_usage,
                    },
                },
                "message_start",
            ),
            _sse({"type": "ping"}, "ping"),
        ]
        first_piece = len(events) + 1  # after the first content_block_start
        index = 0
        for thinking in self._thinking_blocks(reply):
            events.append(
                _sse(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                    },
                    "content_block_start",
                )
            )
            for piece in _pieces(thinking, reply.chunk_chars):
                events.append(
                    _sse(
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "thinking_delta", "thinking": piece},
                        },
                        "content_block_delta",
                    )
                )
            events.append(
                _sse(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "signature_delta", "signature": f"EqQB-sig-{index}"},
                    },
                    "content_block_delta",
                )
            )
            events.append(
                _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
            )
            index += 1
        if reply.text or not reply.tool_calls:
            events += self._anthropic_text_block(reply, index)
            index += 1
        for i, call in enumerate(reply.tool_calls):
            events += self._anthropic_tool_use_block(reply.call_id("anthropic", i), call, index)
            index += 1
        events.append(
            _sse(
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": reply.stop_reason("anthropic"),
                        "stop_sequence": None,
                    },
                    "usage": {"output_tokens": usage["output_tokens"]},
                },
                "message_delta",
            )
        )
        events.append(_sse({"type": "message_stop"}, "message_stop"))
        return events, first_piece

    @staticmethod
    def _anthropic_text_block(reply: Reply, index: int) -> list[bytes]:
        events = [
            _sse(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
                "content_block_start",
            )
        ]
        for piece in _pieces(reply.text, reply.chunk_chars):
            events.append(
                _sse(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                    "content_block_delta",
                )
            )
        events.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        return events

    @staticmethod
    def _anthropic_tool_use_block(call_id: str, call: Call, index: int) -> list[bytes]:
        events = [
            _sse(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": call_id,
                        "name": call.name,
                        "input": {},
                    },
                },
                "content_block_start",
            )
        ]
        # Anthropic opens every tool_use block with an empty partial_json.
        for piece in ["", *call.pieces()]:
            events.append(
                _sse(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                    "content_block_delta",
                )
            )
        events.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        return events

    async def _stream(
        self,
        request: web.Request,
        recorded: RecordedRequest,
        reply: Reply,
        *,
        cut: CutStream | MidStreamError | Garbled | None,
    ) -> web.StreamResponse:
        if recorded.api == "openai":
            events, first_piece = self._openai_events(recorded, reply)
        else:
            events, first_piece = self._anthropic_events(recorded, reply)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        if cut is not None:
            events = events[: first_piece + cut.after_chunks]
        if reply.chunk_delay_s > 0:
            for event in events:
                await response.write(event)
                await self._pause(reply.chunk_delay_s)
        else:
            # One write per 64 KiB keeps the server's own CPU cost out of client benchmarks.
            body = b"".join(events)
            for start in range(0, len(body), 65536):
                await response.write(body[start : start + 65536])
        if isinstance(cut, Garbled):
            event = b"event: content_block_delta\n" if recorded.api == "anthropic" else b""
            await response.write(event + b"data: {this is not json\n\n")
        elif isinstance(cut, MidStreamError):
            error = {"type": "error", "error": {"type": cut.error_type, "message": cut.message}}
            if recorded.api == "openai":
                await response.write(
                    _sse({"error": {"message": cut.message, "type": cut.error_type}})
                )
            else:
                await response.write(_sse(error, "error"))
        elif isinstance(cut, CutStream) and cut.abort:
            transport = request.transport
            if transport is not None:
                transport.abort()
            return response
        await response.write_eof()
        return response


@pytest.fixture
async def model_server() -> AsyncIterator[ModelServer]:
    """A started `ModelServer`, closed after the test."""
    async with ModelServer() as server:
        yield server

"""Record a real model's answers once, replay them offline: `RecordingProvider`, `ReplayProvider`.

```python
recording = RecordingProvider(create_provider(ProviderConfig("openai", "gpt-4o-mini")), path)
agent = create_agent(provider=recording, tools=[add])      # a real run, written to `path`
...
agent = create_agent(provider=ReplayProvider(path), tools=[add])   # the same run, offline
```

A cassette is a JSON-lines file, one model call a line: the request as the model saw it
(model, phase, messages, tools, tool choice, response format, temperature, max tokens,
options) and every event of its answer (tokens, thinking, tool-call fragments and calls,
restarts, the final metadata with usage and stop reason), or the error it ended with. A line is
written and flushed as soon as its call ends, so a crash loses nothing already answered.

Secrets are never written: the request's thread and trace ids are left out (they are not
content), credential-named options and headers are replaced by `[REDACTED]`, and the whole
line is scrubbed of the wrapped provider's configured secrets (its API key, credential headers,
a password in its base URL), of credential-named environment variables' values and of anything
shaped like an API key.

Replay matches a request by its content, never by its position alone: among recorded requests
with the same content the first one not yet replayed answers, one that ended (answered or
failed) before one abandoned mid-stream (its run cancelled while recording). An abandoned
call replays the events it got, then fails with `CassetteMissError` if read further. A
request the cassette does not hold raises `CassetteMissError` showing the closest recorded
request and a diff.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import weakref
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Literal, assert_never

from pes_agent.errors import CassetteMissError, ConfigurationError, ProviderError
from pes_agent.providers._sdk import redact
from pes_agent.providers.base import (
    LLMProvider,
    LLMRequest,
    PromptMessage,
    ProviderEvent,
    ServerAddress,
    StreamMetadata,
    StreamRestart,
    StructuredOutput,
    ThinkingBlock,
    TokenDelta,
    ToolCallDelta,
    ToolCallEvent,
)
from pes_agent.tools.calls import ToolCall
from pes_agent.usage import Usage

__all__ = ["CASSETTE_VERSION", "RecordingProvider", "ReplayProvider"]

CASSETTE_VERSION = 1
"""The format of a cassette line; a line of another version is refused on replay."""

_REDACTED = "[REDACTED]"
# Header names whose values are credentials (`Authorization`, Azure's `api-key`, cookies, ...).
_CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|password|cookie", re.IGNORECASE)
# Option names that are credentials themselves; stricter than headers, so that `max_tokens`
# and `top_k` stay readable.
_CREDENTIAL_OPTION = re.compile(
    r"^(?:.*[_-])?(?:api[_-]?key|key|auth|authorization|token|secret|password|cookie|"
    r"credentials?)$",
    re.IGNORECASE,
)
# Environment variables whose values are credentials; shorter values would redact noise.
_CREDENTIAL_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|AUTH|CREDENTIAL", re.IGNORECASE)
_MIN_SECRET = 8

Outcome = Literal["complete", "error", "abandoned"]


# -- requests -----------------------------------------------------------------------------
def _scrub_options(value: Any, *, in_headers: bool = False) -> Any:
    """`value` with every credential-named option and header replaced by `[REDACTED]`."""
    if isinstance(value, Mapping):
        scrubbed: dict[str, Any] = {}
        for name, item in value.items():
            key = str(name)
            credential = (_CREDENTIAL_HEADER if in_headers else _CREDENTIAL_OPTION).search(key)
            if credential and item is not None:
                scrubbed[key] = _REDACTED
            else:
                headers = "header" in key.lower()
                scrubbed[key] = _scrub_options(item, in_headers=in_headers or headers)
        return scrubbed
    if isinstance(value, list | tuple):
        return [_scrub_options(item, in_headers=in_headers) for item in value]
    return value


def _call_record(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def _message_record(message: PromptMessage) -> dict[str, Any]:
    record: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name is not None:
        record["name"] = message.name
    if message.tool_calls:
        record["tool_calls"] = [_call_record(call) for call in message.tool_calls]
    if message.tool_call_id is not None:
        record["tool_call_id"] = message.tool_call_id
    return record


def request_record(model: str, request: LLMRequest) -> dict[str, Any]:
    """What a cassette keeps of `request` and matches on: its content, without thread or trace
    ids and without credentials, as plain JSON."""
    record = {
        "model": model,
        "phase": request.phase,
        "messages": [_message_record(message) for message in request.messages],
        "tools": [tool.model_dump(mode="json") for tool in request.tools],
        "tool_choice": request.tool_choice,
        "response_format": request.response_format,
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "options": _scrub_options(request.options),
    }
    # Through JSON once, so that a tuple and a list, or an int key and a str key, compare equal
    # to what a cassette read back holds.
    loaded: dict[str, Any] = json.loads(_scrubbed_json(record, ()))
    return loaded


def _scrubbed_json(data: Any, secrets: tuple[str, ...]) -> str:
    # `redact` replaces each secret in every escaped form JSON may give it, with text that is
    # itself valid inside a JSON string, so the line stays valid JSON. Keys keep their order:
    # a tool call's arguments replay in the order the model wrote them, as the prompts that
    # render them later are matched word for word (matching sorts keys on its own).
    return redact(json.dumps(data, ensure_ascii=False, default=str), secrets)


def _match_key(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, sort_keys=True)


# -- events -------------------------------------------------------------------------------
def event_record(event: ProviderEvent) -> dict[str, Any]:
    """One stream event as a cassette line holds it: a `type` and the event's fields."""
    if isinstance(event, TokenDelta):
        return {"type": "token", "text": event.text, "kind": event.kind}
    if isinstance(event, ThinkingBlock):
        return {"type": "thinking", "text": event.text}
    if isinstance(event, ToolCallDelta):
        return {
            "type": "tool_call_delta",
            "id": event.call_id,
            "name": event.name,
            "text": event.text,
        }
    if isinstance(event, ToolCallEvent):
        return {
            "type": "tool_call",
            "call": _call_record(event.call),
            "error": event.error,
            "raw": event.raw,
        }
    if isinstance(event, StreamRestart):
        return {"type": "restart", "reason": event.reason, "attempt": event.attempt}
    if isinstance(event, StreamMetadata):
        return {
            "type": "metadata",
            "usage": event.usage.model_dump(mode="json"),
            "model": event.model,
            "stop_reason": event.stop_reason,
            "time_to_first_token_ms": event.time_to_first_token_ms,
            "total_ms": event.total_ms,
            "response_id": event.response_id,
            "provider": event.provider,
        }
    assert_never(event)


def event_from_record(record: Mapping[str, Any]) -> ProviderEvent:
    """The stream event a cassette line's event record stands for."""
    kind = record["type"]
    if kind == "token":
        return TokenDelta(record["text"], record["kind"])
    if kind == "thinking":
        return ThinkingBlock(record["text"])
    if kind == "tool_call_delta":
        return ToolCallDelta(record["id"], record["name"], record["text"])
    if kind == "tool_call":
        call = record["call"]
        return ToolCallEvent(
            ToolCall(call["id"], call["name"], dict(call["arguments"])),
            error=record["error"],
            raw=record["raw"],
        )
    if kind == "restart":
        return StreamRestart(record["reason"], record["attempt"])
    if kind == "metadata":
        return StreamMetadata(
            usage=Usage.model_validate(record["usage"]),
            model=record["model"],
            stop_reason=record["stop_reason"],
            time_to_first_token_ms=record["time_to_first_token_ms"],
            total_ms=record["total_ms"],
            response_id=record["response_id"],
            provider=record["provider"],
        )
    raise ValueError(f"unknown event type {kind!r}")


def _environment_secrets() -> list[str]:
    return [
        value.strip()
        for name, value in os.environ.items()
        if _CREDENTIAL_ENV.search(name) and len(value.strip()) >= _MIN_SECRET
    ]


# -- recording ----------------------------------------------------------------------------
class RecordingProvider:
    """Wraps any provider: passes each request through unchanged and appends the request and
    its whole answer to the cassette at `path` (JSON lines, flushed after every call).

    The wrapped provider's `name`, `model`, `structured_output` and `server` show through, so a
    recorded run plans and is traced exactly as the unwrapped one.
    """

    def __init__(
        self, provider: LLMProvider, path: str | os.PathLike[str], *, secrets: tuple[str, ...] = ()
    ) -> None:
        """Wrap `provider`, recording to `path`.

        Args:
            provider: The provider that answers (a real model, usually).
            path: The cassette file; created with its folder if missing, appended to otherwise.
            secrets: More values never to write, besides those the provider and the
                environment are known to hold.
        """
        self.provider = provider
        self.path = Path(path)
        self._extra_secrets = tuple(secrets)
        # Streams begun and not yet ended: `aclose` ends them, so each one's line is written
        # even when its consumer stopped reading without closing it.
        self._open: weakref.WeakSet[AsyncGenerator[ProviderEvent, None]] = weakref.WeakSet()
        self.path.parent.mkdir(parents=True, exist_ok=True)

    @property
    def name(self) -> str:
        return self.provider.name

    @property
    def model(self) -> str:
        return self.provider.model

    @property
    def structured_output(self) -> StructuredOutput | None:
        value: StructuredOutput | None = getattr(self.provider, "structured_output", None)
        return value

    @property
    def server(self) -> ServerAddress | None:
        value: ServerAddress | None = getattr(self.provider, "server", None)
        return value

    def _secrets(self) -> tuple[str, ...]:
        # The SDK providers keep every configured secret (key, credential headers, a password in
        # the base URL) for scrubbing their own errors; reuse them.
        known = getattr(self.provider, "_secrets", ())
        found = [*self._extra_secrets, *_environment_secrets()]
        if isinstance(known, tuple):
            found += [secret for secret in known if isinstance(secret, str)]
        return tuple(sorted({s for s in found if len(s) >= _MIN_SECRET}, key=len, reverse=True))

    def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the wrapped provider's answer to `request` unchanged, then record the call.

        A call whose consumer stops reading or is cancelled before the answer ends is recorded
        as `"abandoned"`, with the events streamed until then, when its stream is closed (at
        the latest by `aclose`).

        Args:
            request: The model call, passed on as it is.

        Returns:
            The wrapped provider's events, as it streams them.

        Raises:
            ProviderError: The wrapped provider failed (recorded too, so replay fails alike).
        """
        stream = self._recorded(request)
        self._open.add(stream)
        return stream

    async def _recorded(self, request: LLMRequest) -> AsyncGenerator[ProviderEvent, None]:
        events: list[dict[str, Any]] = []
        outcome: Outcome = "abandoned"
        error: dict[str, Any] | None = None
        try:
            async for event in self.provider.stream(request):
                events.append(event_record(event))
                yield event
            outcome = "complete"
        except ProviderError as failure:
            outcome = "error"
            error = {
                "message": failure.message,
                "status_code": failure.status_code,
                "retryable": failure.retryable,
                "code": failure.code,
                "refusal": failure.refusal,
            }
            raise
        finally:
            self._write(request, events, outcome, error)

    def _write(
        self,
        request: LLMRequest,
        events: list[dict[str, Any]],
        outcome: Outcome,
        error: dict[str, Any] | None,
    ) -> None:
        line = {
            "version": CASSETTE_VERSION,
            "provider": {
                "name": self.name,
                "model": self.model,
                "structured_output": self.structured_output,
                "server": None
                if self.server is None
                else {"address": self.server.address, "port": self.server.port},
            },
            "request": request_record(self.model, request),
            "outcome": outcome,
            "events": events,
            "error": error,
        }
        text = _scrubbed_json(line, self._secrets())
        with self.path.open("a", encoding="utf-8") as file:
            file.write(text + "\n")
            file.flush()
            os.fsync(file.fileno())

    async def aclose(self) -> None:
        """Record each call still streaming as abandoned, then close the wrapped provider."""
        for stream in list(self._open):
            await stream.aclose()
        await self.provider.aclose()


# -- replay -------------------------------------------------------------------------------
def _how_to_record(path: Path) -> str:
    return (
        f"record it by running once with a real provider wrapped in "
        f"RecordingProvider(provider, {str(path)!r})"
    )


def _load(path: Path, how_to_record: str) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationError(f"no cassette at {path}: {how_to_record}") from None
    except (OSError, UnicodeDecodeError) as failure:
        raise ConfigurationError(f"cannot read the cassette {path}: {failure}") from None
    entries: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if entry.get("version") != CASSETTE_VERSION:
                raise ValueError(
                    f"version {entry.get('version')!r}, this pes-agent reads {CASSETTE_VERSION}"
                )
            if not isinstance(entry["request"]["messages"], list):
                raise ValueError("its request has no messages")
            for event in entry["events"]:
                event_from_record(event)
        except (ValueError, KeyError, TypeError, AttributeError) as failure:
            raise ConfigurationError(
                f"the cassette {path} is damaged at line {number} ({failure}); delete it and "
                f"{how_to_record}"
            ) from None
        entries.append(entry)
    return entries


def _pretty(record: Mapping[str, Any]) -> list[str]:
    return json.dumps(record, ensure_ascii=False, sort_keys=True, indent=2).splitlines()


class ReplayProvider:
    """Answers from a cassette `RecordingProvider` wrote, offline.

    Each request is matched by its content (model, phase, messages, tools, tool choice,
    response format, parameters, options); among equal recorded requests, the first not yet
    replayed answers. Its events stream as they were recorded, and a recorded failure is raised
    again as a `ProviderError`. `name`, `model`, `structured_output` and `server` are the
    recorded provider's, so a replayed run plans and reports as the recorded one did.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        model: str | None = None,
        how_to_record: str | None = None,
    ) -> None:
        """Read the cassette at `path`.

        Args:
            path: The cassette file.
            name: The provider's name; the recorded provider's when None.
            model: The model's name, matched against the recorded requests; the recorded
                one's when None.
            how_to_record: What the errors tell the user to do to record the cassette, e.g.
                "record it with `pytest --pes-record tests/test_x.py::test_y`"; by default,
                to run once with a real provider wrapped in `RecordingProvider`.

        Raises:
            ConfigurationError: The cassette is missing, unreadable or damaged; the message
                names the path and says how to record it.
        """
        self.path = Path(path)
        self._how_to_record = how_to_record or _how_to_record(self.path)
        self._entries = _load(self.path, self._how_to_record)
        first = self._entries[0]["provider"] if self._entries else {}
        self._name = name or first.get("name") or "replay"
        self._model = model or first.get("model") or "replay-model"
        self.structured_output: StructuredOutput | None = first.get("structured_output")
        server = first.get("server")
        # The recorded server, so a replayed run's observations and traces name it alike.
        self.server = None if server is None else ServerAddress(server["address"], server["port"])
        self._unused: dict[str, deque[int]] = {}
        for index, entry in enumerate(self._entries):
            self._unused.setdefault(_match_key(entry["request"]), deque()).append(index)

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return self._model

    @property
    def remaining(self) -> int:
        """How many recorded calls have not been replayed yet."""
        return sum(len(indexes) for indexes in self._unused.values())

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the recorded answer to `request`.

        Args:
            request: The model call, matched by its content against the recorded ones.

        Yields:
            The recorded events, in the order they were streamed.

        Raises:
            CassetteMissError: The cassette holds no such request (or each one is used up), or
                only one abandoned while recording and this stream is read past its end.
            ProviderError: The recorded call failed.
        """
        record = request_record(self._model, request)
        indexes = self._unused.get(_match_key(record))
        if not indexes:
            raise self._miss(record, request, used_up=indexes is not None)
        # A call abandoned while recording (its run cancelled, say) answers only when no
        # recording of the request ended: a run recorded again after a cancel replays in full.
        index = next(
            (i for i in indexes if self._entries[i].get("outcome") != "abandoned"), indexes[0]
        )
        indexes.remove(index)
        entry = self._entries[index]
        for event in entry["events"]:
            yield event_from_record(event)
        if entry.get("outcome") == "abandoned":
            # Reached only by a consumer reading past where the recording's consumer stopped.
            raise CassetteMissError(
                f"the cassette {self.path} recorded this {record['phase']} call as abandoned "
                f"(its run stopped reading it, or was cancelled, after "
                f"{len(entry['events'])} events), so it holds no more of the answer; delete "
                f"the cassette and {self._how_to_record}, letting the run finish",
                provider=self._name,
                thread_id=request.thread_id,
                trace_id=request.trace_id,
            )
        error = entry.get("error")
        if entry.get("outcome") == "error" and error is not None:
            raise ProviderError(
                error["message"],
                provider=self._name,
                status_code=error.get("status_code"),
                retryable=bool(error.get("retryable")),
                code=error.get("code"),
                refusal=error.get("refusal"),
                thread_id=request.thread_id,
                trace_id=request.trace_id,
            )

    def _miss(
        self, record: dict[str, Any], request: LLMRequest, *, used_up: bool
    ) -> CassetteMissError:
        asked = _pretty(record)
        if used_up:
            detail = (
                "the cassette holds this request, but each recording of it was already "
                "replayed; record the run again if it now makes this call more often"
            )
        elif not self._entries:
            detail = "the cassette is empty"
        else:
            closest = max(
                self._entries,
                key=lambda entry: difflib.SequenceMatcher(
                    None, _pretty(entry["request"]), asked
                ).ratio(),
            )
            diff = difflib.unified_diff(
                _pretty(closest["request"]), asked, "recorded", "requested", lineterm=""
            )
            detail = "the closest recorded request differs:\n" + "\n".join(diff)
        return CassetteMissError(
            f"the cassette {self.path} holds no {record['phase']} request like this one; "
            f"{detail}\nIf the change is intended, delete the cassette and "
            f"{self._how_to_record}",
            provider=self._name,
            thread_id=request.thread_id,
            trace_id=request.trace_id,
        )

    async def aclose(self) -> None:
        """Nothing to release; present for the provider protocol."""

"""What the SDK-backed adapters share: keys, secret scrubbing, error classification, the call.

`SdkProvider` owns one SDK client, a concurrency slot (`ProviderConfig.max_concurrency`) and
the shared retry layer (`pes_agent.providers.retry`). A subclass builds its client
(`_new_client`) and the request (`_request_kwargs`) and streams one attempt (`_events`); the
SDK and transport exceptions it lets through are classified here (`_classify`) into retryable
or final `AttemptFailure`s. Native tool calls are joined by each adapter and finished here
(`tool_call_event`: arguments that are not a JSON object give an event with an error), and a
`tool_choice` is checked against the offered tools before anything is sent
(`offered_tool_choice`).

Every configured secret — the API key, credential headers in the options, a password in the
base URL — is scrubbed from error text in every form it may take there: raw, JSON-escaped,
repr-escaped. Keys are read without surrounding whitespace, and a key with a control
character inside is refused before any request (`pes_agent.config.clean_api_key`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus
from types import ModuleType
from typing import Any, ClassVar, Generic, Protocol, TypeVar
from urllib.parse import urlsplit

import httpx2

from pes_agent.config import ProviderConfig, clean_api_key
from pes_agent.errors import ConfigurationError, ProviderError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.providers.base import (
    LLMRequest,
    PromptMessage,
    ProviderEvent,
    ServerAddress,
    ToolCallEvent,
    ToolChoice,
)
from pes_agent.providers.retry import (
    AttemptFailure,
    RetryPolicy,
    is_retryable_status,
    parse_retry_after,
    retrying_stream,
)
from pes_agent.tools.calls import ToolCall

__all__ = [
    "SdkErrorTypes",
    "SdkProvider",
    "env_value",
    "labelled_tool_result",
    "offered_tool_choice",
    "redact",
    "secret_forms",
    "split_options",
    "tool_call_event",
]

_log = get_logger("pes_agent.providers")

# Key-shaped strings are redacted even when they are not our key (a gateway may echo another):
# OpenAI/Anthropic `sk-`, `pk-`, `key-`, xAI `xai-`, Perplexity `pplx-`, Groq `gsk_`, Hugging
# Face `hf_`, Google `AIza`. Configured keys are redacted whatever their shape.
_KEY_PATTERN = re.compile(
    r"\b(?:(?:sk|pk|key|xai|pplx)-|(?:gsk|hf)_|AIza)(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{16,}"
)
_REDACTED = "[REDACTED]"
_MAX_DETAIL = 300
# Option headers whose values are credentials (Azure's `api-key`, `Authorization`, ...).
_CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|password|cookie", re.IGNORECASE)
# Raised while the SDK builds the request, before anything is sent: trying again cannot help.
_REQUEST_ERRORS = (httpx2.LocalProtocolError, httpx2.UnsupportedProtocol, UnicodeEncodeError)

# In-stream error events carry an error type instead of an HTTP status.
_STREAM_ERROR_STATUS = {
    "overloaded_error": 529,
    "rate_limit_error": 429,
    "api_error": 500,
    "server_error": 500,
    "timeout_error": 504,
}


def secret_forms(secret: str) -> tuple[str, ...]:
    """How `secret` may be spelled in error text, longest first.

    Raw; JSON-escaped (a JSON body quoted in a message); repr-escaped, as Python shows a str or
    bytes (httpx's "Illegal header value b'...'"); and each of those JSON-escaped once more.
    """
    if not secret:
        return ()
    forms = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        repr(secret.encode())[2:-1],
        secret.encode("unicode_escape").decode("ascii"),
    }
    forms |= {json.dumps(form)[1:-1] for form in forms}
    return tuple(sorted(forms, key=len, reverse=True))


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """`text` with every secret in `secrets` (in any of its `secret_forms`), and anything
    shaped like an API key, redacted."""
    for secret in secrets:
        for form in secret_forms(secret):
            text = text.replace(form, _REDACTED)
    return _KEY_PATTERN.sub(_REDACTED, text)


def env_value(name: str) -> str | None:
    """Environment variable `name` without surrounding whitespace; `None` when unset or blank."""
    return os.environ.get(name, "").strip() or None


def split_options(options: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """SDK keyword arguments from `options`: the SDK's own parameters as they are, the rest in
    `extra_body` so any server-specific field (`top_k`, `repetition_penalty`, ...) still goes
    through."""
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in options.items():
        if key in known:
            kwargs[key] = value
        else:
            extra[key] = value
    if extra:
        kwargs["extra_body"] = {**extra, **(kwargs.get("extra_body") or {})}
    return kwargs


def labelled_tool_result(message: PromptMessage) -> str:
    """A `tool` prompt message that answers no call (no `tool_call_id`) as user-turn text.

    Both APIs accept a tool-role message only as the answer to one of the model's own tool
    calls, by id. A tool result without an id — a PES thread's stored history
    (`MessageRole.TOOL`), tools the agent ran outside the model — has no call to answer, so it
    goes in as a labelled user turn, which every model and compatible server reads. Tool
    messages with a `tool_call_id` are sent as the API's real tool messages instead.
    """
    label = f"[tool result: {message.name}]" if message.name else "[tool result]"
    return f"{label}\n{message.content}"


def tool_call_event(call_id: str, name: str, raw: str) -> ToolCallEvent:
    """One finished native tool call from its joined argument text.

    Empty text means no arguments (`{}`). Text that is not a JSON object, or a call without a
    tool name, gives the event an `error` saying why, `raw` holding the text as sent, and
    empty arguments — never a raise, so one garbled call does not lose the rest of the answer.
    """
    if not name:
        error = f"tool call {call_id!r} names no tool"
        return ToolCallEvent(ToolCall(call_id, name, {}), error=error, raw=raw)
    if not raw.strip():
        return ToolCallEvent(ToolCall(call_id, name, {}))
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as exc:
        error = f"the arguments of tool call {call_id!r} ({name}) are not valid JSON: {exc}"
        return ToolCallEvent(ToolCall(call_id, name, {}), error=error, raw=raw)
    if not isinstance(arguments, dict):
        error = (
            f"the arguments of tool call {call_id!r} ({name}) are a JSON "
            f"{type(arguments).__name__}, not an object"
        )
        return ToolCallEvent(ToolCall(call_id, name, {}), error=error, raw=raw)
    return ToolCallEvent(ToolCall(call_id, name, arguments))


def offered_tool_choice(request: LLMRequest) -> ToolChoice | None:
    """The request's `tool_choice` as it should reach the API, checked against its tools.

    Without tools, `"auto"` and `"none"` say nothing and are left out; `"required"` or a tool's
    name cannot be honoured, and a name must be one of the offered tools: both are usage
    errors raised before anything is sent.
    """
    choice = request.tool_choice
    if choice is None:
        return None
    names = [schema.name for schema in request.tools]
    if not names:
        if choice in ("auto", "none"):
            return None
        raise UsageError(
            f"tool_choice={choice!r} needs tools: pass the tool schemas in LLMRequest.tools "
            "(or tools=... to the model caller), or leave tool_choice unset"
        )
    if choice not in ("auto", "none", "required") and choice not in names:
        raise UsageError(
            f"tool_choice={choice!r} names no offered tool; use one of {names} "
            "or 'auto', 'none', 'required'"
        )
    return choice


@dataclass(frozen=True, slots=True)
class SdkErrorTypes:
    """The exception classes of one SDK, so one classifier serves them all."""

    status: type[Exception]
    api: type[Exception]
    timeout: tuple[type[Exception], ...]
    connection: tuple[type[Exception], ...]

    @classmethod
    def of(cls, sdk: ModuleType) -> SdkErrorTypes:
        """The classes of a Stainless-generated SDK (`openai`, `anthropic`: the same names)."""
        return cls(
            status=sdk.APIStatusError,
            api=sdk.APIError,
            timeout=(sdk.APITimeoutError, httpx2.TimeoutException),
            connection=(sdk.APIConnectionError, httpx2.TransportError),
        )


class SdkClient(Protocol):
    """What the adapters need of an SDK client besides its API: its URL, and closing it."""

    @property
    def base_url(self) -> httpx2.URL: ...

    async def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=SdkClient)


def _status_phrase(status: int) -> str:
    if status == 529:
        return "overloaded"
    try:
        return HTTPStatus(status).phrase.lower()
    except ValueError:
        return "server error" if status >= 500 else "error"


def _error_detail(exc: BaseException) -> str:
    """The server's own error message when the body has one, else the exception text."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return str(exc)


class SdkProvider(ABC, Generic[ClientT]):
    """A provider backed by a vendor SDK client; subclasses speak one wire protocol.

    Calls in flight are counted, so that `retire()` (what `ProviderPool` does to a provider it
    evicts) closes the client only once they have ended.
    """

    #: Shown in error messages: "the OpenAI API key was rejected".
    label: ClassVar[str]
    #: The environment variable the SDK reads the key from.
    key_env_var: ClassVar[str]
    errors: ClassVar[SdkErrorTypes]
    #: A stand-in key for servers that need none; it is not a secret, so it is not redacted.
    placeholder_key: ClassVar[str | None] = None

    def __init__(self, config: ProviderConfig, *, retry_policy: RetryPolicy | None = None) -> None:
        self._config = config
        self._retry_policy = retry_policy or RetryPolicy()
        self._api_key = self._resolve_api_key(config)
        self._secrets = self._configured_secrets(config)
        self._slot = asyncio.Semaphore(config.max_concurrency)
        self._closed = False
        self._retired = False
        self._in_flight = 0
        self._client = self._new_client()
        self._client_open = True

    # identity ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._config.provider

    @property
    def model(self) -> str:
        return self._config.model

    @property
    def config(self) -> ProviderConfig:
        return self._config

    def __repr__(self) -> str:
        return f"{type(self).__name__}(provider={self.name!r}, model={self.model!r})"

    @property
    def client(self) -> ClientT:
        """The SDK client (shared by every call of this provider)."""
        return self._client

    @property
    def server(self) -> ServerAddress:
        """The host and port requests go to (the client's base URL; its scheme's default port)."""
        url = self._client.base_url
        return ServerAddress(url.host, url.port or (443 if url.scheme == "https" else 80))

    # keys --------------------------------------------------------------------------------
    def _resolve_api_key(self, config: ProviderConfig) -> str:
        # Cleaned again here: a config changed by model_copy() was never validated.
        key = ""
        if config.api_key is not None:
            key = clean_api_key(config.api_key.get_secret_value(), source="ProviderConfig.api_key")
        if not key:
            key = clean_api_key(
                os.environ.get(self.key_env_var, ""),
                source=f"the {self.key_env_var} environment variable",
            )
        key = key or (self.placeholder_key or "")
        if not key:
            raise ConfigurationError(
                f"no {self.label} API key: set {self.key_env_var} or pass "
                f"ProviderConfig({config.provider!r}, {config.model!r}, api_key=...)"
            )
        return key

    def _configured_secrets(self, config: ProviderConfig) -> tuple[str, ...]:
        """Every secret value the configuration holds: the key, credential headers in the
        options, a password in the base URL."""
        secrets: list[str] = []
        if self._api_key and self._api_key != self.placeholder_key:
            secrets.append(self._api_key)
        headers = config.options.get("extra_headers")
        if isinstance(headers, Mapping):
            secrets += (
                value.strip()
                for name, value in headers.items()
                if isinstance(value, str) and _CREDENTIAL_HEADER.search(str(name))
            )
        if config.base_url:
            try:
                password = urlsplit(config.base_url).password
            except ValueError:
                password = None
            if password:
                secrets.append(password)
        # A short value (say "1" in a header) would redact half of every message.
        return tuple(secret for secret in secrets if len(secret) >= 8)

    # the call ----------------------------------------------------------------------------
    def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        """Stream one model call: tokens, thinking blocks, native tool calls, restarts on retry,
        then metadata."""
        if self._closed:
            raise UsageError(f"{self!r} is closed; create a new provider or ProviderPool")
        kwargs = self._request_kwargs(request)
        log = _log.bind(
            provider=self.name,
            model=self.model,
            thread_id=request.thread_id,
            trace_id=request.trace_id,
            phase=request.phase,
        )
        return retrying_stream(
            lambda: self._events(kwargs),
            classify=self._classify,
            max_retries=self._config.max_retries,
            policy=self._retry_policy,
            on_give_up=lambda failure, attempts: self._give_up(failure, attempts, request),
            log=log,
            slot=self._slot,
            in_flight=self._in_flight_call(),
        )

    @abstractmethod
    def _new_client(self) -> ClientT:
        """A new SDK client for this configuration (the SDK's own retries off)."""

    @abstractmethod
    def _request_kwargs(self, request: LLMRequest) -> dict[str, Any]:
        """The SDK call's keyword arguments for `request` (built once per call)."""

    @abstractmethod
    def _events(self, kwargs: dict[str, Any]) -> AsyncGenerator[ProviderEvent, None]:
        """Stream one attempt; raise `AttemptFailure` for an incomplete stream.

        SDK and transport exceptions may escape: the retry layer classifies them (`_classify`).
        """

    async def aclose(self) -> None:
        """Close the SDK client and its connection pool now; further calls raise."""
        self._closed = True
        await self._close_client()

    async def retire(self) -> None:
        """Close the client once no call is in flight, without cutting one short.

        A call made afterwards still works, on a client of its own that closes when the call
        ends, so whoever still holds this provider is never refused. `ProviderPool` retires
        the providers it evicts.
        """
        self._retired = True
        if self._in_flight == 0:
            await self._close_client()

    async def _close_client(self) -> None:
        if self._client_open:
            self._client_open = False
            await self._client.close()

    @asynccontextmanager
    async def _in_flight_call(self) -> AsyncIterator[None]:
        """One call, counted as in flight from its first event to its end.

        A retired provider whose client was closed meanwhile gets a new client for the call;
        when the last call of a retired provider ends, its client closes.
        """
        self._in_flight += 1
        if not self._client_open and not self._closed:
            self._client = self._new_client()
            self._client_open = True
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._retired and self._in_flight == 0:
                await self._close_client()

    # failures ----------------------------------------------------------------------------
    def classify_error(self, exc: Exception) -> AttemptFailure | None:
        """What an exception from this provider's SDK client means for the retry layer:
        retryable or final, its reason scrubbed of secrets; `None` if it is not the SDK's.
        For other calls on `client` (embeddings) run through `retrying_call`."""
        return self._classify(exc)

    def redact_secrets(self, text: str) -> str:
        """`text` with this provider's configured secrets, and key-shaped strings, redacted."""
        return self._redact(text)

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def _detail(self, exc: BaseException) -> str:
        detail = self._redact(_error_detail(exc)).strip()
        return detail if len(detail) <= _MAX_DETAIL else detail[: _MAX_DETAIL - 1] + "…"

    def _classify(self, exc: Exception) -> AttemptFailure | None:
        """An `AttemptFailure` for an SDK or transport exception; `None` for anything else."""
        errors = self.errors
        unsent = exc if isinstance(exc, _REQUEST_ERRORS) else exc.__cause__
        if isinstance(unsent, _REQUEST_ERRORS) and (
            unsent is exc or isinstance(exc, errors.connection)
        ):
            return AttemptFailure(
                f"the request could not be built ({type(unsent).__name__}): {self._detail(unsent)}",
                kind="request",
                retryable=False,
            )
        if isinstance(exc, errors.status):
            status = int(getattr(exc, "status_code", 0) or 0)
            if 200 <= status < 300:  # an error event inside a 200 stream
                return self._stream_error(exc)
            response = getattr(exc, "response", None)
            headers = response.headers if response is not None else {}
            return AttemptFailure(
                f"HTTP {status} ({_status_phrase(status)}): {self._detail(exc)}",
                kind="status",
                status_code=status,
                retryable=is_retryable_status(status),
                retry_after_s=parse_retry_after(headers),
                code=_error_code(exc),
            )
        if isinstance(exc, errors.timeout):
            return AttemptFailure(
                f"no response within timeout_s={self._config.timeout_s:g}",
                kind="timeout",
                retryable=True,
            )
        if isinstance(exc, errors.connection):
            cause = exc.__cause__ if isinstance(exc.__cause__, httpx2.HTTPError) else exc
            return AttemptFailure(
                f"connection failed ({type(cause).__name__}): {self._detail(cause)}",
                kind="connection",
                retryable=True,
            )
        if isinstance(exc, errors.api):
            return self._stream_error(exc)
        if isinstance(exc, json.JSONDecodeError):
            # A garbled event line (a proxy cutting a chunk): the next attempt may be clean.
            return AttemptFailure(
                f"the server sent malformed stream data: {self._detail(exc)}",
                kind="stream_error",
                retryable=True,
            )
        return None

    def _stream_error(self, exc: Exception) -> AttemptFailure:
        error_type = getattr(exc, "type", None)
        status = _STREAM_ERROR_STATUS.get(error_type) if isinstance(error_type, str) else None
        return AttemptFailure(
            f"error event in the stream ({error_type or 'unknown'}): {self._detail(exc)}",
            kind="stream_error",
            status_code=status,
            retryable=status is not None,
            code=error_type if isinstance(error_type, str) else None,
        )

    def _give_up(self, failure: AttemptFailure, attempts: int, request: LLMRequest) -> Exception:
        """The `ProviderError` a caller sees: what failed, and what to do about it."""
        label = self.label
        status = failure.status_code
        if failure.retryable:
            tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
            message = f"the {label} API call failed after {tries}: {failure.reason}"
        elif failure.kind == "request":
            message = (
                f"the {label} API call could not be sent: {failure.reason}; check the headers "
                f"in ProviderConfig.options and the base_url"
            )
        elif status == 401:
            message = (
                f"the {label} API key was rejected (401); "
                f"set {self.key_env_var} or ProviderConfig.api_key"
            )
        elif status == 403:
            message = (
                f"the {label} API refused the request: {failure.reason}; "
                f"check that the API key may use model {self.model!r}"
            )
        elif status == 404:
            message = (
                f"the {label} API found no such model or endpoint: {failure.reason}; "
                f"check the model name {self.model!r} and base_url"
            )
        else:
            message = f"the {label} API rejected the request: {failure.reason}"
        return ProviderError(
            self._redact(message),
            provider=self.name,
            status_code=status,
            retryable=failure.retryable,
            code=failure.code,
            refusal=None if failure.retryable else refusal_of(status, failure.code, failure.reason),
            thread_id=request.thread_id,
            trace_id=request.trace_id,
        )


def _error_code(exc: Exception) -> str | None:
    """The error code in an SDK status error's body: OpenAI's ``error.code`` (or its
    ``error.type``), Anthropic's ``error.type``; `None` when the body names none."""
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code:
        return code
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping):
            for key in ("code", "type"):
                value = error.get(key)
                if isinstance(value, str) and value:
                    return value
    return None


_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_CONTENT_CODES = frozenset({"content_filter", "content_policy_violation"})
_CONTEXT_WORDS = re.compile(
    r"context length|context window|maximum context|prompt is too long|too many tokens"
    r"|input is too long|request too large",
    re.IGNORECASE,
)
_CONTENT_WORDS = re.compile(r"content (management )?polic|content filter", re.IGNORECASE)


def refusal_of(status: int | None, code: str | None, reason: str) -> str | None:
    """Whether a final failure is the server refusing this request rather than failing:
    ``"context_length"`` (the prompt is too long for the model: 400 or 413 with
    OpenAI's ``context_length_exceeded`` code or words such as Anthropic's "prompt is too
    long"), ``"content_filter"`` (a 400 naming the content policy); else `None`."""
    if status not in (400, 413):
        return None
    if code in _CONTEXT_CODES or _CONTEXT_WORDS.search(reason):
        return "context_length"
    if code in _CONTENT_CODES or _CONTENT_WORDS.search(reason):
        return "content_filter"
    return None

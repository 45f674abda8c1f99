"""A provider made of providers: when one fails, the next serves the same request.

```python
from pes_agent import create_agent
from pes_agent.providers import FallbackProvider

agent = create_agent(provider=["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5"], tools=[...])
# or, to choose what counts as an outage:
provider = FallbackProvider(["openai:gpt-4o-mini", my_local_provider], fall_back_on=...)
```

Each provider keeps its own retries: `FallbackProvider` moves on only once a provider has
given up on a call. What moves it on is `fall_back_on(error)`; the default, `should_fall_back`,
says yes to an outage and to a refusal of this very request:

- a `ProviderError` that was retryable and whose retries ran out: connection failures,
  timeouts, 5xx, 429 beyond its retries, streams that kept breaking;
- a `ProviderError` whose `refusal` is set: the prompt is too long for the model (a 400 or 413
  naming the context length) or the provider's content policy refused it (a 400);
- `OSError` and `TimeoutError` from a provider of your own.

Never: a `UsageError` (a bad argument, a closed provider) fails at once whatever
`fall_back_on` says, as do authentication and other 4xx errors under the default (the next
provider would hide a configuration mistake).

Streaming: a provider is replaced only while nothing of its answer has been yielded. Once a
token (or a thinking piece, a tool call, a restart) went to the caller, and so maybe to a
subscriber's screen, a failure ends the call as it would without a fallback.

The `StreamMetadata` of the answer names the provider that gave it (`provider`, and `model`
when the server named none), and its usage counts the providers asked (`Usage.requests`: one
for each that failed before, plus the answer's). A provider that failed before streaming
anything reported no tokens, so the token counts are the answering provider's (its own
retried attempts included).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TypeAlias

from pes_agent.config import ProviderConfig
from pes_agent.errors import ProviderError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.providers.base import (
    LLMProvider,
    LLMRequest,
    ProviderEvent,
    StreamMetadata,
    StructuredOutput,
)
from pes_agent.providers.registry import create_provider
from pes_agent.providers.retry import RetryPolicy
from pes_agent.usage import Usage

__all__ = ["FallBackOn", "FallbackProvider", "resolve_provider", "should_fall_back"]

#: What moves a `FallbackProvider` on to its next provider: a predicate over the failure, or
#: the exception classes that do.
FallBackOn: TypeAlias = Callable[[Exception], bool] | tuple[type[Exception], ...]

_log = get_logger("pes_agent.providers")
_ONE_REQUEST = Usage(requests=1)


def should_fall_back(error: Exception) -> bool:
    """The default `fall_back_on`: an outage (a retryable `ProviderError` whose retries ran
    out, an `OSError` or `TimeoutError`) or a refusal of the request (`ProviderError.refusal`:
    the context length or the content policy). A `UsageError` never falls back."""
    if isinstance(error, UsageError):
        return False
    if isinstance(error, ProviderError):
        return error.retryable or error.refusal is not None
    return isinstance(error, OSError | TimeoutError)


class FallbackProvider:
    """Providers tried in order for each call: the first serves it unless it fails after its
    own retries in a way `fall_back_on` accepts; then the next serves the same request."""

    def __init__(
        self,
        providers: Sequence[str | ProviderConfig | LLMProvider],
        *,
        fall_back_on: FallBackOn = should_fall_back,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        """Fall back along `providers`, in order.

        Args:
            providers: Two or more providers, in order of preference: provider objects, or
                ``"NAME:MODEL"`` strings and `ProviderConfig`s, which are built here (with
                `retry_policy`) and closed by `aclose()`. Provider objects passed in stay open.
            fall_back_on: Which failures move on to the next provider: a predicate over the
                exception, or a tuple of exception classes; `should_fall_back` by default. A
                `UsageError` never falls back.
            retry_policy: The retry timing of the providers built here from strings or configs.

        Raises:
            UsageError: Fewer than two providers, an entry that is not a provider, or a
                `fall_back_on` that is neither callable nor a tuple of exception classes.
        """
        if isinstance(providers, str | ProviderConfig) or not isinstance(providers, Sequence):
            raise UsageError(
                "FallbackProvider takes a list of providers, e.g. "
                "FallbackProvider(['openai:gpt-4o-mini', 'anthropic:claude-haiku-4-5']); "
                f"got {type(providers).__name__}"
            )
        if len(providers) < 2:
            raise UsageError(
                f"FallbackProvider needs at least two providers to fall back between, got "
                f"{len(providers)}; pass the one provider on its own instead"
            )
        self._fall_back_on = _predicate(fall_back_on)
        self._owned: list[LLMProvider] = []
        built: list[LLMProvider] = []
        for position, entry in enumerate(providers):
            if isinstance(entry, str | ProviderConfig):
                # Should a later entry fail, those built so far hold no connection yet (their
                # clients connect on the first request), so nothing is left open.
                provider = create_provider(entry, retry_policy=retry_policy)
                self._owned.append(provider)
            elif isinstance(entry, LLMProvider):
                provider = entry
            else:
                raise UsageError(
                    f"FallbackProvider's provider {position} is a {type(entry).__name__}; "
                    "give 'NAME:MODEL', a ProviderConfig or a provider object (with name, "
                    "model, stream() and aclose())"
                )
            built.append(provider)
        self.providers: tuple[LLMProvider, ...] = tuple(built)
        self._model = ",".join(f"{p.name}:{p.model}" for p in self.providers)
        modes = {getattr(p, "structured_output", None) for p in self.providers}
        # A request shaped for one way of structuring (response_format, a forced tool) must
        # suit every provider that may serve it; otherwise plans are asked for in text.
        self.structured_output: StructuredOutput | None = modes.pop() if len(modes) == 1 else None

    @property
    def name(self) -> str:
        return "fallback"

    @property
    def model(self) -> str:
        """The providers as ``"NAME:MODEL"``, comma-separated, in order of preference."""
        return self._model

    def __repr__(self) -> str:
        return f"FallbackProvider({self._model!r})"

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the call from the first provider that serves it (see the module docstring).

        Args:
            request: The call, sent unchanged to each provider that is asked.

        Yields:
            The serving provider's events, its `StreamMetadata` naming it (`provider`) and
            counting every provider asked (`usage.requests`).

        Raises:
            UsageError: From any provider, at once.
            ProviderError: The last provider's failure, or the failure of a provider that had
                already streamed, or one `fall_back_on` does not accept.
        """
        spent = Usage()
        last = len(self.providers) - 1
        for position, provider in enumerate(self.providers):
            streamed = False
            try:
                async with _closing(provider.stream(request)) as events:
                    async for event in events:
                        if isinstance(event, StreamMetadata):
                            yield _answered_by(event, provider, spent)
                        else:
                            streamed = True
                            yield event
                return
            except UsageError:
                raise
            except Exception as error:
                if streamed or position == last or not self._fall_back_on(error):
                    raise
                spent = spent + _ONE_REQUEST
                nxt = self.providers[position + 1]
                _log.warning(
                    "llm.fallback",
                    provider=provider.name,
                    model=provider.model,
                    next_provider=nxt.name,
                    next_model=nxt.model,
                    error_type=type(error).__name__,
                    status_code=getattr(error, "status_code", None),
                    thread_id=request.thread_id,
                    trace_id=request.trace_id,
                    phase=request.phase,
                )

    async def aclose(self) -> None:
        """Close the providers built here from strings or configs; those passed in as objects
        stay open (their owner closes them)."""
        owned, self._owned = self._owned, []
        for provider in owned:
            await provider.aclose()


@asynccontextmanager
async def _closing(
    events: AsyncIterator[ProviderEvent],
) -> AsyncIterator[AsyncIterator[ProviderEvent]]:
    """`events`, closed on the way out (a provider's stream is usually an async generator):
    a failed or abandoned stream releases its connection now, not when collected."""
    try:
        yield events
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


def _predicate(fall_back_on: FallBackOn) -> Callable[[Exception], bool]:
    if isinstance(fall_back_on, tuple):
        if not all(isinstance(kind, type) and issubclass(kind, Exception) for kind in fall_back_on):
            raise UsageError(
                "fall_back_on takes exception classes, e.g. fall_back_on=(ProviderError,), "
                f"or a function of the exception; got {fall_back_on!r}"
            )
        kinds = fall_back_on
        return lambda error: isinstance(error, kinds)
    if callable(fall_back_on):
        return fall_back_on
    raise UsageError(
        "fall_back_on must be a function of the exception returning a bool, or a tuple of "
        f"exception classes; got {type(fall_back_on).__name__}"
    )


def _answered_by(meta: StreamMetadata, provider: LLMProvider, spent: Usage) -> StreamMetadata:
    """`meta` naming `provider` as the one that answered, its usage with `spent` added."""
    usage = meta.usage if not spent.requests else meta.usage + spent
    return replace(
        meta,
        provider=meta.provider or provider.name,
        model=meta.model or provider.model,
        usage=usage,
    )


def resolve_provider(
    provider: object, *, retry_policy: RetryPolicy | None = None
) -> tuple[LLMProvider, bool]:
    """The provider `create_agent(provider=...)` means, and whether it was built here (then
    its builder closes it): a spec string or `ProviderConfig` builds a client, a list falls
    back along its items (`FallbackProvider`), a provider object is used as it is.

    Raises:
        UsageError: `provider` is none of these; the message lists what is accepted.
    """
    if isinstance(provider, str | ProviderConfig):
        return create_provider(provider, retry_policy=retry_policy), True
    if isinstance(provider, LLMProvider):
        return provider, False
    if isinstance(provider, list | tuple):
        return FallbackProvider(list(provider), retry_policy=retry_policy), True
    raise UsageError(
        "provider must be 'openai:MODEL', 'anthropic:MODEL', 'ollama:MODEL', a "
        "ProviderConfig, a provider object (with name, model, stream() and aclose()) or a "
        f"list of them to fall back along; got {type(provider).__name__}"
    )

"""From provider names to providers: `create_provider`, `register_provider`, `ProviderPool`.

```python
provider = create_provider("anthropic:claude-sonnet-4-5")
register_provider("vllm", lambda config: OpenAIProvider(config))   # "vllm:MODEL" now works

async with ProviderPool() as pool:                 # what an agent holds
    provider = pool.get("openai:gpt-4o-mini")      # created once, then reused
    assert pool.get("openai:gpt-4o-mini") is provider
```

The built-in names are `openai`, `anthropic` and `ollama`; their SDKs are imported on first
use, so importing pes-agent stays fast.

`ProviderPool` keeps one provider — one SDK client and its connection pool — per
configuration. Configurations are compared in full, API key included, so two that differ only
in their key never share a client; the cache holds a keyed hash of the key, never the key.
Each provider limits its own concurrent calls (`ProviderConfig.max_concurrency`): calls beyond
the limit wait for a slot. A pool belongs to one event loop.

The pool keeps the `max_size` (default 32) most recently used providers; per-call
configurations (`RunOptions.provider_config`) would otherwise each keep a client and its
sockets open for good. An evicted provider is retired: its client closes as soon as the calls
still streaming on it have ended, and a run that still holds it keeps working (each further
call on its own short-lived client). A provider from a `register_provider` factory is retired
the same way when it has a `retire()` coroutine method, and closed with `aclose()` otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import secrets
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pes_agent._closing import ClosedOnExit, close_all
from pes_agent.config import ProviderConfig
from pes_agent.errors import ConfigurationError, UsageError
from pes_agent.observing.logs import get_logger
from pes_agent.providers.base import LLMProvider
from pes_agent.providers.retry import RetryPolicy

__all__ = [
    "DEFAULT_POOL_SIZE",
    "ProviderFactory",
    "ProviderPool",
    "ProviderSpec",
    "create_provider",
    "parse_provider_spec",
    "provider_names",
    "register_provider",
]

ProviderFactory = Callable[[ProviderConfig], LLMProvider]
ProviderSpec = str | ProviderConfig | LLMProvider

#: How many providers (SDK clients) a `ProviderPool` keeps by default.
DEFAULT_POOL_SIZE = 32

_log = get_logger("pes_agent.providers")


def _openai(config: ProviderConfig, retry_policy: RetryPolicy | None) -> LLMProvider:
    from pes_agent.providers.openai import OpenAIProvider

    return OpenAIProvider(config, retry_policy=retry_policy)


def _anthropic(config: ProviderConfig, retry_policy: RetryPolicy | None) -> LLMProvider:
    from pes_agent.providers.anthropic import AnthropicProvider

    return AnthropicProvider(config, retry_policy=retry_policy)


def _ollama(config: ProviderConfig, retry_policy: RetryPolicy | None) -> LLMProvider:
    from pes_agent.providers.ollama import OllamaProvider

    return OllamaProvider(config, retry_policy=retry_policy)


@dataclass(frozen=True, slots=True)
class _Registration:
    # Built-in factories take the retry policy; registered ones own their retries.
    builtin: Callable[[ProviderConfig, RetryPolicy | None], LLMProvider] | None = None
    custom: ProviderFactory | None = None

    def create(self, config: ProviderConfig, retry_policy: RetryPolicy | None) -> LLMProvider:
        if self.builtin is not None:
            return self.builtin(config, retry_policy)
        if self.custom is not None:
            return self.custom(config)
        raise RuntimeError("a provider registration has neither a built-in nor a custom factory")


_REGISTRY: dict[str, _Registration] = {
    "openai": _Registration(builtin=_openai),
    "anthropic": _Registration(builtin=_anthropic),
    "ollama": _Registration(builtin=_ollama),
}


def provider_names() -> tuple[str, ...]:
    """List the provider names `create_provider` accepts, e.g. to offer them in a CLI.

    Returns:
        The built-in names and those added with `register_provider`, sorted.
    """
    return tuple(sorted(_REGISTRY))


def _accepted() -> str:
    return ", ".join(repr(name) for name in provider_names())


def register_provider(name: str, factory: ProviderFactory, *, replace: bool = False) -> None:
    """Make `"NAME:MODEL"` and `ProviderConfig("NAME", ...)` build providers with `factory`.

    Args:
        name: The provider name, without `:` or surrounding spaces.
        factory: `factory(config)` returns any `LLMProvider` for a `ProviderConfig`.
        replace: Allow replacing a name that is registered already (built-in or not).

    Raises:
        ConfigurationError: The name is malformed or taken, or `factory` is not callable.
    """
    if not name or ":" in name or name != name.strip():
        raise ConfigurationError(
            f"provider name {name!r} must be non-empty, without ':' or surrounding spaces"
        )
    if not callable(factory):
        raise ConfigurationError(
            f"the factory for provider {name!r} must be callable as factory(config)"
        )
    if name in _REGISTRY and not replace:
        raise ConfigurationError(
            f"provider name {name!r} is already registered; pass replace=True to override it"
        )
    _REGISTRY[name] = _Registration(custom=factory)


def parse_provider_spec(spec: str) -> ProviderConfig:
    """`"openai:gpt-4o-mini"` → `ProviderConfig("openai", "gpt-4o-mini")`.

    Only the first `:` separates: `"ollama:llama3.1:8b"` is model `llama3.1:8b` on Ollama.

    Args:
        spec: `"NAME:MODEL"`.

    Returns:
        The config naming that provider and model.

    Raises:
        ConfigurationError: `spec` is not `NAME:MODEL`, or the name is not registered (the
            message lists the accepted names).
    """
    name, sep, model = spec.strip().partition(":")
    name, model = name.strip(), model.strip()
    if not sep or not name or not model:
        raise ConfigurationError(
            f"provider {spec!r} must look like 'openai:gpt-4o-mini' (NAME:MODEL); "
            f"accepted names: {_accepted()}"
        )
    if name not in _REGISTRY:
        raise ConfigurationError(
            f"unknown provider {name!r} in {spec!r}; accepted names: {_accepted()} "
            "(or add one with register_provider)"
        )
    return ProviderConfig(name, model)


def create_provider(spec: ProviderSpec, *, retry_policy: RetryPolicy | None = None) -> LLMProvider:
    """A provider from `"NAME:MODEL"`, a `ProviderConfig`, or an `LLMProvider` (returned as is).

    Args:
        spec: `"NAME:MODEL"` (e.g. `"openai:gpt-4o-mini"`), a `ProviderConfig`, or a provider
            object.
        retry_policy: Tunes the built-in providers' retry timing; None for the default.

    Returns:
        The provider; the caller closes it with `aclose()` (a provider object passed in is
        returned as is).

    Raises:
        ConfigurationError: The name is unknown, `spec` is none of the above, or the API key
            is missing (the message names the environment variable to set).
    """
    if isinstance(spec, str):
        config = parse_provider_spec(spec)
    elif isinstance(spec, ProviderConfig):
        config = spec
    elif isinstance(spec, LLMProvider):
        return spec
    else:
        raise ConfigurationError(
            "provider must be 'NAME:MODEL' (e.g. 'openai:gpt-4o-mini'), a ProviderConfig or an "
            f"object with the LLMProvider methods, not {type(spec).__name__}"
        )
    registration = _REGISTRY.get(config.provider)
    if registration is None:
        raise ConfigurationError(
            f"unknown provider {config.provider!r}; accepted names: {_accepted()} "
            "(or add one with register_provider)"
        )
    return registration.create(config, retry_policy)


_CacheKey = tuple[str, str, str, str | None, float, int, int, str]


class ProviderPool(ClosedOnExit):
    """Creates each configured provider once, hands it out again, and closes them all.

    At most `max_size` providers are kept, least recently used evicted first (see the module
    docstring for what happens to an evicted one).
    """

    def __init__(
        self, *, retry_policy: RetryPolicy | None = None, max_size: int = DEFAULT_POOL_SIZE
    ) -> None:
        """Keep up to `max_size` providers, built with `retry_policy`.

        Args:
            retry_policy: Tunes the built-in providers' retry timing; None for the default.
            max_size: How many providers the pool keeps at most.

        Raises:
            ConfigurationError: `max_size` is below 1.
        """
        if max_size < 1:
            raise ConfigurationError(f"ProviderPool(max_size={max_size}) must keep at least 1")
        self._retry_policy = retry_policy
        self._max_size = max_size
        self._providers: OrderedDict[_CacheKey, LLMProvider] = OrderedDict()
        # Evicted providers someone may still hold: aclose() closes them for good.
        self._retired: weakref.WeakSet[LLMProvider] = weakref.WeakSet()
        self._retiring: set[asyncio.Task[None]] = set()
        # Evicted outside an event loop, so not closed yet: aclose() does it.
        self._unclosed: list[LLMProvider] = []
        # A per-pool salt: the cache keys reveal nothing about the API keys they stand for.
        self._salt = secrets.token_bytes(32)
        self._closed = False

    @property
    def max_size(self) -> int:
        """How many providers this pool keeps at most."""
        return self._max_size

    def get(self, spec: ProviderSpec) -> LLMProvider:
        """The provider for `spec` (`"NAME:MODEL"` or a `ProviderConfig`), created on first use.

        Args:
            spec: `"NAME:MODEL"`, a `ProviderConfig`, or a provider object (returned as it
                is; the pool does not own or close it).

        Returns:
            The provider; the pool closes it in `aclose()` (or when evicting it).

        Raises:
            UsageError: The pool is closed.
            ConfigurationError: As `create_provider` raises it.
        """
        if self._closed:
            raise UsageError("this ProviderPool is closed; create a new one")
        if isinstance(spec, str):
            config = parse_provider_spec(spec)
        elif isinstance(spec, ProviderConfig):
            config = spec
        else:
            return create_provider(spec)
        key = self._cache_key(config)
        provider = self._providers.get(key)
        if provider is not None:
            self._providers.move_to_end(key)
            return provider
        provider = create_provider(config, retry_policy=self._retry_policy)
        self._providers[key] = provider
        while len(self._providers) > self._max_size:
            self._evict(self._providers.popitem(last=False)[1])
        return provider

    def _evict(self, provider: LLMProvider) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._unclosed.append(provider)
            return
        retire = getattr(provider, "retire", None)
        close: Callable[[], Awaitable[object]] = provider.aclose
        if callable(retire):
            close = retire
            # A provider that cannot be weakly referenced is retired all the same, only not
            # closed again by aclose().
            with contextlib.suppress(TypeError):
                self._retired.add(provider)
        task = loop.create_task(self._finish_eviction(provider, close()))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _finish_eviction(self, provider: LLMProvider, closing: Awaitable[object]) -> None:
        try:
            await closing
        except Exception:
            # Nobody awaits this task: a failure to close must at least be seen.
            _log.exception("provider_close_failed", provider=provider.name, model=provider.model)

    def _cache_key(self, config: ProviderConfig) -> _CacheKey:
        secret = config.api_key.get_secret_value() if config.api_key is not None else ""
        key_digest = hmac.new(self._salt, secret.encode(), hashlib.sha256).hexdigest()
        options = json.dumps(config.options, sort_keys=True, default=repr)
        return (
            config.provider,
            config.model,
            key_digest,
            config.base_url,
            config.timeout_s,
            config.max_retries,
            config.max_concurrency,
            options,
        )

    def __len__(self) -> int:
        return len(self._providers)

    async def aclose(self) -> None:
        """Close every provider this pool created (their HTTP clients); idempotent.

        Evicted providers are closed too, also those a run still holds.
        """
        self._closed = True
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        providers = [*self._providers.values(), *self._retired, *self._unclosed]
        self._providers = OrderedDict()
        self._retired = weakref.WeakSet()
        self._unclosed = []
        await close_all(providers)

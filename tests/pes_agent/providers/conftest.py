"""Fixtures for the provider tests: the model server, providers on it, recorded retry waits.

Other test directories reuse the server with
`from tests.pes_agent.providers.model_server import ModelServer, Reply, Fault, ...`, and get the
fixture by importing `model_server` from there into their own `conftest.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from pes_agent.config import ProviderConfig
from pes_agent.providers import LLMProvider, RetryPolicy, create_provider

from .helpers import API_KEY, RecordedSleeps
from .model_server import ModelServer, model_server

__all__ = ["make_provider", "model_server", "policy", "sleeps"]

_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_PROFILE",
    "OLLAMA_API_KEY",
    "OLLAMA_BASE_URL",
)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys and URLs from the developer's shell must not reach the tests."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sleeps() -> RecordedSleeps:
    return RecordedSleeps()


@pytest.fixture
def policy(sleeps: RecordedSleeps) -> RetryPolicy:
    """The default retry timing, with waits recorded rather than slept."""
    return RetryPolicy(sleep=sleeps)


ProviderMaker = Callable[..., LLMProvider]


@pytest.fixture
async def make_provider(
    model_server: ModelServer, policy: RetryPolicy
) -> AsyncIterator[ProviderMaker]:
    """`make_provider("openai", timeout_s=0.5)`: a provider on the test server, closed after."""
    made: list[LLMProvider] = []

    def make(name: str, /, **config: Any) -> LLMProvider:
        retry_policy = config.pop("retry_policy", policy)
        config.setdefault("api_key", API_KEY)
        config.setdefault("base_url", model_server.base_url_for(name))
        provider = create_provider(
            ProviderConfig(name, config.pop("model", "test-model"), **config),
            retry_policy=retry_policy,
        )
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()

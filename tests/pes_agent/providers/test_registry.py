"""`create_provider` and `register_provider`: names, specs, keys from config or environment."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from pes_agent.config import ProviderConfig
from pes_agent.errors import ConfigurationError, UsageError
from pes_agent.providers import (
    AnthropicProvider,
    LLMProvider,
    LLMRequest,
    OllamaProvider,
    OpenAIProvider,
    ProviderEvent,
    StreamMetadata,
    TokenDelta,
    create_provider,
    parse_provider_spec,
    provider_names,
    register_provider,
)
from pes_agent.providers import registry as registry_module
from pes_agent.usage import Usage

from .helpers import API_KEY, collect, content
from .model_server import ModelServer, Reply


class EchoProvider:
    """A custom provider that echoes the last message back."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.closed = False

    @property
    def name(self) -> str:
        return self.config.provider

    @property
    def model(self) -> str:
        return self.config.model

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        yield TokenDelta(request.messages[-1].content)
        yield StreamMetadata(usage=Usage(requests=1))

    async def aclose(self) -> None:
        self.closed = True


@pytest.fixture
def restore_registry() -> Iterator[None]:
    """Registrations made by a test are undone after it."""
    saved = dict(registry_module._REGISTRY)
    yield
    registry_module._REGISTRY.clear()
    registry_module._REGISTRY.update(saved)


@pytest.mark.parametrize(
    ("spec", "cls", "model"),
    [
        ("openai:gpt-4o-mini", OpenAIProvider, "gpt-4o-mini"),
        ("anthropic:claude-sonnet-4-5", AnthropicProvider, "claude-sonnet-4-5"),
        ("ollama:llama3.1:8b", OllamaProvider, "llama3.1:8b"),
        ("  openai : gpt-4o ", OpenAIProvider, "gpt-4o"),
    ],
)
async def test_spec_strings_build_the_right_adapter(
    monkeypatch: pytest.MonkeyPatch, spec: str, cls: type, model: str
) -> None:
    """'NAME:MODEL' picks the adapter; only the first colon separates name from model."""
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    provider = create_provider(spec)
    try:
        assert type(provider) is cls
        assert provider.model == model
        assert isinstance(provider, LLMProvider)
    finally:
        await provider.aclose()


@pytest.mark.parametrize("spec", ["gpt-4o", "openai:", ":gpt-4o", ""])
def test_malformed_spec_says_the_expected_shape(spec: str) -> None:
    """A spec without NAME:MODEL fails with an example and the accepted names."""
    with pytest.raises(ConfigurationError, match=r"NAME:MODEL.*'anthropic', 'ollama', 'openai'"):
        create_provider(spec)


def test_unknown_name_lists_the_accepted_names() -> None:
    """An unknown provider name is a ConfigurationError listing every accepted name."""
    with pytest.raises(ConfigurationError) as caught:
        create_provider("mistral:large")
    message = str(caught.value)
    assert "'mistral'" in message
    assert "accepted names: 'anthropic', 'ollama', 'openai'" in message
    assert isinstance(caught.value, UsageError)
    with pytest.raises(ConfigurationError, match="accepted names"):
        create_provider(ProviderConfig("mistral", "large"))


@pytest.mark.parametrize(
    ("name", "variable"), [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")]
)
def test_missing_key_is_a_one_line_hint_naming_the_variable(name: str, variable: str) -> None:
    """No api_key and no environment variable: the error says which variable to set."""
    with pytest.raises(ConfigurationError) as caught:
        create_provider(f"{name}:some-model")
    message = str(caught.value)
    assert variable in message
    assert "api_key=" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("name", "variable"), [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")]
)
async def test_key_from_environment_is_sent(
    monkeypatch: pytest.MonkeyPatch, model_server: ModelServer, name: str, variable: str
) -> None:
    """Without api_key the provider uses the SDK's usual environment variable."""
    monkeypatch.setenv(variable, "sk-from-the-environment-0123456789")
    model_server.script(Reply("ok"))
    provider = create_provider(ProviderConfig(name, "m", base_url=model_server.base_url_for(name)))
    try:
        await collect(provider)
    finally:
        await provider.aclose()
    assert model_server.requests[0].credential == "sk-from-the-environment-0123456789"


async def test_ollama_needs_no_key() -> None:
    """'ollama:MODEL' is created without any key configured."""
    provider = create_provider("ollama:llama3.1")
    try:
        assert provider.name == "ollama"
    finally:
        await provider.aclose()


async def test_registered_name_builds_custom_providers(restore_registry: None) -> None:
    """A registered factory serves 'NAME:MODEL' specs and ProviderConfigs with that name."""
    register_provider("echo", EchoProvider)
    assert "echo" in provider_names()

    provider = create_provider("echo:parrot")
    assert isinstance(provider, EchoProvider)
    assert provider.model == "parrot"
    assert content(await collect(provider)) == "Hello?"
    assert isinstance(create_provider(ProviderConfig("echo", "m")), EchoProvider)


async def test_registered_openai_compatible_name(restore_registry: None) -> None:
    """A name can map to the OpenAI adapter for a compatible server such as vLLM."""
    register_provider("vllm", OpenAIProvider)
    provider = create_provider(
        ProviderConfig("vllm", "qwen", api_key="none", base_url="http://127.0.0.1:9/v1")
    )
    try:
        assert isinstance(provider, OpenAIProvider)
        assert provider.name == "vllm"
    finally:
        await provider.aclose()


def test_registering_twice_needs_replace(restore_registry: None) -> None:
    """A taken name is refused unless replace=True."""
    register_provider("echo", EchoProvider)
    with pytest.raises(ConfigurationError, match="replace=True"):
        register_provider("echo", EchoProvider)
    register_provider("echo", EchoProvider, replace=True)
    with pytest.raises(ConfigurationError, match="already registered"):
        register_provider("openai", EchoProvider)


@pytest.mark.parametrize("name", ["", "a:b", " padded "])
def test_invalid_names_are_refused(name: str, restore_registry: None) -> None:
    """Names must be non-empty, colon-free and unpadded."""
    with pytest.raises(ConfigurationError):
        register_provider(name, EchoProvider)


def test_provider_objects_pass_through() -> None:
    """An object implementing the protocol is returned unchanged."""
    echo = EchoProvider(ProviderConfig("echo", "m"))
    assert create_provider(echo) is echo


def test_other_objects_are_refused_with_the_accepted_forms() -> None:
    """Anything else fails with what would have been accepted."""
    with pytest.raises(ConfigurationError, match=r"'NAME:MODEL'.*ProviderConfig.*LLMProvider"):
        create_provider(42)  # type: ignore[arg-type]


def test_parse_provider_spec_returns_a_config() -> None:
    """The parsed spec is a ProviderConfig with defaults for everything else."""
    config = parse_provider_spec("anthropic:claude-haiku")
    assert config == ProviderConfig("anthropic", "claude-haiku")
    assert config.api_key is None

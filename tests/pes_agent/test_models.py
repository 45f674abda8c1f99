"""The public models: positional construction, nested validation, secrets kept out of sight."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pes_agent import AgentProps, ProviderConfig, RunOptions, ThreadConfig, Usage


def test_provider_config_takes_provider_and_model_positionally_or_by_keyword() -> None:
    """ProviderConfig('openai', 'm') and ProviderConfig(provider=..., model=...) are equal."""
    assert ProviderConfig("openai", "m") == ProviderConfig(provider="openai", model="m")


def test_thread_config_with_a_nested_provider_config_round_trips_through_json() -> None:
    """A ThreadConfig holding a ProviderConfig validates back from its own JSON dump."""
    config = ThreadConfig(
        provider_config=ProviderConfig("anthropic", "claude", timeout_s=5.0), enabled_tools=["a"]
    )
    assert ThreadConfig.model_validate_json(config.model_dump_json()) == config
    assert ThreadConfig.model_validate({"provider_config": {"provider": "o", "model": "m"}})


def test_agent_props_validate_from_a_dict() -> None:
    """AgentProps can be validated from plain data, as a web handler would receive it."""
    props = AgentProps.model_validate({"query": "hi", "thread_id": "t", "options": {}})
    assert props == AgentProps("hi", "t", options=RunOptions())


def test_api_key_never_appears_in_repr_or_dump() -> None:
    """The key is a SecretStr: repr, str and JSON dumps hide it."""
    config = ProviderConfig("openai", "m", api_key="sk-test-SECRET-123")
    for text in (repr(config), str(config), config.model_dump_json()):
        assert "SECRET" not in text


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_retries": -1}, "max_retries"),
        ({"model": " "}, "must not be empty"),
    ],
)
def test_provider_config_rejects_bad_values(kwargs: dict[str, object], field: str) -> None:
    """A non-positive timeout, negative retries or a blank model is refused at once."""
    data: dict[str, object] = {"provider": "openai", "model": "m", **kwargs}
    with pytest.raises(ValidationError, match=field):
        ProviderConfig(**data)  # type: ignore[arg-type]


def test_usage_adds_up_field_by_field() -> None:
    """Adding two Usage values sums every counter."""
    total = Usage(input_tokens=1, output_tokens=2, total_tokens=3, requests=1) + Usage(
        input_tokens=10, output_tokens=20, total_tokens=30, reasoning_tokens=4, requests=1
    )
    assert total == Usage(
        input_tokens=11, output_tokens=22, total_tokens=33, reasoning_tokens=4, requests=2
    )

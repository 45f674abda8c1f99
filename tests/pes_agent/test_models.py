"""The public models: positional construction, nested validation, secrets kept out of sight."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from pes_agent import AgentProps, ProviderConfig, RunOptions, ThreadConfig, Usage
from pes_agent.config import LLMParams


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


@pytest.mark.parametrize(
    ("model", "field", "value"),
    [
        (RunOptions, "history_limit", False),
        (RunOptions, "history_limit", "5"),
        (RunOptions, "max_tool_calls", True),
        (RunOptions, "tool_timeout_s", "1.5"),
        (RunOptions, "max_revisions", "2"),
        (ThreadConfig, "history_limit", False),
        (ThreadConfig, "history_limit", "5"),
        (LLMParams, "max_tokens", "100"),
        (LLMParams, "temperature", True),
        (ProviderConfig, "max_retries", "3"),
        (ProviderConfig, "timeout_s", True),
    ],
)
def test_numbers_are_never_guessed_from_bools_or_strings(
    model: type[BaseModel], field: str, value: object
) -> None:
    """A bool, a string or a fraction where a count or a number of seconds goes is refused,
    naming the field, instead of being stored as 0, 1 or 5."""
    data: dict[str, object] = {field: value}
    if model is ProviderConfig:
        data.update(provider="openai", model="m")
    with pytest.raises(ValidationError, match=field):
        model(**data)


def test_a_whole_float_counts_as_an_int() -> None:
    """JSON's 5.0 is the integer 5: it is taken, as an int."""
    options = RunOptions.model_validate_json('{"history_limit": 5.0, "max_tool_calls": 2.0}')
    assert (options.history_limit, options.max_tool_calls) == (5, 2)
    assert isinstance(options.history_limit, int)


@pytest.mark.parametrize("model", [RunOptions, ThreadConfig, LLMParams, ProviderConfig])
def test_a_misspelt_field_is_refused_not_ignored(model: type[BaseModel]) -> None:
    """An unknown field (here `history_limt`) is an error naming it: ignored, the setting
    the caller meant would silently not apply."""
    data: dict[str, object] = {"history_limt": 3}
    if model is ProviderConfig:
        data.update(provider="openai", model="m")
    with pytest.raises(ValidationError, match="history_limt"):
        model(**data)

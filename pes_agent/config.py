"""Configuration: providers, threads, per-call options and a thread's saved state."""

from __future__ import annotations

import unicodedata
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from pes_agent.errors import ConfigurationError

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "AgentState",
    "LLMParams",
    "PlanningMode",
    "ProviderConfig",
    "Reevaluate",
    "RunOptions",
    "StateSaving",
    "ThreadConfig",
    "clean_api_key",
]

StateSaving = Literal["explicit", "implicit"]
#: When a running plan is re-evaluated (`pes_agent.execution.revision`): `"never"`, after a
#: wave with a failed call (`"on_failure"`), or after every wave (`"each_wave"`).
Reevaluate = Literal["never", "on_failure", "each_wave"]
#: How the default planner asks for the plan: `"structured"` through the provider's structured
#: output (a JSON Schema), `"text"` through the prompt alone, `"auto"` structured where the
#: provider supports it and text otherwise (`pes_agent.planning.structured`).
PlanningMode = Literal["auto", "structured", "text"]


#: The system prompt of an agent created without one.
DEFAULT_SYSTEM_PROMPT = "You are a helpful, precise assistant."


def clean_api_key(key: str, *, source: str) -> str:
    """`key` without surrounding whitespace (a pasted key often ends in a newline).

    Raises `ConfigurationError` for a key with a control or non-ASCII character inside: it
    cannot go into an HTTP header, and httpx would quote it in its error. The message names
    `source` (e.g. "ProviderConfig.api_key" or "the OPENAI_API_KEY environment variable") and
    never any part of the key.
    """
    key = key.strip()
    if key.isascii() and key.isprintable():
        return key
    if any(unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") for char in key):
        problem = "a control character (a line break, tab or other invisible character)"
    else:
        problem = "a non-ASCII character (API keys are plain ASCII)"
    raise ConfigurationError(
        f"the API key in {source} contains {problem} inside it; "
        "copy the key again, exactly as the provider shows it"
    )


class ProviderConfig(BaseModel):
    """Which model to call and how: `ProviderConfig("openai", "gpt-4o-mini", api_key=...)`.

    `provider` is `"openai"`, `"anthropic"`, `"ollama"` or a name registered with
    `register_provider`. Without `api_key`/`base_url` the SDKs' usual environment variables
    (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `OPENAI_BASE_URL`, ...) apply. The key is a
    `SecretStr`: it never appears in `repr`, logs or observations. Whitespace around it is
    dropped; a key with a control character inside is a `ConfigurationError`.
    """

    # A validation error must not quote its input: the input may hold the API key.
    model_config = ConfigDict(frozen=True, hide_input_in_errors=True)

    provider: str
    model: str
    api_key: SecretStr | None = None
    base_url: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 3
    max_concurrency: int = 16
    options: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, provider: str | None = None, model: str | None = None, /, **data: Any):
        # Positional or keyword; pydantic also calls this with keywords when it validates a
        # ProviderConfig nested in another model (ThreadConfig, RunOptions).
        if provider is not None:
            data["provider"] = provider
        if model is not None:
            data["model"] = model
        key = data.get("api_key")
        if isinstance(key, SecretStr):
            key = key.get_secret_value()
        if isinstance(key, str):
            # Checked here rather than in a validator, so that it raises a ConfigurationError
            # (pydantic turns a validator's error into a ValidationError).
            data["api_key"] = clean_api_key(key, source="ProviderConfig.api_key") or None
        super().__init__(**data)

    @field_validator("provider", "model")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty, e.g. ProviderConfig('openai', 'gpt-4o-mini')")
        return value

    @field_validator("timeout_s")
    @classmethod
    def _positive_timeout(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("timeout_s must be > 0 seconds")
        return value

    @field_validator("max_retries")
    @classmethod
    def _retries(cls, value: int) -> int:
        if value < 0:
            raise ValueError("max_retries must be >= 0 (0 disables retries)")
        return value

    @field_validator("max_concurrency")
    @classmethod
    def _concurrency(cls, value: int) -> int:
        if value < 1:
            raise ValueError("max_concurrency must be >= 1")
        return value


class LLMParams(BaseModel):
    """Sampling parameters passed to the model for one call."""

    model_config = ConfigDict(frozen=True)

    temperature: float | None = None
    max_tokens: int | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class ThreadConfig(BaseModel):
    """Per-thread settings; any field left `None` falls back to the agent's default.

    `enabled_tools=None` enables every registered tool; `[]` enables none.
    `require_approval` names tools whose calls on this thread wait for a person's approval,
    on top of the agent's rules (it can add gates, never remove them).
    """

    # A nested ProviderConfig's validation error must not quote the input (it may hold a key).
    model_config = ConfigDict(hide_input_in_errors=True)

    provider_config: ProviderConfig | None = None
    enabled_tools: list[str] | None = None
    history_limit: int | None = None
    system_prompt: str | None = None
    require_approval: list[str] | None = None

    @field_validator("history_limit")
    @classmethod
    def _history(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError("history_limit must be >= 0")
        return value

    @field_validator("require_approval")
    @classmethod
    def _gated(cls, value: list[str] | None) -> list[str] | None:
        return _tool_names(value, "ThreadConfig.require_approval")


def _tool_names(value: list[str] | None, where: str) -> list[str] | None:
    if value is not None and not all(name.strip() for name in value):
        raise ValueError(f"{where} must name tools, e.g. ['transfer_money'], not empty strings")
    return value


class AgentState(BaseModel):
    """Application data saved per thread; `version` increases on every save."""

    data: dict[str, Any] = Field(default_factory=dict)
    version: int = 0


class RunOptions(BaseModel):
    """Settings for one `process()` call; `None` keeps the thread's or agent's setting.

    Each field replaces the thread's or agent's value for this call, except `enabled_tools`,
    which can only narrow the thread's tools (a tool the thread does not enable never runs).
    """

    # A nested ProviderConfig's validation error must not quote the input (it may hold a key).
    model_config = ConfigDict(hide_input_in_errors=True)

    provider_config: ProviderConfig | None = None
    system_prompt: str | None = None
    llm_params: LLMParams | None = None
    enabled_tools: list[str] | None = None
    history_limit: int | None = None
    max_tool_calls: int | None = None
    tool_timeout_s: float | None = None
    #: `create_agent(reevaluate=..., max_revisions=...)` for this call.
    reevaluate: Reevaluate | None = None
    max_revisions: int | None = None
    #: The default planner's `planning_mode` for this call (`LLMPlanner`; other planners
    #: ignore it).
    planning_mode: PlanningMode | None = None
    #: Tools whose calls wait for a person's approval in this call, on top of the agent's and
    #: the thread's rules (it can add gates, never remove them).
    require_approval: list[str] | None = None

    @field_validator("require_approval")
    @classmethod
    def _gated(cls, value: list[str] | None) -> list[str] | None:
        return _tool_names(value, "RunOptions.require_approval")

    @field_validator("history_limit")
    @classmethod
    def _history(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError("history_limit must be >= 0 (0: no history)")
        return value

    @field_validator("max_tool_calls")
    @classmethod
    def _max_calls(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError("max_tool_calls must be >= 1")
        return value

    @field_validator("max_revisions")
    @classmethod
    def _revisions(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError("max_revisions must be >= 0 (0: the plan is never revised)")
        return value

    @field_validator("tool_timeout_s")
    @classmethod
    def _timeout(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("tool_timeout_s must be > 0 seconds")
        return value

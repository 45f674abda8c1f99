"""Configuration: providers, threads, per-call options and a thread's saved state."""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from pes_agent._patterns import BLANK, NOT_BLANK
from pes_agent.errors import ConfigurationError
from pes_agent.usage import UsageLimits

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

_NOT_BLANK = re.compile(NOT_BLANK)
#: A name (of a provider, model or tool): a string holding more than white space. The models'
#: validators refuse others, saying how to fix it; the JSON Schema states it as a pattern.
_Name = Annotated[str, Field(json_schema_extra={"pattern": NOT_BLANK})]


def _whole(value: Any) -> Any:
    """`value` as an int when it is a float without a fractional part: JSON's `5.0` is the
    integer 5 (and JSON Schema says so). The int fields are strict otherwise: `true` or `"5"`
    is a mistake to report, not a number to guess."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


#: The keys `clean_api_key` accepts, as a pattern for JSON Schemas: printable ASCII, perhaps
#: with white space around it.
_API_KEY = f"^[{BLANK}]*[\\x20-\\x7e]*[{BLANK}]*$"


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

    # A validation error must not quote its input: the input may hold the API key. A
    # misspelt field is refused rather than ignored.
    model_config = ConfigDict(frozen=True, hide_input_in_errors=True, extra="forbid")

    provider: _Name
    model: _Name
    api_key: Annotated[SecretStr, Field(json_schema_extra={"pattern": _API_KEY})] | None = None
    base_url: str | None = None
    timeout_s: float = Field(default=60.0, gt=0, strict=True)
    #: 0 disables retries.
    max_retries: int = Field(default=3, ge=0, strict=True)
    max_concurrency: int = Field(default=16, ge=1, strict=True)
    options: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, provider: str | None = None, model: str | None = None, /, **data: Any):
        """Name the provider and model; the other settings go by keyword.

        Args:
            provider: `"openai"`, `"anthropic"`, `"ollama"` or a registered name.
            model: The model's name at that provider, e.g. `"gpt-4o-mini"`.
            **data: `api_key`, `base_url`, `timeout_s`, `max_retries`, `max_concurrency`
                (calls at once) and `options` (passed to the SDK), by name.

        Raises:
            ConfigurationError: The API key holds a control character.
            pydantic.ValidationError: A field is missing, misspelt or out of range (the
                error never quotes the input, which may hold the key).
        """
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
        if _NOT_BLANK.search(value) is None:
            raise ValueError("must not be empty, e.g. ProviderConfig('openai', 'gpt-4o-mini')")
        return value

    _counts = field_validator("max_retries", "max_concurrency", mode="before")(_whole)


class LLMParams(BaseModel):
    """Sampling parameters passed to the model for one call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float | None = Field(default=None, strict=True)
    max_tokens: int | None = Field(default=None, strict=True)
    extra: dict[str, Any] = Field(default_factory=dict)

    _counts = field_validator("max_tokens", mode="before")(_whole)


class ThreadConfig(BaseModel):
    """Per-thread settings; any field left `None` falls back to the agent's default.

    `enabled_tools=None` enables every registered tool; `[]` enables none.
    `require_approval` names tools whose calls on this thread wait for a person's approval,
    on top of the agent's rules (it can add gates, never remove them); `usage_limits` can
    likewise only tighten the agent's `UsageLimits`.
    """

    # A nested ProviderConfig's validation error must not quote the input (it may hold a key).
    # A misspelt field is refused rather than ignored; numbers are strict (`false` or "5" as
    # a history limit is a mistake).
    model_config = ConfigDict(hide_input_in_errors=True, extra="forbid")

    provider_config: ProviderConfig | None = None
    enabled_tools: list[str] | None = None
    #: How many earlier messages the model sees (0: none).
    history_limit: int | None = Field(default=None, ge=0, strict=True)
    system_prompt: str | None = None
    require_approval: list[_Name] | None = None
    #: The most a run on this thread may spend, on top of the agent's limits (it can lower a
    #: limit, never raise it).
    usage_limits: UsageLimits | None = None

    _counts = field_validator("history_limit", mode="before")(_whole)

    @field_validator("require_approval")
    @classmethod
    def _gated(cls, value: list[str] | None) -> list[str] | None:
        return _tool_names(value, "ThreadConfig.require_approval")


def _tool_names(value: list[str] | None, where: str) -> list[str] | None:
    if value is not None and not all(_NOT_BLANK.search(name) for name in value):
        raise ValueError(f"{where} must name tools, e.g. ['transfer_money'], not empty strings")
    return value


class AgentState(BaseModel):
    """Application data saved per thread; `version` increases on every save."""

    data: dict[str, Any] = Field(default_factory=dict)
    version: int = 0


class RunOptions(BaseModel):
    """Settings for one `process()` call; `None` keeps the thread's or agent's setting.

    Each field replaces the thread's or agent's value for this call, except `enabled_tools`,
    which can only narrow the thread's tools (a tool the thread does not enable never runs),
    and `require_approval` and `usage_limits`, which can only add gates and lower limits.
    """

    # A nested ProviderConfig's validation error must not quote the input (it may hold a key).
    # A misspelt option is refused rather than ignored, and numbers are taken as numbers only.
    model_config = ConfigDict(hide_input_in_errors=True, extra="forbid")

    provider_config: ProviderConfig | None = None
    system_prompt: str | None = None
    llm_params: LLMParams | None = None
    enabled_tools: list[str] | None = None
    #: How many earlier messages the model sees (0: none).
    history_limit: int | None = Field(default=None, ge=0, strict=True)
    max_tool_calls: int | None = Field(default=None, ge=1, strict=True)
    tool_timeout_s: float | None = Field(default=None, gt=0, strict=True)
    #: `create_agent(reevaluate=..., max_revisions=...)` for this call (0: the plan is never
    #: revised).
    reevaluate: Reevaluate | None = None
    max_revisions: int | None = Field(default=None, ge=0, strict=True)
    #: The default planner's `planning_mode` for this call (`LLMPlanner`; other planners
    #: ignore it).
    planning_mode: PlanningMode | None = None
    #: Tools whose calls wait for a person's approval in this call, on top of the agent's and
    #: the thread's rules (it can add gates, never remove them).
    require_approval: list[_Name] | None = None
    #: The most this call may spend, on top of the agent's and the thread's limits (it can
    #: lower a limit, never raise it).
    usage_limits: UsageLimits | None = None

    _counts = field_validator("history_limit", "max_tool_calls", "max_revisions", mode="before")(
        _whole
    )

    @field_validator("require_approval")
    @classmethod
    def _gated(cls, value: list[str] | None) -> list[str] | None:
        return _tool_names(value, "RunOptions.require_approval")

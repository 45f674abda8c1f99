"""Token accounting for model calls and whole runs, and the limits a run may not cross."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pes_agent.errors import UsageLimitExceeded

__all__ = ["Usage", "UsageLimits"]

LimitName = Literal["requests", "input_tokens", "output_tokens", "total_tokens", "tool_calls"]
_TOKEN_LIMITS: Final[tuple[LimitName, ...]] = ("input_tokens", "output_tokens", "total_tokens")
# A limit as the OpenAPI document of the HTTP service shows it: a whole number of 0 or more.
_Limit = Annotated[int, Field(ge=0, strict=True)]


class Usage(BaseModel):
    """Tokens used by one model call or, summed, by a whole run.

    `input_tokens` and `output_tokens` are those of the answers the run used. When a provider
    retries a call whose stream had already begun (a dropped connection, an overloaded server
    mid-answer), the failed attempt cost tokens too: they are `retried_input_tokens` and
    `retried_output_tokens`, kept apart so that the answer's own counts stay exact. A cut
    stream reports no usage, so they are estimated: the prompt as the successful attempt's
    (it is the same request), the output from what had streamed (one token per streamed piece,
    at least one per four characters). Attempts refused before they streamed (429, 5xx) cost
    nothing and count nothing.

    `total_tokens` is everything the calls cost: input plus output plus the retried tokens.
    Cache and reasoning counts are broken out of input and output where the provider reports
    them (they are not added again).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    retried_input_tokens: int = 0
    retried_output_tokens: int = 0
    requests: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            retried_input_tokens=self.retried_input_tokens + other.retried_input_tokens,
            retried_output_tokens=self.retried_output_tokens + other.retried_output_tokens,
            requests=self.requests + other.requests,
        )


class UsageLimits(BaseModel):
    """The most a run may spend: model calls, tokens and tool calls (None: no limit).

    ```python
    agent = create_agent(provider=..., usage_limits=UsageLimits(total_tokens=20_000))
    await agent.process(
        AgentProps("...", "t1", options=RunOptions(usage_limits=UsageLimits(tool_calls=5)))
    )
    ```

    Limits set on the agent, on a thread (`ThreadConfig.usage_limits`) and on one call
    (`RunOptions.usage_limits`) add up to the tightest of each: a thread or a call can lower
    a limit, never raise it (`tightened`).

    What is counted, for the run as a whole:
    - `requests`: model calls (planning, its repair, re-evaluations, language steps,
      synthesis; for an ECS entity with a `UsageLimitsComponent`, every model call a system
      makes for it). A provider's own retries of one call are attempts of that call, not
      requests.
    - `input_tokens` / `output_tokens`: the answers' tokens plus those of attempts that were
      retried after they had started streaming (`Usage.retried_input_tokens`, ...).
    - `total_tokens`: `Usage.total_tokens`, which includes the retried attempts.
    - `tool_calls`: tool calls started (language steps are model calls, counted as requests).

    When the checks run: before each model call (a call the run has no room for is not made:
    `requests` reached, or the tokens used already at a token limit), after each model call
    (its tokens may have crossed a token limit) and before each tool call. Reaching a limit
    exactly is fine; a run that would cross one stops with `status="error"` and
    `metadata.error` naming the limit and the figures (`"total_tokens: 4,120 used, limit
    4,000"`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: _Limit | None = None
    input_tokens: _Limit | None = None
    output_tokens: _Limit | None = None
    total_tokens: _Limit | None = None
    tool_calls: _Limit | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _a_count(cls, value: Any, info: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON's 5.0 is the integer 5 (and JSON Schema says so)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"{info.field_name} must be a whole number of 0 or more, or None for no limit "
                f"(got {value!r}), e.g. UsageLimits({info.field_name}=1000)"
            )
        return value

    @property
    def unlimited(self) -> bool:
        """Whether no limit is set at all (then nothing needs checking)."""
        return all(getattr(self, name) is None for name in type(self).model_fields)

    def tightened(self, other: UsageLimits | None) -> UsageLimits:
        """These limits and `other`'s together: the lower of each where both set one.

        Args:
            other: Limits from a narrower scope (a thread, a call), or None.

        Returns:
            Limits no wider than either.
        """
        if other is None or other.unlimited:
            return self
        if self.unlimited:
            return other
        merged: dict[str, int | None] = {}
        for name in type(self).model_fields:
            mine, theirs = getattr(self, name), getattr(other, name)
            merged[name] = theirs if mine is None else mine if theirs is None else min(mine, theirs)
        return UsageLimits(**merged)

    def check_before_request(self, usage: Usage, requests: int) -> None:
        """Raise if the run has no room for another model call.

        Args:
            usage: What the run's model calls used so far.
            requests: The model calls it made so far.

        Raises:
            UsageLimitExceeded: `requests` is at its limit, or a token count is at its limit
                already (another call would cross it).
        """
        if self.requests is not None and requests >= self.requests:
            raise _exceeded("requests", requests, self.requests, "another model call")
        for name in _TOKEN_LIMITS:
            limit = getattr(self, name)
            if limit is not None and (used := tokens_used(usage, name)) >= limit:
                raise _exceeded(name, used, limit, "another model call")

    def check_tokens(self, usage: Usage) -> None:
        """Raise if the tokens used so far cross a token limit.

        Args:
            usage: What the run's model calls used so far, the latest included.

        Raises:
            UsageLimitExceeded: A token count is above its limit.
        """
        for name in _TOKEN_LIMITS:
            limit = getattr(self, name)
            if limit is not None and (used := tokens_used(usage, name)) > limit:
                raise _exceeded(name, used, limit)

    def check_before_tool_call(self, tool_calls: int) -> None:
        """Raise if the run has no room for another tool call.

        Args:
            tool_calls: The tool calls it started so far.

        Raises:
            UsageLimitExceeded: `tool_calls` is at its limit.
        """
        if self.tool_calls is not None and tool_calls >= self.tool_calls:
            raise _exceeded("tool_calls", tool_calls, self.tool_calls, "another tool call")


def tokens_used(usage: Usage, name: LimitName) -> int:
    """The tokens a token limit counts: the answers' plus retried attempts' (see UsageLimits)."""
    if name == "input_tokens":
        return usage.input_tokens + usage.retried_input_tokens
    if name == "output_tokens":
        return usage.output_tokens + usage.retried_output_tokens
    return usage.total_tokens


def _exceeded(name: LimitName, used: int, limit: int, needed: str = "") -> UsageLimitExceeded:
    message = f"{name}: {used:,} used, limit {limit:,}"
    if needed:
        message += f"; the run needs {needed}"
    return UsageLimitExceeded(message, limit=name, used=used, allowed=limit)

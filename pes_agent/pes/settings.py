"""A run's settings, resolved once: the agent's defaults ← the thread's config ← the call's options.

`AgentDefaults` is what `create_agent(...)` was given; `RunSettings.resolve` lays a thread's
`ThreadConfig` and a call's `RunOptions` over it, field by field, the first one set winning.
Nothing after that reads `RunOptions` or `ThreadConfig` for a setting: the run's components
and resources are built from the one frozen `RunSettings`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from pes_agent.approvals.gate import ApprovalHandler, ApprovalPredicate
from pes_agent.config import (
    LLMParams,
    ProviderConfig,
    Reevaluate,
    RunOptions,
    StateSaving,
    ThreadConfig,
)
from pes_agent.observing.logs import get_logger
from pes_agent.usage import UsageLimits

__all__ = ["AgentDefaults", "RunSettings", "resolve_history_limit"]

# The agent's logger: the warning below is about the agent's configuration, not a phase.
_log = get_logger("pes_agent.agent")

T = TypeVar("T")

# A call without options: every field None, so the thread's and the agent's settings hold.
_NO_OPTIONS = RunOptions()


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentDefaults:
    """The agent's settings for every run, as `create_agent(...)` checked them.

    A thread's `ThreadConfig` and a call's `RunOptions` override some of them per run
    (`RunSettings.resolve`); `state_saving`, `max_concurrency`, the approval predicate,
    handler and timeout are the agent's alone.
    """

    system_prompt: str
    history_limit: int
    state_saving: StateSaving
    max_concurrency: int
    tool_timeout_s: float
    max_tool_calls: int
    llm_params: LLMParams
    reevaluate: Reevaluate = "never"
    max_revisions: int = 2
    require_approval: frozenset[str] = frozenset()
    approval_predicate: ApprovalPredicate | None = None
    approval_handler: ApprovalHandler | None = None
    approval_timeout_s: float | None = None
    usage_limits: UsageLimits | None = None


# A NamedTuple rather than a frozen dataclass: as immutable, and built on every run's hot path,
# where a frozen dataclass's __init__ costs ~2 us more for these eleven fields.
class RunSettings(NamedTuple):
    """One run's settings: the agent's defaults, the thread's config and the call's options
    laid over each other (`resolve`), the call's winning."""

    system_prompt: str
    history_limit: int
    #: The thread's or call's provider; None: the agent's own.
    provider_config: ProviderConfig | None
    llm_params: LLMParams
    enabled_tools: frozenset[str]
    max_tool_calls: int
    tool_timeout_s: float
    max_concurrency: int
    reevaluate: Reevaluate
    max_revisions: int
    #: The tools gated by name: the agent's, the thread's and the call's added up.
    require_approval: frozenset[str]
    #: The tightest of the agent's, the thread's and the call's limits; None: no limit.
    usage_limits: UsageLimits | None

    @classmethod
    def resolve(
        cls,
        defaults: AgentDefaults,
        thread: ThreadConfig,
        options: RunOptions | None,
        registered: Sequence[str],
    ) -> RunSettings:
        """The settings of a run on a thread configured with `thread`, called with `options`,
        on an agent whose tools are `registered` (enabled names not among them are dropped,
        with a warning)."""
        call = options if options is not None else _NO_OPTIONS
        return cls(
            system_prompt=_first(call.system_prompt, thread.system_prompt, defaults.system_prompt),
            history_limit=resolve_history_limit(defaults, thread, options),
            provider_config=call.provider_config or thread.provider_config,
            llm_params=call.llm_params or defaults.llm_params,
            enabled_tools=_enabled_tools(thread.enabled_tools, call.enabled_tools, registered),
            max_tool_calls=_first(call.max_tool_calls, defaults.max_tool_calls),
            tool_timeout_s=_first(call.tool_timeout_s, defaults.tool_timeout_s),
            max_concurrency=defaults.max_concurrency,
            reevaluate=_first(call.reevaluate, defaults.reevaluate),
            max_revisions=_first(call.max_revisions, defaults.max_revisions),
            require_approval=defaults.require_approval.union(
                thread.require_approval or (), call.require_approval or ()
            ),
            usage_limits=_tightest(defaults.usage_limits, thread.usage_limits, call.usage_limits),
        )


def resolve_history_limit(
    defaults: AgentDefaults, thread: ThreadConfig | None, options: RunOptions | None
) -> int:
    """How many of the newest messages a run reads (`RunSettings.history_limit`): the call's
    number, else the thread's (`thread` None: never configured), else the agent's. On its own,
    so that a store can apply it to the config it reads in the same go (`load_snapshot`)."""
    call = options.history_limit if options is not None else None
    if call is not None:
        return call
    if thread is not None and thread.history_limit is not None:
        return thread.history_limit
    return defaults.history_limit


def _first(*values: T | None) -> T:
    for value in values:
        if value is not None:
            return value
    raise AssertionError("the last fallback is never None")


def _tightest(*scopes: UsageLimits | None) -> UsageLimits | None:
    """The scopes' limits together, each the lowest set (None when none sets any)."""
    merged: UsageLimits | None = None
    for limits in scopes:
        if limits is None or limits.unlimited:
            continue
        merged = limits if merged is None else merged.tightened(limits)
    return merged


@functools.lru_cache(maxsize=16)
def _every_tool(registered: tuple[str, ...]) -> frozenset[str]:
    """Every registered tool, as one frozenset shared by the runs that enable them all (most
    runs): not one more set per run in flight."""
    return frozenset(registered)


def _enabled_tools(
    allowed: Sequence[str] | None, requested: Sequence[str] | None, registered: Sequence[str]
) -> frozenset[str]:
    if allowed is None and requested is None:
        return _every_tool(tuple(registered))
    # The thread decides what may run; a per-call list can only narrow that down.
    enabled = frozenset(registered if allowed is None else allowed)
    if requested is not None:
        enabled = enabled & frozenset(requested)
    unknown = enabled.difference(registered)
    if unknown:
        # Most likely a typo in a ThreadConfig; the model is never shown these names.
        _log.warning(
            "enabled_tools_not_registered", tools=sorted(unknown), registered=list(registered)
        )
        enabled = enabled - unknown
    return enabled

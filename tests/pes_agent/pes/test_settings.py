"""A run's settings: the agent's defaults, under the thread's config, under the call's options."""

from __future__ import annotations

import pytest

from pes_agent import LLMParams, ProviderConfig, RunOptions, ThreadConfig
from pes_agent.pes.settings import AgentDefaults, RunSettings

DEFAULTS = AgentDefaults(
    system_prompt="agent prompt",
    history_limit=20,
    state_saving="explicit",
    max_concurrency=8,
    tool_timeout_s=30.0,
    max_tool_calls=32,
    llm_params=LLMParams(temperature=0.1),
    require_approval=frozenset({"pay"}),
)
TOOLS = ("add", "pay", "search")


def test_without_thread_config_or_options_a_run_has_the_agents_defaults() -> None:
    """Nothing set on the thread or the call leaves every setting at the agent's value."""
    settings = RunSettings.resolve(DEFAULTS, ThreadConfig(), None, TOOLS)
    assert settings.system_prompt == "agent prompt"
    assert settings.history_limit == 20
    assert settings.provider_config is None
    assert settings.llm_params == LLMParams(temperature=0.1)
    assert settings.enabled_tools == frozenset(TOOLS)
    assert (settings.max_tool_calls, settings.tool_timeout_s) == (32, 30.0)
    assert (settings.reevaluate, settings.max_revisions) == ("never", 2)
    assert settings.require_approval == frozenset({"pay"})


def test_the_threads_config_wins_over_the_agent_and_the_calls_options_over_both() -> None:
    """Each setting comes from the call if it sets it, else the thread, else the agent."""
    thread = ThreadConfig(
        system_prompt="thread prompt",
        history_limit=5,
        provider_config=ProviderConfig(provider="ollama", model="thread-model"),
    )
    settings = RunSettings.resolve(DEFAULTS, thread, RunOptions(history_limit=0), TOOLS)
    assert settings.system_prompt == "thread prompt"
    assert settings.history_limit == 0
    assert settings.provider_config == ProviderConfig(provider="ollama", model="thread-model")
    options = RunOptions(
        system_prompt="call prompt",
        provider_config=ProviderConfig(provider="ollama", model="call-model"),
        llm_params=LLMParams(max_tokens=9),
        max_tool_calls=3,
        tool_timeout_s=1.5,
        reevaluate="each_wave",
        max_revisions=0,
    )
    settings = RunSettings.resolve(DEFAULTS, thread, options, TOOLS)
    assert settings.system_prompt == "call prompt"
    assert settings.history_limit == 5
    assert settings.provider_config == ProviderConfig(provider="ollama", model="call-model")
    assert settings.llm_params == LLMParams(max_tokens=9)
    assert (settings.max_tool_calls, settings.tool_timeout_s) == (3, 1.5)
    assert (settings.reevaluate, settings.max_revisions) == ("each_wave", 0)


def test_a_calls_enabled_tools_narrow_the_threads_and_never_widen_them() -> None:
    """A call can only pick among the tools its thread enables."""
    thread = ThreadConfig(enabled_tools=["add", "search"])
    options = RunOptions(enabled_tools=["add", "pay"])
    assert RunSettings.resolve(DEFAULTS, thread, options, TOOLS).enabled_tools == {"add"}


def test_gates_by_name_add_up_from_the_agent_the_thread_and_the_call() -> None:
    """The thread's and the call's require_approval add gates to the agent's; none removes one."""
    thread = ThreadConfig(require_approval=["search"])
    options = RunOptions(require_approval=["add"])
    settings = RunSettings.resolve(DEFAULTS, thread, options, TOOLS)
    assert settings.require_approval == {"pay", "search", "add"}


def test_run_settings_cannot_change_once_resolved() -> None:
    """The settings are frozen: a phase reads them, it cannot alter the run's."""
    settings = RunSettings.resolve(DEFAULTS, ThreadConfig(), None, TOOLS)
    with pytest.raises(AttributeError):
        settings.max_tool_calls = 99  # type: ignore[misc]

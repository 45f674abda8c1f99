"""What a run sees of its thread: its own state copy, and a config no run can change for another."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pes_agent import (
    AgentProps,
    AgentState,
    ThreadConfig,
    ToolContext,
    create_agent,
    tool,
)
from pes_agent.providers.base import LLMRequest
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines
from pes_agent.threads.state import ThreadContext


def test_a_runs_empty_config_cannot_be_changed_for_the_other_runs() -> None:
    """Runs on threads never configured share one empty config, which refuses any change;
    the state of each is its own."""
    first = ThreadContext.for_run(None, None)
    second = ThreadContext.for_run(None, None)
    assert first.config == second.config
    assert first.config.model_dump() == ThreadConfig().model_dump()
    assert not first.configured
    with pytest.raises(ValidationError, match="frozen"):
        first.config.system_prompt = "only mine"
    assert second.config.system_prompt is None
    first.state.data["mine"] = 1
    assert second.state.data == {}
    assert first.state is not second.state


def test_a_loaded_context_is_the_callers_to_change() -> None:
    """`ThreadContext.of` (what `load_context` returns) still gives a fresh, changeable empty
    config, equal to `ThreadConfig()`."""
    context = ThreadContext.of(None, None)
    assert type(context.config) is ThreadConfig
    assert context.config == ThreadConfig()
    context.config.system_prompt = "mine"
    assert ThreadContext.of(None, None).config.system_prompt is None
    configured = ThreadConfig(system_prompt="own")
    assert ThreadContext.for_run(configured, AgentState()).config is configured


@tool
def remember(fact: str, context: ToolContext) -> str:
    """Remember a fact in the thread state."""
    assert context.state is not None
    context.state.data[fact] = context.state.data.get(fact, 0) + 1
    return "noted"


async def test_one_runs_state_change_reaches_no_other_thread() -> None:
    """A tool changing its run's state on one unconfigured thread leaves the state other
    threads' runs see, and what they save, untouched."""

    def answer(request: LLMRequest) -> str:
        if request.phase == "planning":
            fact = request.thread_id
            return plan_lines(plan_call(1, "remember", fact=fact), intent="remember")
        return "Noted."

    model = ScriptedProvider([answer], repeat=True)
    async with create_agent(
        provider=model, tools=[remember], storage="memory", state_saving="implicit"
    ) as agent:
        for thread in ("a", "b", "c"):
            result = await agent.process(AgentProps("remember", thread))
            assert result.metadata.status == "success"
        for thread in ("a", "b", "c"):
            saved = await agent.state.get_agent_state(thread)
            assert saved is not None
            assert saved.data == {thread: 1}

"""Usage limits: a run that would cross one stops at that point, as an error, with nothing saved."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from pes_agent import (
    AgentCore,
    AgentFinalResponse,
    AgentProps,
    Observation,
    ObservationType,
    RunOptions,
    ThreadConfig,
    UsageError,
    UsageLimitExceeded,
    UsageLimits,
)
from pes_agent.execution.executors import ConcurrentExecutor
from pes_agent.planning.plan import ParsedToolCall
from pes_agent.protocols import ExecutionContext
from pes_agent.testing import ScriptedProvider, plan_call, plan_lines
from pes_agent.tools.base import ToolResult
from pes_agent.usage import Usage
from tests.helpers import AgentBuilder

from .conftest import Events

ANSWER = "All done."
TWO_ADDS = plan_lines(plan_call(1, "add", a=1, b=2), plan_call(2, "add", a=3, b=4), intent="add")


async def _observations(agent: AgentCore, thread_id: str = "t1") -> list[Observation]:
    return await agent.observations.get_observations(thread_id)


def _usage_of_calls(seen: list[Observation]) -> list[Usage]:
    return [
        Usage.model_validate(o.content["usage"])
        for o in seen
        if o.type is ObservationType.LLM_STREAM_METADATA
    ]


async def _stopped(agent: AgentCore, result: AgentFinalResponse, limit: str) -> Observation:
    """Check the run ended as a budget error that saved nothing; its ERROR observation."""
    assert result.metadata.status == "error"
    assert result.metadata.error is not None
    assert result.metadata.error.startswith(f"usage limit reached: {limit}: ")
    assert await agent.conversation.get_messages("t1") == []
    errors = [o for o in await _observations(agent) if o.type is ObservationType.ERROR]
    assert len(errors) == 1
    (error,) = errors
    assert (error.title, error.content["phase"], error.content["limit"]) == (
        "Usage limit reached",
        "budget",
        limit,
    )
    return error


async def test_requests_stop_the_run_before_the_call_past_the_limit(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """With requests=1 the plan runs, the synthesis call is never made, and the run ends in
    error naming the limit, with nothing saved."""
    model = ScriptedProvider([TWO_ADDS, ANSWER])
    agent = build_agent(provider=model, tools=tools, usage_limits=UsageLimits(requests=1))
    result = await agent.process(AgentProps("add", "t1"))
    error = await _stopped(agent, result, "requests")
    assert result.metadata.error == (
        "usage limit reached: requests: 1 used, limit 1; the run needs another model call"
    )
    assert (error.content["used"], error.content["allowed"]) == (1, 1)
    assert len(model.requests) == 1
    assert result.metadata.llm_calls == 1
    assert events.log == ["add:1+2", "add:3+4"]


async def test_reaching_each_limit_exactly_is_fine(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A run whose use equals every limit (measured on an unlimited run) succeeds and is
    saved."""
    model = ScriptedProvider([TWO_ADDS, ANSWER], repeat=True)
    agent = build_agent(provider=model, tools=tools)
    free = await agent.process(AgentProps("add", "t0"))
    usage = free.metadata.usage
    exact = UsageLimits(
        requests=2,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        tool_calls=2,
    )
    result = await agent.process(AgentProps("add", "t1", options=RunOptions(usage_limits=exact)))
    assert result.metadata.status == "success"
    assert result.metadata.usage == usage
    assert len(await agent.conversation.get_messages("t1")) == 2


@pytest.mark.parametrize("limit", ["input_tokens", "output_tokens", "total_tokens"])
async def test_tokens_past_a_limit_stop_the_run_after_the_call_that_crossed_it(
    build_agent: AgentBuilder, tools: list[Any], events: Events, limit: str
) -> None:
    """A limit one token below what the planning call used stops the run right after it:
    no tool runs, no synthesis call is made, and the message gives the figures."""
    probe = ScriptedProvider([TWO_ADDS])
    probe_agent = build_agent(provider=probe, tools=tools)
    await probe_agent.process(AgentProps("add", "probe"))
    planning = _usage_of_calls(await _observations(probe_agent, "probe"))[0]
    used = getattr(planning, limit)
    events.log.clear()

    model = ScriptedProvider([TWO_ADDS, ANSWER])
    limits = UsageLimits(**{limit: used - 1})
    agent = build_agent(provider=model, tools=tools, usage_limits=limits)
    result = await agent.process(AgentProps("add", "t1"))
    error = await _stopped(agent, result, limit)
    assert (
        result.metadata.error == f"usage limit reached: {limit}: {used:,} used, limit {used - 1:,}"
    )
    assert (error.content["used"], error.content["allowed"]) == (used, used - 1)
    assert len(model.requests) == 1
    assert events.log == []
    assert getattr(result.metadata.usage, limit) == used


async def test_tokens_at_a_limit_stop_the_run_before_the_next_call(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """Tokens exactly at a limit are fine, but the next call would cross it: it is not made."""
    probe = ScriptedProvider([TWO_ADDS])
    probe_agent = build_agent(provider=probe, tools=tools)
    await probe_agent.process(AgentProps("add", "probe"))
    planning = _usage_of_calls(await _observations(probe_agent, "probe"))[0]

    model = ScriptedProvider([TWO_ADDS, ANSWER])
    limits = UsageLimits(total_tokens=planning.total_tokens)
    agent = build_agent(provider=model, tools=tools, usage_limits=limits)
    result = await agent.process(AgentProps("add", "t1"))
    await _stopped(agent, result, "total_tokens")
    assert result.metadata.error == (
        f"usage limit reached: total_tokens: {planning.total_tokens:,} used, limit "
        f"{planning.total_tokens:,}; the run needs another model call"
    )
    assert len(model.requests) == 1


async def test_tool_calls_past_the_limit_stop_the_run_and_cancel_the_calls_in_flight(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """With tool_calls=1, the second call of a plan is refused before it starts; the first,
    still running, is cancelled, and each is recorded as cancelled by the limit."""
    plan = plan_lines(
        plan_call(1, "sleepy", seconds=10),
        plan_call(2, "add", a=1, b=2),
        intent="sleep and add",
    )
    model = ScriptedProvider([plan, ANSWER])
    agent = build_agent(provider=model, tools=tools, usage_limits=UsageLimits(tool_calls=1))
    result = await asyncio.wait_for(agent.process(AgentProps("go", "t1")), 5)
    await _stopped(agent, result, "tool_calls")
    assert result.metadata.error == (
        "usage limit reached: tool_calls: 1 used, limit 1; the run needs another tool call"
    )
    assert events.log == ["sleepy:start", "sleepy:cancelled"]
    ends = [o for o in await _observations(agent) if o.type is ObservationType.TOOL_EXECUTION]
    assert sorted(o.content["callId"] for o in ends) == ["call_1", "call_2"]
    assert all(o.content["error"] == "Cancelled: " + (result.metadata.error or "") for o in ends)
    assert len(model.requests) == 1
    leftover = [t for t in asyncio.all_tasks() if t.get_name().startswith("pes-")]
    assert leftover == []


async def test_a_streaming_plan_stops_being_written_when_a_started_call_crosses_a_limit(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """A call started while the plan streams that crosses tool_calls stops the planning
    stream at its next piece (LLM_STREAM_ERROR naming the limit) instead of letting the
    model write the rest."""
    plan = (
        plan_lines(
            plan_call(1, "sleepy", seconds=10),
            plan_call(2, "add", a=1, b=2),
            intent="sleep and add",
        )
        + "\n# "
        + "x" * 400
    )
    model = ScriptedProvider([plan, ANSWER], chunk_size=4, chunk_latency_s=0.01)
    agent = build_agent(provider=model, tools=tools, usage_limits=UsageLimits(tool_calls=1))
    started = asyncio.get_running_loop().time()
    result = await asyncio.wait_for(agent.process(AgentProps("go", "t1")), 5)
    elapsed = asyncio.get_running_loop().time() - started
    await _stopped(agent, result, "tool_calls")
    seen = await _observations(agent)
    (stream_error,) = [o for o in seen if o.type is ObservationType.LLM_STREAM_ERROR]
    assert stream_error.content["phase"] == "planning"
    assert "tool_calls: 1 used, limit 1" in stream_error.content["error"]
    # The whole answer would take over a second to stream (~120 pieces of 10 ms).
    assert elapsed < 0.9, f"the planning stream went on for {elapsed:.2f} s"
    assert events.log == ["sleepy:start", "sleepy:cancelled"]


async def test_language_steps_and_repairs_count_as_requests(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A plan's repair call and a language step are model calls: with requests=2 a run
    whose plan needed a repair stops before its language step runs."""
    unusable = "1. add(a=1, b=\n"
    plan = '1. add(a=1, b=2)\n2. language_step("Say {step_1_result} in words.")\nIntent: add'

    model = ScriptedProvider([unusable, plan, "three", ANSWER])
    agent = build_agent(provider=model, tools=tools, usage_limits=UsageLimits(requests=2))
    result = await agent.process(AgentProps("add", "t1"))
    await _stopped(agent, result, "requests")
    assert [request.phase for request in model.requests] == ["planning", "repair"]


async def test_a_call_or_thread_can_lower_a_limit_but_never_raise_it(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """The agent's requests=1 holds against a call asking for 5; a thread's tool_calls=1
    holds on top of the agent's limit, and a call cannot raise it back either."""
    model = ScriptedProvider([TWO_ADDS, ANSWER], repeat=True)
    agent = build_agent(provider=model, tools=tools, usage_limits=UsageLimits(requests=1))
    wider = RunOptions(usage_limits=UsageLimits(requests=5, tool_calls=5))
    result = await agent.process(AgentProps("add", "t1", options=wider))
    assert (result.metadata.error or "").startswith("usage limit reached: requests: 1 used")

    unlimited = build_agent(provider=model, tools=tools, usage_limits=UsageLimits(requests=9))
    await unlimited.state.set_thread_config(
        "t2", ThreadConfig(usage_limits=UsageLimits(tool_calls=1))
    )
    result = await unlimited.process(AgentProps("add", "t2", options=wider))
    assert (result.metadata.error or "").startswith("usage limit reached: tool_calls: 1 used")
    result = await unlimited.process(AgentProps("add", "t3", options=wider))
    assert result.metadata.status == "success"


async def test_a_thread_s_limits_are_stored_and_read_back(
    build_agent: AgentBuilder, tmp_path: Any
) -> None:
    """A ThreadConfig's usage_limits survive SQLite: a new agent on the file reads them."""
    limits = UsageLimits(total_tokens=4_000, tool_calls=3)
    url = f"sqlite:///{tmp_path / 'limits.db'}"
    first = build_agent(provider=ScriptedProvider(["x"]), storage=url)
    await first.state.set_thread_config("t1", ThreadConfig(usage_limits=limits))
    await first.aclose()
    second = build_agent(provider=ScriptedProvider(["x"]), storage=url)
    stored = await second.state.get_thread_config("t1")
    assert stored is not None
    assert stored.usage_limits == limits


class _Forgiving(ConcurrentExecutor):
    """An executor that turns every exception of a run into error results (a bad plug-in)."""

    async def execute(
        self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext
    ) -> list[ToolResult]:
        try:
            return await super().execute(calls, ctx)
        except BaseException as error:  # the point of this plug-in
            if isinstance(error, asyncio.CancelledError):
                raise
            return [
                ToolResult(call_id=c.call_id, tool_name=c.tool_name, status="error", error="x")
                for c in calls
            ]


async def test_an_executor_that_swallows_the_stop_does_not_get_past_it(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """The budget keeps its breach: even when an executor turns the stop into error results,
    the run ends at the limit and no synthesis call is made."""
    model = ScriptedProvider([TWO_ADDS, ANSWER])
    agent = build_agent(
        provider=model,
        tools=tools,
        executor=_Forgiving(),
        usage_limits=UsageLimits(tool_calls=1),
    )
    result = await agent.process(AgentProps("add", "t1"))
    await _stopped(agent, result, "tool_calls")
    assert len(model.requests) == 1
    assert events.log == ["add:1+2"]


def test_bad_limits_fail_at_once_with_the_fix() -> None:
    """A negative, fractional or boolean limit, or usage_limits that is not a UsageLimits,
    is refused where it is written, and the message shows a correct call."""
    for bad in (-1, 2.5, True, "10"):
        with pytest.raises(ValueError, match=r"e\.g\. UsageLimits\(requests=1000\)"):
            UsageLimits(requests=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="extra"):
        UsageLimits(tokens=5)  # type: ignore[call-arg]
    assert UsageLimits(requests=5.0).requests == 5  # type: ignore[arg-type]  # JSON's 5.0
    from pes_agent import create_agent

    with pytest.raises(UsageError, match=r"usage_limits=UsageLimits\("):
        create_agent(provider=ScriptedProvider(["x"]), usage_limits={"requests": 1})  # type: ignore[arg-type]


def test_limits_tighten_field_by_field() -> None:
    """`tightened` keeps the lower of each limit and any limit only one side sets."""
    agent = UsageLimits(requests=10, total_tokens=5_000)
    call = UsageLimits(requests=20, total_tokens=1_000, tool_calls=3)
    assert agent.tightened(call) == UsageLimits(requests=10, total_tokens=1_000, tool_calls=3)
    assert call.tightened(agent) == agent.tightened(call)
    assert agent.tightened(None) is agent
    assert UsageLimits().unlimited
    assert not agent.unlimited


def test_retried_tokens_count_against_the_token_limits() -> None:
    """Tokens of attempts retried after they had streamed count: input, output and total."""
    usage = Usage(
        input_tokens=10,
        output_tokens=5,
        retried_input_tokens=10,
        retried_output_tokens=3,
        total_tokens=28,
    )
    for limit, used in (("input_tokens", 20), ("output_tokens", 8), ("total_tokens", 28)):
        UsageLimits(**{limit: used}).check_tokens(usage)
        with pytest.raises(UsageLimitExceeded) as stop:
            UsageLimits(**{limit: used - 1}).check_tokens(usage)
        assert (stop.value.limit, stop.value.used, stop.value.allowed) == (limit, used, used - 1)

"""Planner, executor and synthesizer are protocols: swapping one needs no subclassing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pes_agent import (
    AgentProps,
    ExecutionContext,
    ParsedToolCall,
    PlanningContext,
    PlanningOutput,
    SequentialExecutor,
    SynthesisContext,
    ToolResult,
)
from pes_agent.testing import ScriptedProvider

from ...helpers import AgentBuilder
from .conftest import Events, call, plan_json


class KeywordPlanner:
    """Plans without a model: always adds the two numbers found in the query."""

    async def plan(self, ctx: PlanningContext) -> PlanningOutput:
        a, b = (int(word) for word in ctx.props.query.split() if word.isdigit())
        return PlanningOutput(
            intent="add",
            tool_calls=[ParsedToolCall(call_id="c1", tool_name="add", arguments={"a": a, "b": b})],
        )


class TemplateSynthesizer:
    """Answers without a model from the first result."""

    async def synthesize(self, ctx: SynthesisContext) -> str:
        return f"{ctx.props.query} = {ctx.results[0].output}"


async def test_custom_planner_and_synthesizer_need_no_model_calls(
    build_agent: AgentBuilder, tools: list[Any]
) -> None:
    """A keyword planner and a template synthesizer answer with zero LLM calls."""
    model = ScriptedProvider([])
    agent = build_agent(
        provider=model, tools=tools, planner=KeywordPlanner(), synthesizer=TemplateSynthesizer()
    )
    result = await agent.process(AgentProps("add 4 and 5", "t"))
    assert result.response.content == "add 4 and 5 = 9"
    assert (result.metadata.status, result.metadata.llm_calls) == ("success", 0)


class RecordingExecutor:
    """Runs nothing; answers every call with a canned result."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def execute(
        self, calls: Sequence[ParsedToolCall], ctx: ExecutionContext
    ) -> list[ToolResult]:
        self.seen.extend(c.tool_name for c in calls)
        return [
            ToolResult(call_id=c.call_id, tool_name=c.tool_name, status="success", output="canned")
            for c in calls
        ]


async def test_custom_executor_replaces_the_default(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """An executor passed to create_agent receives the plan's calls instead of the default."""
    executor = RecordingExecutor()
    model = ScriptedProvider([plan_json(call(1, "add", a=1, b=2)), "ok"])
    agent = build_agent(provider=model, tools=tools, executor=executor)
    result = await agent.process(AgentProps("q", "t"))
    assert executor.seen == ["add"]
    assert events.log == []
    assert result.metadata.tool_calls == 1


async def test_sequential_executor_runs_calls_one_after_another(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """With SequentialExecutor independent calls never overlap."""
    model = ScriptedProvider(
        [plan_json(call(1, "slow_echo", text="A"), call(2, "slow_echo", text="B")), "ok"]
    )
    agent = build_agent(provider=model, tools=tools, executor=SequentialExecutor())
    await agent.process(AgentProps("q", "t"))
    assert events.log == ["start:A", "end:A", "start:B", "end:B"]


async def test_default_executor_runs_independent_calls_together(
    build_agent: AgentBuilder, tools: list[Any], events: Events
) -> None:
    """With the default executor two independent calls both start before either ends."""
    model = ScriptedProvider(
        [plan_json(call(1, "slow_echo", text="A"), call(2, "slow_echo", text="B")), "ok"]
    )
    agent = build_agent(provider=model, tools=tools)
    await agent.process(AgentProps("q", "t"))
    assert max(events.index("start:A"), events.index("start:B")) < min(
        events.index("end:A"), events.index("end:B")
    )

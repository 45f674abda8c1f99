"""Real runs of a scripted agent for the evaluators to read, and a way to evaluate one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from pydantic_evals import Case, Dataset
from pydantic_evals.evaluators import Evaluator
from pydantic_evals.reporting import EvaluationReport

from pes_agent import tool
from pes_agent.evals import AgentRun, run_agent
from pes_agent.testing import ScriptedProvider, plan_call, plan_json

from ...helpers import AgentBuilder


@tool
def search(query: str) -> str:
    """Search the web."""
    return f"Paris: sunny, 21 °C ({query})"


@tool
def summarize(text: str) -> str:
    """Summarize a text."""
    return text.split(",")[0]


@tool
def weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "celsius": 21}


@tool
def broken(city: str) -> str:
    """A tool that always fails."""
    raise ValueError(f"no data for {city}")


TOOLS = [search, summarize, weather, broken]

CHAIN_PLAN = plan_json(
    plan_call(1, "search", query="weather in Paris"),
    plan_call(2, "summarize", text="{step_1_result}"),
    intent="the weather in Paris",
)
CHAIN_ANSWER = "It is sunny in Paris today."


async def scripted_run(
    build_agent: AgentBuilder, script: Sequence[Any], query: str = "Weather in Paris?"
) -> AgentRun:
    """One run of an agent with the test tools on a model answering `script`."""
    agent = build_agent(provider=ScriptedProvider(list(script)), tools=TOOLS)
    return await run_agent(agent, query)


@pytest.fixture
async def chain_run(build_agent: AgentBuilder) -> AgentRun:
    """A successful run: search, then summarize its result (a DAG two calls deep)."""
    return await scripted_run(build_agent, [CHAIN_PLAN, CHAIN_ANSWER])


@pytest.fixture
async def partial_run(build_agent: AgentBuilder) -> AgentRun:
    """A run whose only tool call fails: status "partial"."""
    plan = plan_json(plan_call(1, "broken", city="Paris"), intent="weather")
    return await scripted_run(build_agent, [plan, "I could not find out."])


async def evaluate(
    run: AgentRun, *evaluators: Evaluator[Any, Any, Any], query: str = "Weather in Paris?"
) -> EvaluationReport[str, Any, Any]:
    """A one-case report of `evaluators` over `run`, as pydantic-evals makes it."""

    async def task(inputs: str) -> AgentRun:
        return run

    dataset = Dataset[str, Any, Any](
        name="test", cases=[Case(name="case", inputs=query)], evaluators=list(evaluators)
    )
    return await dataset.evaluate(task, progress=False)


def verdict(report: EvaluationReport[str, Any, Any], name: str) -> tuple[bool, str | None]:
    """The value and reason of the assertion `name` of the report's one case."""
    (case,) = report.cases
    assert not case.evaluator_failures, case.evaluator_failures
    result = case.assertions[name]
    return result.value, result.reason

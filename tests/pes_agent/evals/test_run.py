"""AgentRun reads a run's response and observations; run_agent and agent_task make them."""

from __future__ import annotations

from typing import Any

from pydantic_evals import Case, Dataset

from pes_agent import ParsedToolCall
from pes_agent.evals import AgentRun, CalledTools, Status, agent_task, plan_depth, run_agent
from pes_agent.testing import ScriptedProvider, plan_call, plan_json

from ...helpers import AgentBuilder
from .conftest import CHAIN_ANSWER, CHAIN_PLAN, TOOLS, scripted_run


async def test_a_run_shows_its_answer_status_calls_depth_and_usage(chain_run: AgentRun) -> None:
    """An AgentRun gives the answer, the status, the executed calls in order with their
    resolved arguments and results, the plan's depth and the usage."""
    assert chain_run.answer == CHAIN_ANSWER
    assert chain_run.status == "success"
    assert chain_run.tool_names == ("search", "summarize")
    first, second = chain_run.tool_calls
    assert (first.call_id, first.arguments, first.status) == (
        "call_1",
        {"query": "weather in Paris"},
        "success",
    )
    assert second.arguments == {"text": "Paris: sunny, 21 °C (weather in Paris)"}
    assert second.output == "Paris: sunny"
    assert chain_run.plan_depth == 2
    assert chain_run.usage.requests == 2
    assert {o.trace_id for o in chain_run.observations} == {chain_run.trace_id}


async def test_a_failed_call_counts_as_executed_with_its_error(build_agent: AgentBuilder) -> None:
    """A call that ran and failed is among the executed calls, with status and error."""
    plan = plan_json(plan_call(1, "broken", city="Oslo"), intent="weather")
    run = await scripted_run(build_agent, [plan, "No data."])
    (call,) = run.tool_calls
    assert (call.tool_name, call.status) == ("broken", "error")
    assert call.error is not None
    assert "no data for Oslo" in call.error


async def test_a_run_without_tools_has_no_calls_and_depth_zero(build_agent: AgentBuilder) -> None:
    """A plan with no calls executes nothing and is zero deep."""
    run = await scripted_run(build_agent, [plan_json(intent="greeting"), "Hello!"])
    assert (run.tool_calls, run.plan_depth, run.answer) == ((), 0, "Hello!")


async def test_independent_calls_are_one_deep(build_agent: AgentBuilder) -> None:
    """Calls that depend on none are a DAG one call deep."""
    plan = plan_json(
        plan_call(1, "weather", city="Paris"), plan_call(2, "weather", city="Rome"), intent="w"
    )
    run = await scripted_run(build_agent, [plan, "Both warm."])
    assert run.plan_depth == 1
    assert sorted(c.arguments["city"] for c in run.tool_calls) == ["Paris", "Rome"]


def test_plan_depth_follows_placeholders_and_depends_on_and_survives_cycles() -> None:
    """plan_depth counts the longest chain over placeholders and dependsOn ids; a cycle (a
    plan error) does not make it loop."""
    chain = [
        ParsedToolCall(call_id="a", tool_name="t", arguments={}),
        ParsedToolCall(call_id="b", tool_name="t", arguments={"x": "{step_1_result}"}),
        ParsedToolCall(call_id="c", tool_name="t", arguments={}, depends_on=["b"]),
    ]
    assert plan_depth(chain) == 3
    assert plan_depth([]) == 0
    cycle = [
        ParsedToolCall(call_id="a", tool_name="t", arguments={}, depends_on=["b"]),
        ParsedToolCall(call_id="b", tool_name="t", arguments={}, depends_on=["a"]),
    ]
    assert plan_depth(cycle) >= 1


async def test_run_agent_uses_a_new_thread_unless_given_one(build_agent: AgentBuilder) -> None:
    """Each run_agent call without a thread id starts a new thread; a given one is used."""
    agent = build_agent(
        provider=ScriptedProvider([plan_json(intent="hi"), "Hi."], repeat=True), tools=TOOLS
    )
    first = await run_agent(agent, "hello")
    second = await run_agent(agent, "hello")
    named = await run_agent(agent, "hello", thread_id="my-thread")
    assert first.thread_id != second.thread_id
    assert first.thread_id.startswith("eval-")
    assert named.thread_id == "my-thread"


async def test_run_agent_inside_override_reads_the_overridden_runs(
    build_agent: AgentBuilder,
) -> None:
    """Inside agent.override, run_agent runs on the swapped provider and storage and reads
    that run's observations."""
    agent = build_agent(provider=ScriptedProvider(["unused"]), tools=TOOLS)
    async with agent.override(
        provider=ScriptedProvider([CHAIN_PLAN, CHAIN_ANSWER]), storage="memory"
    ):
        run = await run_agent(agent, "Weather in Paris?")
    assert run.answer == CHAIN_ANSWER
    assert run.tool_names == ("search", "summarize")


async def test_agent_task_runs_every_case_of_a_dataset(build_agent: AgentBuilder) -> None:
    """agent_task hands Dataset.evaluate a task that runs each case's query on its own
    thread; the report holds one AgentRun per case."""

    def model(request: Any) -> str:
        if request.phase == "planning":
            city = "Rome" if "Rome" in request.messages[-1].content else "Paris"
            return plan_json(plan_call(1, "weather", city=city), intent="weather")
        return "Warm."

    agent = build_agent(provider=ScriptedProvider([model], repeat=True), tools=TOOLS)
    dataset = Dataset[str, Any, Any](
        name="cities",
        cases=[Case(name="paris", inputs="Paris?"), Case(name="rome", inputs="Rome?")],
        evaluators=[Status(), CalledTools(["weather"])],
    )
    report = await dataset.evaluate(agent_task(agent), progress=False, max_concurrency=2)
    runs = {case.name: case.output for case in report.cases}
    assert runs["paris"].tool_calls[0].arguments == {"city": "Paris"}
    assert runs["rome"].tool_calls[0].arguments == {"city": "Rome"}
    assert runs["paris"].thread_id != runs["rome"].thread_id
    assert all(r.value for case in report.cases for r in case.assertions.values())

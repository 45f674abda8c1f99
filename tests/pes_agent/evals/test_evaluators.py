"""Each evaluator passes a run that meets it and fails one that does not, saying why."""

from __future__ import annotations

import pytest

from pes_agent.evals import (
    AgentRun,
    AnswerContains,
    CalledTools,
    MaxToolCalls,
    PlanDepthAtMost,
    Status,
)

from .conftest import evaluate, verdict


async def test_called_tools_passes_when_every_name_was_executed(chain_run: AgentRun) -> None:
    """CalledTools passes when each named tool ran, and lists the calls as its reason."""
    report = await evaluate(chain_run, CalledTools(["summarize", "search"]))
    assert verdict(report, "CalledTools") == (True, "called ['search', 'summarize']")


async def test_called_tools_fails_naming_the_tool_not_called(chain_run: AgentRun) -> None:
    """CalledTools fails when a named tool never ran, naming it beside the calls made."""
    report = await evaluate(chain_run, CalledTools("weather"))
    assert verdict(report, "CalledTools") == (
        False,
        "called ['search', 'summarize'] but not 'weather'",
    )


async def test_called_tools_in_order_checks_the_order_calls_started(chain_run: AgentRun) -> None:
    """With in_order, CalledTools passes the order the calls ran in and fails another."""
    right = await evaluate(chain_run, CalledTools(["search", "summarize"], in_order=True))
    assert verdict(right, "CalledTools")[0] is True
    wrong = await evaluate(chain_run, CalledTools(["summarize", "search"], in_order=True))
    assert verdict(wrong, "CalledTools") == (
        False,
        "called ['search', 'summarize'], not ['summarize', 'search'] in that order",
    )


async def test_max_tool_calls_counts_executed_calls(chain_run: AgentRun) -> None:
    """MaxToolCalls passes at its limit and fails below the number of calls executed."""
    at_limit = await evaluate(chain_run, MaxToolCalls(2))
    assert verdict(at_limit, "MaxToolCalls") == (True, "executed 2 tool calls")
    over = await evaluate(chain_run, MaxToolCalls(1))
    assert verdict(over, "MaxToolCalls") == (
        False,
        "executed 2 tool calls, more than 1: ['search', 'summarize']",
    )


async def test_status_passes_a_successful_run(chain_run: AgentRun) -> None:
    """Status("success") passes a run that succeeded."""
    report = await evaluate(chain_run, Status("success"))
    assert verdict(report, "Status") == (True, "status 'success'")


async def test_status_fails_a_partial_run_with_its_status(partial_run: AgentRun) -> None:
    """Status("success") fails a run whose tool failed, giving the status it ended with;
    Status("partial") passes it."""
    report = await evaluate(partial_run, Status())
    value, reason = verdict(report, "Status")
    assert value is False
    assert reason is not None
    assert reason.startswith("status 'partial', expected 'success'")
    assert verdict(await evaluate(partial_run, Status("partial")), "Status")[0] is True


async def test_answer_contains_ignores_case_unless_asked(chain_run: AgentRun) -> None:
    """AnswerContains finds text in any case by default, and only exactly when case_sensitive."""
    report = await evaluate(chain_run, AnswerContains("SUNNY"))
    assert verdict(report, "AnswerContains") == (True, "the answer contains 'SUNNY'")
    strict = await evaluate(chain_run, AnswerContains("SUNNY", case_sensitive=True))
    assert verdict(strict, "AnswerContains") == (
        False,
        "the answer does not contain 'SUNNY': 'It is sunny in Paris today.'",
    )


async def test_answer_contains_fails_on_missing_text(chain_run: AgentRun) -> None:
    """AnswerContains fails when the text is absent, showing the answer."""
    report = await evaluate(chain_run, AnswerContains("London"))
    assert verdict(report, "AnswerContains")[0] is False


async def test_plan_depth_at_most_reads_the_plans_dag(chain_run: AgentRun) -> None:
    """PlanDepthAtMost passes a two-deep plan at 2 and fails it at 1."""
    report = await evaluate(chain_run, PlanDepthAtMost(2))
    assert verdict(report, "PlanDepthAtMost") == (True, "the plan's DAG is 2 calls deep")
    shallow = await evaluate(chain_run, PlanDepthAtMost(1))
    assert verdict(shallow, "PlanDepthAtMost") == (
        False,
        "the plan's DAG is 2 calls deep, more than 1",
    )


@pytest.mark.parametrize(
    "evaluator",
    [CalledTools(["search"]), MaxToolCalls(1), Status(), AnswerContains("x"), PlanDepthAtMost(1)],
    ids=lambda e: type(e).__name__,
)
async def test_an_output_that_is_not_a_run_is_an_evaluator_failure(evaluator: object) -> None:
    """An evaluator given another task's output fails the case, saying to use agent_task."""
    from pydantic_evals import Case, Dataset

    dataset = Dataset[str, object, object](
        name="t",
        cases=[Case(inputs="q")],
        evaluators=[evaluator],  # type: ignore[list-item]
    )
    report = await dataset.evaluate(lambda query: "just text", progress=False)
    (failure,) = report.cases[0].evaluator_failures
    assert "agent_task(agent)" in failure.error_message

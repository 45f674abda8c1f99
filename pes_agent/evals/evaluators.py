"""Evaluators over an agent's run (`ctx.output: AgentRun`), for pydantic-evals datasets.

```python
dataset = Dataset(
    cases=[Case(name="weekend", inputs="Lisbon or Porto this weekend?")],
    evaluators=[Status("success"), CalledTools(["get_weather", "find_events"], in_order=True),
                MaxToolCalls(4), PlanDepthAtMost(3), AnswerContains("Lisbon")],
)
report = await dataset.evaluate(agent_task(agent))
```

Each returns an `EvaluationReason`: pass or fail, and what the run did (`"called
['get_weather'] but not 'find_events'"`). In a YAML dataset they are named by class
(`CalledTools: [get_weather]`, `Status: success`); `Dataset.from_file(path,
custom_evaluator_types=EVALUATORS)` reads them. Needs `pip install 'pes-agent[evals]'`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pes_agent.errors import UsageError
from pes_agent.evals._extra import require_pydantic_evals
from pes_agent.evals.run import AgentRun

require_pydantic_evals()

from pydantic_evals.evaluators import (  # noqa: E402 (after the check that names the extra)
    EvaluationReason,
    Evaluator,
    EvaluatorContext,
)

__all__ = [
    "AnswerContains",
    "CalledTools",
    "MaxToolCalls",
    "PlanDepthAtMost",
    "Status",
    "run_of",
]


def run_of(ctx: EvaluatorContext[Any, Any, Any], evaluator: str) -> AgentRun:
    """The `AgentRun` an evaluator reads from `ctx.output`.

    Args:
        ctx: The evaluation's context.
        evaluator: The evaluator's name, for the error.

    Returns:
        `ctx.output`.

    Raises:
        UsageError: The task returned something else than an `AgentRun`.
    """
    output = ctx.output
    if not isinstance(output, AgentRun):
        raise UsageError(
            f"{evaluator} reads an AgentRun, but the task returned {type(output).__name__}; "
            "evaluate with the task agent_task(agent) from pes_agent.evals"
        )
    return output


def _listed(names: tuple[str, ...]) -> str:
    return "[" + ", ".join(repr(name) for name in names) + "]"


def _in_order(wanted: list[str], called: tuple[str, ...]) -> bool:
    rest = iter(called)
    return all(name in rest for name in wanted)  # a subsequence: each found after the last


@dataclass(repr=False)
class CalledTools(Evaluator[Any, AgentRun, Any]):
    """The run executed a call of each of `names`; with `in_order`, in that order (other
    calls may come between).

    Args:
        names: Tool names (one name alone is a list of one).
        in_order: Their first calls must have started in this order.
    """

    names: list[str] | str
    in_order: bool = False

    def evaluate(self, ctx: EvaluatorContext[Any, AgentRun, Any]) -> EvaluationReason:
        """Pass when every name was called (in order, with `in_order`).

        Args:
            ctx: The case's context; `ctx.output` is the run.

        Returns:
            The verdict, with the calls the run made as the reason.
        """
        called = run_of(ctx, "CalledTools").tool_names
        wanted = [self.names] if isinstance(self.names, str) else list(self.names)
        missing = [name for name in wanted if name not in called]
        if missing:
            lacking = ", ".join(repr(name) for name in missing)
            return EvaluationReason(False, f"called {_listed(called)} but not {lacking}")
        if self.in_order and not _in_order(wanted, called):
            return EvaluationReason(
                False, f"called {_listed(called)}, not {_listed(tuple(wanted))} in that order"
            )
        return EvaluationReason(True, f"called {_listed(called)}")


@dataclass(repr=False)
class MaxToolCalls(Evaluator[Any, AgentRun, Any]):
    """The run executed at most `n` tool calls (calls refused before they started do not
    count).

    Args:
        n: The most calls allowed.
    """

    n: int

    def evaluate(self, ctx: EvaluatorContext[Any, AgentRun, Any]) -> EvaluationReason:
        """Pass when the run executed `n` tool calls or fewer.

        Args:
            ctx: The case's context; `ctx.output` is the run.

        Returns:
            The verdict, with the number of calls as the reason.
        """
        called = run_of(ctx, "MaxToolCalls").tool_names
        count = len(called)
        if count > self.n:
            return EvaluationReason(
                False, f"executed {count} tool calls, more than {self.n}: {_listed(called)}"
            )
        return EvaluationReason(True, f"executed {count} tool calls")


@dataclass(repr=False)
class Status(Evaluator[Any, AgentRun, Any]):
    """The run ended with `status` (`"success"`, `"partial"`, `"error"`, ...).

    Args:
        status: The status expected.
    """

    status: str = "success"

    def evaluate(self, ctx: EvaluatorContext[Any, AgentRun, Any]) -> EvaluationReason:
        """Pass when the run's status is `status`.

        Args:
            ctx: The case's context; `ctx.output` is the run.

        Returns:
            The verdict; on failure the status and the run's error.
        """
        run = run_of(ctx, "Status")
        if run.status == self.status:
            return EvaluationReason(True, f"status {run.status!r}")
        error = run.response.metadata.error
        detail = f": {error}" if error else ""
        return EvaluationReason(False, f"status {run.status!r}, expected {self.status!r}{detail}")


@dataclass(repr=False)
class AnswerContains(Evaluator[Any, AgentRun, Any]):
    """The answer contains `text` (ignoring case unless `case_sensitive`).

    Args:
        text: The text to find.
        case_sensitive: Match case exactly.
    """

    text: str
    case_sensitive: bool = False

    def evaluate(self, ctx: EvaluatorContext[Any, AgentRun, Any]) -> EvaluationReason:
        """Pass when the answer contains `text`.

        Args:
            ctx: The case's context; `ctx.output` is the run.

        Returns:
            The verdict; on failure the start of the answer.
        """
        answer = run_of(ctx, "AnswerContains").answer
        found = (
            self.text in answer
            if self.case_sensitive
            else self.text.casefold() in answer.casefold()
        )
        if found:
            return EvaluationReason(True, f"the answer contains {self.text!r}")
        shown = answer if len(answer) <= 120 else answer[:117] + "..."
        return EvaluationReason(False, f"the answer does not contain {self.text!r}: {shown!r}")


@dataclass(repr=False)
class PlanDepthAtMost(Evaluator[Any, AgentRun, Any]):
    """The plan's DAG is at most `n` calls deep (its longest chain of dependent calls).

    Args:
        n: The deepest allowed; 1 allows only independent calls.
    """

    n: int

    def evaluate(self, ctx: EvaluatorContext[Any, AgentRun, Any]) -> EvaluationReason:
        """Pass when the run's plan is `n` calls deep or less.

        Args:
            ctx: The case's context; `ctx.output` is the run.

        Returns:
            The verdict, with the plan's depth as the reason.
        """
        depth = run_of(ctx, "PlanDepthAtMost").plan_depth
        if depth > self.n:
            return EvaluationReason(
                False, f"the plan's DAG is {depth} calls deep, more than {self.n}"
            )
        return EvaluationReason(True, f"the plan's DAG is {depth} calls deep")

"""The evaluators a YAML dataset may name by class, for `Dataset.from_file`."""

from __future__ import annotations

from typing import Any, Final

from pes_agent.evals.evaluators import (
    AnswerContains,
    CalledTools,
    MaxToolCalls,
    PlanDepthAtMost,
    Status,
)
from pes_agent.evals.judge import LLMJudge
from pes_agent.evals.run import AgentRun

from pydantic_evals.evaluators import Evaluator  # isort: skip (the checks above come first)

__all__ = ["EVALUATORS"]

#: `Dataset.from_file(path, custom_evaluator_types=EVALUATORS)`; `MaxToolCalls` and `LLMJudge`
#: take the place of pydantic-evals' own evaluators of those names.
EVALUATORS: Final[tuple[type[Evaluator[Any, AgentRun, Any]], ...]] = (
    AnswerContains,
    CalledTools,
    LLMJudge,
    MaxToolCalls,
    PlanDepthAtMost,
    Status,
)

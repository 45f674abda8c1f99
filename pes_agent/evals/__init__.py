"""Evaluate agents with pydantic-evals: datasets of queries, evaluators over each run.

```python
from pydantic_evals import Case, Dataset
from pes_agent.evals import AnswerContains, CalledTools, Status, agent_task

dataset = Dataset(
    cases=[Case(name="weekend", inputs="Lisbon or Porto this weekend?")],
    evaluators=[Status("success"), CalledTools(["get_weather"]), AnswerContains("Lisbon")],
)
report = await dataset.evaluate(agent_task(agent))   # each case: a run on a new thread
report.print(include_reasons=True)
```

`AgentRun` (the run's response and observations), `run_agent` and `agent_task` need nothing
more than pes-agent; the evaluators (`CalledTools`, `MaxToolCalls`, `Status`, `AnswerContains`,
`PlanDepthAtMost`, `LLMJudge`) are pydantic-evals `Evaluator`s and need
`pip install 'pes-agent[evals]'`. They are imported on first use, so `import pes_agent` never
imports pydantic-evals. `pes-agent eval DATASET.yaml` runs a YAML dataset that names them by
class (`EVALUATORS` is the list to pass to `Dataset.from_file(custom_evaluator_types=...)`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pes_agent._lazy import lazy_exports

if TYPE_CHECKING:
    from pes_agent.evals.evaluators import (
        AnswerContains,
        CalledTools,
        MaxToolCalls,
        PlanDepthAtMost,
        Status,
    )
    from pes_agent.evals.judge import LLMJudge, Verdict, parse_verdict, use_judge
    from pes_agent.evals.registry import EVALUATORS
    from pes_agent.evals.run import AgentRun, ExecutedCall, agent_task, plan_depth, run_agent

__all__ = [
    "EVALUATORS",
    "AgentRun",
    "AnswerContains",
    "CalledTools",
    "ExecutedCall",
    "LLMJudge",
    "MaxToolCalls",
    "PlanDepthAtMost",
    "Status",
    "Verdict",
    "agent_task",
    "parse_verdict",
    "plan_depth",
    "run_agent",
    "use_judge",
]

_HOMES = {
    "AnswerContains": "pes_agent.evals.evaluators",
    "CalledTools": "pes_agent.evals.evaluators",
    "MaxToolCalls": "pes_agent.evals.evaluators",
    "PlanDepthAtMost": "pes_agent.evals.evaluators",
    "Status": "pes_agent.evals.evaluators",
    "LLMJudge": "pes_agent.evals.judge",
    "Verdict": "pes_agent.evals.judge",
    "parse_verdict": "pes_agent.evals.judge",
    "use_judge": "pes_agent.evals.judge",
    "EVALUATORS": "pes_agent.evals.registry",
    "AgentRun": "pes_agent.evals.run",
    "ExecutedCall": "pes_agent.evals.run",
    "agent_task": "pes_agent.evals.run",
    "plan_depth": "pes_agent.evals.run",
    "run_agent": "pes_agent.evals.run",
}
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)

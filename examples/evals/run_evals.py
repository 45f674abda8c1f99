"""Evaluate the demo agent on the dataset beside this file, offline, and print the report.

The demo agent (`pes-agent demo`: a scripted model, weather and events tools) answers each
case's query on a new thread; pes_agent.evals' evaluators check what each run did (status,
tools called, plan depth, answer) and a scripted judge grades one answer against a rubric.
The same from the command line:

    cd examples/evals && pes-agent eval dataset.yaml --demo --judge scripted_judge:JUDGE

Exits 1 if a case failed, as `pes-agent eval` does.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from pydantic_evals import Dataset

from pes_agent import create_agent
from pes_agent.cli.demo import demo_model, demo_tools
from pes_agent.evals import EVALUATORS, agent_task, use_judge

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # scripted_judge.py, run from anywhere

from scripted_judge import JUDGE  # noqa: E402


async def main() -> int:
    dataset = Dataset[str, Any, Any].from_file(
        HERE / "dataset.yaml", custom_evaluator_types=EVALUATORS
    )
    # The demo's scripted model, without the pacing meant for a person watching it stream.
    async with create_agent(provider=demo_model().inner, tools=demo_tools()) as agent:
        with use_judge(JUDGE):  # the judge of the dataset's `LLMJudge: {rubric: ...}`
            report = await dataset.evaluate(
                agent_task(agent), name=dataset.name, max_concurrency=4, progress=False
            )
    report.print(include_reasons=True, include_durations=False, width=120)
    failed = [
        case.name
        for case in report.cases
        if any(result.value is False for result in case.assertions.values())
    ] + [failure.name for failure in report.failures]
    print(f"{len(report.cases) - len(failed)} of {len(dataset.cases)} cases passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""`pes-agent eval DATASET.yaml`: run a pydantic-evals dataset against the agent `run` builds.

The dataset is pydantic-evals' YAML (or JSON) format; its evaluators are named by class, ours
(`CalledTools`, `MaxToolCalls`, `Status`, `AnswerContains`, `PlanDepthAtMost`, `LLMJudge`)
beside pydantic-evals' own. Each case's `inputs` is a query, asked on a new thread. The report
table is printed; `--json FILE` keeps the whole report. Exit code 0 when every case passed, 1
when one failed an assertion or raised, 2 for a dataset that cannot be read.

`LLMJudge: {rubric: ...}` in a dataset has no provider of its own: the judge is `--judge
MODULE:ATTR` (a provider object, e.g. a `ScriptedProvider` offline), else `--judge-provider
NAME:MODEL`, else the run's `--provider` (with `--demo`, one of the first two is needed).

Nothing here is imported until the command runs: `pes-agent --help` stays light.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pes_agent.cli.errors import CLIError, ExitCode

if TYPE_CHECKING:
    from pydantic_evals import Dataset
    from pydantic_evals.reporting import EvaluationReport
    from rich.console import Console

    from pes_agent.cli.paths import StoreLocation
    from pes_agent.core import AgentCore
    from pes_agent.evals.run import AgentRun
    from pes_agent.providers.base import LLMProvider

__all__ = [
    "EvalOptions",
    "add_eval_options",
    "eval_command",
    "eval_options",
    "failed_cases",
    "load_dataset",
]

_EXTRA = "pip install 'pes-agent[evals]'"


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {value!r}")
    return number


def add_eval_options(command: argparse.ArgumentParser) -> None:
    """The options of `eval` besides the agent's (`--provider`, `--tools`, ... added by the
    caller): the dataset, --demo, --judge, --judge-provider, --json, --concurrency, --db."""
    command.add_argument("dataset", metavar="DATASET", help="a pydantic-evals dataset file (.yaml)")
    command.add_argument(
        "--demo",
        action="store_true",
        help="evaluate the offline demo agent (scripted model, built-in tools) instead",
    )
    judge = command.add_mutually_exclusive_group()
    judge.add_argument(
        "--judge",
        metavar="MODULE:ATTR",
        help="the LLMJudge's model: a provider object to import, e.g. a ScriptedProvider "
        "(the current directory is importable)",
    )
    judge.add_argument(
        "--judge-provider",
        metavar="NAME:MODEL",
        help="the LLMJudge's model, e.g. openai:gpt-4o (default: --provider)",
    )
    command.add_argument("--json", metavar="FILE", help="also write the whole report as JSON")
    command.add_argument(
        "--concurrency",
        type=_positive,
        default=4,
        metavar="N",
        help="cases run at once (default: 4)",
    )
    command.add_argument(
        "--db",
        default="memory",
        help="where the runs' threads are kept (default: memory, gone when the command ends)",
    )


@dataclass(frozen=True, slots=True)
class EvalOptions:
    """What `pes-agent eval` was asked to do."""

    dataset: Path
    provider: str
    store: StoreLocation
    base_url: str | None = None
    tool_specs: tuple[str, ...] = ()
    system_prompt: str | None = None
    mcp_commands: tuple[str, ...] = ()
    demo: bool = False
    judge: str | None = None
    judge_provider: str | None = None
    json_path: Path | None = None
    concurrency: int | None = 4


def load_dataset(path: Path) -> Dataset[str, Any, Any]:
    """The dataset at `path`, with our evaluators known by class name; a `CLIError` (exit code
    2) in one line when it cannot be read."""
    try:
        from pydantic_evals import Dataset

        from pes_agent.evals.registry import EVALUATORS
    except ImportError:
        raise CLIError(f"pes-agent eval needs pydantic-evals: {_EXTRA}") from None
    if not path.is_file():
        raise CLIError(f"{path}: no such dataset file")
    try:
        return Dataset[str, Any, Any].from_file(path, custom_evaluator_types=EVALUATORS)
    except Exception as error:
        problem: BaseException = error
        while isinstance(problem, BaseExceptionGroup) and problem.exceptions:
            problem = problem.exceptions[0]  # the first problem, in one line
        detail = " ".join(str(problem).split())
        if len(detail) > 300:
            detail = detail[:297] + "..."
        raise CLIError(
            f"{path}: not a usable dataset: {type(problem).__name__}: {detail}"
        ) from None


def failed_cases(report: EvaluationReport[Any, Any, Any]) -> list[str]:
    """The names of the cases that failed: the task raised, an evaluator raised, or an
    assertion is false.

    Args:
        report: What `Dataset.evaluate` returned.

    Returns:
        The failed cases' names, in the report's order (errors last).
    """
    failed = [
        case.name
        for case in report.cases
        if case.evaluator_failures or any(r.value is False for r in case.assertions.values())
    ]
    return failed + [failure.name for failure in report.failures]


def _uses_default_judge(dataset: Dataset[str, Any, Any]) -> bool:
    from pes_agent.evals.judge import LLMJudge

    evaluators = [*dataset.evaluators, *(e for case in dataset.cases for e in case.evaluators)]
    return any(isinstance(e, LLMJudge) and e.provider is None for e in evaluators)


def _imported_judge(spec: str) -> LLMProvider:
    from pes_agent.cli.tool_loading import load_tools
    from pes_agent.providers.base import LLMProvider

    try:
        (value,) = load_tools([spec])
    except CLIError as error:
        raise CLIError(error.message.replace("--tools", "--judge", 1)) from None
    except ValueError:
        raise CLIError(f"--judge {spec!r}: names a list; name one provider object") from None
    if not isinstance(value, LLMProvider):
        raise CLIError(
            f"--judge {spec!r}: a {type(value).__name__}, not a provider (an object with name, "
            "model, stream() and aclose(), e.g. a ScriptedProvider)"
        )
    return value


def _built_judge(spec: str, base_url: str | None, option: str) -> LLMProvider:
    from pes_agent.config import ProviderConfig
    from pes_agent.errors import ConfigurationError
    from pes_agent.providers.registry import create_provider

    try:
        if base_url is None:
            return create_provider(spec)
        name, _, model = spec.partition(":")
        return create_provider(ProviderConfig(name, model, base_url=base_url))
    except ConfigurationError as error:
        raise CLIError(f"{option} {spec!r}: {error.message}") from None


def _judge(options: EvalOptions) -> tuple[LLMProvider | None, bool]:
    """The judge for LLMJudges without a provider, and whether this command must close it."""
    if options.judge is not None:
        return _imported_judge(options.judge), False
    if options.judge_provider is not None:
        return _built_judge(options.judge_provider, None, "--judge-provider"), True
    if options.demo:
        raise CLIError(
            "the dataset has an LLMJudge and the demo's scripted model cannot judge: pass "
            "--judge MODULE:ATTR (a provider object, e.g. a ScriptedProvider) or "
            "--judge-provider NAME:MODEL"
        )
    return _built_judge(options.provider, options.base_url, "--provider"), True


def _agent(options: EvalOptions) -> AgentCore:
    from pes_agent.cli.demo import demo_model, demo_tools
    from pes_agent.cli.runner import build_agent, mcp_servers

    if options.demo:
        # The scripted model without the pacing meant for a person watching the live view.
        return build_agent(provider=demo_model().inner, tools=demo_tools(), store=options.store)
    return build_agent(
        provider=options.provider,
        base_url=options.base_url,
        tool_specs=options.tool_specs,
        tools=mcp_servers(options.mcp_commands),
        store=options.store,
        system_prompt=options.system_prompt,
    )


def _write_json(report: EvaluationReport[str, AgentRun, Any], path: Path) -> None:
    from pydantic import TypeAdapter
    from pydantic_evals.reporting import EvaluationReport

    data = TypeAdapter(EvaluationReport[str, Any, Any]).dump_python(report, mode="json")
    data["failed_cases"] = failed_cases(report)
    try:
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as error:
        raise CLIError(f"--json {path}: cannot write it: {error.strerror or error}") from None


async def eval_command(options: EvalOptions, *, console: Console) -> ExitCode:
    """`pes-agent eval`: run every case of the dataset as a query on a new thread of the
    agent, print the report, write `--json`, and say whether every case passed.

    Args:
        options: The dataset, the agent's options, the judge and the outputs.
        console: Where the report is printed.

    Returns:
        `ExitCode.OK` when every case passed, `ExitCode.RUN_ERROR` (1) otherwise.

    Raises:
        CLIError: The dataset cannot be read, or the agent or the judge cannot be built
            (exit code 2).
    """
    dataset = load_dataset(options.dataset)
    from pes_agent.cli.runner import open_agent_tools
    from pes_agent.evals.judge import use_judge
    from pes_agent.evals.run import agent_task

    judge, close_judge = _judge(options) if _uses_default_judge(dataset) else (None, False)
    try:
        agent = _agent(options)
        async with agent:
            if options.mcp_commands:
                await open_agent_tools(agent)
            with use_judge(judge):
                report = await dataset.evaluate(
                    agent_task(agent),
                    name=dataset.name or options.dataset.stem,
                    max_concurrency=options.concurrency,
                    progress=console.is_terminal,
                )
    finally:
        if judge is not None and close_judge:
            await judge.aclose()
    report.print(console=console, include_reasons=True)
    if options.json_path is not None:
        _write_json(report, options.json_path)
    failed = failed_cases(report)
    total = len(report.cases) + len(report.failures)
    if failed:
        console.print(f"{len(failed)} of {total} cases failed: {', '.join(failed)}")
        return ExitCode.RUN_ERROR
    console.print(f"all {total} cases passed")
    return ExitCode.OK


def eval_options(
    args: argparse.Namespace, store: StoreLocation, tools: Sequence[str]
) -> EvalOptions:
    """The `EvalOptions` of parsed `pes-agent eval` arguments.

    Args:
        args: The parsed command line.
        store: The store `--db` names.
        tools: The `--tools` specs, split.

    Returns:
        The options for `eval_command`.
    """
    return EvalOptions(
        dataset=Path(args.dataset),
        provider=args.provider,
        store=store,
        base_url=args.base_url,
        tool_specs=tuple(tools),
        system_prompt=args.system,
        mcp_commands=tuple(args.mcp or ()),
        demo=args.demo,
        judge=args.judge,
        judge_provider=args.judge_provider,
        json_path=Path(args.json) if args.json else None,
        concurrency=args.concurrency,
    )

"""`LLMJudge`: a model grades a run's answer against a rubric, through any pes-agent provider.

```python
judge = create_provider("openai:gpt-4o-mini")         # or a ScriptedProvider, offline
evaluators = [LLMJudge("Recommends one city and says why", provider=judge)]

with use_judge(judge):                                # for judges without a provider of
    report = await dataset.evaluate(agent_task(agent))  # their own (a YAML dataset's)
```

The judge is asked for JSON `{"pass": true|false, "reason": "..."}`; the verdict is read from
the answer's first JSON object (code fences and words around it are fine). A verdict that cannot
be read, or a judge whose provider failed, is a failed evaluation whose reason says so — never
an exception that stops the report. Unlike pydantic-evals' own `LLMJudge` (pydantic-ai models),
this one takes pes-agent's `LLMProvider`s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pes_agent.errors import PESAgentError, UsageError
from pes_agent.evals._extra import require_pydantic_evals
from pes_agent.evals.evaluators import run_of
from pes_agent.evals.run import AgentRun
from pes_agent.providers.base import LLMProvider, LLMRequest, PromptMessage, TokenDelta

require_pydantic_evals()

from pydantic_evals.evaluators import (  # noqa: E402 (after the check that names the extra)
    EvaluationReason,
    Evaluator,
    EvaluatorContext,
)

__all__ = ["JUDGE_INSTRUCTIONS", "LLMJudge", "Verdict", "parse_verdict", "use_judge"]

JUDGE_INSTRUCTIONS: Final = (
    "You grade an AI assistant's answer against a rubric. Read the rubric, the question and "
    "the answer, then reply with only a JSON object: "
    '{"pass": true or false, "reason": "one sentence saying why"}.'
)

_VERDICT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"pass": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["pass", "reason"],
    "additionalProperties": False,
}

_default_judge: ContextVar[LLMProvider | None] = ContextVar("pes_agent_judge", default=None)


class Verdict(BaseModel):
    """A judge's verdict: `{"pass": true, "reason": "..."}`."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    passed: bool = Field(alias="pass", strict=True)
    reason: str = ""


@contextmanager
def use_judge(provider: LLMProvider | None) -> Iterator[None]:
    """Let the `LLMJudge`s without a provider of their own use `provider` inside the block.

    Context-local: the cases `Dataset.evaluate` runs inside the block see it, other tasks
    do not. `pes-agent eval --judge ...` sets it for YAML datasets.

    Args:
        provider: The judge's model; None leaves such judges without one.

    Yields:
        Nothing; leave the block to restore the judge in force before it.
    """
    token = _default_judge.set(provider)
    try:
        yield
    finally:
        _default_judge.reset(token)


def parse_verdict(text: str) -> Verdict | str:
    """Read a judge's answer: the first JSON object in `text` with a boolean `pass`.

    Args:
        text: The judge's whole answer.

    Returns:
        The verdict, or a sentence saying why none could be read.
    """
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            found, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            found = None
        if isinstance(found, dict) and "pass" in found:
            try:
                return Verdict.model_validate(found)
            except ValidationError as error:
                problem = error.errors()[0]["msg"]
                return f"the judge's verdict is not usable ({problem}): {_short(text)!r}"
        start = text.find("{", start + 1)
    return f'the judge gave no verdict (JSON {{"pass": ..., "reason": ...}}): {_short(text)!r}'


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= 160 else text[:157] + "..."


@dataclass(repr=False)
class LLMJudge(Evaluator[Any, AgentRun, Any]):
    """A model grades the answer against `rubric` and says pass or fail, and why.

    Args:
        rubric: What a good answer does, e.g. "Recommends one city and gives its weather".
        provider: The judge's model; None for the one `use_judge` (or `pes-agent eval
            --judge`) sets.
        include_query: Show the judge the question as well as the answer.
    """

    rubric: str
    provider: LLMProvider | None = None
    include_query: bool = True

    def build_serialization_arguments(self) -> dict[str, Any]:
        """The arguments a dataset file and the report show: all but the provider.

        Returns:
            The non-default arguments, without `provider` (a live object).
        """
        arguments = super().build_serialization_arguments()
        arguments.pop("provider", None)
        return arguments

    async def evaluate(self, ctx: EvaluatorContext[Any, AgentRun, Any]) -> EvaluationReason:
        """Ask the judge about the run's answer.

        Args:
            ctx: The case's context; `ctx.output` is the run, `ctx.inputs` the question.

        Returns:
            The judge's verdict and reason; a failure with the problem as the reason when
            the verdict cannot be read or the judge's provider failed.

        Raises:
            UsageError: No judge: neither `provider` nor `use_judge(...)` gives one.
        """
        run = run_of(ctx, "LLMJudge")
        judge = self.provider or _default_judge.get()
        if judge is None:
            raise UsageError(
                "LLMJudge has no provider: pass LLMJudge(rubric, provider=...), evaluate "
                "inside `with use_judge(provider):`, or give `pes-agent eval` --judge"
            )
        request = LLMRequest(
            messages=(
                PromptMessage("system", JUDGE_INSTRUCTIONS),
                PromptMessage("user", self._prompt(ctx.inputs, run.answer)),
            ),
            # The closest phase: a text answer written from what is given, with no tools.
            phase="synthesis",
            thread_id=run.thread_id,
            trace_id=run.trace_id,
            temperature=0.0,
            response_format=_VERDICT_SCHEMA,
        )
        try:
            text = "".join(
                [
                    event.text
                    async for event in judge.stream(request)
                    if isinstance(event, TokenDelta) and event.kind == "content"
                ]
            )
        except PESAgentError as error:
            return EvaluationReason(False, f"the judge failed: {error.message}")
        verdict = parse_verdict(text)
        if isinstance(verdict, str):
            return EvaluationReason(False, verdict)
        return EvaluationReason(verdict.passed, verdict.reason or None)

    def _prompt(self, query: object, answer: str) -> str:
        parts = [f"# Rubric\n{self.rubric}"]
        if self.include_query:
            parts.append(f"# Question\n{query}")
        parts.append(f"# Answer\n{answer}")
        return "\n\n".join(parts)

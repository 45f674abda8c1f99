"""LLMJudge asks any provider for a JSON verdict; an unreadable one fails the case, not the run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from pes_agent import LLMRequest, ProviderError
from pes_agent.evals import AgentRun, LLMJudge, Verdict, parse_verdict, use_judge
from pes_agent.providers.base import ProviderEvent
from pes_agent.testing import ScriptedProvider

from .conftest import evaluate, verdict


def judge_answering(*answers: str) -> ScriptedProvider:
    """A scripted judge that answers each request with the next of `answers`."""
    return ScriptedProvider(list(answers))


async def test_a_passing_verdict_passes_with_the_judges_reason(chain_run: AgentRun) -> None:
    """A verdict {"pass": true} passes the case, with the judge's reason."""
    judge = judge_answering(json.dumps({"pass": True, "reason": "mentions the weather"}))
    report = await evaluate(chain_run, LLMJudge("Says the weather.", provider=judge))
    assert verdict(report, "LLMJudge") == (True, "mentions the weather")


async def test_a_failing_verdict_fails_with_the_judges_reason(chain_run: AgentRun) -> None:
    """A verdict {"pass": false} fails the case, with the judge's reason."""
    judge = judge_answering('{"pass": false, "reason": "no temperature"}')
    report = await evaluate(chain_run, LLMJudge("Gives the temperature.", provider=judge))
    assert verdict(report, "LLMJudge") == (False, "no temperature")


async def test_the_judge_sees_rubric_question_and_answer(chain_run: AgentRun) -> None:
    """The judge's request holds the rubric, the case's question and the run's answer, and
    asks for the verdict's JSON schema."""
    judge = judge_answering('{"pass": true, "reason": "ok"}')
    await evaluate(chain_run, LLMJudge("Is polite.", provider=judge), query="Weather?")
    (request,) = judge.requests
    prompt = request.messages[-1].content
    assert "# Rubric\nIs polite." in prompt
    assert "# Question\nWeather?" in prompt
    assert f"# Answer\n{chain_run.answer}" in prompt
    assert request.response_format is not None
    assert request.response_format["required"] == ["pass", "reason"]


@pytest.mark.parametrize(
    "answer",
    ["I think it passes.", '{"pass": "yes", "reason": "fine"}', '{"verdict": true}', ""],
    ids=["prose", "pass-not-bool", "no-pass-key", "empty"],
)
async def test_an_unreadable_verdict_is_a_failed_evaluation(
    chain_run: AgentRun, answer: str
) -> None:
    """A judge answer without a usable JSON verdict fails the case with a reason saying so,
    and does not stop the evaluation."""
    report = await evaluate(chain_run, LLMJudge("Anything.", provider=judge_answering(answer)))
    value, reason = verdict(report, "LLMJudge")
    assert value is False
    assert reason is not None
    assert "verdict" in reason


async def test_a_verdict_in_a_code_fence_among_words_is_read(chain_run: AgentRun) -> None:
    """A verdict inside a code fence with words around it is read."""
    answer = 'Here you go:\n```json\n{"pass": true, "reason": "good"}\n```\nThanks.'
    report = await evaluate(chain_run, LLMJudge("Anything.", provider=judge_answering(answer)))
    assert verdict(report, "LLMJudge") == (True, "good")


async def test_a_failing_judge_provider_is_a_failed_evaluation(chain_run: AgentRun) -> None:
    """A judge whose provider raises fails the case with the provider's error as the reason."""

    class Down:
        name, model = "down", "down-model"

        async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
            raise ProviderError("the judge's API is down", retryable=False)
            yield  # an async generator

        async def aclose(self) -> None:
            return None

    report = await evaluate(chain_run, LLMJudge("Anything.", provider=Down()))
    assert verdict(report, "LLMJudge") == (False, "the judge failed: the judge's API is down")


async def test_a_judge_without_provider_uses_the_one_of_use_judge(chain_run: AgentRun) -> None:
    """LLMJudge without a provider asks the one `use_judge` sets for the block."""
    judge = judge_answering('{"pass": true, "reason": "from the block"}')
    with use_judge(judge):
        report = await evaluate(chain_run, LLMJudge("Anything."))
    assert verdict(report, "LLMJudge") == (True, "from the block")


async def test_a_judge_without_any_provider_fails_saying_how_to_give_one(
    chain_run: AgentRun,
) -> None:
    """With no provider anywhere, the evaluator fails the case naming use_judge and --judge."""
    report = await evaluate(chain_run, LLMJudge("Anything."))
    (failure,) = report.cases[0].evaluator_failures
    assert "use_judge" in failure.error_message
    assert "--judge" in failure.error_message


def test_the_provider_is_not_part_of_the_serialized_judge() -> None:
    """A judge serializes (in reports and dataset files) as its rubric, not its provider."""
    judge = LLMJudge("Is short.", provider=ScriptedProvider(["x"]))
    assert judge.as_spec().arguments == ("Is short.",)


def test_parse_verdict_reads_the_first_object_with_pass() -> None:
    """parse_verdict skips JSON without `pass` and reads the first object that has it."""
    text = 'draft {"note": 1} then {"pass": false, "reason": "too long"}'
    assert parse_verdict(text) == Verdict(passed=False, reason="too long")
    assert isinstance(parse_verdict("{not json"), str)
